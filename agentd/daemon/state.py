"""The daemon's single mutable thing: one immutable ``State``, replaced whole after each
collection (DESIGN.md section 1).

HTTP handlers, the metrics exposition and systemd notify only ever read the State that is
current when they start; the daemon builds a new one and swaps the reference. Derived
bytes (the metrics exposition, its gzip form, the snapshot JSON) are computed at most
once per State, when first asked for (the exposition in a worker thread), and cached on
it, so a scrape of a rendered State costs a dict lookup.
"""

from __future__ import annotations

import asyncio
import gzip
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Literal, Mapping, TypeVar

from agentd.base.escape import model_json
from agentd.config import AgentConfig
from agentd.judging.expected import Expected
from agentd.judging.placement import Placement, placement
from agentd.judging.roles import HcaRoles, RolesSource
from agentd.model import Finding, NodeSnapshot, NodeStatus, overall_status
from agentd.ncclbench.job import BenchOutcome
from agentd.outputs.maintenance import Maintenance
from agentd.records import FileStatus, ReloadStatus, TierRun

HealthStatus = Literal["ok", "degraded", "critical", "starting", "maintenance"]
_T = TypeVar("_T")


@dataclass(frozen=True, eq=False)
class State:
    seq: int  # 0 for the initial not-ready State, then +1 per publish
    generated_at: float  # unix time this State was built
    started_at: float  # unix time the daemon started
    config: AgentConfig
    # time.monotonic() when built: the clock staleness is judged on (agentd.judging.staleness)
    generated_mono: float = field(default_factory=time.monotonic)
    ready: bool = False  # a full collection (every probe run once) has completed
    snapshot: NodeSnapshot | None = None
    findings: tuple[Finding, ...] = ()  # sorted; includes agentd.data.stale at build time
    stale_limits: Mapping[str, float] = field(default_factory=dict)  # probe -> seconds
    compute_hcas: tuple[str, ...] = ()
    hca_roles_source: RolesSource = ""
    expected: Expected = field(default_factory=Expected)
    files: tuple[FileStatus, ...] = ()
    nccl_env: tuple[tuple[str, str], ...] = ()  # variables the env file sets, in order
    nccl_problems: tuple[str, ...] = ()
    topology_hash: str = ""  # agentd.nccl.topo.topology_hash of the rendered topology XML; "" when none was rendered
    tiers: tuple[TierRun, ...] = ()  # the latest run of each tier
    reload: ReloadStatus = field(default_factory=ReloadStatus)
    udev_events: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (subsystem, action) -> count
    udev_active: bool = False
    link_events: Mapping[str, int] = field(default_factory=dict)  # rtnetlink notifications by outcome (agentd.daemon.netlink)
    link_active: bool = False
    process: Mapping[str, float] = field(default_factory=dict)  # self stats sampled at build time
    bench: BenchOutcome | None = None  # the last scheduled NCCL benchmark's
    # While the node is in maintenance; after it ended, the unix time it did until a full
    # collection that started later is published
    maintenance: Maintenance | None = None
    maintenance_ended_at: float | None = None
    # The exposition of this State (the daemon passes agentd.daemon.exposition.REGISTRY.render):
    # injected, so the State holds finished bytes and never imports the metrics layer.
    render_metrics: Callable[["State"], bytes] | None = field(default=None, repr=False, compare=False)
    # Derived data by key (``cached``): each key's builder fixes its value's type, so the map holds
    # values of many types, read back as the type the caller asks for.
    _cache: dict[Hashable, Any] = field(default_factory=dict, init=False, repr=False, compare=False)  # Any: one type per key (above)

    @property
    def in_maintenance(self) -> bool:
        return self.maintenance is not None or self.maintenance_ended_at is not None

    @property
    def measured_status(self) -> NodeStatus:
        """The node's status from the findings that count, maintenance or not (once per State)."""
        return self.cached("measured_status", lambda: overall_status(self.findings))

    @property
    def status(self) -> HealthStatus:
        if not self.ready:
            return "starting"
        if self.in_maintenance:
            return "maintenance"
        return self.measured_status

    def cached(self, key: Hashable, build: Callable[[], _T]) -> _T:
        """Derived data computed once per State, by whichever thread asks first: the loop,
        or the worker thread ``metrics_body`` renders in. A lookup and a store are each
        atomic under the GIL; two threads that miss at once both build the same value (the
        builders are pure functions of the State) and the later store wins. ``metrics_body``
        makes a scrape start at most one render per key."""
        try:
            value: _T = self._cache[key]  # the key's builder fixed the type when it was stored
            return value
        except KeyError:
            value = self._cache[key] = build()
            return value

    # -- derived bytes -----------------------------------------------------------------
    def metrics_bytes(self) -> bytes:
        render = self.render_metrics
        if render is None:
            return b""
        return self.cached("metrics", lambda: render(self))

    def metrics_gzip(self) -> bytes:
        return self.cached("metrics.gz", lambda: gzip.compress(self.metrics_bytes(), compresslevel=6, mtime=0))

    async def metrics_body(self, compressed: bool) -> bytes:
        """The exposition (gzip-compressed or not) for a scrape, rendered at most once per
        State and only when a scrape asks: a node publishes every fast interval (2 s) and
        is scraped every 15-60 s, so most States are never rendered. The render runs in a
        worker thread (never on the event loop); concurrent scrapes share it."""
        key = "metrics.gz" if compressed else "metrics"
        try:
            value: bytes = self._cache[key]
            return value
        except KeyError:
            pass
        task = self._cache.get(("rendering", key))
        if task is None:
            build = self.metrics_gzip if compressed else self.metrics_bytes
            task = self._cache[("rendering", key)] = asyncio.ensure_future(asyncio.to_thread(build))
        result: bytes = await asyncio.shield(task)
        return result

    def placement(self) -> Placement | None:
        """The node's NVLink domain and rails (agentd.judging.placement) from this State's
        snapshot, compute HCAs and findings; None before the first collection."""
        snap = self.snapshot
        if snap is None:
            return None
        roles = HcaRoles(compute=self.compute_hcas, other=tuple(h.name for h in snap.hcas if h.name not in self.compute_hcas),
                         source=self.hca_roles_source)
        return self.cached("placement", lambda: placement(snap, roles, self.findings, self.config.fabric))

    def topology_json(self) -> bytes:
        """The snapshot's JSON with one more top-level key, ``placement`` (every snapshot key
        stays where it was, so existing consumers keep working)."""

        def build() -> bytes:
            p = self.placement()
            if self.snapshot is None or p is None:
                return b'{"error":"no collection yet"}'
            snap = model_json(self.snapshot)
            return (snap[:-1] + ',"placement":' + model_json(p) + "}").encode()

        return self.cached("topology", build)
