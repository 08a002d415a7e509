"""The file-reading probes of a phase run in turn as one lane run, and a hung or failing
one still costs only itself: it is timed out (or failed) on its own timeout, the probes
before it keep their results and the ones after it run in their own lanes."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from agentd import sim
from agentd.collection import collector as col
from agentd.collection.collector import Collector, probes_in
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot

FAST = probes_in(("fast",))  # ib, netdev, gdr, kernel: one phase, all file readers


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(sim.build_tree("h100-ib", tmp_path_factory.mktemp("turn") / "root"))


class Spy:
    """Wraps Collector._body: records which thread ran each probe, and can hold one probe
    (its first run only) until released, or make it raise."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, hold: str | None = None, fail: str | None = None):
        self.threads: dict[str, list[int]] = {}
        self.release = threading.Event()
        self.held = 0
        self.owner: Collector | None = None  # only this collector's runs are watched
        real = col.Collector._body

        def body(c: Collector, spec: Any, deps: Any, quick: bool = False) -> Any:
            if c is not self.owner:  # e.g. an earlier test's released run, finishing late
                return real(c, spec, deps, quick)
            self.threads.setdefault(spec.name, []).append(threading.get_ident())
            if spec.name == fail:
                raise OSError("simulated reader crash")
            if spec.name == hold and self.held == 0:
                self.held += 1
                self.release.wait(30)
            return real(c, spec, deps, quick)

        monkeypatch.setattr(col.Collector, "_body", body)


def _collector(root: Path, probe_s: float = 5.0) -> Collector:
    return Collector(HostRoot.at(root), AgentConfig(timeouts={"probe_s": probe_s}))


@pytest.mark.tree
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_phase_s_file_probes_are_one_hand_off(tree: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    import asyncio

    from agentd.host.runner import Lane

    spy = Spy(monkeypatch)
    lanes: list[str] = []
    real = Lane.submit

    def submit(lane: Lane, fn: Any, *args: Any) -> Any:
        lanes.append(lane.name)
        return real(lane, fn, *args)

    monkeypatch.setattr(Lane, "submit", submit)
    c = spy.owner = _collector(tree)
    c.run_sync(FAST) if mode == "sync" else asyncio.run(c.run(FAST))
    assert lanes == ["turn:" + ",".join(FAST)]
    assert len({t for name in FAST for t in spy.threads[name]}) == 1
    assert all(c.outputs[name].status.ok for name in FAST)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_hung_probe_in_a_turn_costs_only_itself(tree: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    import asyncio

    spy = Spy(monkeypatch, hold="netdev")
    c = spy.owner = _collector(tree, probe_s=0.5)

    def run() -> None:
        if mode == "sync":
            c.run_sync(FAST)
        else:
            asyncio.run(c.run(FAST))

    try:
        run()
        st = {name: c.outputs[name].status for name in FAST}
        assert st["netdev"].timed_out and not st["netdev"].ok
        assert st["ib"].ok  # ran before the hung one
        assert st["gdr"].ok and st["kernel"].ok  # ran after it, in their own lanes
        assert spy.threads["gdr"][0] != spy.threads["netdev"][0]
        # the next run: the group's run still hangs, so each probe goes to its own lane
        # (netdev's own lane is free: its hung run is the group's)
        run()
        assert all(c.outputs[name].status.ok for name in FAST)
        assert len(spy.threads["netdev"]) == 2
    finally:
        spy.release.set()


def test_a_failing_probe_in_a_turn_is_failed_and_the_others_run(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(monkeypatch, fail="ib")
    c = spy.owner = _collector(tree)
    c.run_sync(FAST)
    ib = c.outputs["ib"].status
    assert not ib.ok and not ib.timed_out and "simulated reader crash" in (ib.error or "")
    assert all(c.outputs[name].status.ok for name in FAST if name != "ib")
