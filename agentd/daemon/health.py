"""What ``/health``, ``/checks``, systemd STATUS= and the logs say about a State, computed
for the moment they are asked (staleness turns a silent daemon critical on its own)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentd.base.escape import json_text, printable
from agentd.daemon.state import HealthStatus, State
from agentd.judging.staleness import with_staleness
from agentd.model import Finding, overall_status


@dataclass(frozen=True)
class Health:
    status: HealthStatus
    http_status: int
    findings: tuple[Finding, ...]
    stale_probes: tuple[str, ...]
    generated_at: float


def health(state: State, now: float) -> Health:
    """``now``: time.monotonic(), the clock staleness is judged on."""
    if not state.ready:
        return Health("starting", 503, (), (), state.generated_at)
    findings, stale = with_staleness(state.findings, state.snapshot, state.stale_limits, now)
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
    return json_text(body, separators=(",", ":")).encode()


def health_text(h: Health) -> bytes:
    """First line the status, then one line per non-ok finding: a Slurm drain reason."""
    lines: list[str] = [h.status]
    if h.status == "starting":
        lines.append("critical agentd.starting node: first collection not finished yet")
    for f in h.findings:
        if f.severity != "ok":
            lines.append(f"{f.severity} {f.code} {f.subject}: {f.message}")
    return printable("\n".join(lines) + "\n").encode()


def checks_json(state: State) -> bytes:
    def build() -> bytes:
        body = {
            "status": state.status,
            "generated_at": state.generated_at,
            "findings": [finding_dict(f) for f in state.findings],
        }
        return json_text(body, separators=(",", ":")).encode()

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
