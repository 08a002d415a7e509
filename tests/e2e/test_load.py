"""Load and hostile clients against the real daemon (issue 7).

- ~15 s of 50 concurrent aiohttp clients on /metrics (identity and gzip) and /health (JSON
  and text) while a background task toggles port_down on the live tree: zero failed
  requests (every answer 200, or 503 for a critical /health, with a well-formed body) and
  the daemon's RSS does not grow without bound (a generous bound, not a timing). Latency
  and throughput are printed as figures, never asserted.
- Malformed requests on raw sockets (garbage bytes, an oversized header and request line,
  too many headers) get an error or a closed connection, and slow clients that send a
  byte every 0.5 s do not stop the server from answering everybody else.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import random
import socket
import threading
import time

import aiohttp
import psutil
import pytest

from agentd import sim
from agentd.sim.build import pristine_root
from tests.support.daemon_harness import REACT_S, Agent, config_text, health_consistent, poll

pytestmark = pytest.mark.e2e

CLIENTS = 50
LOAD_S = 15.0
TOGGLE_S = 0.5
FLAP_WINDOW_S = 3.0  # port_down toggled ~15 times reads as flapping: let it clear soon after
ENDPOINTS = (("/metrics", False), ("/metrics", True), ("/health", False), ("/health?format=text", False))
STATUSES = {"ok", "degraded", "critical"}


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    d = tmp_path_factory.mktemp("load")
    cfg = config_text(out=d / "out", extra=f"[thresholds]\nflap_window_s = {FLAP_WINDOW_S}\n")
    pristine_root("h100-ib")  # built once per process: not inside the timed load
    a = Agent(d, config=cfg)
    try:
        a.wait_ready()
        assert poll(lambda: a.findings() == (200, set())), a.findings()
        yield a
    finally:
        a.stop()


def _check(path: str, gz: bool, status: int, headers, body: bytes) -> str | None:
    """None when the answer is well formed, else why not."""
    if path == "/metrics":
        if status != 200:
            return f"/metrics {status}"
        if gz and headers.get("Content-Encoding") != "gzip":
            return "/metrics asked for gzip, got identity"
        if not (body.startswith(b"# HELP ") and body.endswith(b"\n") and b"\nagentd_healthy " in body):
            return f"/metrics body malformed ({len(body)} bytes)"
        return None
    if status not in (200, 503):
        return f"{path} {status}"
    if path == "/health":
        doc = json.loads(body)
        return None if health_consistent(status, doc) else f"/health {status} with {doc.get('status')}"
    first = body.decode().split("\n", 1)[0]
    return None if first in STATUSES and (status == 503) == (first == "critical") else f"text {status} {first!r}"


async def _load(a: Agent) -> dict:
    lat: dict[str, list[float]] = {f"{p}{' gzip' if gz else ''}": [] for p, gz in ENDPOINTS}
    errors: list[str] = []
    codes = {200: 0, 503: 0}
    rss: list[float] = []
    probe: list[float] = []
    proc = psutil.Process(a.proc.pid)
    stop = asyncio.Event()

    async def client(i: int, session: aiohttp.ClientSession) -> None:
        rnd = random.Random(i)
        while not stop.is_set():
            path, gz = ENDPOINTS[rnd.randrange(len(ENDPOINTS))]
            key = f"{path}{' gzip' if gz else ''}"
            t0 = time.perf_counter()
            try:
                hdrs = {"Accept-Encoding": "gzip" if gz else "identity"}
                async with session.get(a.base + path, headers=hdrs) as r:
                    body = await r.read()
                    why = _check(path, gz, r.status, r.headers, body)
                    codes[r.status] = codes.get(r.status, 0) + 1
            except Exception as e:
                why = f"{key}: {type(e).__name__}: {e}"
            lat[key].append(time.perf_counter() - t0)
            if why:
                errors.append(why)

    # Fault toggling and RSS sampling run in threads: the clients keep the event loop busy.
    done = threading.Event()
    toggles = [0]

    def toggler() -> None:
        while not done.is_set():
            sim.apply_fault(a.root, "port_down")
            done.wait(TOGGLE_S)
            sim.clear_fault(a.root, "port_down")
            toggles[0] += 1
            done.wait(TOGGLE_S)

    def sampler() -> None:
        while not done.is_set():
            rss.append(proc.memory_info().rss)
            done.wait(1.0)

    def prober() -> None:  # one sequential /health client beside the 50: what a scheduler sees
        while not done.is_set():
            t = time.perf_counter()
            try:
                code, body = a.get("/health", timeout=30)
                why = _check("/health", False, code, {}, body)
            except Exception as e:
                why = f"probe /health: {type(e).__name__}: {e}"
            probe.append(time.perf_counter() - t)
            if why:
                errors.append(why)
            done.wait(0.05)

    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CLIENTS), timeout=timeout, auto_decompress=True) as session:
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(client(i, session)) for i in range(CLIENTS)]
        threads = [threading.Thread(target=f) for f in (toggler, sampler, prober)]
        for t in threads:
            t.start()
        try:
            await asyncio.sleep(LOAD_S)
        finally:
            stop.set()
            done.set()
            await asyncio.gather(*tasks)
            elapsed = time.perf_counter() - t0
            for t in threads:
                t.join(30)
    return {"lat": lat, "errors": errors, "codes": codes, "rss": rss, "elapsed": elapsed, "toggles": toggles[0], "probe": probe}


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000 if xs else float("nan")


def test_load_zero_failures_and_bounded_memory(agent):
    idle = []
    for _ in range(100):
        t = time.perf_counter()
        assert agent.get("/health")[0] == 200
        idle.append(time.perf_counter() - t)
    res = asyncio.run(_load(agent))
    lat, rss = res["lat"], res["rss"]
    total = sum(len(v) for v in lat.values())
    print(f"\nload: {CLIENTS} clients, {res['elapsed']:.1f} s, {total} requests = {total / res['elapsed']:.0f} req/s, "
          f"{res['toggles']} port_down toggles, answers {res['codes']}")
    for key, xs in lat.items():
        print(f"  {key:22s} n={len(xs):6d}  p50={_pct(xs, 0.5):7.1f} ms  p99={_pct(xs, 0.99):7.1f} ms")
    print(f"  sequential /health client: idle p50={_pct(idle, 0.5):.1f} ms p99={_pct(idle, 0.99):.1f} ms; "
          f"under load p50={_pct(res['probe'], 0.5):.1f} ms p99={_pct(res['probe'], 0.99):.1f} ms (n={len(res['probe'])})")
    print("  (latencies include client-side queueing: one Python client process on the same cores as the daemon)")
    print("  daemon RSS MB per second: " + " ".join(f"{x / 2**20:.0f}" for x in rss))
    assert not res["errors"], f"{len(res['errors'])} failed requests, e.g. {res['errors'][:5]}"
    assert all(len(xs) > 0 for xs in lat.values()), {k: len(v) for k, v in lat.items()}
    assert res["codes"].get(503, 0) > 0, "the toggled port_down never showed as 503: faults did not take effect"
    third = max(1, len(rss) // 3)
    first, last = max(rss[:third]), max(rss[-third:])
    assert last <= 1.5 * first + 20 * 2**20, f"RSS grew from {first / 2**20:.0f} MB to {last / 2**20:.0f} MB"
    assert agent.alive(), agent.logs()
    sim.clear_fault(agent.root, "port_down")
    assert poll(lambda: agent.findings() == (200, set()), REACT_S + FLAP_WINDOW_S), agent.findings()


# -- hostile clients ----------------------------------------------------------------
def _raw(a: Agent, payload: bytes, *, timeout: float = 10.0) -> bytes:
    """Send ``payload``; what the server answers before closing (b"" when it just closes)."""
    with socket.create_connection(("127.0.0.1", a.port), timeout=timeout) as s:
        try:
            s.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
                if b"\r\n\r\n" in b"".join(chunks):
                    break
        except (ConnectionResetError, TimeoutError):
            pass
        return b"".join(chunks)


def _status(resp: bytes) -> int | None:
    parts = resp.split(b" ", 2)
    return int(parts[1]) if resp.startswith(b"HTTP/1.") and len(parts) > 1 and parts[1].isdigit() else None


def test_malformed_requests_are_refused_and_others_still_served(agent):
    big = 3 * 8192  # > web.max_request_bytes (default 8192)
    cases = {
        "garbage": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\x00\xff\r\n\r\n",
        "not http": b"HELLO THERE\r\n\r\n",
        "huge header": b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * big + b"\r\n\r\n",
        "huge request line": b"GET /health?" + b"a" * big + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        "too many headers": b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(500)) + b"\r\n",
        "bad version": b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n",
    }
    for name, payload in cases.items():
        resp = _raw(agent, payload)
        code = _status(resp)
        assert resp == b"" or (code is not None and 400 <= code < 600), (name, resp[:200])
        print(f"\n  {name}: {code if code else 'connection closed'}", end="")
        assert agent.get("/health")[0] == 200, name
    print()
    assert agent.alive(), agent.logs()


def test_slow_clients_do_not_block_others(agent):
    slow = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", agent.port), timeout=5)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        slow.append(s)
    answered = closed = 0
    try:
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            for s in list(slow):
                try:
                    s.sendall(b"X")  # one byte of an endless header name, every 0.5 s
                except OSError:
                    slow.remove(s)
                    closed += 1
            code, body = agent.get("/health", timeout=5)
            assert code == 200 and json.loads(body)["status"] == "ok", (code, body[:200])
            answered += 1
            time.sleep(0.5)
        print(f"\n  slow clients: {len(slow)} still connected, {closed} closed by the server; {answered} normal /health answered meanwhile")
        assert answered >= 5
        assert gzip.decompress(agent.get("/metrics", headers={"Accept-Encoding": "gzip"})[1]).startswith(b"# HELP ")
    finally:
        for s in slow:
            s.close()
    assert agent.alive(), agent.logs()


def test_idle_connections_beyond_the_fd_limit_do_not_stop_health(tmp_path):
    """A remote peer (listen = 0.0.0.0, as the README suggests for Prometheus) opens more
    idle connections than the unit's fd limit allows; scrapes must keep working."""
    a = Agent(tmp_path / "d", nofile=1024)
    conns: list[socket.socket] = []
    try:
        a.wait_ready()
        assert poll(lambda: a.findings() == (200, set())), a.findings()
        for _ in range(1100):
            try:
                conns.append(socket.create_connection(("127.0.0.1", a.port), timeout=2))
            except OSError:
                break  # refused or timed out: the server is protecting itself, which is fine
        try:
            code = a.get("/health", timeout=5)[0]
        except OSError as e:
            code = f"{type(e).__name__}: {e}"
        assert code == 200, f"/health with {len(conns)} idle connections open: {code}"
    finally:
        for c in conns:
            c.close()
        a.stop()


