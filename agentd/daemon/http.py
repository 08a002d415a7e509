"""Read-only HTTP API (aiohttp). Handlers only read the current State; they never collect.

Endpoints: ``/metrics`` (Prometheus text 0.0.4, gzip on request), ``/health`` (200 ok or
degraded, 503 critical, stale or starting; JSON, or ``?format=text`` for a Slurm drain
reason), ``/livez`` (the event loop and the collection loop are alive), ``/readyz`` (first
full collection done), ``/checks`` (findings JSON), ``/topology`` (snapshot JSON) and ``/``.
Only GET and HEAD; other methods on a known path get 405, unknown paths 404, a request with
a body 413; request line and header fields are capped at ``web.max_request_bytes``.
"""

from __future__ import annotations

import asyncio
import resource
import time
from typing import Any, Awaitable, Callable, Protocol, Sequence

from aiohttp import web

from agentd import __version__
from agentd.base.expo import CONTENT_TYPE
from agentd.config import AgentConfig
from agentd.daemon.auth import web_app_options
from agentd.daemon.health import checks_json, health, health_json, health_text
from agentd.daemon.state import State
from agentd.daemon.webconfig import load_web_config

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


def build_app(source: StateSource, *, clock: Callable[[], float] = time.time, middlewares: Sequence[Any] = ()) -> web.Application:
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
        if accepts_gzip(request.headers.get("Accept-Encoding", "")):
            headers["Content-Encoding"] = "gzip"
            return web.Response(body=state.metrics_gzip(), headers=headers)
        return web.Response(body=state.metrics_bytes(), headers=headers)

    async def health_handler(request: web.Request) -> web.Response:
        state = source.state
        h = health(state, clock())
        text = request.query.get("format") == "text"
        render: Callable[[], bytes] = (lambda: health_text(h)) if text else (lambda: health_json(state, h))
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


class ConnectionLimiter:
    """Keeps open connections below the process's fd limit.

    aiohttp has no cap on connections and no timeout for one that never sends a request,
    so enough idle peers (agentd may listen beyond loopback for Prometheus) would use up
    the fd limit: /health would stop answering and sysfs reads and NCCL writes would fail
    with EMFILE. At the cap, a new connection evicts the oldest one that has not sent a
    byte; if every connection is busy, the new one is closed.
    """

    def __init__(self, cap: int):
        self.cap = cap
        self.conns: dict[Any, list[Any]] = {}  # protocol -> [transport, has sent data]; oldest first
        self.evicted = 0

    @staticmethod
    def default_cap() -> int:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return 4096
        return max(32, min(4096, soft - 200))  # leave room for probes, files, threads

    def _admit(self, proto: Any, transport: Any) -> bool:
        if len(self.conns) >= self.cap:
            idle = next((p for p, (_, sent) in self.conns.items() if not sent), None)
            if idle is None:
                transport.close()
                return False
            self.conns.pop(idle)[0].close()
            self.evicted += 1
        self.conns[proto] = [transport, False]
        return True

    def wrap(self, factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: _Tracked(factory(), self)


class _Tracked(asyncio.Protocol):
    """Forwards to aiohttp's protocol (which has __slots__, so it cannot be patched) and
    tells the limiter when a connection opens, first sends data, and closes."""

    def __init__(self, inner: asyncio.Protocol, limiter: ConnectionLimiter):
        self.inner, self.limiter, self.admitted = inner, limiter, False

    def connection_made(self, transport: Any) -> None:
        self.admitted = self.limiter._admit(self, transport)
        if self.admitted:
            self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.limiter.conns.pop(self, None)
        if self.admitted:
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        entry = self.limiter.conns.get(self)
        if entry is not None:
            entry[1] = True
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class _LimitedSite(web.TCPSite):
    """TCPSite whose protocol factory goes through a ConnectionLimiter."""

    def __init__(self, *args: Any, limiter: ConnectionLimiter, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.limiter = limiter

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self.limiter.wrap(server), self._host, self._port, ssl=self._ssl_context,
            backlog=self._backlog, reuse_address=self._reuse_address, reuse_port=self._reuse_port,
        )  # fmt: skip
        if hasattr(self, "_bound_port"):  # aiohttp >= 3.10 reports the port it bound
            self._bound_port = self._server.sockets[0].getsockname()[1] if self._server.sockets else self._port


async def start_server(app: web.Application, listen: str, max_request_bytes: int, *, ssl_context: Any = None) -> tuple[web.AppRunner, list[tuple[str, int]]]:
    """Bind and start serving; returns the runner (for cleanup) and the bound addresses."""
    runner = web.AppRunner(
        app,
        handle_signals=False,
        access_log=None,
        shutdown_timeout=0.5,
        max_line_size=max_request_bytes,
        max_field_size=max_request_bytes,
        max_headers=max(16, max_request_bytes // 256),
    )
    await runner.setup()
    host, port = parse_listen(listen)
    site = _LimitedSite(runner, host, port, reuse_address=True, ssl_context=ssl_context, limiter=ConnectionLimiter(ConnectionLimiter.default_cap()))
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, [a[:2] for a in runner.addresses]


def web_options(config: AgentConfig) -> tuple[list[Any], Any]:
    """(middlewares, ssl context) from ``web.config_file`` (exporter-toolkit format)."""
    if config.web.config_file is None:
        return [], None

    return web_app_options(load_web_config(config.web.config_file))
