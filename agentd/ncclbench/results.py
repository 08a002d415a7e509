"""The typed result of one benchmark run, whichever runner produced it.

``BenchRun`` is what the history keeps, the metrics export, the findings judge and
``--format json`` prints. Bandwidths are GB/s (1e9 bytes/s) as nccl-tests prints them;
metrics convert to bytes per second.
"""

from __future__ import annotations

from typing import Literal

from agentd.model import Record
from agentd.ncclbench.formulas import infer_n_ranks, known_op
from agentd.ncclbench.ncclparse import Measure, ParsedOutput, Row

RunStatus = Literal["ok", "below_min", "wrong_results", "failed", "timeout", "refused", "unavailable"]
RUN_STATUSES: tuple[str, ...] = ("ok", "below_min", "wrong_results", "failed", "timeout", "refused", "unavailable")
Transport = Literal["nvlink", "net"]


class OpResult(Record):
    op: str
    size_bytes: int
    count: int | None = None
    dtype: str | None = None
    time_us: float  # of the half judged (the faster)
    algbw_gbps: float
    busbw_gbps: float  # the better of out-of-place and in-place
    busbw_out_of_place_gbps: float | None = None
    busbw_in_place_gbps: float | None = None
    wrong: float | None = None  # wrong elements (both halves); None when not checked


class BenchRun(Record):
    started_at: float
    finished_at: float
    runner: Literal["nccl-tests", "torch"] | None = None
    transport: Transport = "nvlink"
    status: RunStatus
    reason: str = ""  # one line: why it failed, was refused or is below minimum
    n_ranks: int | None = None
    ops: tuple[str, ...] = ()
    env_file: str | None = None
    env: dict[str, str] = {}  # NCCL_* variables the run used (the config that produced it)
    nccl_version: str | None = None
    tool_version: str | None = None  # nccl-tests or torch version
    fabric: str | None = None
    results: tuple[OpResult, ...] = ()
    avg_busbw_gbps: dict[str, float] = {}  # op -> nccl-tests' "Avg bus bandwidth"
    errors: tuple[str, ...] = ()

    @property
    def duration_s(self) -> float:
        return max(0.0, self.finished_at - self.started_at)

    def result(self, op: str, size_bytes: int) -> OpResult | None:
        for r in self.results:
            if r.op == op and r.size_bytes == size_bytes:
                return r
        return None


def _best(oop: Measure, ip: Measure | None) -> Measure:
    if ip is None or ip.busbw_gbps != ip.busbw_gbps:  # missing or NaN
        return oop
    return ip if ip.busbw_gbps > oop.busbw_gbps else oop


def op_result(row: Row, op: str) -> OpResult:
    best = _best(row.out_of_place, row.in_place)
    wrongs = [m.wrong for m in (row.out_of_place, row.in_place) if m is not None and m.wrong is not None]
    return OpResult(
        op=op,
        size_bytes=row.size_bytes,
        count=row.count,
        dtype=row.type,
        time_us=best.time_us,
        algbw_gbps=best.algbw_gbps,
        busbw_gbps=best.busbw_gbps,
        busbw_out_of_place_gbps=row.out_of_place.busbw_gbps,
        busbw_in_place_gbps=None if row.in_place is None else row.in_place.busbw_gbps,
        wrong=sum(wrongs) if wrongs else None,
    )


def wrong_results(parsed: ParsedOutput) -> list[str]:
    """Descriptions of data-check failures: ``#wrong`` above 0 (current nccl-tests) or an
    ``Out of bounds values : N FAILED`` footer (all versions; the legacy ``error`` column
    is a relative error, judged by nccl-tests itself in that footer)."""
    out = []
    for s in parsed.sections:
        if s.out_of_bounds_ok is False:
            out.append(f"{s.op or 'test'}: {s.out_of_bounds} out-of-bounds values (data check FAILED)")
        if s.error_column == "#wrong":
            for r in s.rows:
                for half, m in (("out-of-place", r.out_of_place), ("in-place", r.in_place)):
                    if m is not None and m.wrong:
                        out.append(f"{s.op or 'test'} {r.size_bytes} B {half}: {m.wrong:g} wrong elements")
    return out


def n_ranks_of(parsed: ParsedOutput, fallback: int | None = None) -> int | None:
    """Ranks from the rank lines; else inferred from busbw/algbw of a large row; else
    ``fallback`` (the -g the runner asked for)."""
    for s in parsed.sections:
        if s.n_ranks:
            return s.n_ranks
    for s in parsed.sections:
        if s.op and known_op(s.op):
            for r in sorted(s.rows, key=lambda r: -r.size_bytes):
                n = infer_n_ranks(s.op, r.out_of_place.algbw_gbps, r.out_of_place.busbw_gbps)
                if n:
                    return n
    return fallback


def results_from_parsed(parsed: ParsedOutput, sizes: set[int] | None = None, op: str | None = None) -> tuple[OpResult, ...]:
    """One OpResult per (op, size), the last row printed winning (``-N`` repeats rows);
    ``sizes`` keeps only the requested ones, ``op`` only that collective's sections."""
    out: dict[tuple[str, int], OpResult] = {}
    for s in parsed.sections:
        if not s.op or (op is not None and s.op != op):
            continue
        for r in s.rows:
            if sizes is None or r.size_bytes in sizes:
                out[(s.op, r.size_bytes)] = op_result(r, s.op)
    return tuple(out.values())
