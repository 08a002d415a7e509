"""Stale data is a finding: every probe has a limit of ``intervals.stale_after`` times the
interval of its tier. A probe is stale when its last *successful* run finished longer ago
than that limit, or when it has never succeeded. ``/health`` answers 503 while any probe
is stale and lists those probes, each as a critical ``agentd.data.stale`` finding. The age
is computed for the moment asked, so a daemon whose collections stopped turns stale on its
own, without a new collection.

Ages come from the monotonic clock: ``now`` is ``time.monotonic()`` and a probe's success is
its ``ProbeStatus.last_success_mono``, so a wall-clock jump (NTP step, a VM resumed, an
operator's ``date -s``) neither hides nor invents stale data. Wall time stays in the
exported ``*_timestamp_seconds`` metrics only. Pure."""

from __future__ import annotations

from typing import Mapping, Sequence

from agentd.judging.findings import finding, probe_subject
from agentd.model import Finding, NodeSnapshot, ProbeStatus, sort_findings

STALE_CODE = "agentd.data.stale"


def success_age(p: ProbeStatus, now: float) -> float | None:
    """Seconds since the probe last succeeded (``now``: monotonic), None if it never did."""
    return None if p.last_success_mono is None else now - p.last_success_mono


def stale_probe_names(snap: NodeSnapshot | None, limits: Mapping[str, float], now: float) -> tuple[str, ...]:
    """Probes whose last success is older than their limit, or that never succeeded
    (``now``: monotonic)."""
    if snap is None:
        return ()
    out = []
    for p in snap.probes:
        limit = limits.get(p.name)
        if limit is None:
            continue
        age = success_age(p, now)
        if age is None or age > limit:
            out.append(p.name)
    return tuple(out)


def stale_findings(snap: NodeSnapshot | None, limits: Mapping[str, float], probes: Sequence[str], now: float) -> list[Finding]:
    by_name = {p.name: p for p in snap.probes} if snap is not None else {}
    out = []
    for name in probes:
        p = by_name.get(name)
        limit = limits.get(name, 0.0)
        age = success_age(p, now) if p is not None else None
        if age is None:
            what = "has never succeeded"
            measured: float | None = None
        else:
            measured = round(age, 3)
            what = f"last succeeded {measured:.1f} s ago"
        why = f"; last run: {p.error}" if p is not None and p.error else ""
        out.append(
            finding(
                STALE_CODE,
                "critical",
                probe_subject(name),
                f"probe {name} {what} (limit {limit:.1f} s){why}",
                "the data source is hung or failing: check the agentd log and the source (driver, NVML, sysfs); the node's health is unknown until it answers",
                measured=measured,
                expected=limit,
            )
        )
    return out


def with_staleness(
    findings: Sequence[Finding], snap: NodeSnapshot | None, limits: Mapping[str, float], now: float
) -> tuple[tuple[Finding, ...], tuple[str, ...]]:
    """Findings with the agentd.data.stale ones recomputed for ``now``, and the stale probes."""
    stale = stale_probe_names(snap, limits, now)
    kept = [f for f in findings if f.code != STALE_CODE]
    if stale:
        kept.extend(stale_findings(snap, limits, stale, now))
        return tuple(sort_findings(kept)), stale
    if len(kept) == len(findings):
        return tuple(findings), stale
    return tuple(kept), stale
