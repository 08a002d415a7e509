"""Connections of the HTTP server: a cap below the process's fd limit, and timeouts for
request headers and stalled responses (aiohttp has neither), so silent, drip-feeding or
never-reading peers cannot lock ``/health`` out."""

from __future__ import annotations

import asyncio
import dataclasses
import resource
from typing import Callable, cast

from agentd.config import AgentConfig
from agentd.host.fs import MAX_OPEN_DIRS, SWEEP_AT


@dataclasses.dataclass(frozen=True)
class ServerLimits:
    """Request size, timeouts and connection cap of the HTTP server (``[web]`` settings)."""

    max_request_bytes: int = 8192
    header_timeout_s: float = 10.0  # connect (or first byte of a request) -> end of its headers
    write_timeout_s: float = 30.0  # a response that makes no progress for this long is aborted
    idle_timeout_s: float = 75.0  # keep-alive connection without a request
    max_connections: int | None = None  # None: from the fd limit (ConnectionLimiter.default_cap)

    @classmethod
    def from_config(cls, config: AgentConfig) -> ServerLimits:
        w = config.web
        return cls(w.max_request_bytes, w.header_timeout_s, w.write_timeout_s, w.idle_timeout_s)


class ConnectionLimiter:
    """Keeps open connections below the process's fd limit and times out stalled ones.

    aiohttp has no cap on connections, no timeout for reading request headers and none for
    writing a response, so peers that connect and stay silent, drip header bytes, or ask
    for /metrics and never read would hold their fds for ever and, once at the fd limit,
    stop /health and make sysfs reads and NCCL writes fail with EMFILE. Here:

    - a connection whose request headers are not complete ``header_timeout_s`` after it
      opened (or after the first byte of its next request) is aborted;
    - a connection whose pending response makes no progress for ``write_timeout_s`` is
      aborted (also after aiohttp closed it with data still queued);
    - at the cap a new connection is always admitted: it evicts the connection that has
      owed progress the longest (unfinished headers or a stalled write, oldest first), or
      else the one idle the longest, so /health always gets in.
    """

    def __init__(self, cap: int, *, header_timeout_s: float = 10.0, write_timeout_s: float = 30.0):
        self.cap = cap
        self.header_timeout_s, self.write_timeout_s = header_timeout_s, write_timeout_s
        self.conns: dict[_Tracked, None] = {}  # oldest first
        self.evicted = self.timed_out = 0
        self._sweeper: asyncio.TimerHandle | None = None

    @staticmethod
    def default_cap() -> int:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return 4096
        # Leave room for probes, files and threads, and for the directory fds the readers
        # keep while they walk (agentd.host.fs: SWEEP_AT held in all, plus one context's).
        return max(32, min(4096, soft - 200 - SWEEP_AT - MAX_OPEN_DIRS))

    def configure(self, limits: ServerLimits) -> None:
        self.header_timeout_s, self.write_timeout_s = limits.header_timeout_s, limits.write_timeout_s
        if limits.max_connections is not None:
            self.cap = limits.max_connections

    def _admit(self, conn: _Tracked) -> bool:
        while len(self.conns) >= max(1, self.cap):
            victim = min(self.conns, key=lambda c: c.eviction_key(conn.opened))
            self.conns.pop(victim)
            victim.transport.abort()
            self.evicted += 1
        self.conns[conn] = None
        self._arm()
        return True

    def _arm(self) -> None:
        if self._sweeper is None and self.conns:
            tick = max(0.05, min(self.header_timeout_s, self.write_timeout_s) / 4)
            self._sweeper = asyncio.get_running_loop().call_later(tick, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        now = asyncio.get_running_loop().time()
        for conn in list(self.conns):
            if conn.expired(now, self.header_timeout_s, self.write_timeout_s):
                self.conns.pop(conn, None)
                conn.transport.abort()
                self.timed_out += 1
        self._arm()

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    def wrap(self, factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: _Tracked(factory(), self)


class _Tracked(asyncio.Protocol):
    """Forwards to aiohttp's protocol (which has __slots__, so it cannot be patched) and
    keeps what the limiter needs: when the current request's headers started and whether
    they ended (a blank line), and whether queued response bytes still drain."""

    def __init__(self, inner: asyncio.Protocol, limiter: ConnectionLimiter):
        self.inner, self.limiter, self.admitted = inner, limiter, False
        self.transport: asyncio.Transport  # set by connection_made, before the limiter holds it
        self.opened = self.progress = 0.0
        self.partial_since: float | None = None  # headers of a request not complete yet
        self.tail = b""  # last bytes received, to find a blank line split across reads
        self.stall_since: float | None = None
        self.queued = 0

    def eviction_key(self, now: float) -> tuple[int, float]:
        """Smaller is evicted first: owing progress (headers or a stalled write) before
        idle, then the oldest."""
        if self.partial_since is not None:
            return 0, self.partial_since
        if self.stall_since is not None or self.transport.get_write_buffer_size():
            return 0, self.stall_since if self.stall_since is not None else now
        return 1, self.progress

    def expired(self, now: float, header_timeout_s: float, write_timeout_s: float) -> bool:
        if self.partial_since is not None and now - self.partial_since >= header_timeout_s:
            return True
        queued = self.transport.get_write_buffer_size()
        if not queued:
            self.stall_since = None
        elif self.stall_since is None or queued < self.queued:
            self.stall_since = now  # bytes drained since the last look: progress
        self.queued = queued
        return self.stall_since is not None and now - self.stall_since >= write_timeout_s

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream server's: socket or TLS, both Transports
        self.opened = self.progress = asyncio.get_running_loop().time()
        self.partial_since = self.opened  # the header timeout counts from the connect
        self.admitted = self.limiter._admit(self)
        if self.admitted:
            self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.limiter.conns.pop(self, None)
        if self.admitted:
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        now = asyncio.get_running_loop().time()
        seen = self.tail + data
        end = max(seen.rfind(b"\n\n"), seen.rfind(b"\n\r\n"))
        if end >= 0:  # a request's headers are complete
            rest = seen[end:].lstrip(b"\r\n")
            self.progress = now
            self.partial_since = now if rest else None
        elif self.partial_since is None:
            self.partial_since = now  # first byte of the next request
        self.tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.stall_since = None
        self.progress = asyncio.get_running_loop().time()
        self.inner.resume_writing()
