"""The HTTP API over a real socket: status codes, bodies, gzip, methods, limits."""

from __future__ import annotations

import asyncio
import gzip

import aiohttp
import pytest

from agentd.daemon.http import accepts_gzip, build_app, parse_listen, start_server
from agentd.daemon.state import State
from tests.support import service_snapshots as fixtures


class Source:
    def __init__(self, state: State):
        self.state = state
        self.live = (True, "alive")

    def alive(self):
        return self.live


@pytest.fixture
async def server():
    src = Source(fixtures.state(findings=fixtures.FINDINGS))
    runner, addrs = await start_server(build_app(src), "127.0.0.1:0", 8192)
    host, port = addrs[0]
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        yield src, f"http://{host}:{port}", session, (host, port)
    await runner.cleanup()


async def test_metrics_plain_and_gzip(server):
    src, base, s, _ = server
    async with s.get(base + "/metrics", headers={"Accept-Encoding": "identity"}) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert "Content-Encoding" not in r.headers
        assert await r.read() == src.state.metrics_bytes()
    async with s.get(base + "/metrics", headers={"Accept-Encoding": "gzip, deflate"}) as r:
        assert r.headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(await r.read()) == src.state.metrics_bytes()
    async with s.head(base + "/metrics") as r:
        assert r.status == 200 and await r.read() == b""


async def test_health_codes_follow_the_state(server):
    src, base, s, _ = server
    async with s.get(base + "/health") as r:
        assert r.status == 503
        body = await r.json()
        assert body["status"] == "critical" and {"findings", "generated_at", "stale_probes"} <= body.keys()
    async with s.get(base + "/health?format=text") as r:
        assert r.status == 503 and (await r.text()).splitlines()[0] == "critical"
    src.state = fixtures.state()
    async with s.get(base + "/health") as r:
        assert r.status == 200 and (await r.json())["status"] == "ok"
    src.state = fixtures.state(ready=False)
    async with s.get(base + "/health") as r:
        assert r.status == 503 and (await r.json())["status"] == "starting"
    async with s.get(base + "/readyz") as r:
        assert r.status == 503
    async with s.get(base + "/topology") as r:
        assert r.status == 503


async def test_other_endpoints(server):
    src, base, s, _ = server
    async with s.get(base + "/readyz") as r:
        assert r.status == 200
    async with s.get(base + "/livez") as r:
        assert r.status == 200
    src.live = (False, "no collection completed for 99 s")
    async with s.get(base + "/livez") as r:
        assert r.status == 503 and "no collection" in await r.text()
    async with s.get(base + "/checks") as r:
        codes = [f["code"] for f in (await r.json())["findings"]]
        assert codes == ["ib.port.down", "mtu.mismatch"]
    async with s.get(base + "/topology") as r:
        topo = await r.json()
        assert topo["hcas"][0]["name"] == "mlx5_0" and topo["hcas"][0]["pci_bus_id"] == "0000:1b:00.0"
    async with s.get(base + "/") as r:
        assert r.status == 200 and "/metrics" in await r.text()


async def test_unknown_paths_methods_and_bodies(server):
    _, base, s, _ = server
    async with s.get(base + "/nope") as r:
        assert r.status == 404
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        async with s.request(method, base + "/metrics") as r:
            assert r.status == 405, method
    async with s.get(base + "/health", data=b"x" * 10) as r:
        assert r.status == 413


async def _raw(addr, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(*addr)
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(65536), 10)
    writer.close()
    return data


async def test_oversized_request_line_and_header_are_refused(server):
    _, base, s, addr = server
    big = b"a" * 20000
    resp = await _raw(addr, b"GET /metrics?" + big + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert resp.split(b" ", 2)[1] in (b"400", b"414", b"431"), resp[:100]
    resp = await _raw(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + big + b"\r\n\r\n")
    assert resp.split(b" ", 2)[1] in (b"400", b"431"), resp[:100]
    async with s.get(base + "/health") as r:  # the server is still up
        assert r.status in (200, 503)


def test_helpers():
    assert accepts_gzip("gzip") and accepts_gzip("br, gzip;q=0.5") and accepts_gzip("*")
    assert not accepts_gzip("") and not accepts_gzip("gzip;q=0") and not accepts_gzip("identity")
    assert parse_listen("127.0.0.1:9478") == ("127.0.0.1", 9478)
    assert parse_listen("[::1]:9478") == ("::1", 9478)
