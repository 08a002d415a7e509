"""OpenSSL stays out of the ``agentd`` process unless it serves TLS (agentd.base.openssl_gate,
docs/performance.md "Memory"): the same digests without ``_hashlib``; no ``ssl`` in
``agentd run`` without a web config file, so turning TLS on then fails the reload loudly;
a web config file set at start keeps TLS one reload away.

The gate acts on a whole interpreter, so each case runs in a fresh one."""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.security.test_webconfig import client_ctx, pki  # noqa: F401  (pki: fixture)
from tests.support.daemon_harness import Agent, config_text, metric_value, poll
from tests.support.paths import REPO

pytestmark = pytest.mark.proc

ROOT = REPO

PROBE = r"""
import json, sys
from agentd.base import openssl_gate as g
out = {"lean": g.lean_process() if sys.argv[1] == "lean" else None}
import hashlib, hmac, secrets
out["sha256"] = hashlib.sha256(b"abc").hexdigest()
out["md5"] = hashlib.md5(b"abc").hexdigest()
out["hmac"] = hmac.new(b"key", b"message", hashlib.sha256).hexdigest()
out["openssl_hashes"] = sys.modules.get("_hashlib") is not None
out["without_tls"] = g.without_tls()
try:
    import ssl
    out["ssl"] = True
except ImportError:
    out["ssl"] = False
import asyncio
from aiohttp import web
out["server"] = web.Application is not None and asyncio.new_event_loop is not None
out["tls_available"] = g.tls_available()
import frozenlist, os
out["frozenlist_compiled"] = frozenlist.FrozenList is not frozenlist.PyFrozenList
out["switch_left_set"] = "FROZENLIST_NO_EXTENSIONS" in os.environ
print(json.dumps(out))
"""


def probe(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FROZENLIST_NO_EXTENSIONS")}
    r = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def builtin_hashes() -> bool:
    names = ("_md5", "_sha1", "_sha3", "_blake2") + (("_sha2",) if sys.version_info >= (3, 12) else ("_sha256", "_sha512"))
    return all(importlib.util.find_spec(n) is not None for n in names)


def test_a_lean_process_hashes_the_same_without_openssl_and_serves_http_without_ssl():
    out = probe("lean")
    # the digests are the ones OpenSSL gives this test process
    assert out["sha256"] == hashlib.sha256(b"abc").hexdigest() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert out["md5"] == hashlib.md5(b"abc").hexdigest()
    assert out["hmac"] == hmac.new(b"key", b"message", hashlib.sha256).hexdigest()
    if builtin_hashes():
        assert out["lean"] is True and out["openssl_hashes"] is False
    else:  # a build without the built-in hashes (Fedora, RHEL) keeps OpenSSL's
        assert out["lean"] is False and out["openssl_hashes"] is True
    assert out["without_tls"] is True and out["ssl"] is False and out["tls_available"] is False
    assert out["server"] is True  # asyncio and aiohttp.web import without ssl
    # frozenlist's pure-Python build (no C++ runtime mapped), and no switch left for children
    assert out["frozenlist_compiled"] is False and out["switch_left_set"] is False


def test_nothing_is_left_out_of_a_process_that_is_not_the_agentd_command():
    out = probe("embedded")
    assert out["lean"] is None
    assert out["without_tls"] is False and out["ssl"] is True and out["tls_available"] is True
    assert out["frozenlist_compiled"] is compiled_frozenlist()


def compiled_frozenlist() -> bool:
    """Whether frozenlist's C++ extension is installed (wheels for common platforms)."""
    return importlib.util.find_spec("frozenlist._frozenlist") is not None


def frozenlist_files() -> list[str]:
    spec = importlib.util.find_spec("frozenlist._frozenlist")
    return [os.path.realpath(spec.origin)] if spec is not None and spec.origin else []


# -- the daemon ---------------------------------------------------------------------


def mapped(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def ssl_files() -> list[str]:
    """The shared objects ``import ssl`` maps in this interpreter."""
    import _ssl

    f = getattr(_ssl, "__file__", None)
    if f is None:
        pytest.skip("_ssl is built into this interpreter: nothing to look for in the maps")
    return [os.path.realpath(f)]


def hashlib_files() -> list[str]:
    import _hashlib

    f = getattr(_hashlib, "__file__", None)
    return [os.path.realpath(f)] if f else []


def reload_gauge(agent: Agent) -> float | None:
    code, body = agent.get("/metrics")
    return metric_value(body.decode(), "agentd_config_last_reload_success") if code == 200 else None


def reload(agent: Agent, config: str) -> tuple[float | None, str]:
    """Write the config, SIGHUP, and wait for the reload's outcome: (the success gauge
    once the next publish shows a failure, else its last value; the log lines about it)."""
    offset = agent.log_size()
    agent.config_path.write_text(config)
    os.kill(agent.proc.pid, signal.SIGHUP)
    poll(lambda: agent.events_since(offset, "config.reloaded", "config.reload_failed"))
    poll(lambda: reload_gauge(agent) == 0.0, limit_s=10)
    return reload_gauge(agent), agent.events_since(offset, "config.reload")


def tls_web_config(tmp: Path, pki: Path) -> Path:  # noqa: F811
    p = tmp / "web.yml"
    p.write_text(f"tls_server_config:\n  cert_file: {pki / 'server.pem'}\n  key_file: {pki / 'server.key'}\n")
    return p


def test_agentd_run_without_a_web_config_maps_no_openssl_and_refuses_tls_by_reload(tmp_path, pki):  # noqa: F811
    files = ssl_files() + (hashlib_files() if builtin_hashes() else []) + frozenlist_files()
    base = config_text(out=tmp_path / "node", fast_s=1.0, medium_s=2.0, slow_s=4.0)
    with Agent(tmp_path, config=base) as agent:
        maps = mapped(agent.proc.pid)
        assert not [f for f in files if f in maps], "OpenSSL's modules (or frozenlist's C++ one) are mapped without TLS"
        web = tls_web_config(tmp_path, pki)
        ok, lines = reload(agent, base + f'[web]\nconfig_file = "{web}"\n')
        assert ok == 0.0
        assert "config.reload_failed" in lines and "turning TLS on needs a restart" in lines
        assert agent.get("/health")[0] in (200, 503)  # still serving plain HTTP, as before
        assert agent.alive()


def test_agentd_run_with_a_web_config_file_turns_tls_on_by_reload(tmp_path, pki):  # noqa: F811
    import ssl
    import urllib.error
    import urllib.request

    web = tmp_path / "web.yml"
    web.write_text("http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n")
    base = config_text(out=tmp_path / "node", fast_s=1.0, medium_s=2.0, slow_s=4.0) + f'[web]\nconfig_file = "{web}"\n'
    with Agent(tmp_path, config=base) as agent:
        assert all(f in mapped(agent.proc.pid) for f in ssl_files())
        tls_web_config(tmp_path, pki)  # the same file now turns TLS on
        offset = agent.log_size()
        os.kill(agent.proc.pid, signal.SIGHUP)
        assert poll(lambda: agent.events_since(offset, "config.reloaded", "config.reload_failed")), agent.logs()
        assert "config.reloaded" in agent.events_since(offset, "config.reload"), agent.logs()
        ctx: ssl.SSLContext = client_ctx(pki)
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{agent.port}/health", context=ctx, timeout=10) as r:
                status = r.status
        except urllib.error.HTTPError as e:
            status = e.code
        assert status in (200, 503)
