"""Whether a benchmark may start now: pure judgement of the GPU process list.

A benchmark saturates NVLink, PCIe and the NICs and allocates GPU memory: on a GPU that a
job is using it would slow the job and measure nonsense. So it refuses when any
process holds a compute context on a GPU it would use, and when it cannot find out
(NVML unavailable), unless forced. The process list comes from
``agentd.host.gpuprocs.gpu_processes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from agentd.host.gpuprocs import GpuProcess, GpuProcesses

MAX_LISTED = 5


@dataclass(frozen=True)
class SafetyVerdict:
    ok: bool
    reason: str  # why it may not run, or what was overridden with force
    busy: tuple[GpuProcess, ...] = ()


def _describe(procs: Iterable[GpuProcess]) -> str:
    procs = list(procs)
    parts = [f"gpu{p.gpu}: pid {p.pid}{f' ({p.name})' if p.name else ''}" for p in procs[:MAX_LISTED]]
    more = f", +{len(procs) - MAX_LISTED} more" if len(procs) > MAX_LISTED else ""
    return ", ".join(parts) + more


def check_idle(answer: GpuProcesses, *, gpus: Iterable[int] | None = None, force: bool = False, ignore_pids: Iterable[int] = ()) -> SafetyVerdict:
    """``gpus``: NVML indices the run would use (None: all). ``ignore_pids``: our own."""
    wanted = None if gpus is None else set(gpus)
    skip = set(ignore_pids)
    if not answer.available:
        reason = f"cannot verify that the GPUs are idle: {answer.error or 'NVML unavailable'}"
        return SafetyVerdict(ok=force, reason=reason + (" (--force given: running anyway)" if force else "; use --force to run anyway"))
    busy = tuple(p for p in answer.processes if p.pid not in skip and (wanted is None or p.gpu in wanted))
    if not busy:
        return SafetyVerdict(ok=True, reason="GPUs idle")
    desc = f"GPUs in use by {len(busy)} process(es): {_describe(busy)}"
    if force:
        return SafetyVerdict(ok=True, reason=desc + " (--force given: running anyway)", busy=busy)
    return SafetyVerdict(ok=False, reason=desc + "; refusing to benchmark (use --force to override)", busy=busy)
