"""A reload whose config read never returns fails (issue 42): after ``timeouts.probe_s``
the running config stays and the failure says why; a SIGHUP while that read still hangs
fails at once instead of stacking another blocked read. (tests/daemon/test_stop_with_hung_io
shows the process still stops.)"""

from __future__ import annotations

import asyncio
import threading

import pytest

import agentd.daemon.daemon as daemon_mod
from agentd.collection.collector import PROBE_TIERS
from agentd.config import AgentConfig
from agentd.daemon.daemon import Daemon
from agentd.daemon.systemd import Notifier
from agentd.host.fs import HostRoot
from tests.support.quiet_collector import QuietCollector

BOUND_S = 30.0  # a guard against the hang under test, not a timing: the reload gives up after 0.2 s


async def published(d: Daemon, error: str) -> None:
    """Wait for the next State to carry the reload's error (/metrics and /health read it)."""
    while error not in (d.state.reload.error or ""):
        await asyncio.sleep(0.02)
    assert d.state.reload.ok is False


async def test_a_reload_whose_config_read_hangs_fails_and_keeps_the_running_config(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = AgentConfig(intervals={"fast_s": 0.05, "medium_s": 0.1, "slow_s": 0.2, "stale_after": 20}, timeouts={"probe_s": 0.2},
                      nccl={"enabled": False}, paths={"baseline": str(tmp_path / "b.json"), "state_dir": str(tmp_path)}).model_copy(update={"listen": "127.0.0.1:0"})
    release = threading.Event()
    monkeypatch.setattr(daemon_mod, "load_config", lambda *a, **k: release.wait())  # a config on a filesystem that never answers
    d = Daemon(cfg, host=HostRoot.at(tmp_path), collector=QuietCollector(cfg), probe_tiers=dict(PROBE_TIERS), notifier=Notifier({}), watchdog=None)
    task = asyncio.create_task(d.run())
    try:
        while not d.state.ready:
            await asyncio.sleep(0.02)
        assert await asyncio.wait_for(d.reload(), BOUND_S) is False  # the bound: a guard against the hang under test
        assert d.config is cfg
        await published(d, "was not read within 0.2 s (timeouts.probe_s; hung filesystem?)")
        assert await asyncio.wait_for(d.reload(), BOUND_S) is False  # the first read still hangs: no second one piles up
        await published(d, "the previous reload is still reading its files")
    finally:
        release.set()
        d.stop()
        await asyncio.wait_for(task, 30)
