"""The web config's request-side rules as aiohttp middlewares: response headers, rate
limit, client certificate SANs and basic auth (agentd.daemon.webconfig parses the file).

Basic auth verifies bcrypt in one worker thread (never on the event loop) and remembers
a success for ``AUTH_CACHE_TTL_S`` keyed by the SHA-256 of user, password and hash, so a
scrape costs one bcrypt per TTL, not one per request.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import ipaddress
import os
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

import bcrypt
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from agentd.daemon.webconfig import WebConfig, ssl_context

if TYPE_CHECKING:
    import ssl

REALM = "agentd"
AUTH_CACHE_TTL_S = 120.0
AUTH_CACHE_MAX = 1024
AUTH_MAX_PENDING = 32  # bcrypt verifications queued at once; more answer 429
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


class BasicAuth:
    """bcrypt checks off the event loop, one at a time (one worker thread for the process),
    with a short cache of successes."""

    def __init__(self, users: dict[str, str], *, ttl_s: float = AUTH_CACHE_TTL_S, clock: Callable[[], float] = time.monotonic):
        self._users = {u: h.encode() for u, h in users.items()}
        self._cost = max(int(h[4:6]) for h in users.values())
        self._dummy: bytes | None = None  # made in the worker on first use: no bcrypt on the event loop
        self._ttl, self._clock = ttl_s, clock
        self._cache: OrderedDict[bytes, float] = OrderedDict()
        self._inflight: dict[bytes, asyncio.Future[bool]] = {}
        self._pool = _BCRYPT_POOL
        self.bcrypt_calls = 0

    def _check(self, password: bytes, stored: bytes | None) -> bool:
        """Runs in the single worker thread. Unknown users are checked against a dummy hash
        of the same cost, so the answer takes as long as for a known user."""
        if stored is None:
            if self._dummy is None:
                self._dummy = bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(self._cost))
            stored = self._dummy
        self.bcrypt_calls += 1
        try:
            return bcrypt.checkpw(password, stored)
        except ValueError:  # > 72 bytes: refused, as Go's bcrypt does
            return False

    async def verify(self, header: str | None) -> bool:
        creds = parse_basic_authorization(header)
        if creds is None:
            return False
        user, password = creds
        stored = self._users.get(user)
        fields = (user.encode(), password, stored or b"")
        key = hashlib.sha256(b"".join(len(f).to_bytes(4, "big") + f for f in fields)).digest()  # unambiguous
        now = self._clock()
        expires = self._cache.get(key)
        if expires is not None and expires > now:
            return True
        fut = self._inflight.get(key)
        if fut is None:
            if len(self._inflight) >= AUTH_MAX_PENDING:
                raise web.HTTPTooManyRequests(text="too many pending authentications\n", headers={"Retry-After": "1"})
            fut = asyncio.get_running_loop().run_in_executor(self._pool, self._check, password, stored)
            self._inflight[key] = fut
            try:
                ok = await asyncio.shield(fut) and stored is not None
            finally:
                del self._inflight[key]
            if ok:
                self._remember(key, self._clock())
            return ok
        return await asyncio.shield(fut) and stored is not None

    def _remember(self, key: bytes, now: float) -> None:
        self._cache[key] = now + self._ttl
        self._cache.move_to_end(key)
        while len(self._cache) > AUTH_CACHE_MAX:
            self._cache.popitem(last=False)


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
        if request.path in excluded or await auth.verify(request.headers.get("Authorization")):
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
