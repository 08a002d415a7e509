"""The HTTP API over a real socket: status codes, bodies, gzip, methods, limits, and the
connection cap and timeouts against silent, drip-feeding and never-reading clients."""

from __future__ import annotations

import asyncio
import gzip
import socket

import aiohttp
import pytest

from agentd.daemon.connections import ServerLimits
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
    srv = await start_server(build_app(src), "127.0.0.1:0", 8192)
    host, port = srv.addresses[0]
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        yield src, f"http://{host}:{port}", session, (host, port)
    await srv.close()


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


# -- slow clients (issue 12 item 3) ----------------------------------------------------
BIG = 8 << 20  # a /metrics body no loopback socket buffer holds


class BigState:
    """A healthy State whose /metrics body is BIG bytes."""

    def __init__(self):
        self.real = fixtures.state()

    def __getattr__(self, name):
        return getattr(self.real, name)

    def metrics_bytes(self) -> bytes:
        return b"#" * BIG

    async def metrics_body(self, compressed: bool) -> bytes:
        return self.metrics_bytes()


class BigSource(Source):
    def __init__(self):
        self.state = BigState()
        self.live = (True, "alive")


@pytest.fixture
async def big_server(request):
    srv = await start_server(build_app(BigSource()), "127.0.0.1:0", request.param)
    yield srv
    await srv.close()


def stalled_reader(addr) -> socket.socket:
    """Asks for /metrics and does not read (a tiny receive buffer)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    s.connect(addr)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n\r\n")
    return s


async def until_closed_by_server(s: socket.socket, limit_s: float = 20.0) -> int:
    """Reads ``s`` until the server closes or resets it; the bytes read. Raises
    TimeoutError if it is still open after ``limit_s`` (a bound, not a measurement)."""
    s.setblocking(False)
    got = 0
    loop = asyncio.get_running_loop()
    try:
        while True:
            chunk = await asyncio.wait_for(loop.sock_recv(s, 1 << 20), limit_s)
            if not chunk:
                return got
            got += len(chunk)
    except ConnectionResetError:
        return got
    finally:
        s.close()


async def until(pred, limit_s: float = 20.0) -> bool:
    for _ in range(int(limit_s / 0.02)):
        if pred():
            return True
        await asyncio.sleep(0.02)
    return pred()


@pytest.mark.parametrize("big_server", [ServerLimits(header_timeout_s=0.3)], indirect=True)
async def test_silent_and_drip_fed_connections_are_closed_after_the_header_timeout(big_server):
    addr = big_server.addresses[0]
    silent = socket.create_connection(addr)
    drip = socket.create_connection(addr)
    drip.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    for _ in range(5):  # bytes that never end the headers do not extend the deadline
        await asyncio.sleep(0.1)
        try:
            drip.sendall(b"X")
        except OSError:
            break
    assert await until_closed_by_server(silent) == 0
    assert await until_closed_by_server(drip) == 0  # closed without an answer
    assert big_server.limiter.timed_out == 2


@pytest.mark.parametrize("big_server", [ServerLimits(write_timeout_s=0.3)], indirect=True)
async def test_a_client_that_never_reads_is_aborted_after_the_write_timeout(big_server):
    reader = stalled_reader(big_server.addresses[0])
    assert await until(lambda: big_server.limiter.timed_out == 1), big_server.connections
    assert big_server.connections == 0
    assert await until_closed_by_server(reader) < BIG  # the response was cut, not finished


@pytest.mark.parametrize("big_server", [ServerLimits(max_connections=4, header_timeout_s=300, write_timeout_s=300)], indirect=True)
async def test_at_the_cap_stalled_connections_make_room_for_health(big_server):
    addr = big_server.addresses[0]
    held = [stalled_reader(addr), stalled_reader(addr)]
    for _ in range(2):
        d = socket.create_connection(addr)
        d.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-")
        held.append(d)
    assert await until(lambda: big_server.connections == 4)
    try:
        for path in ("/health", "/livez", "/health"):
            async with aiohttp.ClientSession() as s, s.get(f"http://{addr[0]}:{addr[1]}{path}") as r:
                assert r.status == 200, path
        assert big_server.limiter.evicted >= 1 and big_server.connections <= 4
    finally:
        for h in held:
            h.close()
