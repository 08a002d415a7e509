"""Shared pieces of the checks: history windows, counter math, severities.

Counter rules (the reason this module exists):
- A rate needs two readings of the same counter with increasing ``taken_at``. No history
  means no rate, never a guess.
- A counter that went backwards was reset (driver reload, ``perfquery -R``): the readings
  before the reset are ignored and the rate is measured from the first reading after it.
  A reset in the latest step is reported, never turned into a negative or zero rate.
- A counter at its PMA maximum (agentd.base.pma: 4 to 16-bit error counters, data
  counters 32 or 64-bit) no longer counts: its rate is unknown, and it is reported as
  saturated instead of being read as flat.
- Small counts over short spans are noise for low thresholds (one symbol error in a 2 s
  ``agentd check`` window is 1800/h): a threshold above zero also needs ``MIN_EVENTS``
  events. A threshold of exactly zero means "any increase" as published (NVSentinel).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Literal, Sequence

from agentd.config import AgentConfig
from agentd.judging.baseline import Baseline
from agentd.judging.roles import HcaRoles, hca_roles
from agentd.model import HistoryEntry, IbPort, Netdev, NodeSnapshot, PortReading, Severity


@dataclass(frozen=True)
class CheckInput:
    """Everything a check may look at. Checks never read files or clocks."""

    snapshot: NodeSnapshot
    # earlier snapshots, oldest first (may be empty): what the history keeps of them
    # (agentd.model.HistoryEntry; a whole snapshot is one too)
    history: tuple[HistoryEntry, ...]
    config: AgentConfig
    baseline: Baseline | None = None
    roles: HcaRoles | None = None  # computed with hca_roles(snapshot, config.hca) when None

    def resolved_roles(self) -> HcaRoles:
        return self.roles if self.roles is not None else hca_roles(self.snapshot, self.config.hca)


# Counter rates are measured over thresholds.rate_window_s (error counters with per-hour
# thresholds: averages short bursts, and a finding clears at most that long after the
# counter stops moving) or thresholds.short_rate_window_s (pause storms, congestion
# notifications: what is happening now, cleared quickly).
# A positive threshold fires only when at least this many events were counted.
MIN_EVENTS = 3
# Readings used per counter within the window (evenly thinned; the oldest and newest are
# always kept). Thinning can only hide a reset followed by a rise above the earlier value,
# which makes the rate lower, never higher: no false alarm, bounded cost per cycle.
MAX_READINGS = 60


# ---------------------------------------------------------------------------
# severities and numbers (finding() and the subjects: agentd.judging.findings)


def cap(severity: Severity, limit: Severity) -> Severity:
    """The milder of two severities (non-compute devices are capped at warning)."""
    order: tuple[Severity, ...] = ("ok", "warning", "critical")
    return order[min(order.index(severity), order.index(limit))]


def fmt(value: float) -> str:
    """Short human number: 0.0333 -> '0.0333', 1200.0 -> '1200', 12.345 -> '12.3'."""
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


# ---------------------------------------------------------------------------
# history


def earlier(history: Iterable[HistoryEntry], now: float) -> list[HistoryEntry]:
    """History snapshots strictly older than ``now``, oldest first."""
    return sorted((s for s in history if s.taken_at < now), key=lambda s: s.taken_at)


def in_window(history: Iterable[HistoryEntry], now: float, window_s: float,
              max_snapshots: int = MAX_READINGS) -> list[HistoryEntry]:
    """Snapshots within ``window_s`` before ``now``, oldest first, thinned evenly to at most
    ``max_snapshots``. When none is that recent but older ones exist, the newest older one
    (a rate over a longer span is still a rate)."""
    older = earlier(history, now)
    recent = [s for s in older if s.taken_at >= now - window_s]
    if not recent:
        return older[-1:]
    if len(recent) <= max_snapshots:
        return recent
    step = (len(recent) - 1) / (max_snapshots - 1)
    picks = sorted({round(i * step) for i in range(max_snapshots)} | {0, len(recent) - 1})
    return [recent[i] for i in picks]


def changes(window: Sequence[HistoryEntry], *parts: Callable[[HistoryEntry], object]) -> list[HistoryEntry]:
    """``window`` without the entries whose ``parts`` are all the very objects of the entry
    before (the history shares every part that did not change: agentd.collection.share).
    Exact for counter math: a dropped entry repeats its predecessor's readings, and
    ``counter_change`` of a run of equal readings keeps the first (the base after a reset
    is the first reading that is lower than the one before, never a repeat). So a rate
    over a steady window costs two readings, not one per entry."""
    out: list[HistoryEntry] = []
    prev: tuple[object, ...] | None = None
    for s in window:
        now = tuple(part(s) for part in parts)
        if prev is None or any(a is not b for a, b in zip(now, prev, strict=True)):
            out.append(s)
        prev = now
    return out


# ---------------------------------------------------------------------------
# counter math


@dataclass(frozen=True)
class CounterChange:
    """How one counter moved over a span of readings."""

    status: Literal["rate", "reset", "saturated", "unknown"]
    delta: int = 0  # increase since the base reading (a lower bound when saturated)
    seconds: float = 0.0

    @property
    def rate(self) -> float | None:
        if self.status != "rate" or self.seconds <= 0:
            return None
        return self.delta / self.seconds


def counter_change(readings: Sequence[tuple[float, int | None]], max_value: int | None = None) -> CounterChange:
    """Judge a counter from ``(taken_at, value)`` readings, oldest first, the last one the
    current reading. Missing values (None) are skipped."""
    points = [(t, v) for t, v in readings if v is not None]
    if len(points) < 2:
        return CounterChange("unknown")
    if points[-1][1] < points[-2][1]:
        return CounterChange("reset")
    base = 0
    for i in range(1, len(points)):
        if points[i][1] < points[i - 1][1]:
            base = i  # count again from the first reading after a reset
    t0, v0 = points[base]
    t1, v1 = points[-1]
    assert v0 is not None and v1 is not None
    if max_value is not None and v1 >= max_value:
        return CounterChange("saturated", delta=v1 - v0, seconds=t1 - t0)
    if t1 <= t0:
        return CounterChange("unknown")
    return CounterChange("rate", delta=v1 - v0, seconds=t1 - t0)


def flat(earlier: Iterable[int | None], current: int) -> bool:
    """True when no earlier reading differs from ``current`` (None: not read then): the
    counter did not move over the window, so no rate can exceed a threshold (``exceeds``
    needs a rise) and ``counter_change`` need not run."""
    return all(v is None or v == current for v in earlier)


def exceeds(change: CounterChange, per_s: float) -> bool:
    """True when a measured rate is above the threshold with enough events to mean it."""
    rate = change.rate
    if rate is None or change.delta <= 0 or rate <= per_s:
        return False
    return per_s == 0 or change.delta >= MIN_EVENTS


def port_index(snap: HistoryEntry) -> dict[tuple[str, int], PortReading]:
    return {(h.name, p.port): p for h in snap.hcas for p in h.ports}


def roce_compute_ports(inp: CheckInput) -> list[tuple[str, IbPort, Netdev]]:
    """(hca, port, netdev) for each Ethernet (RoCE) port of a compute HCA whose netdev is known."""
    roles = inp.resolved_roles()
    out = []
    for h in inp.snapshot.hcas:
        if not roles.is_compute(h.name):
            continue
        for p in h.ports:
            nd = inp.snapshot.netdev(p.netdev) if p.link_layer == "Ethernet" and p.netdev else None
            if nd is not None:
                out.append((h.name, p, nd))
    return out
