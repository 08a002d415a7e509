"""TLS handshakes are connections like any other (issue 42, item 1): counted toward the
cap from the TCP accept and held to the header timeout, so peers that connect and never
send a ClientHello cannot run agentd out of file descriptors (every directory listing then
failed with EMFILE, and the node was reported as having lost every GPU and HCA)."""

from __future__ import annotations

import socket

import aiohttp
import pytest

from agentd.daemon.connections import ServerLimits
from agentd.daemon.http import build_app, start_server
from agentd.daemon.webconfig import load_web_config, ssl_context
from tests.daemon.test_http import Source, until, until_closed_by_server
from tests.security.test_webconfig import client_ctx, config_in, pki  # noqa: F401  (pki: fixture)
from tests.support import service_snapshots as fixtures

TLS = "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n"


@pytest.fixture
async def tls_server(pki, request):  # noqa: F811
    ctx = ssl_context(load_web_config(config_in(pki, TLS)))
    srv = await start_server(build_app(Source(fixtures.state())), "127.0.0.1:0", request.param, ssl_context=ctx)
    yield srv
    await srv.close()


@pytest.mark.parametrize("tls_server", [ServerLimits(max_connections=4, header_timeout_s=300, write_timeout_s=300)], indirect=True)
async def test_handshakes_that_never_start_count_toward_the_cap(tls_server, pki):  # noqa: F811
    addr = tls_server.addresses[0]
    held = [socket.create_connection(addr) for _ in range(12)]  # TCP only: no ClientHello, ever
    try:
        # every one was admitted and, past the cap, evicted oldest first: never more than 4 held
        assert await until(lambda: tls_server.limiter.evicted >= 8), (tls_server.limiter.evicted, tls_server.connections)
        assert tls_server.connections <= 4
        assert await until_closed_by_server(held[0]) == 0  # the oldest was closed by the server
        for path in ("/health", "/livez"):  # and a client that speaks TLS still gets in
            async with aiohttp.ClientSession() as s, s.get(f"https://127.0.0.1:{addr[1]}{path}", ssl=client_ctx(pki)) as r:
                assert r.status == 200, path
        assert tls_server.connections <= 4
    finally:
        for h in held:
            h.close()


@pytest.mark.parametrize("tls_server", [ServerLimits(header_timeout_s=0.3)], indirect=True)
async def test_a_handshake_that_never_starts_is_closed_after_the_header_timeout(tls_server, pki):  # noqa: F811
    addr = tls_server.addresses[0]
    silent = socket.create_connection(addr)
    assert await until_closed_by_server(silent) == 0
    assert tls_server.limiter.timed_out == 1 and tls_server.connections == 0
    async with aiohttp.ClientSession() as s, s.get(f"https://127.0.0.1:{addr[1]}/livez", ssl=client_ctx(pki)) as r:
        assert r.status == 200
