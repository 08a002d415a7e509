"""SIGHUP reloads ``web.config_file`` for real (issue 12 item 4): a removed basic-auth user
loses access, a rotated certificate is served, both on the same listening socket; a web
config that cannot be used fails the reload loudly (log, ``agentd_config_last_reload_success
0``) and the running one keeps serving."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentd.collection.collector import PROBE_TIERS
from agentd.config import AgentConfig, load_config
from agentd.daemon.daemon import Daemon
from agentd.daemon.systemd import Notifier
from agentd.host.fs import HostRoot
from agentd.judging.expected import Expected
from agentd.judging.roles import HcaRoles
from agentd.outputs.evaluate import Evaluation
from tests.security.test_webconfig import HASH, PASSWORD, _openssl, basic, client_ctx, pki  # noqa: F401  (pki: fixture)
from tests.support import service_snapshots as fixtures


@dataclass
class FakeCollector:
    config: AgentConfig

    async def run(self, names: Any, *, quick: bool = False) -> None:
        return None

    kernel_source = None

    def snapshot(self) -> Any:
        return fixtures.snapshot(time.time())

    def snapshot_job(self) -> Any:
        return self.snapshot

    def steady_snapshot(self) -> Any:
        return None

    def with_config(self, config: AgentConfig) -> FakeCollector:
        self.config = config
        return self


def fake_evaluate(snap: Any, history: Any, config: Any, baseline: Any, **_: Any) -> Evaluation:
    return Evaluation(findings=(), status="ok", roles=HcaRoles(("mlx5_0",), ("mlx5_1",), "inferred"), expected=Expected())


class Log:
    """Records the daemon's structured log calls."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, **kw: self.events.append((level, event, kw))


def toml(d: Path, web: Path, extra: str = "") -> Path:
    p = d / "agentd.toml"
    p.write_text(f'[intervals]\nfast_s = 0.05\nmedium_s = 0.1\nslow_s = 0.2\nstale_after = 20\n[nccl]\nenabled = false\n'
                 f'[paths]\nbaseline = "{d}/baseline.json"\n[web]\nconfig_file = "{web}"\n{extra}')
    return p


async def until(pred: Any, limit_s: float = 10.0) -> bool:
    for _ in range(int(limit_s / 0.02)):
        if pred():
            return True
        await asyncio.sleep(0.02)
    return bool(pred())


async def start(d: Path, web: Path, extra: str = "") -> tuple[Daemon, asyncio.Task[int], Log]:
    path = toml(d, web, extra)
    cfg = load_config(path, environ={}).model_copy(update={"listen": "127.0.0.1:0"})
    log = Log()
    daemon = Daemon(cfg, host=HostRoot.at(d), config_path=path, overrides={"listen": "127.0.0.1:9"}, collector=FakeCollector(cfg),
                    probe_tiers=dict(PROBE_TIERS), evaluate=fake_evaluate, notifier=Notifier({}), watchdog=None, log=log)
    task = asyncio.create_task(daemon.run())
    assert await until(lambda: daemon.state.ready)
    return daemon, task, log


async def status(url: str, user: str, password: str, tls: ssl.SSLContext | bool = True) -> int:
    async with aiohttp.ClientSession() as s, s.get(url, ssl=tls, headers={"Authorization": basic(user, password)}) as r:
        return r.status


async def served_serial(port: int, tls: ssl.SSLContext) -> str:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    try:
        return str(writer.get_extra_info("peercert")["serialNumber"])
    finally:
        writer.close()


