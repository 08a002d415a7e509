"""agentd.daemon.keepers: one helper for every file the daemon keeps or follows (the
history, the kernel cursor, the maintenance file, the baseline): reads in a lane with a
timeout that never start twice while one hangs, throttled fire-and-forget writes, and a
failure said once when it starts and once when it ends."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from agentd.base.atomic import WriteResult
from agentd.config import AgentConfig
from agentd.daemon.keepers import Keeper, MaintenanceFollower, Outage, StillReading

HANG_GUARD_S = 30.0  # a guard against the wait under test, not a timing


class Log:
    def __init__(self):
        self.events: list[tuple[str, str, dict]] = []

    def __getattr__(self, level):
        return lambda event, **fields: self.events.append((level, event, fields))

    def names(self):
        return [e for _, e, _ in self.events]


def test_an_outage_is_said_once_when_it_starts_and_once_when_it_ends():
    log = Log()
    o = Outage(log, "thing.write_failed", "thing.written", effect="what it costs")
    for error in (None, "EIO", "EIO", "EIO", "ENOSPC", None, None):
        o.report(error, Path("/x"))
    assert log.events == [
        ("error", "thing.write_failed", {"path": "/x", "error": "EIO", "effect": "what it costs"}),
        ("error", "thing.write_failed", {"path": "/x", "error": "ENOSPC", "effect": "what it costs"}),
        ("info", "thing.written", {"path": "/x"}),
    ]


async def test_a_hung_read_is_neither_started_nor_waited_on_again_and_its_late_answer_is_taken():
    release, reads = threading.Event(), []

    def read():
        reads.append(1)
        release.wait(5)
        return "answer"

    k: Keeper[str] = Keeper("test-read")
    with pytest.raises(TimeoutError):
        await k.load(read, 0.05, "path")
    with pytest.raises(StillReading):  # not waited on: waiting would have had its answer (within the 5 s)
        await k.load(read, 5.0, "path")
    assert reads == [1]  # and no second read
    release.set()
    while k.busy:
        await asyncio.sleep(0.01)
    assert await k.load(read, 1.0, "path") == "answer" and reads == [1]  # the late answer
    assert await k.load(lambda: "fresh", 1.0, "path") == "fresh"


async def test_a_late_answer_for_another_key_is_dropped():
    release = threading.Event()
    k: Keeper[str] = Keeper("test-key")
    with pytest.raises(TimeoutError):
        await k.load(lambda: (release.wait(5), "old path")[1], 0.05, "old")
    release.set()
    while k.busy:
        await asyncio.sleep(0.01)
    assert await k.load(lambda: "new path", 1.0, "new") == "new path"


async def test_saves_are_throttled_and_their_failures_said_once():
    log = Log()
    k: Keeper[None] = Keeper("test-save", Outage(log, "thing.write_failed", "thing.written", effect="lost"))
    results = iter([WriteResult(Path("/f"), False, "EIO"), WriteResult(Path("/f"), False, "EIO"), WriteResult(Path("/f"), True)])
    assert k.due("a", 60.0)
    for mark in ("a", "b", "c"):
        fut = k.save(lambda: next(results), mark, Path("/f"))
        assert fut is not None
        await asyncio.wrap_future(fut)
    assert not k.due("c", 60.0) and k.due("d", 60.0) and k.due("c", 0.0)
    assert log.names() == ["thing.write_failed", "thing.written"]


async def test_a_save_while_the_previous_one_hangs_is_skipped():
    release = threading.Event()
    k: Keeper[None] = Keeper("test-hung-save")
    assert k.save(lambda: (release.wait(5), None)[1], "a", Path("/f")) is not None
    assert k.save(lambda: None, "b", Path("/f")) is None
    with pytest.raises(TimeoutError):
        await k.idle(0.05)
    release.set()
    await k.idle(5.0)


async def test_a_hung_maintenance_read_costs_one_timeout_and_one_log_line(tmp_path, monkeypatch):
    """The publishes after a hung read go on with what was known: they neither wait for
    the hung read (they used to wait the probe timeout each) nor start another."""
    import agentd.daemon.keepers as keepers

    release = threading.Event()
    reads: list[Path] = []

    def hung(path: Path) -> None:
        reads.append(path)
        release.wait()  # the state directory never answers while the test runs

    monkeypatch.setattr(keepers, "read_maintenance", hung)
    log = Log()
    config = AgentConfig(paths={"state_dir": str(tmp_path)}, timeouts={"probe_s": 0.1})
    m = MaintenanceFollower(log)
    try:
        await m.follow(config, "fast", None)
        # with an hour to wait, a follow that waited for the hung read would meet the guard
        patient = config.model_copy(update={"timeouts": config.timeouts.model_copy(update={"probe_s": 3600.0})})
        for _ in range(3):
            await asyncio.wait_for(m.follow(patient, "fast", None), HANG_GUARD_S)
        assert len(reads) == 1
        assert log.names() == ["maintenance.read_failed"] and not m.held
    finally:
        release.set()
