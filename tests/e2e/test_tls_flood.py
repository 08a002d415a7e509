"""A TLS handshake flood neither locks /health out nor makes the node lose its GPUs and
HCAs (issue 42, item 1; the red team's reproduction).

Connections that never send a ClientHello were not counted against the connection cap,
so 700 of them ran a daemon with 512 fds out of file descriptors: /health went unanswered,
and the next collection's directory listings failed with EMFILE and were judged as every
GPU and HCA missing (503). Now the handshake is a connection like any other (counted from
the TCP accept, evicted at the cap), and a listing that fails is a read error, not absence.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
import urllib.request
from pathlib import Path

import pytest

from tests.security.test_webconfig import client_ctx, pki  # noqa: F401  (pki: fixture)
from tests.support.daemon_harness import Agent, config_text, poll, sim_state_dir

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FLOOD = 700  # more than the daemon's 512 fds


def https_health(port: int, tls: ssl.SSLContext) -> tuple[int, dict] | None:
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/health", context=tls, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except OSError:
        return None


def test_a_tls_handshake_flood_leaves_health_answering_and_the_inventory_whole(tmp_path: Path, pki: Path):  # noqa: F811
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {pki / 'server.pem'}\n  key_file: {pki / 'server.key'}\n")
    # a long header timeout: the flood is held for the whole test, as an attacker re-opening connections holds it
    cfg = config_text(out=tmp_path / "d" / "out", extra=f'[web]\nconfig_file = "{web}"\nheader_timeout_s = 120\n')
    tls = client_ctx(pki)
    a = Agent(tmp_path / "d", config=cfg, nofile=512)
    held: list[socket.socket] = []
    try:
        first = poll(lambda: (h := https_health(a.port, tls)) is not None and h[0] == 200 and h, 60)
        assert first, a.logs()
        assert poll(lambda: (sim_state_dir(tmp_path / "d") / "baseline.json").is_file(), 30), a.logs()  # GPUs and HCAs recorded
        for _ in range(FLOOD):
            try:
                held.append(socket.create_connection(("127.0.0.1", a.port), timeout=2))  # never a ClientHello
            except OSError:
                break
        answers = []
        for _ in range(8):  # bounded: eight probes over a few collections while the flood is held
            h = https_health(a.port, tls)
            answers.append(None if h is None else (h[0], sorted(f["code"] for f in h[1]["findings"])))
            time.sleep(0.5)
        assert all(x is not None and x[0] == 200 for x in answers), (len(held), answers, a.logs())
        assert not any(code.startswith("inventory.") for _, codes in answers for code in codes), answers  # type: ignore[misc]
        assert a.alive()
    finally:
        for s in held:
            s.close()
        a.stop()
