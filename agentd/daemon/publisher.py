"""From one collection to the next State: snapshot -> shared with the history -> checks and
NCCL render (worker thread, memoised) -> managed file writes and a first baseline (writer
lane, timeout) -> a new State, its metrics rendered once, off the event loop.

The daemon owns the schedule and swaps the State the Publisher returns; the Publisher owns
what is judged and written, and the node's baseline once it is adopted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from agentd.collection.history import History, share
from agentd.config import AgentConfig
from agentd.daemon.exposition import REGISTRY
from agentd.daemon.state import State
from agentd.host.runner import Lane, await_future
from agentd.judging.baseline import Baseline
from agentd.judging.outputs import output_findings
from agentd.judging.staleness import stale_probe_names, with_staleness
from agentd.model import Finding, NodeSnapshot, sort_findings
from agentd.outputs.evaluate import Evaluation, Evaluator, evaluate
from agentd.outputs.writer import Writer
from agentd.records import FileStatus, ReloadStatus, TierRun


@dataclass(frozen=True)
class Context:
    """What the daemon knows beyond the snapshot, for the State it publishes."""

    config: AgentConfig
    started_at: float
    seq: int
    stale_limits: Mapping[str, float]
    tiers: tuple[TierRun, ...]
    reload: ReloadStatus
    udev_events: Mapping[tuple[str, str], int]
    udev_active: bool
    process: Mapping[str, float]
    bench: Any = None
    bench_findings: tuple[Finding, ...] = ()


class Publisher:
    def __init__(self, *, evaluate: Callable[..., Evaluation] = evaluate, writer: Writer | None = None, log: Any):
        self.evaluator = Evaluator(evaluate)
        self.writer = writer or Writer()
        self.log = log
        self.baseline: Baseline | None = None
        self._write_lane = Lane("writer")

    async def judge(self, snapshot_job: Callable[[], NodeSnapshot], history: History, config: AgentConfig) -> tuple[NodeSnapshot, Evaluation]:
        """Take the snapshot, share its unchanged parts with the previous one, evaluate it
        (worker thread) and append it to the history."""
        baseline, hist = self.baseline, history.snapshots()
        prev = hist[-1] if hist else None

        def job() -> tuple[NodeSnapshot, Evaluation]:
            snap = share(prev, snapshot_job())  # unchanged parts become the previous objects
            return snap, self.evaluator(snap, hist, config, baseline, refresh_s=config.intervals.medium_s)

        snap, ev = await asyncio.to_thread(job)
        return history.append(snap), ev

    async def write(self, ev: Evaluation, snap: NodeSnapshot, config: AgentConfig, stale_limits: Mapping[str, float]) -> tuple[FileStatus, ...]:
        """NCCL files, NFD labels and a first baseline, in the writer lane with a timeout."""
        stale = stale_probe_names(snap, stale_limits, time.time())
        status = "critical" if stale else ev.status
        new_baseline = None
        if ev.new_baseline is not None and self.baseline is None and all(p.ok for p in snap.probes):
            new_baseline = ev.new_baseline
        fut, started = self._write_lane.submit(self.writer.write, ev, config, snap, status, new_baseline)
        if not started:
            self.log.warning("files.write_skipped", reason="the previous write is still running (hung filesystem?)")
            return self.writer.statuses()
        try:
            statuses, err = await await_future(fut, config.timeouts.probe_s)
        except TimeoutError:
            self.log.error("files.write_timeout", timeout_s=config.timeouts.probe_s)
            return tuple(dataclasses.replace(s, ok=False, error="write did not finish in time", changed=False) for s in self.writer.statuses())
        except Exception as e:
            self.log.error("files.write_crashed", error=f"{type(e).__name__}: {e}")
            return self.writer.statuses()
        if new_baseline is not None:
            if err is None:
                self.baseline = new_baseline
                self.log.info("baseline.saved", path=str(config.paths.baseline))
            else:
                self.log.error("baseline.save_failed", path=str(config.paths.baseline), error=err)
        return statuses

    async def build(self, snap: NodeSnapshot, ev: Evaluation, files: tuple[FileStatus, ...], ctx: Context) -> State:
        """The State of one collection, findings complete (files, benchmark, staleness as of
        now) and its metrics rendered once, off the event loop."""
        now = time.time()
        state = State(
            seq=ctx.seq, generated_at=now, started_at=ctx.started_at, config=ctx.config, ready=True, snapshot=snap,
            findings=ev.findings, stale_limits=ctx.stale_limits, compute_hcas=ev.roles.compute, hca_roles_source=ev.roles.source,
            expected=ev.expected, files=files, nccl_env=ev.nccl_env, nccl_problems=ev.nccl_problems, tiers=ctx.tiers,
            reload=ctx.reload, udev_events=ctx.udev_events, udev_active=ctx.udev_active, process=ctx.process,
            bench=ctx.bench, render_metrics=REGISTRY.render,
        )  # fmt: skip
        topo_problems = getattr(ev.render, "topo_problems", ()) if ev.render is not None else ()
        extra = [*output_findings(files, ev.nccl_problems, topo_problems), *ctx.bench_findings]
        base = tuple(sort_findings([*ev.findings, *extra])) if extra else ev.findings
        findings, _ = with_staleness(base, snap, ctx.stale_limits, now)
        if findings is not ev.findings:
            state = dataclasses.replace(state, findings=findings)
        await asyncio.to_thread(state.metrics_bytes)
        return state
