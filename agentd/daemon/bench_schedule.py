"""Scheduled `agentd bench nccl` runs inside the daemon (opt-in: bench.enabled).

Never part of the health loop: the benchmark runs in its own lane (a daemon thread, the
job itself kills its process group at bench.time_limit_s), at most every
bench.interval_s, only on idle GPUs unless bench.idle_only is off. The last outcome
goes into State: its metrics (agentd_bench_nccl_*) and its findings (below minimum:
degraded; wrong results: critical) next to the node's own.
"""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path
from typing import Protocol

from agentd.config import AgentConfig
from agentd.daemon.logging import Log
from agentd.daemon.state import State
from agentd.host.runner import Lane, await_future
from agentd.model import Finding
from agentd.ncclbench.job import BenchOptions, BenchOutcome, next_due, run_bench_job
from agentd.ncclbench.results import BenchRun
from agentd.ncclbench.run_history import history_path, load_history


class BenchHost(Protocol):
    """What the scheduler needs of the daemon that runs it."""

    @property
    def config(self) -> AgentConfig: ...
    @property
    def state(self) -> State: ...
    @property
    def log(self) -> Log: ...
    def trigger_full(self) -> None: ...


class BenchScheduler:
    def __init__(self) -> None:
        self.lane = Lane("bench")
        self.outcome: BenchOutcome | None = None
        self._last_run: BenchRun | None = None  # seeded from the history file

    def seed(self, state_dir: Path) -> None:
        runs, _ = load_history(history_path(state_dir))
        self._last_run = runs[-1] if runs else None

    def findings(self) -> tuple[Finding, ...]:
        return tuple(self.outcome.findings) if self.outcome is not None else ()

    async def run_forever(self, daemon: BenchHost) -> None:
        self.seed(daemon.config.paths.state_dir)
        while True:
            cfg = daemon.config
            if not cfg.bench.enabled:
                await asyncio.sleep(60)
                continue
            due = next_due(self._last_run, time.time(), cfg.bench.interval_s)
            if due > time.time():
                await asyncio.sleep(min(due - time.time(), 300))
                continue
            st = daemon.state
            if st.snapshot is None:
                await asyncio.sleep(5)
                continue
            try:
                job = functools.partial(
                    run_bench_job, cfg, BenchOptions.scheduled(cfg),
                    snapshot=st.snapshot, current_findings=st.findings, compute_hcas=st.compute_hcas,
                )  # fmt: skip
                outcome = await await_future(self.lane.submit(job)[0], cfg.bench.time_limit_s + 60)
            except TimeoutError:
                daemon.log.error("bench.stuck", time_limit_s=cfg.bench.time_limit_s)
                await asyncio.sleep(cfg.bench.interval_s)
                continue
            except Exception as e:
                daemon.log.error("bench.failed", error=f"{type(e).__name__}: {e}")
                await asyncio.sleep(cfg.bench.interval_s)
                continue
            self.outcome, self._last_run = outcome, outcome.run
            daemon.log.info("bench.finished", status=outcome.run.status, findings=[f.code for f in outcome.findings])
            daemon.trigger_full()
