"""A new kernel log record reads the kernel log at once (issue 37): /dev/kmsg is pollable,
and a simulated root's dev/kmsg file is watched with inotify, so an XID reaches /health
without waiting for the fast-tier poll.

The daemon tests run the real Daemon and Collector in-process on a simulated node with a
fast tier of a minute: only the watcher can bring the XID in within the bound (a bound on a
broken daemon, never a timing assertion; bench/bench_xid_event.py measures the latency)."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path

import pytest

from agentd import sim
from agentd.config import AgentConfig
from agentd.daemon.daemon import Daemon
from agentd.daemon.health import health
from agentd.daemon.kmsg_events import DeviceWatch, FileWatch, KmsgWatcher
from agentd.host.fs import HostRoot
from tests.support.daemon_harness import free_port


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str):
        return lambda event, **kw: self.lines.append((level, event))


async def until(pred, limit_s: float = 10.0) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if pred():
            return True
        await asyncio.sleep(0.02)
    return False


async def test_a_file_log_wakes_the_watcher_on_append_and_only_for_kmsg(tmp_path):
    (tmp_path / "dev").mkdir()
    kmsg = tmp_path / "dev/kmsg"
    kmsg.write_text("")
    pokes: list[float] = []
    w = KmsgWatcher(trigger=lambda: pokes.append(time.monotonic()), log=Log(), opener=lambda: FileWatch(str(kmsg)))
    assert w.start(asyncio.get_running_loop()) and w.active
    (tmp_path / "dev/other").write_text("x")  # another file of the directory: nothing
    await asyncio.sleep(0.2)
    assert pokes == []
    with kmsg.open("a") as f:
        f.write("4,1,1000,-;NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.\n")
    assert await until(lambda: len(pokes) == 1)
    with kmsg.open("a") as f:  # not re-armed yet: the events wait in the kernel
        f.write("4,2,2000,-;x\n")
    await asyncio.sleep(0.2)
    assert len(pokes) == 1
    w.rearm()
    assert await until(lambda: len(pokes) == 2)
    w.stop()
    assert not w.active


async def test_an_unwatchable_log_is_said_once_and_is_not_fatal(tmp_path):
    log = Log()
    w = KmsgWatcher(trigger=lambda: None, log=log, opener=lambda: FileWatch(str(tmp_path / "missing/kmsg")))
    assert not w.start(asyncio.get_running_loop()) and not w.start(asyncio.get_running_loop())
    assert [e for _, e in log.lines] == ["kmsg.unwatched"]


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/kmsg"), reason="writing the kernel log needs root")
async def test_dev_kmsg_is_pollable_from_its_end(tmp_path):
    pokes: list[float] = []
    w = KmsgWatcher(trigger=lambda: pokes.append(time.monotonic()), log=Log(), opener=lambda: DeviceWatch("/dev/kmsg"))
    assert w.start(asyncio.get_running_loop())
    await asyncio.sleep(0.1)
    pokes.clear()  # whatever else this machine logged meanwhile
    with open("/dev/kmsg", "w") as k:  # a harmless line of agentd's own tests
        k.write(f"<6>agentd-test kmsg-watch {uuid.uuid4().hex[:12]}\n")
    assert await until(lambda: len(pokes) >= 1)
    w.stop()


def _daemon(tmp_path: Path, root: Path, kmsg: str) -> Daemon:
    cfg = AgentConfig.model_validate({
        "host_root": str(root), "listen": f"127.0.0.1:{free_port()}", "nccl": {"enabled": False},
        "events": {"rtnetlink": "off", "kmsg": kmsg}, "intervals": {"fast_s": 60, "medium_s": 60, "slow_s": 120},
        "timeouts": {"nvml_s": 1.0},
        "paths": {"baseline": str(tmp_path / "baseline.json"), "state_dir": str(tmp_path / "state")},
    })
    return Daemon(cfg, host=HostRoot.at(root), watchdog=None)


@pytest.mark.tree
@pytest.mark.parametrize("kmsg", ["on", "off"])
async def test_an_xid_reaches_health_without_the_fast_tier(tmp_path, kmsg):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    d = _daemon(tmp_path, root, kmsg)
    task = asyncio.create_task(d.run())
    try:
        assert await until(lambda: d.state.ready, 30)
        assert health(d.state, time.monotonic()).status == "ok"
        sim.apply_fault(root, "xid@gpu3")  # the driver's Xid 79 line, appended
        got = await until(lambda: health(d.state, time.monotonic()).status == "critical", 10 if kmsg == "on" else 3)
        assert got is (kmsg == "on")  # off: only the fast tier (a minute here) would read it
        if got:
            assert any(f.code == "gpu.xid" and f.subject == "gpu3" for f in d.state.findings)
            assert d.kmsg.events >= 1
    finally:
        d.stop()
        await asyncio.wait_for(task, 10)
