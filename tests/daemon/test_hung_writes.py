"""Writes and reads that never finish are findings, never a silent or hung daemon (issue 12,
items 5, 6 and 10): a FIFO or a hung filesystem at a managed path or at the baseline, temp
files of a killed writer swept at start, staleness on the monotonic clock."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import aiohttp

from agentd.collection.collector import PROBE_TIERS
from agentd.config import AgentConfig, Intervals
from agentd.daemon.daemon import Daemon
from agentd.daemon.publisher import Context, Publisher
from agentd.daemon.systemd import Notifier
from agentd.host.fs import HostRoot
from agentd.judging.baseline import baseline_from
from agentd.judging.expected import Expected
from agentd.judging.roles import HcaRoles
from agentd.model import ProbeStatus
from agentd.outputs.baseline_store import BaselineError, load_baseline
from agentd.outputs.evaluate import Evaluation
from agentd.outputs.writer import Writer
from agentd.records import ReloadStatus
from tests.support import service_snapshots as fixtures

ROLES = HcaRoles(("mlx5_0",), ("mlx5_1",), "inferred")
BOUND_S = 30.0  # a bound on a hang, not a timing: the operations under test take milliseconds


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict]] = []

    def __getattr__(self, level: str):
        return lambda event, **kw: self.events.append((level, event, kw))

    def names(self) -> list[str]:
        return [e for _, e, _ in self.events]


def unblock(fifo: Path) -> None:
    """Give a reader stuck on ``fifo`` (the code before the fix) its EOF, so no thread stays hung."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def finishes(fn, *args):
    """Run fn(*args) in a daemon thread; (finished, result or exception)."""
    out: list = []

    def body():
        try:
            out.append(fn(*args))
        except BaseException as e:
            out.append(e)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(BOUND_S)
    return (not t.is_alive()), (out[0] if out else None)


def cfg(tmp_path: Path, **paths) -> AgentConfig:
    p = {"nccl_env": str(tmp_path / "nccl" / "nccl.env"), "nccl_conf": str(tmp_path / "nccl" / "nccl.conf"),
         "nccl_topo": str(tmp_path / "nccl" / "topo.xml"), "baseline": str(tmp_path / "baseline.json"), **paths}
    return AgentConfig(paths=p, nccl={"enabled": True, "write_topo": False}, timeouts={"probe_s": 1.0})


def evaluation(snap, **kw) -> Evaluation:
    render = SimpleNamespace(env_sh="export NCCL_IB_HCA=mlx5_0\n", env_conf=None, topo_xml=None, topo_problems=())
    return Evaluation(findings=(), status="ok", roles=ROLES, expected=Expected(), render=render, **kw)  # type: ignore[arg-type]


def context(config: AgentConfig, seq: int = 1) -> Context:
    return Context(config=config, started_at=time.time(), seq=seq, stale_limits={}, tiers=(), reload=ReloadStatus(),
                   udev_events={}, udev_active=False, process={})


async def publish(pub: Publisher, config: AgentConfig, snap, ev, seq: int = 1):
    files = await pub.write(ev, snap, config, {})
    return await pub.build(snap, ev, files, context(config, seq))


def write_failed(state) -> dict[str, str]:
    return {f.subject: f.message for f in state.findings if f.code == "nccl.file.write_failed"}


# -- item 5: a FIFO at a managed path, a write that never finishes --------------------------
async def test_a_fifo_at_the_nccl_file_path_is_a_failed_write_and_a_finding(tmp_path):
    config = cfg(tmp_path)
    fifo = config.paths.nccl_env
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    pub = Publisher(log=Log())
    snap = fixtures.snapshot()
    try:
        state = await publish(pub, config, snap, evaluation(snap))
    finally:
        unblock(fifo)
    env = {f.name: f for f in state.files}["nccl.env"]
    assert not env.ok and "FIFO" in (env.error or "")
    assert "nccl.env" in write_failed(state) and "FIFO" in write_failed(state)["nccl.env"]
    assert 'agentd_nccl_file_write_success{file="nccl.env"' in state.metrics_bytes().decode()
    assert [ln for ln in state.metrics_bytes().decode().splitlines() if ln.startswith('agentd_nccl_file_write_success{file="nccl.env"')][0].endswith(" 0")
    assert fifo.is_fifo()  # someone else's FIFO is left alone, never replaced