async def test_reload_drops_a_removed_user_and_keeps_the_socket(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  alice: {HASH}\n  bob: {HASH}\n")
    d, task, log = await start(tmp_path, web)
    port = d.addresses[0][1]
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        assert await status(url, "bob", PASSWORD) == 200
        web.write_text(f"basic_auth_users:\n  alice: {HASH}\n")
        assert await d.reload() is True
        assert d.addresses[0][1] == port
        assert await status(url, "bob", PASSWORD) == 401
        assert await status(url, "alice", PASSWORD) == 200
        assert await until(lambda: b"agentd_config_last_reload_success 1" in d.state.metrics_bytes())
    finally:
        d.stop()
        assert await asyncio.wait_for(task, 5) == 0


async def test_a_sighup_during_a_reload_is_judged_after_it(tmp_path: Path) -> None:
    """Two SIGHUPs a moment apart, the second with a broken web config: the reloads run in
    order, so the latest one (failed) is what ``agentd_config_last_reload_success`` says,
    not the first one finishing late (its server handover takes ``HANDOVER_S``)."""
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  alice: {HASH}\n  bob: {HASH}\n")
    d, task, log = await start(tmp_path, web)
    try:
        web.write_text(f"basic_auth_users:\n  alice: {HASH}\n")
        first = asyncio.create_task(d.reload())
        await asyncio.sleep(0.1)  # the first has read its files and is handing the socket over
        assert not first.done()
        web.write_text("basic_auth_users:\n  alice: not-a-hash\n")
        second = asyncio.create_task(d.reload())
        assert await first is True and await second is False
        assert await until(lambda: b"agentd_config_last_reload_success 0" in d.state.metrics_bytes())
        events = [event for _, event, _ in log.events if event.startswith("config.reload")]
        assert events[-2:] == ["config.reloaded", "config.reload_failed"], events
    finally:
        d.stop()
        assert await asyncio.wait_for(task, 5) == 0


def issue_server_cert(ca_dir: Path, out: Path) -> None:
    """A fresh key and certificate for the same names, signed by the test CA."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", *ec, "-keyout", str(out / "tls.key"), "-out", str(out / "tls.csr"), "-subj", "/CN=server", cwd=ca_dir)
    _openssl("x509", "-req", "-in", str(out / "tls.csr"), "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "ext.cnf", "-extensions", "server", "-out", str(out / "tls.pem"), cwd=ca_dir)


@pytest.mark.proc
async def test_reload_serves_a_rotated_certificate_and_can_turn_tls_on(pki: Path, tmp_path: Path) -> None:  # noqa: F811
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  alice: {HASH}\n")  # plain HTTP first
    d, task, _ = await start(tmp_path, web)
    port = d.addresses[0][1]
    tls = client_ctx(pki)
    try:
        shutil.copy(pki / "server.pem", tmp_path / "tls.pem")
        shutil.copy(pki / "server.key", tmp_path / "tls.key")
        web.write_text(f"tls_server_config:\n  cert_file: tls.pem\n  key_file: tls.key\nbasic_auth_users:\n  alice: {HASH}\n")
        assert await d.reload() is True
        first = await served_serial(port, tls)
        assert await status(f"https://127.0.0.1:{port}/metrics", "alice", PASSWORD, tls) == 200
        issue_server_cert(pki, tmp_path)  # rotated in place, same paths
        assert await d.reload() is True
        second = await served_serial(port, tls)
        assert second != first
        assert await status(f"https://127.0.0.1:{port}/metrics", "alice", PASSWORD, tls) == 200
    finally:
        d.stop()
        assert await asyncio.wait_for(task, 5) == 0


@pytest.mark.parametrize("bad", ["basic_auth_users:\n  bob: not-a-bcrypt-hash\n", "tls_server_config:\n  cert_file: missing.pem\n  key_file: missing.key\n"])
async def test_a_web_config_that_cannot_be_used_fails_the_reload_loudly(tmp_path: Path, bad: str) -> None:
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  alice: {HASH}\n")
    d, task, log = await start(tmp_path, web)
    url = f"http://127.0.0.1:{d.addresses[0][1]}/metrics"
    try:
        web.write_text(bad)
        assert await d.reload() is False
        assert any(level == "error" and event == "config.reload_failed" and "web" in kw["error"] for level, event, kw in log.events), log.events
        assert await until(lambda: b"agentd_config_last_reload_success 0" in d.state.metrics_bytes())
        assert await status(url, "alice", PASSWORD) == 200  # the running web config keeps serving
        assert await status(url, "bob", PASSWORD) == 401
    finally:
        d.stop()
        assert await asyncio.wait_for(task, 5) == 0


async def test_a_tls_handshake_that_never_starts_is_closed_after_the_header_timeout(pki: Path, tmp_path: Path) -> None:  # noqa: F811
    shutil.copy(pki / "server.pem", tmp_path / "tls.pem")
    shutil.copy(pki / "server.key", tmp_path / "tls.key")
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config:\n  cert_file: tls.pem\n  key_file: tls.key\n")
    d, task, _ = await start(tmp_path, web, "header_timeout_s = 0.3\n")
    port = d.addresses[0][1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)  # plain TCP, no ClientHello
        assert await asyncio.wait_for(reader.read(), 20) == b""  # closed by the server
        writer.close()
        assert await served_serial(port, client_ctx(pki))  # others still get in
    finally:
        d.stop()
        assert await asyncio.wait_for(task, 5) == 0


@pytest.mark.e2e
def test_sighup_to_the_agentd_process_drops_a_removed_user(tmp_path: Path) -> None:
    """The same through the real process and signal: ``agentd run`` gets SIGHUP."""
    import os
    import signal

    from tests.support.daemon_harness import Agent, config_text, metric_value, poll

    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  alice: {HASH}\n  bob: {HASH}\nauth_excluded_paths: [/readyz, /health]\n")
    out = tmp_path / "d" / "out"
    a = Agent(tmp_path / "d", config=config_text(out=out, extra=f'[web]\nconfig_file = "{web}"\n'))
    try:
        a.wait_ready()
        bob = {"Authorization": basic("bob", PASSWORD)}
        alice = {"Authorization": basic("alice", PASSWORD)}
        assert a.get("/metrics", headers=bob)[0] == 200
        web.write_text(f"basic_auth_users:\n  alice: {HASH}\nauth_excluded_paths: [/readyz, /health]\n")
        os.kill(a.proc.pid, signal.SIGHUP)
        assert poll(lambda: a.get("/metrics", headers=bob)[0] == 401, 20.0), a.logs()
        code, body = a.get("/metrics", headers=alice)
        assert code == 200 and metric_value(body.decode(), "agentd_config_last_reload_success") == 1.0
        web.write_text("basic_auth_users:\n  alice: not-a-hash\n")
        os.kill(a.proc.pid, signal.SIGHUP)
        assert poll(lambda: metric_value(a.get("/metrics", headers=alice)[1].decode(), "agentd_config_last_reload_success") == 0.0, 20.0), a.logs()
        assert "config.reload_failed" in a.logs()
        assert a.alive()
    finally:
        a.stop()
