"""The daemon loop in-process with a fake collector: READY/STATUS/WATCHDOG through a real
notify socket, the watchdog withheld while collections hang, reload keeping the old
config on error, udev-triggered collections, clean stop."""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass, field

import aiohttp
import pytest

from agentd.collection.collector import PROBE_TIERS
from agentd.config import AgentConfig, EventSettings, Intervals
from agentd.daemon.daemon import Daemon
from agentd.daemon.systemd import Notifier, Watchdog
from agentd.host.fs import HostRoot
from agentd.judging.expected import Expected
from agentd.judging.roles import HcaRoles
from agentd.model import Finding
from agentd.outputs.evaluate import Evaluation
from tests.support import service_snapshots as fixtures

TIERS = dict(PROBE_TIERS)


@dataclass
class FakeCollector:
    config: AgentConfig
    runs: list = field(default_factory=list)
    block: asyncio.Event | None = None  # set: collections hang until cleared

    async def run(self, names, *, quick=False):
        self.runs.append(tuple(names))
        while self.block is not None and self.block.is_set():
            await asyncio.sleep(0.01)

    kernel_source = None

    def snapshot(self):
        return fixtures.snapshot(time.time())

    def snapshot_job(self):
        return self.snapshot

    def steady_snapshot(self):
        return None

    def with_config(self, config):
        self.config = config
        return self


def fake_evaluate(findings=()):
    def evaluate(snap, history, config, baseline, **_):
        return Evaluation(findings=tuple(findings), status="ok", roles=HcaRoles(("mlx5_0",), ("mlx5_1",), "inferred"), expected=Expected())

    return evaluate


def config(tmp_path, **intervals) -> AgentConfig:
    iv = Intervals(fast_s=0.05, medium_s=0.1, slow_s=0.2, stale_after=20, **intervals)
    # rtnetlink and kmsg off: tests that make the root live ("/") must not see the host's own
    # link changes or kernel log lines (a veth another test makes logs one: a collection more)
    c = AgentConfig(intervals=iv, nccl={"enabled": False}, paths={"baseline": str(tmp_path / "baseline.json")},
                    events={"rtnetlink": "off", "kmsg": "off"})
    return c.model_copy(update={"listen": "127.0.0.1:0"})


@pytest.fixture
def notify(tmp_path):
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.setblocking(False)
    yield Notifier({"NOTIFY_SOCKET": str(path)}), sock
    sock.close()


def drain(sock) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(sock.recv(4096))
        except BlockingIOError:
            return out


