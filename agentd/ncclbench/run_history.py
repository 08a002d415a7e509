"""Benchmark history: the last N runs as one small JSON file, written atomically.

File: ``<paths.state_dir>/bench-nccl.json``::

    {"format": 1, "runs": [<BenchRun JSON>, ...]}   # oldest first, at most N

A missing file is an empty history. An unreadable or corrupt file is reported (the
caller prints it) and treated as empty; it is only replaced when a new run is saved, so a
read problem never loses data silently. ``compare`` is pure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from pydantic import ValidationError

from agentd.base.atomic import WriteResult, atomic_write, read_current
from agentd.config import STATE_DIR_FILES
from agentd.model import Record
from agentd.ncclbench.results import BenchRun

FILE_NAME = STATE_DIR_FILES["bench"]
FORMAT = 1
DEFAULT_KEEP = 50
MAX_BYTES = 16 * 1024 * 1024


def history_path(state_dir: Path | str) -> Path:
    return Path(state_dir) / FILE_NAME


def load_history(path: Path | str) -> tuple[list[BenchRun], str | None]:
    """(runs oldest first, problem or None). Never raises."""
    p = Path(path)
    if not p.exists():
        return [], None
    raw = read_current(p, MAX_BYTES)
    if raw is None:
        return [], f"{p}: cannot be read"
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return [], f"{p}: not valid JSON ({e})"
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        return [], f"{p}: not a bench history (no 'runs' list)"
    runs: list[BenchRun] = []
    bad = 0
    for item in data["runs"]:
        try:
            runs.append(BenchRun.model_validate(item))
        except ValidationError:
            bad += 1
    return runs, (f"{p}: {bad} unreadable run(s) skipped" if bad else None)


def render_history(runs: Sequence[BenchRun], keep: int = DEFAULT_KEEP) -> str:
    kept = list(runs)[-max(1, keep):]
    doc = {"format": FORMAT, "runs": [r.model_dump(mode="json") for r in kept]}
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def append_run(path: Path | str, run: BenchRun, keep: int = DEFAULT_KEEP) -> WriteResult:
    """Add ``run`` and keep the newest ``keep``. A corrupt file is moved aside to
    ``<name>.corrupt`` before it is replaced."""
    p = Path(path)
    runs, problem = load_history(p)
    if problem and not runs and p.exists():
        try:
            p.replace(p.with_name(p.name + ".corrupt"))
        except OSError:
            pass
    runs.append(run)
    return atomic_write(p, render_history(runs, keep), mode=0o644)


class Delta(Record):
    op: str
    size_bytes: int
    before_gbps: float | None = None
    after_gbps: float | None = None
    delta_pct: float | None = None  # (after - before) / before * 100; None when either is missing or before is 0


def compare(a: BenchRun, b: BenchRun) -> list[Delta]:
    """Per (op, size) present in either run: bus bandwidth of ``a`` (before) and ``b``
    (after) and the change in percent. Sorted by op, then size."""
    keys = sorted({(r.op, r.size_bytes) for r in a.results} | {(r.op, r.size_bytes) for r in b.results})
    out = []
    for op, size in keys:
        ra, rb = a.result(op, size), b.result(op, size)
        before = ra.busbw_gbps if ra else None
        after = rb.busbw_gbps if rb else None
        pct = None
        if before is not None and after is not None and before > 0:
            pct = (after - before) / before * 100.0
        out.append(Delta(op=op, size_bytes=size, before_gbps=before, after_gbps=after, delta_pct=pct))
    return out


def previous_comparable(runs: Sequence[BenchRun], current: BenchRun) -> BenchRun | None:
    """The newest earlier run with results on the same transport (refused or failed runs
    measured nothing and are skipped)."""
    for r in reversed(runs):
        if r is current or r.started_at >= current.started_at:
            continue
        if r.results and r.transport == current.transport:
            return r
    return None
