"""What ``/health``, ``/checks``, systemd STATUS= and the logs say about a State, computed
for the moment they are asked (staleness turns a silent daemon critical on its own).

Only findings that count decide the status (``agentd.model.overall_status``): withheld
ones (observe mode, pending, boot grace) are listed apart. In maintenance
(``agentd maintenance on``) /health answers 200 with status ``maintenance`` and its reason,
and still lists everything measured, with the status it would have had
(``measured_status``); after ``off`` it keeps answering so until a full collection that
started after it was published."""

from __future__ import annotations

from dataclasses import dataclass

from agentd.base.escape import json_text, printable
from agentd.base.jsontypes import JsonObject
from agentd.daemon.state import HealthStatus, State
from agentd.judging.findings import finding_line, utc_text
from agentd.judging.staleness import with_staleness
from agentd.model import Finding, overall_status
from agentd.outputs.maintenance import maintenance_doc, maintenance_line


@dataclass(frozen=True)
class Health:
    status: HealthStatus
    http_status: int
    findings: tuple[Finding, ...]
    stale_probes: tuple[str, ...]
    generated_at: float
    measured: HealthStatus | None = None  # the status without maintenance


def maintenance_text(state: State) -> str | None:
    """The line after the status ``maintenance`` (agentd.outputs.maintenance.maintenance_line,
    as `agentd check` prints it), None when not in maintenance."""
    m = state.maintenance
    if m is not None:
        return maintenance_line(m)
    if state.maintenance_ended_at is not None:
        return (f"maintenance agentd.maintenance node: maintenance ended at {utc_text(state.maintenance_ended_at)}; "
                "waiting for a full fresh collection")
    return None


def health(state: State, now: float) -> Health:
    """``now``: time.monotonic(), the clock staleness is judged on."""
    if not state.ready:
        return Health("starting", 503, (), (), state.generated_at)
    findings, stale = with_staleness(state.findings, state.snapshot, state.stale_limits, now)
    status = overall_status(findings)
    if state.in_maintenance:
        return Health("maintenance", 200, findings, stale, state.generated_at, measured=status)
    return Health(status, 503 if status == "critical" else 200, findings, stale, state.generated_at, measured=status)


def finding_dict(f: Finding) -> JsonObject:
    return f.model_dump(exclude_none=True)


def health_json(state: State, h: Health) -> bytes:
    snap = state.snapshot
    body: JsonObject = {
        "status": h.status,
        "ready": state.ready,
        "generated_at": h.generated_at,
        "node": snap.system.hostname if snap is not None else None,
        "stale_probes": list(h.stale_probes),
        "findings": [finding_dict(f) for f in h.findings if f.severity != "ok" and f.withheld is None],
        "withheld": [finding_dict(f) for f in h.findings if f.severity != "ok" and f.withheld is not None],
    }
    if h.status == "maintenance":
        m = state.maintenance
        body["measured_status"] = h.measured
        body["maintenance"] = (
            maintenance_doc(m) if m is not None
            else {"ended_at": state.maintenance_ended_at, "waiting_for": "a full fresh collection"}
        )  # fmt: skip
    if not state.ready:
        body["message"] = "first collection not finished yet"
    return json_text(body, separators=(",", ":")).encode()


def health_text(h: Health, state: State | None = None) -> bytes:
    """First line the status, then one line per non-ok finding that counts: a Slurm drain
    reason (agentd.judging.findings.finding_line). In maintenance a line that says why
    comes second."""
    lines: list[str] = [h.status]
    if h.status == "starting":
        lines.append("critical agentd.starting node: first collection not finished yet")
    why = maintenance_text(state) if state is not None and h.status == "maintenance" else None
    if why is not None:
        lines.append(why)
    for f in h.findings:
        if f.severity != "ok" and f.withheld is None:
            lines.append(finding_line(f))
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
    bad = [f for f in findings if f.severity != "ok" and f.withheld is None]
    if status == "maintenance":
        m = state.maintenance
        return f"maintenance: {m.reason if m is not None else 'ended, waiting for a full collection'}; {len(bad)} findings"
    if not bad:
        snap = state.snapshot
        n_gpu = len(snap.gpus) if snap else 0
        n_ports = sum(1 for hca in (snap.hcas if snap else ()) if hca.name in state.compute_hcas for p in hca.ports if p.is_active)
        return f"ok: {n_gpu} GPUs, {n_ports} active compute ports"
    crit = sum(1 for f in bad if f.severity == "critical")
    first = bad[0]
    return f"{status}: {len(bad)} findings ({crit} critical); {first.code} {first.subject}"
