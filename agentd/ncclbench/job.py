"""One benchmark job, the same for ``agentd bench nccl`` and the daemon's schedule:
safety check -> lock -> runner -> expectations -> findings -> history.

Blocking (it runs a child process for minutes): the daemon calls ``run_bench_job`` in a
worker thread (``asyncio.to_thread``), never from the health loop, and only when
``bench.enabled``; ``next_due`` says when.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from agentd.base.atomic import WriteResult
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot, read_bounded
from agentd.host.gpuprocs import GpuProcesses, gpu_processes
from agentd.host.procrun import exclusive_lock, run_bounded
from agentd.model import Finding, NodeSnapshot
from agentd.ncclbench.expect import (
    Expectation,
    ExpectPolicy,
    Fabric,
    detect_fabric,
    expectations,
)
from agentd.ncclbench.findings import judge_run, status_after_judging
from agentd.ncclbench.results import BenchRun, RunStatus
from agentd.ncclbench.run_history import (
    DEFAULT_KEEP,
    Delta,
    append_run,
    compare,
    history_path,
    load_history,
    previous_comparable,
)
from agentd.ncclbench.runners import (
    BenchRequest,
    choose_runner,
    parse_env_file,
    parse_size,
    run_nccl_tests,
    run_torch,
    validate_ops,
)
from agentd.ncclbench.safety import check_idle

MiB = 1024 * 1024
DEFAULT_OPS = ("all_reduce", "all_gather", "reduce_scatter")
DEFAULT_SIZES = (104857, 1 * MiB, 16 * MiB, 64 * MiB, 256 * MiB)  # 0.1M,1M,16M,64M,256M as nccl-tests parses them
REFUSED_RETRY_S = 600.0
LOCK_NAME = "bench-nccl.lock"


@dataclass(frozen=True)
class BenchOptions:
    ops: tuple[str, ...] = DEFAULT_OPS
    sizes: tuple[int, ...] = DEFAULT_SIZES
    gpus: int | None = None  # None: every GPU on the node
    env_file: Path | None = None  # None: paths.nccl_env when it exists
    env_file_explicit: bool = False  # a missing explicit file is an error
    runner: str = "auto"  # auto | nccl-tests | torch
    transport: str = "nvlink"  # nvlink | net
    force: bool = False
    time_limit_s: float | None = None  # None: bench.time_limit_s
    iters: int = 20
    warmup: int = 5
    check: bool = True
    save: bool = True
    expected_busbw_gbps: dict[str, float] = field(default_factory=dict)

    @classmethod
    def scheduled(cls, config: AgentConfig) -> "BenchOptions":
        """What the daemon runs: idle GPUs only unless bench.idle_only is off. Reads the
        proposed keys bench.ops / sizes / runner / transport / expected_busbw_gbps when the
        config has them, else the defaults."""
        b = config.bench
        sizes = getattr(b, "sizes", None)
        return cls(
            ops=tuple(getattr(b, "ops", None) or DEFAULT_OPS),
            sizes=tuple(sorted({parse_size(str(x)) for x in sizes})) if sizes else DEFAULT_SIZES,
            runner=getattr(b, "runner", None) or "auto",
            transport=getattr(b, "transport", None) or "nvlink",
            expected_busbw_gbps=dict(getattr(b, "expected_busbw_gbps", None) or {}),
            force=not b.idle_only,
        )  # fmt: skip


@dataclass(frozen=True)
class BenchOutcome:
    run: BenchRun
    expectations: list[Expectation] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    fabric: Fabric | None = None
    previous: BenchRun | None = None
    deltas: list[Delta] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    saved: WriteResult | None = None


def next_due(last: BenchRun | None, now: float, interval_s: float) -> float:
    """Unix time the next scheduled run is due: one interval after the last run that
    measured something; a refused or unavailable run is retried sooner."""
    if last is None:
        return now
    if last.status in ("refused", "unavailable"):
        return last.finished_at + min(interval_s, REFUSED_RETRY_S)
    return last.finished_at + interval_s


def expect_policy(config: AgentConfig, opts: BenchOptions) -> ExpectPolicy:
    """Config and options -> ExpectPolicy (bench.min_fraction / judge_min_bytes when the
    config has those proposed keys)."""
    b = config.bench
    base = ExpectPolicy()
    return ExpectPolicy(
        min_fraction=float(getattr(b, "min_fraction", None) or base.min_fraction),
        judge_min_bytes=int(getattr(b, "judge_min_bytes", None) or base.judge_min_bytes),
        expected_busbw_gbps=dict(opts.expected_busbw_gbps),
        min_busbw_gbps=dict(b.min_busbw_gbps),
    )


def _env(config: AgentConfig, opts: BenchOptions, notes: list[str]) -> tuple[dict[str, str], str | None, str | None]:
    """(variables, env file used, error)."""
    path = opts.env_file or config.paths.nccl_env
    explicit = opts.env_file is not None and opts.env_file_explicit
    try:
        text = read_bounded(path, 1024 * 1024).decode("utf-8", "replace")
    except FileNotFoundError:
        if explicit:
            return {}, str(path), f"env file {path} does not exist"
        notes.append(f"no NCCL env file at {path}: running with the environment as is")
        return {}, None, None
    except OSError as e:
        return {}, str(path), f"env file {path} cannot be read: {e.strerror or e}"
    env, problems = parse_env_file(text)
    notes += [f"{path}: {p}" for p in problems]
    return env, str(path), None


def _refused(started: float, status: RunStatus, reason: str, opts: BenchOptions, env_file: str | None, now: Callable[[], float]) -> BenchRun:
    return BenchRun(started_at=started, finished_at=now(), status=status, reason=reason, transport=opts.transport, ops=opts.ops, env_file=env_file)


def run_bench_job(
    config: AgentConfig,
    opts: BenchOptions,
    *,
    snapshot: NodeSnapshot | None = None,
    current_findings: Sequence[Finding] = (),
    compute_hcas: Sequence[str] | None = None,
    gpu_query: Callable[[HostRoot], GpuProcesses] = gpu_processes,
    run: Callable[..., tuple[int, str, str, bool]] = run_bounded,
    now: Callable[[], float] = time.time,
) -> BenchOutcome:
    started = now()
    notes: list[str] = []
    ops = validate_ops(opts.ops)
    opts = replace(opts, ops=ops)
    env, env_file, env_error = _env(config, opts, notes)
    if env_error:
        return BenchOutcome(run=_refused(started, "unavailable", env_error, opts, env_file, now), notes=notes)
    answer = gpu_query(HostRoot.at(config.host_root, config.host_mode))
    gpus = opts.gpus or answer.gpus or (len(snapshot.gpus) if snapshot is not None else 0) or 1
    verdict = check_idle(answer, gpus=range(gpus), force=opts.force)
    if not verdict.ok:
        return BenchOutcome(run=_refused(started, "refused", verdict.reason, opts, env_file, now), notes=notes)
    if verdict.reason != "GPUs idle":
        notes.append(verdict.reason)
    runner, binaries, why = choose_runner(opts.runner, ops, config.bench.nccl_tests_dir)
    if runner is None:
        return BenchOutcome(run=_refused(started, "unavailable", why, opts, env_file, now), notes=notes)
    req = BenchRequest(
        ops=ops, sizes=tuple(sorted(set(opts.sizes))), gpus=gpus, env=env, time_limit_s=opts.time_limit_s or config.bench.time_limit_s,
        iters=opts.iters, warmup=opts.warmup, check=opts.check, transport=opts.transport, env_file=env_file,
    )  # fmt: skip
    state_dir = config.paths.state_dir
    with exclusive_lock(Path(state_dir) / LOCK_NAME) as held:
        if held is False:
            return BenchOutcome(run=_refused(started, "refused", "another NCCL benchmark is running on this node", opts, env_file, now), notes=notes)
        if held is None:
            notes.append(f"cannot create {Path(state_dir) / LOCK_NAME}: running without the lock against concurrent benchmarks")
        result = run_nccl_tests(req, binaries, run=run, clock=now) if runner == "nccl-tests" else run_torch(req, run=run, clock=now)
    result = result.model_copy(update={"started_at": started})
    fabric = detect_fabric(snapshot, compute_hcas) if snapshot is not None else None
    policy = expect_policy(config, opts)
    expected = expectations(fabric or Fabric(intra="unknown"), [(r.op, r.size_bytes) for r in result.results], policy, opts.transport)
    result = result.model_copy(update={"fabric": fabric.label if fabric else None})
    found = judge_run(result, expected, current_findings)
    status = status_after_judging(result, found)
    if status != result.status:
        below = [f.subject for f in found if f.code == "bench.nccl.below_min"]
        result = result.model_copy(update={"status": status, "reason": "below minimum: " + ", ".join(below)})
    path = history_path(state_dir)
    runs, problem = load_history(path)
    if problem:
        notes.append(problem)
    previous = previous_comparable(runs, result)
    keep = int(getattr(config.bench, "history_size", None) or DEFAULT_KEEP)
    saved = append_run(path, result, keep) if opts.save and result.results else None
    if saved is not None and not saved.ok:
        notes.append(f"history not saved: {saved.error}")
    return BenchOutcome(
        run=result, expectations=expected, findings=found, fabric=fabric, previous=previous,
        deltas=compare(previous, result) if previous else [], notes=notes, saved=saved,
    )  # fmt: skip
