"""Text and JSON views of a benchmark outcome (pure; used by ``agentd bench nccl``)."""

from __future__ import annotations

from typing import Sequence

from agentd.base.jsontypes import JsonObject
from agentd.ncclbench.findings import size_label
from agentd.ncclbench.job import BenchOutcome
from agentd.ncclbench.run_history import Delta

_COLUMNS = ["op", "size", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "expected", "min", ""]


def _f(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.rjust(w) if i and i < len(r) - 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]


def outcome_text(outcome: BenchOutcome) -> str:
    run = outcome.run
    lines = [
        f"NCCL benchmark: {run.status}" + (f" ({run.reason})" if run.reason else ""),
        f"  runner {run.runner or '-'}, transport {run.transport}, ranks {run.n_ranks or '-'}, fabric {run.fabric or 'unknown'}, "
        + (f"NCCL {run.nccl_version}, " if run.nccl_version else "")
        + f"{run.duration_s:.1f}s",
    ]
    if run.env_file:
        lines.append(f"  env file {run.env_file} ({len(run.env)} NCCL_* variables)")
    if run.results:
        exp = {(e.op, e.size_bytes): e for e in outcome.expectations}
        below = {f.subject for f in outcome.findings if f.code == "bench.nccl.below_min"}
        rows = [list(_COLUMNS)]
        for r in sorted(run.results, key=lambda r: (r.op, r.size_bytes)):
            e = exp.get((r.op, r.size_bytes))
            mark = "BELOW MIN" if f"{r.op}/{size_label(r.size_bytes)}" in below else ""
            rows.append([r.op, size_label(r.size_bytes), _f(r.time_us, "{:.1f}"), _f(r.algbw_gbps), _f(r.busbw_gbps),
                         _f(e.expected_gbps if e else None, "{:.1f}"), _f(e.min_gbps if e else None, "{:.1f}"), mark])  # fmt: skip
        lines += ["", *_table(rows)]
    if outcome.findings:
        lines.append("")
        for f in outcome.findings:
            lines.append(f"{f.severity.upper()} {f.code} {f.subject}: {f.message}")
            if f.remediation:
                lines.append(f"  -> {f.remediation}")
    for n in outcome.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines) + "\n"


def compare_text(deltas: Sequence[Delta], before_at: float | None, after_at: float | None) -> str:
    import time as _time

    def when(t: float | None) -> str:
        return "-" if t is None else _time.strftime("%Y-%m-%d %H:%M:%S", _time.localtime(t))

    if not deltas:
        return "compare: no earlier run with results to compare with\n"
    rows = [["op", "size", "before(GB/s)", "after(GB/s)", "change"]]
    for d in deltas:
        rows.append([d.op, size_label(d.size_bytes), _f(d.before_gbps), _f(d.after_gbps), "-" if d.delta_pct is None else f"{d.delta_pct:+.1f}%"])
    return f"compare: before {when(before_at)} -> after {when(after_at)}\n" + "\n".join(_table(rows)) + "\n"


def outcome_json(outcome: BenchOutcome) -> JsonObject:
    return {
        "run": outcome.run.model_dump(mode="json"),
        "fabric": outcome.fabric.model_dump(mode="json") if outcome.fabric else None,
        "expectations": [e.model_dump(mode="json") for e in outcome.expectations],
        "findings": [f.model_dump(mode="json") for f in outcome.findings],
        "previous_started_at": outcome.previous.started_at if outcome.previous else None,
        "compare": [d.model_dump(mode="json") for d in outcome.deltas],
        "notes": list(outcome.notes),
    }
