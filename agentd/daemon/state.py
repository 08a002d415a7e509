"""The daemon's single mutable thing: one immutable ``State``, replaced whole after each
collection (DESIGN.md section 1), and the pure functions that judge it.

HTTP handlers, the metrics exposition and systemd notify only ever read the State that is
current when they start; the daemon builds a new one and swaps the reference. Derived
bytes (the metrics exposition, its gzip form, the snapshot JSON) are computed once per
State and cached on it, so a scrape costs a dict lookup, not a render.

Staleness, precisely: every probe has a limit of ``intervals.stale_after`` times the
interval of its tier. A probe is stale when its last *successful* run finished longer ago
than that limit, or when it has never succeeded. ``/health`` answers 503 while any probe is
stale and lists those probes, each as a critical ``agentd.data.stale`` finding. Because the
age is computed when the request is answered, a daemon whose collections stopped turns
stale on its own, without a new State.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping

from agentd.config import AgentConfig
from agentd.model import Finding, NodeSnapshot, overall_status, sort_findings

HealthStatus = Literal["ok", "degraded", "critical", "starting"]
STALE_CODE = "agentd.data.stale"


@dataclass(frozen=True)
class FileStatus:
    """Outcome of the daemon's writes of one managed file (nccl.env, topo.xml, ...)."""

    name: str  # stable short name: the metric's ``file`` label
    path: str
    ok: bool  # the last attempt succeeded, or nothing needed writing
    last_write_at: float | None = None  # unix time the content last changed on disk
    failures_total: int = 0
    drift: bool = False  # someone changed the file since agentd wrote it (and it is not restored)
    drift_total: int = 0  # drift detections since agentd started (restored or not)
    error: str | None = None
    changed: bool = False  # written by the cycle that built this State


@dataclass(frozen=True)
class TierRun:
    tier: str  # fast | medium | slow | all
    duration_s: float
    finished_at: float
    cpu_s: float = 0.0


@dataclass(frozen=True)
class Expected:
    """Expected values exported beside the measured ones (``..._expected``)."""

    port_rate_gbps: Mapping[tuple[str, int], float] = field(default_factory=dict)
    port_width: Mapping[tuple[str, int], int] = field(default_factory=dict)
    netdev_mtu: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ReloadStatus:
    ok: bool = True
    at: float | None = None
    error: str | None = None


@dataclass(frozen=True, eq=False)
class State:
    seq: int  # 0 for the initial not-ready State, then +1 per publish
    generated_at: float  # unix time this State was built
    started_at: float  # unix time the daemon started
    config: AgentConfig
    ready: bool = False  # a full collection (every probe run once) has completed
    snapshot: NodeSnapshot | None = None
    findings: tuple[Finding, ...] = ()  # sorted; includes agentd.data.stale at build time
    stale_limits: Mapping[str, float] = field(default_factory=dict)  # probe -> seconds
    compute_hcas: tuple[str, ...] = ()
    hca_roles_source: str = ""
    expected: Expected = field(default_factory=Expected)
    files: tuple[FileStatus, ...] = ()
    nccl_env: tuple[tuple[str, str], ...] = ()  # variables the env file sets, in order
    nccl_problems: tuple[str, ...] = ()
    tiers: tuple[TierRun, ...] = ()  # the latest run of each tier
    reload: ReloadStatus = field(default_factory=ReloadStatus)
    udev_events: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (subsystem, action) -> count
    udev_active: bool = False
    process: Mapping[str, float] = field(default_factory=dict)  # self stats sampled at build time
    bench: Any = None  # agentd.ncclbench.job.BenchOutcome of the last scheduled NCCL benchmark
    _cache: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def status(self) -> HealthStatus:
        if not self.ready:
            return "starting"
        return overall_status(self.findings)

    def cached(self, key: Any, build: Callable[[], Any]) -> Any:
        """Derived data computed at most once per State (the loop thread is the only reader)."""
        try:
            return self._cache[key]
        except KeyError:
            value = self._cache[key] = build()
            return value

    # -- derived bytes -----------------------------------------------------------------
    def metrics_bytes(self) -> bytes:
        from agentd.metrics.registry import render_metrics

        return self.cached("metrics", lambda: render_metrics(self))

    def metrics_gzip(self) -> bytes:
        return self.cached("metrics.gz", lambda: gzip.compress(self.metrics_bytes(), compresslevel=6, mtime=0))

    def topology_json(self) -> bytes:
        def build() -> bytes:
            if self.snapshot is None:
                return b'{"error":"no collection yet"}'
            return self.snapshot.model_dump_json().encode()

        return self.cached("topology", build)


# ---------------------------------------------------------------------------
# staleness and health (pure)


