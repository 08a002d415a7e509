"""Metrics of ``[enforce]`` (docs/enforce.md): how many settings of each named knob differ
from what the checks expect, and what the daemon's enforcer did about it. Nothing is
exported while no knob is named or the mode is off."""

from __future__ import annotations

from typing import Final

from agentd.base.expo import Exposition, Family, MetricType
from agentd.metrics.registry import Area
from agentd.metrics.source import MetricsSource

G: Final[MetricType] = "gauge"
C: Final[MetricType] = "counter"
DRIFT_CODE = "config.drift"  # agentd.judging.enforce.DRIFT_CODE (metrics render from findings, never the plan)

FAMILIES: tuple[Family, ...] = (
    Family("agentd_enforce_info", G, "The enforcement mode (value 1; enforce.mode) while some knob is named in enforce.knobs.", ("mode",)),
    Family("agentd_enforce_drift", G, "Settings of the knob (targets) that differ from what the checks expect (config.drift findings), per knob named in enforce.knobs.", ("knob",)),
    Family("agentd_enforce_window_open", G, "1 while the daemon may apply changes (enforce.mode apply, and the node in maintenance, in boot grace before its first healthy collection, or with idle GPUs when enforce.when_gpus_idle).", ()),
    Family("agentd_enforce_applies_total", C, "Changes of the knob the daemon applied and read back as desired, since it started.", ("knob",)),
    Family("agentd_enforce_failures_total", C, "Changes of the knob the daemon tried that the interface refused, that did not read back as desired (rolled back) or were left partial, since it started.", ("knob",)),
    Family("agentd_enforce_last_apply_timestamp_seconds", G, "Unix time the daemon last applied a change of the knob.", ("knob",)),
    Family("agentd_enforce_stuck", G, "Settings of the knob given up on this boot after enforce.max_attempts (enforce.stuck findings; `agentd enforce status --reset`).", ("knob",)),
)


def render(x: Exposition, s: MetricsSource) -> None:
    cfg = s.config.enforce
    if cfg.mode == "off" or not cfg.knobs:
        return
    x.add("agentd_enforce_info", (cfg.mode,), 1)
    drift = {k: 0 for k in cfg.knobs}
    for f in s.findings:
        if f.code == DRIFT_CODE and f.about.kind == "setting" and f.about.name in drift:
            drift[f.about.name] += 1
    for knob, n in drift.items():
        x.add("agentd_enforce_drift", (knob,), n)
    status = s.enforce
    if cfg.mode != "apply":
        return
    x.add("agentd_enforce_window_open", (), status is not None and status.window_open)
    by_knob = {k.knob: k for k in status.knobs} if status is not None else {}
    for knob in cfg.knobs:
        k = by_knob.get(knob)
        x.add("agentd_enforce_applies_total", (knob,), k.applies_total if k else 0)
        x.add("agentd_enforce_failures_total", (knob,), k.failures_total if k else 0)
        if k is not None and k.last_apply_at is not None:
            x.add("agentd_enforce_last_apply_timestamp_seconds", (knob,), k.last_apply_at)
        x.add("agentd_enforce_stuck", (knob,), k.stuck if k else 0)


AREA = Area("enforce", FAMILIES, render)
