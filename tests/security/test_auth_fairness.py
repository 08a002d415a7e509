"""Basic auth under a flood of wrong passwords, and what its timing tells (issue 42).

Before: one FIFO of 32 bcrypt verifications for the whole process, so 40 clients sending
wrong passwords delayed a fresh login by up to 6.5 s (and refused it with 429 past 32);
the dummy hash for unknown users had the highest cost, so a user whose hash has a lower
cost answered faster than an unknown name (62 vs 231 ms), contrary to docs/security.md.
Now: round-robin between clients with a cap each, the same bcrypt work for every name,
and refusals remembered apart from successes. Order and work are counted, not timed:
``bcrypt.checkpw`` is wrapped to record what it is asked."""

from __future__ import annotations

import asyncio
import base64
import threading

import aiohttp
import bcrypt
import pytest
from aiohttp import web

import agentd.daemon.auth as auth_mod
from agentd.daemon.auth import BasicAuth, client_of, web_app_options
from agentd.daemon.webconfig import parse_web_config

PASSWORD = b"s3cret"
ALICE = bcrypt.hashpw(PASSWORD, bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$", 1)  # htpasswd's prefix
CAROL = bcrypt.hashpw(PASSWORD, bcrypt.gensalt(5)).decode().replace("$2b$", "$2y$", 1)  # a higher cost
BOUND_S = 30.0  # a guard against a wedged test, not a timing


def basic(user: str, password: bytes) -> str:
    return "Basic " + base64.b64encode(user.encode() + b":" + password).decode()


class Recorder:
    """bcrypt.checkpw that records (password, cost of the hash) and, while ``gate`` is
    clear, holds the call (a verification in progress)."""

    def __init__(self) -> None:
        self.calls: list[tuple[bytes, int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.real = bcrypt.checkpw

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        self.calls.append((password, int(hashed[4:6])))
        self.gate.wait(BOUND_S)
        return self.real(password, hashed)


@pytest.fixture
def rec(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    r = Recorder()
    monkeypatch.setattr(bcrypt, "checkpw", r)
    return r


async def settle(pred=lambda: False, rounds: int = 200) -> None:
    """Let the event loop run queued work (and the worker thread report)."""
    for _ in range(rounds):
        if pred():
            return
        await asyncio.sleep(0.005)


async def test_a_flood_from_one_client_delays_another_clients_login_by_one_turn_at_most(rec: Recorder) -> None:
    auth = BasicAuth({"alice": ALICE, "carol": CAROL})
    await auth.verify(basic("alice", b"warm-up"), client="10.0.0.9")  # the dummy hashes are made on first use
    rec.calls.clear()
    rec.gate.clear()  # the first guess is in the worker and stays there until released
    flood = [asyncio.create_task(auth.verify(basic("carol", f"guess{i}".encode()), client="10.0.0.66")) for i in range(40)]
    await settle(lambda: len(rec.calls) >= 1)
    login = asyncio.create_task(auth.verify(basic("alice", PASSWORD), client="10.0.0.7"))
    await settle()
    rec.gate.set()
    assert await asyncio.wait_for(login, BOUND_S) is True
    results = await asyncio.gather(*flood, return_exceptions=True)
    refused = [r for r in results if isinstance(r, web.HTTPTooManyRequests)]
    assert len(refused) == 40 - auth_mod.AUTH_MAX_PENDING_PER_CLIENT  # the flooding client's own cap, not everyone's
    order = [pw for pw, cost in rec.calls if cost == 4]  # one bcrypt per cost in use each: the cost-4 one stands for it
    # The login's verification runs after the one in progress and at most one more of the flood.
    assert PASSWORD in order[:3], order


async def test_every_user_name_costs_the_same_bcrypt_work(rec: Recorder) -> None:
    auth = BasicAuth({"alice": ALICE, "carol": CAROL})
    await auth.verify(basic("alice", b"warm-up"))
    work = {}
    for user in ("alice", "carol", "nobody"):
        rec.calls.clear()
        assert await auth.verify(basic(user, b"wrong")) is False
        work[user] = sorted(cost for _, cost in rec.calls)
    assert work["alice"] == work["carol"] == work["nobody"] == [4, 5], work
    rec.calls.clear()
    assert await auth.verify(basic("alice", PASSWORD)) is True and sorted(c for _, c in rec.calls) == [4, 5]


async def test_a_repeated_wrong_password_costs_one_bcrypt_and_guesses_cannot_evict_a_login(rec: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth_mod, "AUTH_CACHE_MAX", 4)
    auth = BasicAuth({"alice": ALICE})
    assert await auth.verify(basic("alice", PASSWORD)) is True
    for _ in range(3):  # a scraper with a stale password
        assert await auth.verify(basic("alice", b"old-password")) is False
    assert auth.bcrypt_calls == 2
    for i in range(10):  # more distinct guesses than the cache holds
        assert await auth.verify(basic("alice", f"guess{i}".encode())) is False
    calls = auth.bcrypt_calls
    assert await auth.verify(basic("alice", PASSWORD)) is True
    assert auth.bcrypt_calls == calls  # still remembered: no bcrypt for the scraper


def test_fairness_counts_an_ipv6_host_by_its_64() -> None:
    assert client_of("2001:db8:1:2::5") == client_of("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert client_of("::ffff:10.1.2.3") == client_of("10.1.2.3") == "10.1.2.3"
    assert client_of(None) == ""


async def test_through_http_a_flooding_address_gets_429_while_another_logs_in(rec: Recorder) -> None:
    cfg = parse_web_config(f"basic_auth_users:\n  alice: {ALICE}\n")
    middlewares, _ = web_app_options(cfg)
    app = web.Application(middlewares=middlewares)
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}/metrics"

    async def get(source: str, password: bytes) -> int:
        conn = aiohttp.TCPConnector(local_addr=(source, 0), force_close=True)
        async with aiohttp.ClientSession(connector=conn) as s, s.get(url, headers={"Authorization": basic("alice", password)}) as r:
            return r.status

    try:
        await get("127.0.0.9", b"warm-up")
        rec.gate.clear()
        flood = [asyncio.create_task(get("127.0.0.2", f"guess{i}".encode())) for i in range(12)]
        await settle(lambda: sum(t.done() for t in flood) >= 12 - auth_mod.AUTH_MAX_PENDING_PER_CLIENT)
        login = asyncio.create_task(get("127.0.0.3", PASSWORD))
        await settle()
        rec.gate.set()
        assert await asyncio.wait_for(login, BOUND_S) == 200
        statuses = sorted(await asyncio.gather(*flood))
        assert statuses.count(429) == 12 - auth_mod.AUTH_MAX_PENDING_PER_CLIENT and set(statuses) == {401, 429}
    finally:
        rec.gate.set()
        await runner.cleanup()
