"""Pure parser of nccl-tests output (``all_reduce_perf`` and friends). Never raises.

Layouts seen in the wild (tests/ncclbench/data holds real captures of each):

- 2017-2019: ``size count type [redop] [root] time algbw busbw error ...`` where the
  optional columns depend on the collective (all_gather had neither, broadcast only
  ``root``), ``error`` is a max relative error printed as ``%e`` (``2e-07``), and rank
  lines read ``#   Rank  0 Pid  87569 on host device  0 [0x36] Tesla V100``.
- 2021: ``redop`` on every reduction, still ``error``.
- 2022 on: ``size count type redop root time algbw busbw #wrong`` for every collective
  (``none``/``-1`` where meaningless), ``#wrong`` is a count of wrong elements or
  ``N/A``, rank lines carry ``Group``; from 2.17 or so a ``# nccl-tests version`` line and
  ``# Collective test starting/concluded`` lines frame each run.

The column header line names the columns, so rows are read by name; without one (a
truncated capture) the layout is inferred from the number of fields. Each run (a
``# nThread`` header, or a version/starting line) becomes a ``Section``. Lines that are
neither comments nor rows (NCCL INFO logs, wrapper output) are skipped and counted; a
line that starts like a row but does not parse becomes a ``ParseError``. Common line
prefixes (``mpirun --tag-output``, ``srun -l``, ``kubectl logs --timestamps``) are
stripped first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agentd.ncclbench.nccltypes import Measure, ParsedOutput, ParseError, RankLine, Row, Section

__all__ = ["Measure", "ParseError", "ParsedOutput", "RankLine", "Row", "Section", "op_from_binary", "parse_nccl_tests"]

OP_NAMES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv", "gather", "scatter", "hypercube")


# ---------------------------------------------------------------------------

_PREFIX = re.compile(
    r"^(?:\s*(?:\[\d+,\d+\]<std(?:out|err)>:"  # mpirun --tag-output
    r"|\d{4}-\d{2}-\d{2}T[\d:.]+(?:Z|[+-]\d{2}:?\d{2})\s"  # kubectl logs --timestamps
    r"|\((?:head|worker)[^)]*\)\s"  # ray / skypilot
    r"|\d{1,5}:\s))+"  # srun -l
)
_ROW_START = re.compile(r"^\s*\d+\s+\d+\s")
_NTHREAD = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)")
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)")
_STARTING = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded")
_RANK = re.compile(
    r"^#\s*Rank\s+(\d+)(?:\s+Group\s+(\d+))?\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$"
)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(\w+)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([-+0-9.eE]+|nan|inf)", re.IGNORECASE)
_NCCL_VERSION = re.compile(r"^NCCL version\s+(\S+)")
_FAILURE = re.compile(r"\bTest (?:NCCL |CUDA )?failure\b|\bTest timeout\b")
_BINARY = re.compile(r"(?:^|[\s/])(" + "|".join(sorted(OP_NAMES, key=len, reverse=True)) + r")_perf(?:_mpi)?\b")
_TYPE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_KNOWN_PREFIX = ("size", "count", "type", "redop", "root")


def op_from_binary(name: str) -> str | None:
    """``all_reduce_perf`` / ``/opt/x/reduce_scatter_perf_mpi`` -> the collective."""
    m = _BINARY.search(" " + name)
    return m.group(1) if m else None


def _strip_prefix(line: str) -> str:
    m = _PREFIX.match(line)
    return line[m.end():] if m else line


def _measure(toks: list[str]) -> Measure:
    time_us, alg, bus = (float(t) for t in toks[:3])
    wrong_text = toks[3]
    wrong = None if wrong_text.upper() == "N/A" else float(wrong_text)
    return Measure(time_us=time_us, algbw_gbps=alg, busbw_gbps=bus, wrong=wrong, wrong_text=wrong_text)


def _infer_columns(toks: list[str]) -> tuple[str, ...] | None:
    n = len(toks)
    for k in (5, 4, 3):
        if n in (k + 4, k + 8):
            if k == 5:
                return ("size", "count", "type", "redop", "root")
            if k == 4:
                return ("size", "count", "type", "redop") if _TYPE.match(toks[3]) else ("size", "count", "type", "root")
            return ("size", "count", "type")
    return None


@dataclass
class _Builder:
    hint: str | None = None
    starting_op: str | None = None
    version: str | None = None
    nccl_version: str | None = None
    nthread: tuple[int, int, int, int] | None = None
    ranks: list[RankLine] = field(default_factory=list)
    columns: tuple[str, ...] = ()
    error_column: str | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)  # Any: Row's fields by name, less op (validated by Row)
    avg: float | None = None
    oob: tuple[int, bool] | None = None
    concluded: bool = False

    def touched(self) -> bool:
        return bool(self.rows or self.nthread or self.ranks or self.columns or self.version or self.starting_op or self.avg is not None)

    def build(self, default_op: str | None) -> Section:
        op = self.starting_op or self.hint or default_op
        return Section(
            op=op,
            nccl_tests_version=self.version,
            nccl_version=self.nccl_version,
            n_threads=self.nthread[0] if self.nthread else None,
            n_gpus=self.nthread[1] if self.nthread else None,
            min_bytes=self.nthread[2] if self.nthread else None,
            max_bytes=self.nthread[3] if self.nthread else None,
            ranks=tuple(self.ranks),
            columns=self.columns,
            error_column=self.error_column,
            rows=tuple(Row(op=op, **r) for r in self.rows),
            avg_busbw_gbps=self.avg,
            out_of_bounds=self.oob[0] if self.oob else None,
            out_of_bounds_ok=self.oob[1] if self.oob else None,
            concluded=self.concluded,
        )


class _Parser:
    def __init__(self, default_op: str | None):
        self.default_op = default_op
        self.sections: list[Section] = []
        self.errors: list[ParseError] = []
        self.failures: list[str] = []
        self.ignored = 0
        self.cur = _Builder()
        self.pending_hint: str | None = None

    def _claim(self) -> _Builder:
        """The current section is about to record something: give it the pending hint."""
        if self.cur.hint is None and self.pending_hint is not None:
            self.cur.hint = self.pending_hint
            self.pending_hint = None
        return self.cur

    def new_section(self) -> None:
        if self.cur.touched():
            self.sections.append(self.cur.build(self.default_op))
        self.cur = _Builder()

    def comment(self, s: str, lineno: int) -> None:
        cur = self.cur
        if m := _VERSION.match(s):
            if cur.touched():
                self.new_section()
            self._claim().version = m.group(1)
        elif m := _STARTING.match(s):
            if cur.rows or cur.nthread or cur.starting_op:
                self.new_section()
            self._claim().starting_op = op_from_binary(m.group(1)) or m.group(1)
        elif m := _NTHREAD.search(s):
            if cur.rows or cur.nthread:
                self.new_section()
            self._claim().nthread = (int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)))
        elif m := _RANK.match(s):
            if cur.rows:
                self.new_section()
            g = m.groups()
            self._claim().ranks.append(
                RankLine(rank=int(g[0]), group=None if g[1] is None else int(g[1]), pid=int(g[2]), host=g[3], device=int(g[4]), bus_id=g[5], name=g[6].strip() or None)
            )
        elif m := _OOB.match(s):
            cur.oob = (int(m.group(1)), m.group(2).upper() == "OK")
        elif m := _AVG.match(s):
            try:
                cur.avg = float(m.group(1))
            except ValueError:
                self.errors.append(ParseError(line=lineno, text=s[:200], reason="average bus bandwidth is not a number"))
        elif _CONCLUDED.match(s):
            cur.concluded = True
        else:
            toks = s.lstrip("#").split()
            if len(toks) >= 7 and toks[:2] == ["size", "count"] and "time" in toks:
                if cur.rows:
                    self.new_section()
                b = self._claim()
                first_time = toks.index("time")
                b.columns = tuple(toks[:first_time])
                rest = toks[first_time:]
                b.error_column = rest[3] if len(rest) >= 4 else None

    def row(self, s: str, lineno: int) -> None:
        toks = s.split()
        b = self.cur
        columns = b.columns if b.columns and all(c in _KNOWN_PREFIX for c in b.columns) else _infer_columns(toks)
        if columns is None:
            self.errors.append(ParseError(line=lineno, text=s[:200], reason=f"{len(toks)} fields fit no known nccl-tests layout"))
            return
        k = len(columns)
        if len(toks) not in (k + 4, k + 8):
            self.errors.append(ParseError(line=lineno, text=s[:200], reason=f"expected {k + 4} or {k + 8} fields for columns {' '.join(columns)}, got {len(toks)}"))
            return
        try:
            fields = dict(zip(columns, toks))
            size, count, dtype = int(fields["size"]), int(fields["count"]), fields["type"]
            if not _TYPE.match(dtype):
                raise ValueError(f"type {dtype!r} is not a type name")
            root = int(fields["root"]) if "root" in fields else None
            oop = _measure(toks[k : k + 4])
            ip = _measure(toks[k + 4 : k + 8]) if len(toks) == k + 8 else None
        except (ValueError, KeyError) as e:
            self.errors.append(ParseError(line=lineno, text=s[:200], reason=str(e) or type(e).__name__))
            return
        self._claim().rows.append(
            dict(size_bytes=size, count=count, type=dtype, redop=fields.get("redop"), root=root, out_of_place=oop, in_place=ip, line=lineno)
        )

    def other(self, s: str) -> None:
        if m := _NCCL_VERSION.match(s):
            self.cur.nccl_version = m.group(1)
            return
        if _FAILURE.search(s):
            self.failures.append(s[:300])
        if op := op_from_binary(s):
            if self.cur.rows or self.cur.nthread:
                self.pending_hint = op  # a command line for the next run
            else:
                self.cur.hint = op
        self.ignored += 1

    def feed(self, text: str) -> None:
        for lineno, raw in enumerate(text.splitlines(), 1):
            s = _strip_prefix(raw).strip()
            if not s:
                continue
            if s.startswith("#"):
                self.comment(s, lineno)
            elif _ROW_START.match(s):
                self.row(s, lineno)
            else:
                self.other(s)

    def result(self) -> ParsedOutput:
        self.new_section()
        return ParsedOutput(sections=tuple(self.sections), errors=tuple(self.errors), failures=tuple(self.failures), ignored_lines=self.ignored)


def parse_nccl_tests(text: str, *, op: str | None = None) -> ParsedOutput:
    """Parse nccl-tests stdout. ``op`` names the collective when the output does not
    (older versions print no ``Collective test starting`` line); the output's own name
    wins. Never raises."""
    p = _Parser(op)
    try:
        p.feed(text)
    except Exception as e:
        p.errors.append(ParseError(line=0, text="", reason=f"parser error: {type(e).__name__}: {e}"))
    return p.result()
