"""`agentd check --npd CONCERN`: node-problem-detector's custom plugin protocol (pure).

NPD (pkg/custompluginmonitor) runs the plugin with a timeout and reads its exit status:
0 OK, 1 NonOK (the condition is true: a problem), anything else Unknown; its stdout,
trimmed and cut at ``max_output_length`` bytes (default 80), becomes the condition's
message. So the answer is one line whose useful part comes first.

A concern is a set of finding codes (globs). The answer, in this order:

1. maintenance (``agentd maintenance on``): OK "maintenance: <reason>";
2. a counted critical finding of the concern: NonOK, naming its code and subjects first;
3. the concern could not be judged: Unknown (a probe it needs failed or timed out; for
   fabric and nvlink a node that is NVML-blind; the collection itself failed or ran past the
   deadline: those are answered by the CLI before this module is asked). For nvlink a
   counted ``nvml.blind`` is itself the problem (NonOK, step 2); a withheld one, Unknown;
4. else OK, mentioning warnings and withheld (pending, boot grace, observe) findings.

A critical finding that is withheld never makes NonOK, as it never makes /health 503.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Sequence

from agentd.base.escape import printable
from agentd.judging.checks.nvlink import nvml_blind
from agentd.model import Finding, NodeSnapshot, sort_findings

NPD_OK, NPD_PROBLEM, NPD_UNKNOWN = 0, 1, 2

# concern -> finding codes (globs). Documented in packaging/k8s/npd/README.md.
CONCERNS: dict[str, tuple[str, ...]] = {
    "fabric": ("nvlink.fabric.*", "nvlink.domain.*", "fabric.*"),
    "nvlink": ("nvlink.link.*", "nvlink.c2c.*", "gpu.lost", "nvml.blind"),
    "gdr": ("gdr.*",),
    "pcie": ("pcie.*", "gpu.pcie.*"),
    "net": ("ib.*", "roce.*", "mtu.*"),
}
# concern -> probes whose failure or timeout leaves it unjudged
CONCERN_PROBES: dict[str, tuple[str, ...]] = {
    "fabric": ("nvml",),
    "nvlink": ("nvml",),
    "gdr": ("gdr",),
    "pcie": ("pci",),
    "net": ("ib", "netdev"),
}


@dataclass(frozen=True)
class NpdAnswer:
    exit_code: int
    message: str  # one line


def in_concern(concern: str, code: str) -> bool:
    return any(fnmatchcase(code, pattern) for pattern in CONCERNS[concern])


def _line(text: str) -> str:
    return " ".join(printable(text).split())


def _subjects(findings: Sequence[Finding], limit: int = 3) -> str:
    names = list(dict.fromkeys(f.subject for f in findings))
    shown = ",".join(names[:limit])
    return shown + (f"+{len(names) - limit}" if len(names) > limit else "")


def _grouped(findings: Sequence[Finding]) -> str:
    """``nvlink.fabric.incomplete gpu0,gpu1,gpu2+5; fabric.manager.down node``."""
    by_code: dict[str, list[Finding]] = {}
    for f in findings:
        by_code.setdefault(f.code, []).append(f)
    return "; ".join(f"{code} {_subjects(fs)}" for code, fs in by_code.items())


def unknown(message: str) -> NpdAnswer:
    return NpdAnswer(NPD_UNKNOWN, _line(f"unknown: {message}"))


def _unjudged(concern: str, snap: NodeSnapshot) -> str | None:
    for st in snap.probes:
        if st.name in CONCERN_PROBES[concern] and (st.timed_out or not st.ok):
            return f"{st.name} probe {'timed out' if st.timed_out else 'failed'}"
    if concern in ("fabric", "nvlink") and nvml_blind(snap):
        return "NVML cannot see the node's GPUs (nvml.blind)"
    return None


def answer(concern: str, snap: NodeSnapshot | None, findings: Sequence[Finding], maintenance_reason: str | None = None) -> NpdAnswer:
    """The NPD answer for ``concern`` from one judged collection (findings with their
    lifecycle applied: ``withheld`` set on those that do not count)."""
    if maintenance_reason is not None:
        return NpdAnswer(NPD_OK, _line(f"maintenance: {maintenance_reason or 'no reason given'}"))
    mine = sort_findings([f for f in findings if in_concern(concern, f.code)])
    critical = [f for f in mine if f.severity == "critical" and f.withheld is None]
    if critical:
        return NpdAnswer(NPD_PROBLEM, _line(f"{_grouped(critical)}: {critical[0].message}"))
    why = _unjudged(concern, snap) if snap is not None else None
    if why is not None:
        return unknown(f"{concern} not judged: {why}")
    warnings = [f for f in mine if f.severity == "warning" and f.withheld is None]
    withheld = [f for f in mine if f.severity != "ok" and f.withheld is not None]
    parts = [f"{concern} ok"]
    if warnings:
        parts.append(f"warning {_grouped(warnings)}")
    if withheld:
        parts.append(f"withheld {_grouped(withheld)}")
    return NpdAnswer(NPD_OK, _line("; ".join(parts)))
