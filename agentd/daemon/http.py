"""Read-only HTTP API (aiohttp). Handlers only read the current State; they never collect.

Endpoints: ``/metrics`` (Prometheus text 0.0.4, gzip on request), ``/health`` (200 ok or
degraded, 503 critical, stale or starting; JSON, or ``?format=text`` for a Slurm drain
reason), ``/livez`` (the event loop and the collection loop are alive), ``/readyz`` (first
full collection done), ``/checks`` (findings JSON), ``/topology`` (snapshot JSON and the placement) and ``/``.
Only GET and HEAD; other methods on a known path get 405, unknown paths 404, a request with
a body 413; request line and header fields are capped at ``web.max_request_bytes``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol, Sequence

from aiohttp import web

from agentd import __version__
from agentd.base.expo import CONTENT_TYPE
from agentd.config import AgentConfig
from agentd.daemon.connections import ConnectionLimiter, ServerLimits
from agentd.daemon.health import checks_json, health, health_json, health_text
from agentd.daemon.state import State

if TYPE_CHECKING:  # types only: ssl is imported when a web config serves TLS (agentd.base.openssl_gate)
    import ssl

    from aiohttp.typedefs import Middleware

JSON = "application/json"
NO_STORE = {"Cache-Control": "no-store"}


class StateSource(Protocol):
    """What the HTTP layer needs from the daemon."""

    @property
    def state(self) -> State: ...

    def alive(self) -> tuple[bool, str]: ...


def accepts_gzip(header: str) -> bool:
    for part in header.split(","):
        token, _, params = part.strip().partition(";")
        if token.strip().lower() in ("gzip", "*"):
            q = params.strip()
            if q.startswith("q="):
                try:
                    return float(q[2:]) > 0
                except ValueError:
                    return False
            return True
    return False


LANDING = """<!doctype html><html><head><meta charset="utf-8"><title>agentd</title></head><body>
<h1>agentd {version}</h1><p>Node: {node}. Status: <b>{status}</b>.</p><ul>
<li><a href="metrics">/metrics</a> Prometheus metrics</li>
<li><a href="health">/health</a> health JSON (<a href="health?format=text">text</a>)</li>
<li><a href="checks">/checks</a> findings</li><li><a href="topology">/topology</a> snapshot</li>
<li><a href="livez">/livez</a>, <a href="readyz">/readyz</a></li></ul></body></html>
"""


def build_app(source: StateSource, *, clock: Callable[[], float] = time.monotonic, middlewares: Sequence[Middleware] = ()) -> web.Application:
    """The app; ``middlewares`` (TLS client SAN, basic auth, headers, rate limit from the
    web config file) run before everything else."""

    @web.middleware
    async def no_body(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if request.content_length or "Transfer-Encoding" in request.headers:
            return web.Response(status=413, text="request bodies are not accepted\n")
        return await handler(request)

    async def metrics(request: web.Request) -> web.Response:
        state = source.state
        headers = {"Content-Type": CONTENT_TYPE, "Vary": "Accept-Encoding", **NO_STORE}
        compressed = accepts_gzip(request.headers.get("Accept-Encoding", ""))
        if compressed:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=await state.metrics_body(compressed), headers=headers)

    async def health_handler(request: web.Request) -> web.Response:
        state = source.state
        h = health(state, clock())
        text = request.query.get("format") == "text"
        render: Callable[[], bytes] = (lambda: health_text(h, state)) if text else (lambda: health_json(state, h))
        # Without stale probes the body depends on the State alone: build it once per State.
        body = render() if h.stale_probes else state.cached(("health", text), render)
        if text:
            return web.Response(status=h.http_status, body=body, content_type="text/plain", charset="utf-8", headers=NO_STORE)
        return web.Response(status=h.http_status, body=body, content_type=JSON, headers=NO_STORE)

    async def livez(request: web.Request) -> web.Response:
        ok, why = source.alive()
        return web.Response(status=200 if ok else 503, text=f"{why}\n", headers=NO_STORE)

    async def readyz(request: web.Request) -> web.Response:
        ready = source.state.ready
        return web.Response(status=200 if ready else 503, text="ready\n" if ready else "starting\n", headers=NO_STORE)

    async def checks(request: web.Request) -> web.Response:
        return web.Response(body=checks_json(source.state), content_type=JSON, headers=NO_STORE)

    async def topology(request: web.Request) -> web.Response:
        state = source.state
        return web.Response(status=200 if state.snapshot else 503, body=state.topology_json(), content_type=JSON, headers=NO_STORE)

    async def index(request: web.Request) -> web.Response:
        state = source.state
        node = state.snapshot.system.hostname if state.snapshot and state.snapshot.system.hostname else "?"
        page = LANDING.format(version=__version__, node=_html(node), status=state.status)
        return web.Response(text=page, content_type="text/html", headers=NO_STORE)

    app = web.Application(middlewares=[*middlewares, no_body], client_max_size=1024)
    app.router.add_get("/", index)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health_handler)
    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/checks", checks)
    app.router.add_get("/topology", topology)
    return app


def _html(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def parse_listen(listen: str) -> tuple[str, int]:
    """"127.0.0.1:9478" / "[::1]:9478" / "0.0.0.0:9478" -> (host, port)."""
    host, _, port = listen.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


class _LimitedSite(web.TCPSite):
    """TCPSite whose protocol factory goes through a ConnectionLimiter; with ``socks`` it
    serves already-listening sockets (a reload) instead of binding."""

    def __init__(self, *args: Any, limiter: ConnectionLimiter, socks: Sequence[socket.socket] = (), handshake_timeout_s: float = 10.0,  # Any: TCPSite's
                 **kwargs: Any):  # Any: TCPSite's own arguments, passed through as given
        super().__init__(*args, **kwargs)
        self.limiter, self.socks, self.handshake_timeout_s = limiter, list(socks), handshake_timeout_s
        self.servers: list[asyncio.Server] = []

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        factory = self.limiter.wrap(server)
        tls = self._ssl_context
        handshake_s = self.handshake_timeout_s if tls is not None else None  # asyncio takes it with ssl only
        try:
            if self.socks:
                for sock in self.socks:
                    self.servers.append(await loop.create_server(factory, sock=sock, backlog=self._backlog, ssl=tls, ssl_handshake_timeout=handshake_s))
            else:
                self.servers.append(await loop.create_server(
                    factory, self._host, self._port, backlog=self._backlog,
                    reuse_address=self._reuse_address, reuse_port=self._reuse_port, ssl=tls, ssl_handshake_timeout=handshake_s,
                ))  # fmt: skip
        except BaseException:
            for s in self.servers:
                s.close()
            raise
        self._server = self.servers[0]
        if hasattr(self, "_bound_port"):  # aiohttp >= 3.10 reports the port it bound
            self._bound_port = self._server.sockets[0].getsockname()[1] if self._server.sockets else self._port

    async def stop(self) -> None:
        for s in self.servers[1:]:
            s.close()
        await super().stop()

    def listening(self) -> list[socket.socket]:
        """Duplicates of the listening sockets (same queue of pending connections)."""
        return [socket.socket(fileno=os.dup(s.fileno())) for srv in self.servers for s in srv.sockets]


class HttpServer:
    """The running server: one listening socket for the process's life, and an app, TLS
    context and limits that ``replace`` swaps (SIGHUP) without closing that socket."""

    def __init__(self, runner: web.AppRunner, site: _LimitedSite, limiter: ConnectionLimiter, addresses: list[tuple[str, int]]):
        self.runner, self.site, self.limiter, self.addresses = runner, site, limiter, addresses
        self._replacing = asyncio.Lock()  # two SIGHUPs in a row: one replace after the other

    @property
    def connections(self) -> int:
        """Open connections (admitted, not yet closed)."""
        return len(self.limiter.conns)

    @staticmethod
    async def _runner(app: web.Application, limits: ServerLimits) -> web.AppRunner:
        runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            shutdown_timeout=0.5,
            keepalive_timeout=limits.idle_timeout_s,
            max_line_size=limits.max_request_bytes,
            max_field_size=limits.max_request_bytes,
            max_headers=max(16, limits.max_request_bytes // 256),
        )
        await runner.setup()
        return runner

    @classmethod
    async def start(cls, app: web.Application, listen: str, limits: ServerLimits, *, ssl_context: ssl.SSLContext | None = None) -> HttpServer:
        limiter = ConnectionLimiter(ConnectionLimiter.default_cap(), header_timeout_s=limits.header_timeout_s, write_timeout_s=limits.write_timeout_s)
        limiter.configure(limits)
        runner = await cls._runner(app, limits)
        host, port = parse_listen(listen)
        site = _LimitedSite(runner, host, port, reuse_address=True, ssl_context=ssl_context, limiter=limiter, handshake_timeout_s=limits.header_timeout_s)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        return cls(runner, site, limiter, [a[:2] for a in runner.addresses])

    async def replace(self, app: web.Application, limits: ServerLimits, *, ssl_context: ssl.SSLContext | None = None) -> None:
        """Serve ``app`` with ``ssl_context`` from now on. The new server accepts on
        duplicates of the listening sockets before the old one stops, so no connection
        attempt is refused; connections of the old app are closed (in-flight requests get
        0.5 s). On error the old server keeps serving."""
        async with self._replacing:
            await self._replace(app, limits, ssl_context)

    async def _replace(self, app: web.Application, limits: ServerLimits, ssl_context: ssl.SSLContext | None) -> None:
        socks = self.site.listening()
        try:
            runner = await self._runner(app, limits)
            site = _LimitedSite(runner, reuse_address=True, ssl_context=ssl_context, limiter=self.limiter, socks=socks, handshake_timeout_s=limits.header_timeout_s)
            try:
                await site.start()
            except BaseException:
                await runner.cleanup()
                raise
        except BaseException:
            for s in socks:
                s.close()
            raise
        old, self.runner, self.site = self.runner, runner, site
        self.limiter.configure(limits)
        await old.cleanup()

    async def close(self) -> None:
        self.limiter.close()
        await self.runner.cleanup()


async def start_server(app: web.Application, listen: str, limits: ServerLimits | int, *, ssl_context: ssl.SSLContext | None = None) -> HttpServer:
    """Bind and start serving (``limits``: ServerLimits, or just max_request_bytes)."""
    if isinstance(limits, int):
        limits = ServerLimits(max_request_bytes=limits)
    return await HttpServer.start(app, listen, limits, ssl_context=ssl_context)


def web_options(config: AgentConfig) -> tuple[list[Middleware], ssl.SSLContext | None]:
    """(middlewares, ssl context) from ``web.config_file`` (exporter-toolkit format)."""
    if config.web.config_file is None:
        return [], None
    # Imported only when a web config is set: YAML and bcrypt cost RSS that a daemon
    # without one never uses (docs/performance.md, "Memory").
    from agentd.daemon.auth import web_app_options
    from agentd.daemon.webconfig import load_web_config

    return web_app_options(load_web_config(config.web.config_file))
