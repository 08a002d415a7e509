"""The web config's request-side rules as aiohttp middlewares: response headers, rate
limit, client certificate SANs and basic auth (agentd.daemon.webconfig parses the file).

Basic auth verifies bcrypt off the event loop, one verification at a time for the whole
process (one worker thread: a flood of guesses costs at most one core). Waiting
verifications are served round-robin by client address (an IPv6 client by its /64), at
most ``AUTH_MAX_PENDING_PER_CLIENT`` each: a client that floods wrong passwords delays
another client's login by at most one verification per other busy client, not by its
whole queue. Every verification costs the same work whoever the user is: one bcrypt at
each cost the users' hashes have (the user's own hash at its cost, a dummy hash at the
others; an unknown user, dummies at all), so timing tells no user from another and no
user from an unknown name. Outcomes are remembered under the SHA-256 of user, password
and stored hash (never the password): a success until evicted (or ``ttl_s``), a refusal
too, so a scraper with a stale password costs one bcrypt, not one per scrape; successes
and refusals are kept apart, so a flood of guesses cannot evict a scraper's login.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import ipaddress
import os
import time
from collections import Counter, OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

import bcrypt
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from agentd.daemon.webconfig import WebConfig, ssl_context

if TYPE_CHECKING:
    import ssl

REALM = "agentd"
AUTH_CACHE_MAX = 1024  # outcomes remembered, each of successes and refusals
AUTH_MAX_PENDING = 1024  # verifications waiting or running, all clients; more answer 429
AUTH_MAX_PENDING_PER_CLIENT = 4  # the same for one client address; more answer 429
# One worker thread for every BasicAuth: a reload builds a new one (fresh cache) and must
# not leave a thread behind each time.
_BCRYPT_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentd-bcrypt")


def parse_basic_authorization(header: str | None) -> tuple[str, bytes] | None:
    """``Basic base64(user:password)`` -> (user, password bytes); None if malformed."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(token.strip(), validate=True)
        user, sep, password = raw.partition(b":")
        return (user.decode("utf-8"), password) if sep else None
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        return None


def bcrypt_cost(stored: bytes) -> int:
    """The cost of a modular-crypt bcrypt hash (``$2y$10$...`` -> 10)."""
    return int(stored[4:6])


def client_of(remote: str | None) -> str:
    """What round-robin fairness counts as one client: the peer's address, an IPv6 one by
    its /64 (one host's share of addresses)."""
    try:
        ip = ipaddress.ip_address(remote or "")
    except ValueError:
        return remote or ""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


_Job = tuple[bytes, "bytes | None", "asyncio.Future[bool]"]  # password, stored hash, outcome


class BasicAuth:
    """bcrypt checks off the event loop, one at a time for the process, fair between
    clients, of equal work for every user name, with a cache of outcomes (module doc)."""

    def __init__(self, users: dict[str, str], *, ttl_s: float | None = None, clock: Callable[[], float] = time.monotonic):
        self._users = {u: h.encode() for u, h in users.items()}
        self._costs = sorted({bcrypt_cost(h) for h in self._users.values()})
        self._dummies: dict[int, bytes] = {}  # made in the worker on first use: no bcrypt on the event loop
        self._ttl, self._clock = ttl_s, clock
        self._verified: OrderedDict[bytes, float] = OrderedDict()  # key -> expiry
        self._refused: OrderedDict[bytes, None] = OrderedDict()
        self._inflight: dict[bytes, asyncio.Future[bool]] = {}
        self._queues: OrderedDict[str, deque[_Job]] = OrderedDict()  # client -> its waiting verifications, in turn order
        self._pending: Counter[str] = Counter()  # client -> verifications waiting or running
        self._serving: asyncio.Task[None] | None = None
        self._pool = _BCRYPT_POOL
        self.bcrypt_calls = 0  # verifications run (each one bcrypt per cost in use)

    def _check(self, password: bytes, stored: bytes | None) -> bool:
        """Runs in the single worker thread: one bcrypt at each cost in use, the user's own
        hash at its cost and a dummy at the others, so the work is the same for every
        user name, known or not."""
        if not self._dummies:
            self._dummies = {c: bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(c)) for c in self._costs}
        self.bcrypt_calls += 1
        own = bcrypt_cost(stored) if stored is not None else None
        ok = False
        for cost in self._costs:
            mine = stored is not None and cost == own
            try:
                match = bcrypt.checkpw(password, stored if mine else self._dummies[cost])  # type: ignore[arg-type]
            except ValueError:  # > 72 bytes: refused before any work, as Go's bcrypt does, whoever the user
                return False
            ok = ok or (mine and match)
        return ok

    async def verify(self, header: str | None, *, client: str = "") -> bool:
        """Whether ``header`` carries a user's password. ``client``: who asks (client_of),
        for fairness. Raises HTTPTooManyRequests past the pending caps."""
        creds = parse_basic_authorization(header)
        if creds is None:
            return False
        user, password = creds
        stored = self._users.get(user)
        fields = (user.encode(), password, stored or b"")
        key = hashlib.sha256(b"".join(len(f).to_bytes(4, "big") + f for f in fields)).digest()  # unambiguous
        expires = self._verified.get(key)
        if expires is not None and expires > self._clock():
            return True
        if key in self._refused:
            return False
        fut = self._inflight.get(key)
        if fut is not None:  # the same credentials are being checked: share the outcome
            return await asyncio.shield(fut)
        if sum(self._pending.values()) >= AUTH_MAX_PENDING or self._pending[client] >= AUTH_MAX_PENDING_PER_CLIENT:
            raise web.HTTPTooManyRequests(text="too many pending authentications\n", headers={"Retry-After": "1"})
        fut = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        self._pending[client] += 1
        self._queues.setdefault(client, deque()).append((password, stored, fut))
        if self._serving is None or self._serving.done():
            self._serving = asyncio.get_running_loop().create_task(self._serve())
        try:
            ok = await asyncio.shield(fut)
        finally:
            del self._inflight[key]
        self._remember(key, ok)
        return ok

    async def _serve(self) -> None:
        """Run the waiting verifications one at a time, one per client in turn."""
        loop = asyncio.get_running_loop()
        try:
            while self._queues:
                client, queue = next(iter(self._queues.items()))
                password, stored, fut = queue.popleft()
                del self._queues[client]
                if queue:
                    self._queues[client] = queue  # to the back of the round
                try:
                    ok = await loop.run_in_executor(self._pool, self._check, password, stored)
                except Exception as e:
                    if not fut.done():
                        fut.set_exception(e)
                else:
                    if not fut.done():
                        fut.set_result(ok)
                finally:
                    self._pending[client] -= 1
                    if self._pending[client] <= 0:
                        del self._pending[client]
        finally:  # cancelled (the app stops): nobody waits for ever
            for queue in self._queues.values():
                for _, _, waiting in queue:
                    waiting.cancel()
            self._queues.clear()
            self._pending.clear()

    def _remember(self, key: bytes, ok: bool) -> None:
        cache: OrderedDict[bytes, Any] = self._verified if ok else self._refused  # Any: an expiry (float) or None, by which cache
        cache[key] = (self._clock() + self._ttl if self._ttl is not None else float("inf")) if ok else None
        cache.move_to_end(key)
        while len(cache) > AUTH_CACHE_MAX:
            cache.popitem(last=False)