class HangingWriter(Writer):
    """A writer on a hung filesystem: its write does not return until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def write(self, *args):
        self.release.wait()
        return super().write(*args)


async def test_a_write_that_never_finishes_is_a_failed_write_every_publish(tmp_path):
    config = cfg(tmp_path)
    writer = HangingWriter()
    log = Log()
    pub = Publisher(writer=writer, log=log)
    snap = fixtures.snapshot()
    ev = evaluation(snap, new_baseline=baseline_from(snap, ROLES))
    try:
        first = await publish(pub, config, snap, ev, 1)  # times out
        second = await publish(pub, config, snap, ev, 2)  # the first write still hangs
    finally:
        writer.release.set()
    for state in (first, second):
        assert set(write_failed(state)) >= {"nccl.env", "baseline"}, state.findings
        assert {f.name for f in state.files if not f.ok} >= {"nccl.env", "baseline"}
    assert "hung filesystem" in write_failed(second)["nccl.env"]
    fails = lambda st: {f.name: f.failures_total for f in st.files}  # noqa: E731
    assert fails(first)["nccl.env"] == 1 and fails(second)["nccl.env"] == 2
    assert {"files.write_timeout", "files.write_skipped"} <= set(log.names())
    # The filesystem answers again: the files are written, and the failure counter never goes back.
    while pub._write_lane.busy:  # the released write finishes on its own
        await asyncio.sleep(0.01)
    third = await publish(pub, config, snap, ev, 3)
    env = {f.name: f for f in third.files}["nccl.env"]
    assert env.ok and env.failures_total >= 2 and "nccl.env" not in write_failed(third)
    assert config.paths.nccl_env.is_file()


# -- item 6: the baseline is read off the event loop, O_NONBLOCK, regular files only --------
def test_a_fifo_at_the_baseline_path_is_an_invalid_baseline_not_a_hang(tmp_path):
    fifo = tmp_path / "baseline.json"
    os.mkfifo(fifo)
    try:
        done, got = finishes(load_baseline, fifo)
    finally:
        unblock(fifo)
    assert done, "load_baseline blocked on a FIFO"
    assert isinstance(got, BaselineError) and "FIFO" in str(got)


class FakeCollector:
    kernel_source = None

    def __init__(self, config):
        self.config = config

    async def run(self, names, *, quick=False):
        return None

    def snapshot(self):
        return fixtures.snapshot(time.time())

    def snapshot_job(self):
        return self.snapshot

    def steady_snapshot(self):
        return None

    def with_config(self, config):
        return self


async def test_a_fifo_at_the_baseline_path_hangs_neither_health_nor_sigterm(tmp_path):
    fifo = tmp_path / "baseline.json"
    os.mkfifo(fifo)
    config = AgentConfig(intervals=Intervals(fast_s=0.05, medium_s=0.1, slow_s=0.2, stale_after=20), nccl={"enabled": False},
                         paths={"baseline": str(fifo)}).model_copy(update={"listen": "127.0.0.1:0"})
    log = Log()
    d = Daemon(config, host=HostRoot.at(tmp_path), collector=FakeCollector(config), probe_tiers=dict(PROBE_TIERS),
               evaluate=lambda snap, hist, cfg, baseline, **_: Evaluation(findings=(), status="ok", roles=ROLES, expected=Expected()),
               notifier=Notifier({}), watchdog=None, log=log)
    # Should the event loop block on the FIFO (the code before the fix), this thread gives the
    # reader its EOF after the bound, so the test fails instead of hanging.
    ready, hung = threading.Event(), []
    guard = threading.Thread(target=lambda: ready.wait(BOUND_S) or (hung.append(True), unblock(fifo)), daemon=True)
    guard.start()
    task = asyncio.create_task(d.run())
    while not (d.state.ready and d.addresses) and not task.done():
        await asyncio.sleep(0.02)
    ready.set()
    assert not hung, "the event loop blocked reading the baseline"
    host, port = d.addresses[0]
    async with aiohttp.ClientSession() as s, s.get(f"http://{host}:{port}/health") as r:
        assert r.status == 200
    os.kill(os.getpid(), signal.SIGTERM)
    assert await asyncio.wait_for(task, BOUND_S) == 0
    assert "baseline.invalid" in log.names()
    assert fifo.is_fifo()


# -- item 10: temp files of a killed writer are swept at start --------------------------------
async def test_temp_files_of_killed_writers_are_swept_at_start_for_every_file_and_the_baseline(tmp_path):
    config = cfg(tmp_path, nfd_features=str(tmp_path / "features.d" / "agentd"))
    for d in ("nccl", "features.d"):
        (tmp_path / d).mkdir()
    # Left by writers killed just before this start (a restart takes seconds, so they are new).
    crashed = [tmp_path / "nccl" / ".nccl.env.k1x2y3z4.tmp", tmp_path / ".baseline.json.a9b8c7d6.tmp",
               tmp_path / "features.d" / ".agentd.q1w2e3r4.tmp"]
    for p in crashed:
        p.write_text("half a file")
    # One that a live writer (`agentd render` run by hand) is filling right now: it holds the lock.
    live = tmp_path / "nccl" / ".nccl.env.l1v3w7t3.tmp"
    fd = os.open(live, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        pub = Publisher(log=Log())
        snap = fixtures.snapshot()
        await publish(pub, config, snap, evaluation(snap))
        assert [p.name for p in crashed if p.exists()] == []
        assert live.exists()
    finally:
        os.close(fd)


# -- item 10: staleness on the monotonic clock -------------------------------------------------
def probe(name: str, *, wall_age: float, mono_age: float) -> ProbeStatus:
    return ProbeStatus(name=name, ok=True, duration_s=0.01, finished_at=time.time(), last_success_at=time.time() - wall_age,
                       last_success_mono=time.monotonic() - mono_age)


async def test_a_wall_clock_jump_neither_hides_nor_invents_stale_data(tmp_path):
    config = AgentConfig(nccl={"enabled": False}, paths={"baseline": str(tmp_path / "b.json")})
    snap = fixtures.snapshot().model_copy(update={"probes": (
        probe("ib", wall_age=3600.0, mono_age=0.5),  # the wall clock jumped forward an hour: not stale
        probe("nvml", wall_age=0.0, mono_age=100.0),  # it was set back: 100 s without a success is stale
    )})
    ev = Evaluation(findings=(), status="ok", roles=ROLES, expected=Expected())
    pub = Publisher(log=Log())
    files = await pub.write(ev, snap, config, {"ib": 10.0, "nvml": 10.0})
    ctx = Context(config=config, started_at=time.time(), seq=1, stale_limits={"ib": 10.0, "nvml": 10.0}, tiers=(),
                  reload=ReloadStatus(), udev_events={}, udev_active=False, process={})
    state = await pub.build(snap, ev, files, ctx)
    stale = {f.subject for f in state.findings if f.code == "agentd.data.stale"}
    assert stale == {"nvml"}
    text = state.metrics_bytes().decode()
    assert 'agentd_probe_stale{probe="nvml"} 1' in text and 'agentd_probe_stale{probe="ib"} 0' in text
    # The exported timestamp stays wall time.
    ts = [ln for ln in text.splitlines() if ln.startswith('agentd_probe_last_success_timestamp_seconds{probe="ib"}')]
    assert len(ts) == 1 and abs(float(ts[0].split()[-1]) - snap.probes[0].last_success_at) < 1.0


async def test_a_baseline_read_that_hangs_is_never_overwritten_and_is_picked_up_later(tmp_path, monkeypatch):
    """Hung filesystem at the baseline: the daemon goes on without it, adopts no new one (that
    would replace the node's real baseline), and uses it once the read returns."""
    import agentd.daemon.publisher as publisher_mod
    from agentd.judging.baseline import baseline_to_json

    config = cfg(tmp_path)
    snap = fixtures.snapshot()
    real = baseline_from(snap, HcaRoles(("mlx5_0", "mlx5_1"), (), "inferred"))
    config.paths.baseline.write_text(baseline_to_json(real))
    release = threading.Event()
    read = publisher_mod.load_baseline
    monkeypatch.setattr(publisher_mod, "load_baseline", lambda path: (release.wait(), read(path))[1])
    log = Log()
    pub = Publisher(log=log)
    ev = evaluation(snap, new_baseline=baseline_from(snap, ROLES))  # what a fresh baseline would hold
    try:
        await pub.judge(lambda: snap, fixtures_history(), config)
        await publish(pub, config, snap, ev)
        assert "baseline.read_timeout" in log.names() and "baseline.saved" not in log.names()
        assert config.paths.baseline.read_text() == baseline_to_json(real)
    finally:
        release.set()
    while pub.baseline_keeper.busy:
        await asyncio.sleep(0.01)
    await pub.judge(lambda: snap, fixtures_history(), config)
    assert pub.baseline == real and "baseline.loaded" in log.names()


def fixtures_history():
    from agentd.collection.history import History

    return History(4, spacing_s=1.0, recent_s=60.0)