async def until(pred, timeout=10.0, step=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        await asyncio.sleep(step)
    return False


def make(tmp_path, notifier=None, watchdog=None, **kw):
    cfg = kw.pop("cfg", None) or config(tmp_path)
    col = FakeCollector(cfg)
    d = Daemon(cfg, host=HostRoot.at(tmp_path), collector=col, probe_tiers=TIERS, evaluate=kw.pop("evaluate", fake_evaluate()),
               notifier=notifier or Notifier({}), watchdog=watchdog, **kw)
    return d, col


async def test_ready_status_and_watchdog_through_a_real_socket(tmp_path, notify):
    notifier, sock = notify
    d, col = make(tmp_path, notifier, Watchdog(0.4))
    task = asyncio.create_task(d.run())
    got: list[bytes] = []
    assert await until(lambda: got.extend(drain(sock)) or any(m.startswith(b"READY=1") for m in got))
    ready = next(m for m in got if m.startswith(b"READY=1"))
    assert b"STATUS=ok: 1 GPUs, 1 active compute ports" in ready
    assert await until(lambda: got.extend(drain(sock)) or got.count(b"WATCHDOG=1") >= 3)
    assert d.state.ready and set(col.runs) >= {tuple(n for n, t in TIERS.items() if t == tier) for tier in ("fast", "medium", "slow")}

    # Collections hang: after WatchdogSec/2 the loop stops petting (systemd would restart it).
    col.block = asyncio.Event()
    col.block.set()
    await asyncio.sleep(0.4)
    drain(sock)
    await asyncio.sleep(0.5)
    assert b"WATCHDOG=1" not in drain(sock)
    ok, why = d.alive()
    assert ok  # /livez allows longer (its limit is for real probe timeouts)
    # They complete again: petting resumes.
    col.block.clear()
    got = []
    assert await until(lambda: got.extend(drain(sock)) or b"WATCHDOG=1" in got)

    d.stop()
    assert await asyncio.wait_for(task, 5) == 0
    assert any(m.startswith(b"STOPPING=1") for m in drain(sock))


async def test_status_line_follows_findings(tmp_path, notify):
    notifier, sock = notify
    findings: list[Finding] = []

    def evaluate(snap, history, cfg, baseline, **_):
        return Evaluation(findings=tuple(findings), status="ok", roles=HcaRoles(("mlx5_0",), (), "inferred"), expected=Expected())

    d, _ = make(tmp_path, notifier, evaluate=evaluate)
    task = asyncio.create_task(d.run())
    got: list[bytes] = []
    assert await until(lambda: got.extend(drain(sock)) or any(m.startswith(b"READY=1") for m in got))
    findings.append(Finding(code="ib.port.down", severity="critical", subject="mlx5_0:1", message="DOWN"))
    assert await until(lambda: got.extend(drain(sock)) or any(b"STATUS=critical" in m for m in got))
    assert d.state.status == "critical"
    d.stop()
    assert await asyncio.wait_for(task, 5) == 0


async def test_http_is_served_from_state(tmp_path):
    d, _ = make(tmp_path)
    task = asyncio.create_task(d.run())
    assert await until(lambda: d.state.ready)
    host, port = d.addresses[0]
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://{host}:{port}/health") as r:
            assert r.status == 200 and (await r.json())["status"] == "ok"
        async with s.get(f"http://{host}:{port}/metrics") as r:
            text = await r.text()
            assert 'agentd_collection_duration_seconds{tier="fast"}' in text or 'tier="all"' in text
        async with s.get(f"http://{host}:{port}/livez") as r:
            assert r.status == 200
    d.stop()
    assert await asyncio.wait_for(task, 5) == 0


async def test_reload_with_invalid_config_keeps_the_old_one(tmp_path):
    path = tmp_path / "agentd.toml"
    path.write_text('[intervals]\nfast_s = 0.05\nmedium_s = 0.1\nslow_s = 0.2\nstale_after = 20\n[nccl]\nenabled = false\n')
    from agentd.config import load_config

    cfg = load_config(path, environ={}).model_copy(update={"listen": "127.0.0.1:0"})
    d, col = make(tmp_path, cfg=cfg, config_path=path, overrides={"listen": "127.0.0.1:9"})
    task = asyncio.create_task(d.run())
    assert await until(lambda: d.state.ready)

    path.write_text("[intervals]\nfast_s = -1\n")
    assert await d.reload() is False
    assert d.config is cfg and col.config is cfg
    assert d.state.reload.ok is True  # published with the next collection
    assert await until(lambda: d.state.reload.ok is False)
    assert "intervals.fast_s" in (d.state.reload.error or "")
    assert b"agentd_config_last_reload_success 0" in d.state.metrics_bytes()

    path.write_text('[intervals]\nfast_s = 0.07\nmedium_s = 0.1\nslow_s = 0.2\nstale_after = 20\n[nccl]\nenabled = false\n')
    assert await d.reload() is True
    assert d.config.intervals.fast_s == 0.07 and col.config is d.config
    assert d.config.listen == "127.0.0.1:0"  # listen needs a restart: the running value is kept
    d.stop()
    assert await asyncio.wait_for(task, 5) == 0


async def test_udev_events_trigger_one_debounced_full_collection(tmp_path):
    import os

    r, w = os.pipe()
    os.set_blocking(r, False)

    class Dev:
        def __init__(self, subsystem, action):
            self.subsystem, self.action, self.sys_name = subsystem, action, "x"

    queue: list[Dev] = []

    class Monitor:
        def fileno(self):
            return r

        def poll(self, timeout=0):
            try:
                os.read(r, 1)
            except BlockingIOError:
                pass
            return queue.pop(0) if queue else None

    cfg = config(tmp_path).model_copy(update={"intervals": Intervals(fast_s=60, medium_s=60, slow_s=60, event_debounce_s=0.2)})
    d, col = make(tmp_path, cfg=cfg, udev_opener=Monitor)
    d.host = HostRoot(__import__("pathlib").Path("/"))  # only a live root watches udev
    task = asyncio.create_task(d.run())
    assert await until(lambda: d.state.ready)
    assert d.udev.active
    before = len(col.runs)
    queue.extend([Dev("net", "change"), Dev("infiniband", "remove"), Dev("module", "remove")])
    os.write(w, b"xxx")
    assert await until(lambda: d.state.udev_events.get(("module", "remove")) == 1)
    assert len(col.runs) == before + 1 and len(col.runs[-1]) == len(TIERS)  # one full collection for the burst
    assert d.udev.counts == {("net", "change"): 1, ("infiniband", "remove"): 1, ("module", "remove"): 1}
    d.stop()
    assert await asyncio.wait_for(task, 5) == 0
    os.close(r)
    os.close(w)


async def test_no_udev_is_logged_not_fatal(tmp_path):
    def broken():
        raise OSError("no udev here")

    d, _ = make(tmp_path, udev_opener=broken)
    d.host = HostRoot(__import__("pathlib").Path("/"))
    task = asyncio.create_task(d.run())
    assert await until(lambda: d.state.ready)
    assert not d.udev.active and "no udev here" in d.udev.error
    d.stop()
    assert await asyncio.wait_for(task, 5) == 0


async def test_stop_does_not_wait_for_a_hung_collection(tmp_path):
    d, col = make(tmp_path)
    col.block = asyncio.Event()
    col.block.set()
    task = asyncio.create_task(d.run())
    await asyncio.sleep(0.2)
    assert not d.state.ready
    d.stop()
    assert await asyncio.wait_for(task, 5) == 0


async def test_bind_failure_returns_3_and_says_why(tmp_path):
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    port = blocker.getsockname()[1]
    cfg = config(tmp_path).model_copy(update={"listen": f"127.0.0.1:{port}"})
    d, _ = make(tmp_path, cfg=cfg)
    try:
        assert await asyncio.wait_for(d.run(), 5) == 3  # it could not run, as every command says it
        assert d.start_error is not None and "in use" in d.start_error
    finally:
        blocker.close()


async def test_web_config_basic_auth_is_applied(tmp_path):
    bcrypt = pytest.importorskip("bcrypt")
    pytest.importorskip("yaml")
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prom: '{hashed}'\n")
    cfg = config(tmp_path).model_copy(update={"web": AgentConfig(web={"config_file": str(web)}).web})
    d, _ = make(tmp_path, cfg=cfg)
    task = asyncio.create_task(d.run())
    assert await until(lambda: d.state.ready)
    host, port = d.addresses[0]
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://{host}:{port}/metrics") as r:
            assert r.status == 401
        import base64

        creds = base64.b64encode(b"prom:secret").decode()
        async with s.get(f"http://{host}:{port}/metrics", headers={"Authorization": f"Basic {creds}"}) as r:
            assert r.status == 200
    d.stop()
    assert await asyncio.wait_for(task, 5) == 0


async def test_bad_web_config_fails_start(tmp_path):
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: /nonexistent\n")
    cfg = config(tmp_path).model_copy(update={"web": AgentConfig(web={"config_file": str(web)}).web})
    d, _ = make(tmp_path, cfg=cfg)
    assert await asyncio.wait_for(d.run(), 5) == 3


async def test_sighup_reloads(tmp_path):
    import os
    import signal

    path = tmp_path / "agentd.toml"
    path.write_text('[intervals]\nfast_s = 0.05\nmedium_s = 0.1\nslow_s = 0.2\nstale_after = 20\n[nccl]\nenabled = false\n')
    from agentd.config import load_config

    cfg = load_config(path, environ={}).model_copy(update={"listen": "127.0.0.1:0"})
    d, _ = make(tmp_path, cfg=cfg, config_path=path, overrides={"listen": "127.0.0.1:9"})
    task = asyncio.create_task(d.run())
    assert await until(lambda: d.state.ready)
    path.write_text('[intervals]\nfast_s = 0.06\nmedium_s = 0.1\nslow_s = 0.2\nstale_after = 20\n[nccl]\nenabled = false\n')
    os.kill(os.getpid(), signal.SIGHUP)  # the daemon's handler is installed on this loop
    assert await until(lambda: d.config.intervals.fast_s == 0.06)
    d.stop()
    assert await asyncio.wait_for(task, 5) == 0


def fast_runs(col) -> int:
    fast = {n for n, t in TIERS.items() if t == "fast"}
    return sum(1 for r in col.runs if set(r) == fast)


async def test_trigger_tier_coalesces_a_burst_and_follows_up_a_running_collection(tmp_path):
    cfg = config(tmp_path).model_copy(update={"intervals": Intervals(fast_s=60, medium_s=60, slow_s=60, stale_after=20, link_event_debounce_s=0.05)})
    d, col = make(tmp_path, cfg=cfg)
    task = asyncio.create_task(d.run())
    assert await until(lambda: d.state.ready)
    for _ in range(5):
        d.trigger_tier("fast")
    assert await until(lambda: fast_runs(col) == 1)
    col.block = asyncio.Event()
    col.block.set()  # the next collection hangs until cleared
    d.trigger_tier("fast")
    assert await until(lambda: fast_runs(col) == 2)  # running, blocked
    for _ in range(3):
        d.trigger_tier("fast")  # during it: one follow-up, not three, not none
    col.block.clear()
    assert await until(lambda: fast_runs(col) == 3)
    await asyncio.sleep(0.3)
    assert fast_runs(col) == 3
    d.stop()
    assert await asyncio.wait_for(task, 5) == 0


async def test_a_link_change_collects_the_fast_tier_on_any_root_when_rtnetlink_is_on(tmp_path):
    import struct

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    ours.setblocking(False)
    name = b"ens1np0\0"  # a port netdev of the fixture snapshot, down there
    body = struct.pack("=BxHiII", 0, 1, 7, 0, 0) + struct.pack("=HH", 4 + len(name), 3) + name + struct.pack("=HHBxxx", 5, 16, 6) + struct.pack("=HHBxxx", 5, 33, 1)
    up = struct.pack("=IHHII", 16 + len(body), 16, 0, 0, 0) + body  # RTM_NEWLINK: operstate up, carrier 1
    cfg = config(tmp_path).model_copy(update={"intervals": Intervals(fast_s=60, medium_s=60, slow_s=60, stale_after=20), "events": EventSettings(rtnetlink="on")})
    d, col = make(tmp_path, cfg=cfg, link_opener=lambda: ours)
    task = asyncio.create_task(d.run())
    assert await until(lambda: d.state.ready)
    assert d.links.active and not d.host.is_live
    theirs.send(up)
    assert await until(lambda: fast_runs(col) == 1)
    assert await until(lambda: d.state.link_events.get("changed") == 1 and d.state.link_active)
    theirs.send(up)  # a repeat: no collection
    assert await until(lambda: d.links.counts.get("unchanged") == 1)
    await asyncio.sleep(0.2)
    assert fast_runs(col) == 1
    d.stop()
    assert await asyncio.wait_for(task, 5) == 0
    assert not d.links.active
    theirs.close()



async def test_a_reload_turns_the_link_watcher_on_and_off(tmp_path):
    pairs: list[tuple[socket.socket, socket.socket]] = []

    def opener():
        pairs.append(socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM))
        pairs[-1][0].setblocking(False)
        return pairs[-1][0]

    d, _ = make(tmp_path, link_opener=opener)  # rtnetlink off, and a simulated-looking root: auto would be off too
    task = asyncio.create_task(d.run())
    assert await until(lambda: d.state.ready)
    assert not d.links.active and not pairs
    d.apply_config(d.config.model_copy(update={"events": EventSettings(rtnetlink="on")}))
    assert d.links.active and len(pairs) == 1
    d.apply_config(d.config.model_copy(update={"events": EventSettings(rtnetlink="auto")}))
    assert not d.links.active and pairs[0][0].fileno() == -1  # closed
    d.stop()
    assert await asyncio.wait_for(task, 5) == 0
    for _, theirs in pairs:
        theirs.close()