STALLED_READERS = 150
DRIPPERS = 40


def _stalled_reader(port: int) -> socket.socket | None:
    """A client that asks for /metrics and never reads the answer (a tiny receive buffer,
    so the server's writes stall at once)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n\r\n")
    except OSError:
        s.close()
        return None
    return s


def _closed_by_server(s: socket.socket) -> bool:
    """True once the server has closed or reset ``s`` (what it sent before is discarded)."""
    s.setblocking(False)
    try:
        while True:
            if s.recv(1 << 20) == b"":
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_stalled_readers_and_drip_fed_headers_do_not_stop_health(tmp_path):
    """Issue 12 item 3: more stalled readers (GET /metrics, never read) and drip-fed
    headers than the connection cap (56 with 256 fds): /health and /livez keep answering,
    and the header-read, response-write and keep-alive timeouts close every one of them
    (a /metrics answer that fits in the socket buffers leaves an idle keep-alive connection)."""
    cfg = config_text(out=tmp_path / "d" / "out", extra="[web]\nheader_timeout_s = 1.0\nwrite_timeout_s = 1.0\nidle_timeout_s = 2.0\n")
    a = Agent(tmp_path / "d", config=cfg, nofile=256)
    readers: list[socket.socket] = []
    drippers: list[socket.socket] = []
    try:
        a.wait_ready()
        assert poll(lambda: a.findings() == (200, set())), a.findings()
        for _ in range(STALLED_READERS):
            if (s := _stalled_reader(a.port)) is not None:
                readers.append(s)
        for _ in range(DRIPPERS):
            try:
                d = socket.create_connection(("127.0.0.1", a.port), timeout=2)
                d.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
                drippers.append(d)
            except OSError:
                pass
        answered = 0
        for _ in range(10):  # bounded: ten rounds of more stalled readers and one header byte per dripper, then probes
            readers += [s for s in (_stalled_reader(a.port) for _ in range(10)) if s is not None]  # the cap stays full
            for d in drippers:
                try:
                    d.sendall(b"X")
                except OSError:
                    pass
            for path in ("/health", "/livez"):
                try:
                    code = a.get(path, timeout=5)[0]
                except OSError as e:
                    code = f"{type(e).__name__}: {e}"
                assert code == 200, f"{path} with {len(readers)} stalled readers and {len(drippers)} drippers: {code}"
                answered += 1
            time.sleep(0.2)
        stuck = poll(lambda: all(_closed_by_server(s) for s in readers + drippers), 30.0, 0.2)
        left = sum(not _closed_by_server(s) for s in readers + drippers)
        print(f"\n  {len(readers)} stalled readers, {len(drippers)} drippers; {answered} probes answered; {left} still open")
        assert stuck, f"{left} stalled connections still open"
        assert a.get("/health", timeout=5)[0] == 200
        assert a.alive(), a.logs()
    finally:
        for s in readers + drippers:
            s.close()
        a.stop()
