"""Typed records of parsed nccl-tests output (``agentd.ncclbench.ncclparse`` builds them)."""

from __future__ import annotations

from agentd.model import Record


class Measure(Record):
    """One half of a row: out-of-place or in-place."""

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: float | None = None  # #wrong elements, or the legacy max error; None for N/A
    wrong_text: str = ""  # as printed: "0", "N/A", "2e-07"


class Row(Record):
    op: str | None
    size_bytes: int
    count: int
    type: str
    redop: str | None = None
    root: int | None = None
    out_of_place: Measure
    in_place: Measure | None = None
    line: int  # 1-based line number in the parsed text


class RankLine(Record):
    rank: int
    group: int | None = None
    pid: int | None = None
    host: str | None = None
    device: int | None = None
    bus_id: str | None = None  # as printed: "0x36", "0000:04:00"
    name: str | None = None


class Section(Record):
    """One run of one test binary."""

    op: str | None = None
    nccl_tests_version: str | None = None
    nccl_version: str | None = None
    n_threads: int | None = None
    n_gpus: int | None = None  # GPUs per thread (-g)
    min_bytes: int | None = None
    max_bytes: int | None = None
    ranks: tuple[RankLine, ...] = ()
    columns: tuple[str, ...] = ()  # the columns before the first time: size count type [redop] [root]
    error_column: str | None = None  # "#wrong" | "error"
    rows: tuple[Row, ...] = ()
    avg_busbw_gbps: float | None = None
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None
    concluded: bool = False

    @property
    def n_ranks(self) -> int | None:
        """Highest printed rank + 1 (captures sometimes keep only the last rank lines);
        None when no rank line was printed."""
        if not self.ranks:
            return None
        return max(r.rank for r in self.ranks) + 1


class ParseError(Record):
    line: int
    text: str
    reason: str


class ParsedOutput(Record):
    sections: tuple[Section, ...] = ()
    errors: tuple[ParseError, ...] = ()
    failures: tuple[str, ...] = ()  # "Test NCCL failure ...", "Test timeout ..." lines
    ignored_lines: int = 0

    @property
    def rows(self) -> tuple[Row, ...]:
        return tuple(r for s in self.sections for r in s.rows)