def basic_auth_middleware(cfg: WebConfig | None) -> Middleware:
    """401 ``WWW-Authenticate: Basic realm="agentd"`` unless the request carries the
    password of a ``basic_auth_users`` entry; a pass-through when there are no users."""
    if cfg is None or not cfg.basic_auth_users:

        @web.middleware
        async def passthrough(request: web.Request, handler: Handler) -> web.StreamResponse:
            return await handler(request)

        return passthrough
    auth = BasicAuth(cfg.basic_auth_users)
    excluded = frozenset(cfg.auth_excluded_paths)

    @web.middleware
    async def basic_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in excluded or await auth.verify(request.headers.get("Authorization"), client=client_of(request.remote)):
            return await handler(request)
        return web.Response(status=401, text="401 Unauthorized\n", headers={"WWW-Authenticate": f'Basic realm="{REALM}"'})

    basic_auth.auth = auth  # type: ignore[attr-defined]  # tests read bcrypt_calls
    return basic_auth


def _headers_middleware(headers: dict[str, str]) -> Middleware:
    @web.middleware
    async def extra_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            resp = await handler(request)
        except web.HTTPException as e:
            e.headers.update(headers)
            raise
        if not resp.prepared:
            resp.headers.update(headers)
        return resp

    return extra_headers


def _rate_limit_middleware(interval_s: float, burst: int, clock: Callable[[], float] = time.monotonic) -> Middleware:
    state = {"tokens": float(burst), "at": clock()}

    @web.middleware
    async def rate_limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        now = clock()
        state["tokens"] = min(float(burst), state["tokens"] + (now - state["at"]) / interval_s)
        state["at"] = now
        if state["tokens"] < 1:
            return web.Response(status=429, text="429 Too Many Requests\n")
        state["tokens"] -= 1
        return await handler(request)

    return rate_limit


def _san_values(peercert: dict[str, Any] | None) -> list[str]:  # Any: ssl's getpeercert() dict, nested tuples by key
    return [str(v) for kind, v in (peercert or {}).get("subjectAltName", ()) if kind in ("DNS", "IP Address", "email", "URI")]


def _same_san(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a.strip()) == ipaddress.ip_address(b.strip())
    except ValueError:
        return a == b


def _client_san_middleware(allowed: tuple[str, ...]) -> Middleware:
    @web.middleware
    async def client_san(request: web.Request, handler: Handler) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peercert") if request.transport is not None else None
        if not any(_same_san(v, a) for v in _san_values(peer) for a in allowed):
            return web.Response(status=403, text="403 client certificate not allowed\n")
        return await handler(request)

    return client_san


def web_app_options(cfg: WebConfig | None) -> tuple[list[Middleware], ssl.SSLContext | None]:
    """(middlewares to put first in the app, SSLContext for the site) for a web config;
    ``([], None)`` without one. Order: headers, rate limit, client SAN, basic auth."""
    if cfg is None:
        return [], None
    mws: list[Middleware] = []
    if cfg.http_server_config.headers:
        mws.append(_headers_middleware(dict(cfg.http_server_config.headers)))
    if cfg.rate_limit.interval > 0:
        mws.append(_rate_limit_middleware(cfg.rate_limit.interval, cfg.rate_limit.burst))
    if cfg.tls_server_config.client_allowed_sans is not None:
        mws.append(_client_san_middleware(cfg.tls_server_config.client_allowed_sans))
    if cfg.basic_auth_users:
        mws.append(basic_auth_middleware(cfg))
    return mws, ssl_context(cfg)
