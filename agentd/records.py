"""What the shell did, as data: the outcome of each managed file's writes, each tier's
latest collection, the latest configuration reload and the enforcer's changes. The daemon produces these, the
judging layer turns failed writes into findings, the metrics layer exports them."""

from __future__ import annotations

from dataclasses import dataclass


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
    tier: str  # fast | medium | slow | all | event
    duration_s: float
    finished_at: float
    cpu_s: float = 0.0


@dataclass(frozen=True)
class ReloadStatus:
    ok: bool = True
    at: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class EnforceKnob:
    """What the daemon's enforcer did for one knob since it started."""

    knob: str
    applies_total: int = 0  # changes applied and read back as desired
    failures_total: int = 0  # changes the interface refused, that did not read back (rolled back) or were partial
    last_apply_at: float | None = None  # unix time of the last change applied
    stuck: int = 0  # settings given up on this boot (enforce.stuck)


@dataclass(frozen=True)
class EnforceStatus:
    """The daemon's enforcement (agentd.daemon.enforcer): its mode, the window and per knob."""

    mode: str  # off | plan | apply
    knobs: tuple[EnforceKnob, ...] = ()
    window_open: bool = False  # it may apply now (mode apply and a safe window)
    window: str = ""  # why (not)