def stale_probe_names(snap: NodeSnapshot | None, limits: Mapping[str, float], now: float) -> tuple[str, ...]:
    """Probes whose last success is older than their limit, or that never succeeded."""
    if snap is None:
        return ()
    out = []
    for p in snap.probes:
        limit = limits.get(p.name)
        if limit is None:
            continue
        if p.last_success_at is None or now - p.last_success_at > limit:
            out.append(p.name)
    return tuple(out)


def stale_probes(state: State, now: float) -> tuple[str, ...]:
    return stale_probe_names(state.snapshot, state.stale_limits, now)


def stale_findings(state: State, probes: tuple[str, ...], now: float) -> list[Finding]:
    by_name = {p.name: p for p in state.snapshot.probes} if state.snapshot else {}
    out = []
    for name in probes:
        p = by_name.get(name)
        limit = state.stale_limits.get(name, 0.0)
        if p is None or p.last_success_at is None:
            what = "has never succeeded"
            measured: float | None = None
        else:
            measured = round(now - p.last_success_at, 3)
            what = f"last succeeded {measured:.1f} s ago"
        why = f"; last run: {p.error}" if p is not None and p.error else ""
        out.append(
            Finding(
                code=STALE_CODE,
                severity="critical",
                subject=name,
                message=f"probe {name} {what} (limit {limit:.1f} s){why}",
                remediation="the data source is hung or failing: check the agentd log and the source (driver, NVML, sysfs); the node's health is unknown until it answers",
                measured=measured,
                expected=limit,
            )
        )
    return out


def with_staleness(findings: tuple[Finding, ...] | list[Finding], state: State, now: float) -> tuple[tuple[Finding, ...], tuple[str, ...]]:
    """Findings with the agentd.data.stale ones recomputed for ``now``."""
    stale = stale_probes(state, now)
    kept = [f for f in findings if f.code != STALE_CODE]
    if stale:
        kept.extend(stale_findings(state, stale, now))
        return tuple(sort_findings(kept)), stale
    if len(kept) == len(findings):
        return tuple(findings), stale
    return tuple(kept), stale


@dataclass(frozen=True)
class Health:
    status: HealthStatus
    http_status: int
    findings: tuple[Finding, ...]
    stale_probes: tuple[str, ...]
    generated_at: float


def health(state: State, now: float) -> Health:
    if not state.ready:
        return Health("starting", 503, (), (), state.generated_at)
    findings, stale = with_staleness(state.findings, state, now)
    status = overall_status(findings)
    return Health(status, 503 if status == "critical" else 200, findings, stale, state.generated_at)


def finding_dict(f: Finding) -> dict[str, Any]:
    return f.model_dump(exclude_none=True)


def health_json(state: State, h: Health) -> bytes:
    snap = state.snapshot
    body = {
        "status": h.status,
        "ready": state.ready,
        "generated_at": h.generated_at,
        "node": snap.system.hostname if snap is not None else None,
        "stale_probes": list(h.stale_probes),
        "findings": [finding_dict(f) for f in h.findings if f.severity != "ok"],
    }
    if not state.ready:
        body["message"] = "first collection not finished yet"
    return json.dumps(body, separators=(",", ":")).encode()


def health_text(h: Health) -> bytes:
    """First line the status, then one line per non-ok finding: a Slurm drain reason."""
    lines = [h.status]
    if h.status == "starting":
        lines.append("critical agentd.starting node: first collection not finished yet")
    for f in h.findings:
        if f.severity != "ok":
            lines.append(f"{f.severity} {f.code} {f.subject}: {f.message}")
    return ("\n".join(lines) + "\n").encode()


def checks_json(state: State) -> bytes:
    def build() -> bytes:
        body = {
            "status": state.status,
            "generated_at": state.generated_at,
            "findings": [finding_dict(f) for f in state.findings],
        }
        return json.dumps(body, separators=(",", ":")).encode()

    return state.cached("checks", build)


def status_line(state: State, h: Health | None = None) -> str:
    """One-line summary for systemd STATUS= and logs."""
    if not state.ready:
        return "starting: first collection running"
    findings = h.findings if h is not None else state.findings
    status = h.status if h is not None else state.status
    bad = [f for f in findings if f.severity != "ok"]
    if not bad:
        snap = state.snapshot
        n_gpu = len(snap.gpus) if snap else 0
        n_ports = sum(1 for hca in (snap.hcas if snap else ()) if hca.name in state.compute_hcas for p in hca.ports if p.is_active)
        return f"ok: {n_gpu} GPUs, {n_ports} active compute ports"
    crit = sum(1 for f in bad if f.severity == "critical")
    first = bad[0]
    return f"{status}: {len(bad)} findings ({crit} critical); {first.code} {first.subject}"
