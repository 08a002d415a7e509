"""From one collection to the next State: snapshot -> shared with the history -> checks and
NCCL render (worker thread, memoised) -> managed file writes and a first baseline (writer
lane, timeout) -> a new State, its metrics rendered when first scraped, off the event loop.

The daemon owns the schedule and swaps the State the Publisher returns; the Publisher owns
what is judged and written, and the node's baseline once it is adopted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Hashable, Mapping

from agentd.base.jsontypes import JsonObject
from agentd.base.memo import same_objects
from agentd.collection.history import History, share
from agentd.config import AgentConfig
from agentd.daemon.exposition import REGISTRY
from agentd.daemon.keepers import Keeper, StillReading
from agentd.daemon.logging import Log
from agentd.daemon.state import State
from agentd.host.runner import Lane, await_future
from agentd.judging.baseline import Baseline
from agentd.judging.lifecycle import Tracks, advance
from agentd.judging.outputs import output_findings
from agentd.judging.staleness import stale_probe_names, with_staleness
from agentd.model import CONTENT_FIELDS, Finding, HistoryEntry, NodeSnapshot, sort_findings
from agentd.nccl.topo import topology_hash
from agentd.ncclbench.job import BenchOutcome
from agentd.outputs.baseline_store import BaselineError, load_baseline
from agentd.outputs.evaluate import EvaluateFn, Evaluation, Evaluator, evaluate
from agentd.outputs.maintenance import Maintenance
from agentd.outputs.writer import Writer, planned_files
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
    bench: BenchOutcome | None = None
    bench_findings: tuple[Finding, ...] = ()
    link_events: Mapping[str, int] = field(default_factory=dict)  # rtnetlink outcome -> count
    link_active: bool = False
    maintenance: Maintenance | None = None
    maintenance_ended_at: float | None = None


# the parts ``history.share`` replaces by the previous snapshot's when equal
_SHARED = CONTENT_FIELDS
# what the writer reads of a snapshot beside its evaluation (the NFD labels): its content,
# not the time it was taken nor the probe statuses (agentd.model.SNAPSHOT_FIELDS)
_WRITTEN_FROM = CONTENT_FIELDS


class Publisher:
    def __init__(self, *, evaluate: EvaluateFn = evaluate, writer: Writer | None = None, log: Log):
        self.evaluator = Evaluator(evaluate)
        self.writer = writer or Writer()
        self.log = log
        self.baseline: Baseline | None = None
        # The baseline path whose file was read (found, absent or invalid); until then no
        # new baseline is adopted, so a hung read never ends in overwriting a good one.
        self.baseline_read_from: Path | None = None
        self._write_lane = Lane("writer")
        self.baseline_keeper: Keeper[Baseline | None] = Keeper("baseline")
        self._unfinished: dict[str, int] = {}  # file -> publishes whose write did not finish
        # lifecycle tracks of the findings added at build (file writes, the benchmark)
        self.extra_tracks = Tracks()
        self._topo_hash: tuple[str, str] | None = None  # (the topology XML text, its hash)
        # (the parts of the last snapshot shared, what sharing made of it): see _steady
        self._shared: tuple[tuple[object, ...], NodeSnapshot] | None = None
        # The latest write that changed nothing and failed nothing: (the objects it was
        # given, its status and maintenance flag, its statuses, when it finished
        # (monotonic)). See ``write``.
        self._quiet: tuple[tuple[object, ...], tuple[str, bool], tuple[FileStatus, ...], float] | None = None

    async def load_baseline(self, path: Path, timeout_s: float) -> None:
        """Read the baseline at ``path`` in its lane (never on the event loop: a FIFO or a
        hung filesystem there must not stop /health or SIGTERM). On a timeout the baseline
        stays unknown; a later call picks up the read once it finished, without waiting."""
        try:
            b = await self.baseline_keeper.load(lambda: load_baseline(path), timeout_s, path)
        except StillReading:
            return  # an earlier read still hangs
        except TimeoutError:
            self.log.error("baseline.read_timeout", path=str(path), timeout_s=timeout_s, effect="no new baseline is adopted until it can be read")
            return
        except BaselineError as e:
            self.log.error("baseline.invalid", error=str(e), effect="the next healthy collection replaces it")
            b = None
        except Exception as e:
            b = None
            self.log.error("baseline.read_failed", path=str(path), error=f"{type(e).__name__}: {e}", effect="the next healthy collection replaces it")
        if b is not None:
            self.log.info("baseline.loaded", path=str(path))
        self.baseline, self.baseline_read_from = b, path

    # -- the findings' lifecycles, persisted beside the history (agentd.daemon.keepers) --
    # by scope: the checks' findings (the evaluator's tracks), and those added at build
    # (file writes, the benchmark)
    def lifecycle_json(self) -> list[JsonObject]:
        """Every episode's since, sticky window and pending count (agentd.judging.lifecycle),
        as JSON objects."""
        return [{**item, "scope": scope} for scope, tracks in (("checks", self.evaluator.tracks), ("outputs", self.extra_tracks))
                for item in tracks.to_json()]

    def restore_lifecycle(self, items: list[JsonObject]) -> None:
        by_scope: dict[str, list[JsonObject]] = {"checks": [], "outputs": []}
        for item in items:
            scope = item.get("scope") if isinstance(item, dict) else None
            if isinstance(scope, str) and scope in by_scope:
                by_scope[scope].append(item)
        self.evaluator.tracks = Tracks.from_json(by_scope["checks"])
        self.extra_tracks = Tracks.from_json(by_scope["outputs"])

    def lifecycle_mark(self) -> Hashable:
        """What changes when an episode starts, counts or ends (not every sighting)."""
        return tuple((k, t.since, t.raised) for tracks in (self.evaluator.tracks, self.extra_tracks) for k, t in tracks.by_key.items())

    async def judge(self, snapshot_job: Callable[[], NodeSnapshot], history: History, config: AgentConfig,
                    steady: Callable[[], NodeSnapshot | None] | None = None) -> tuple[NodeSnapshot, Evaluation]:
        """Take the snapshot, share its unchanged parts with the previous one, evaluate it
        (worker thread) and append it to the history. ``steady``: the snapshot when its
        content is the last assembly's, else None (cheap, on the loop); when the sharing and
        the evaluation of that would be reused too, nothing goes to a worker thread."""
        if self.baseline_read_from != config.paths.baseline:  # at start, or a reload moved it
            await self.load_baseline(config.paths.baseline, config.timeouts.probe_s)
        baseline, hist = self.baseline, history.snapshots()
        prev = hist[-1] if hist else None
        refresh_s = config.intervals.medium_s
        raw = steady() if steady is not None else None
        quick = self._steady(prev, raw)
        reused = self.evaluator.reuse(quick, config, baseline, refresh_s=refresh_s) if quick is not None else None
        if raw is not None and quick is not None and reused is not None:
            return self._appended(history, raw, quick), reused

        def job() -> tuple[NodeSnapshot, NodeSnapshot, Evaluation]:
            raw = snapshot_job()
            snap = share(prev, raw)  # unchanged parts become the previous objects
            return raw, snap, self.evaluator(snap, hist, config, baseline, refresh_s=refresh_s)

        fresh, snap, ev = await asyncio.to_thread(job)
        return self._appended(history, fresh, snap), ev

    def _appended(self, history: History, raw: NodeSnapshot, snap: NodeSnapshot) -> NodeSnapshot:
        stored = history.append(snap)
        self._shared = (tuple(getattr(raw, f) for f in _SHARED), stored)
        return stored

    def _steady(self, prev: HistoryEntry | None, raw: NodeSnapshot | None) -> NodeSnapshot | None:
        """``share(prev, raw)`` in O(1) when ``raw``'s parts are the very objects the last
        sharing started from and ``prev`` is what it made (the history's newest entry);
        else None."""
        last = self._shared
        if raw is None or prev is None or last is None:
            return None
        parts, made = last
        if prev is not made or any(getattr(raw, f) is not p for f, p in zip(_SHARED, parts, strict=True)):
            return None
        return raw.model_copy(update={f: getattr(made, f) for f in _SHARED})

    async def write(self, ev: Evaluation, snap: NodeSnapshot, config: AgentConfig, stale_limits: Mapping[str, float],
                    *, maintenance: bool = False) -> tuple[FileStatus, ...]:
        """NCCL files, NFD labels and a first baseline, in the writer lane with a timeout.
        A write that does not finish in time (hung filesystem) costs every file it was to
        write: each is reported failed, for this and every publish until it finishes.
        In ``maintenance`` the NCCL files are kept as they are (not even drift is restored),
        no baseline is adopted, and the NFD health label says maintenance.

        A steady publish (the very evaluation, config and snapshot content of the latest
        write, which changed and failed nothing, and the same status) returns that write's
        statuses without a hand-off to the writer lane, for up to ``intervals.medium_s``:
        someone else's edit of a managed file is then seen (and restored) within a medium
        interval rather than a fast one."""
        mono = time.monotonic()
        stale = stale_probe_names(snap, stale_limits, mono)
        status = "maintenance" if maintenance else "critical" if stale else ev.status
        new_baseline = None
        if (ev.new_baseline is not None and self.baseline is None and self.baseline_read_from == config.paths.baseline
                and all(p.ok for p in snap.probes) and not maintenance):
            new_baseline = ev.new_baseline
        given = (ev, config, *(getattr(snap, f) for f in _WRITTEN_FROM))
        quiet = self._quiet
        if (new_baseline is None and quiet is not None and mono - quiet[3] < config.intervals.medium_s
                and quiet[1] == (status, maintenance) and same_objects(quiet[0], given)):
            return quiet[2]
        self._quiet = None
        fut, started = self._write_lane.submit(self.writer.write, ev, config, snap, status, new_baseline, maintenance)
        if not started:
            self.log.error("files.write_skipped", reason="the previous write is still running (hung filesystem?)")
            return self._not_finished(ev, config, "not written: the previous write has not finished (hung filesystem?)")
        try:
            statuses, err = await await_future(fut, config.timeouts.probe_s)
        except TimeoutError:
            self.log.error("files.write_timeout", timeout_s=config.timeouts.probe_s)
            return self._not_finished(ev, config, f"write did not finish within {config.timeouts.probe_s:g} s (hung filesystem?)")
        except Exception as e:
            self.log.error("files.write_crashed", error=f"{type(e).__name__}: {e}")
            return self._not_finished(ev, config, f"write crashed: {type(e).__name__}: {e}")
        if new_baseline is not None:
            if err is None:
                self.baseline = new_baseline
                self.log.info("baseline.saved", path=str(config.paths.baseline))
            else:
                self.log.error("baseline.save_failed", path=str(config.paths.baseline), error=err)
        elif not self._unfinished and all(s.ok and not s.changed and not s.drift for s in statuses):
            self._quiet = (given, (status, maintenance), statuses, time.monotonic())
        return self._counted(statuses)

    def _counted(self, statuses: tuple[FileStatus, ...]) -> tuple[FileStatus, ...]:
        """The writer's statuses with the publishes whose write never finished added to each
        file's failures (the writer cannot count what it never returned from)."""
        if not self._unfinished:
            return statuses
        return tuple(dataclasses.replace(s, failures_total=s.failures_total + self._unfinished.get(s.name, 0)) for s in statuses)

    def _not_finished(self, ev: Evaluation, config: AgentConfig, why: str) -> tuple[FileStatus, ...]:
        """One failed FileStatus per file this publish was to write (the NCCL files, the NFD
        file, a first baseline), whether or not an earlier write ever finished."""
        wanted = [(name, str(path)) for name, path, _ in planned_files(ev, config)]
        if config.paths.nfd_features is not None:
            wanted.append(("nfd-features", str(config.paths.nfd_features)))
        if self.baseline is None and ev.new_baseline is not None:
            wanted.append(("baseline", str(config.paths.baseline)))
        known = {s.name: s for s in self.writer.statuses()}
        out = []
        for name, path in wanted:
            self._unfinished[name] = self._unfinished.get(name, 0) + 1
            prev = known.get(name)
            base = prev if prev is not None and prev.path == path else FileStatus(name=name, path=path, ok=False)
            failures = (prev.failures_total if prev is not None else 0) + self._unfinished[name]
            out.append(dataclasses.replace(base, ok=False, changed=False, error=why, failures_total=failures))
        return tuple(out)

    def _topology_hash(self, ev: Evaluation) -> str:
        """The rendered topology XML's hash, computed once per rendered text (a steady node
        reuses its render, so most publishes cost an identity check)."""
        xml = ev.render.topo_xml if ev.render is not None else None
        if xml is None:
            return ""
        last = self._topo_hash
        if last is None or last[0] is not xml:
            last = self._topo_hash = (xml, topology_hash(xml))
        return last[1]

    async def build(self, snap: NodeSnapshot, ev: Evaluation, files: tuple[FileStatus, ...], ctx: Context) -> State:
        """The State of one collection, findings complete (files, benchmark, staleness as of
        now) and its metrics rendered once, off the event loop."""
        now, mono = time.time(), time.monotonic()
        state = State(
            seq=ctx.seq, generated_at=now, generated_mono=mono, started_at=ctx.started_at, config=ctx.config, ready=True, snapshot=snap,
            findings=ev.findings, stale_limits=ctx.stale_limits, compute_hcas=ev.roles.compute, hca_roles_source=ev.roles.source,
            expected=ev.expected, files=files, nccl_env=ev.nccl_env, nccl_problems=ev.nccl_problems, tiers=ctx.tiers,
            topology_hash=self._topology_hash(ev),
            reload=ctx.reload, udev_events=ctx.udev_events, udev_active=ctx.udev_active, process=ctx.process,
            link_events=ctx.link_events, link_active=ctx.link_active, maintenance=ctx.maintenance,
            maintenance_ended_at=ctx.maintenance_ended_at, bench=ctx.bench, render_metrics=REGISTRY.render,
        )  # fmt: skip
        topo_problems = ev.render.topo_problems if ev.render is not None else ()
        extra = [*output_findings(files, ev.nccl_problems, topo_problems), *ctx.bench_findings]
        if extra or self.extra_tracks:  # their lifecycle, as the checks' findings have theirs (outputs.evaluate)
            life = advance(self.extra_tracks, extra, now=snap.taken_at, settings=ctx.config.lifecycle,
                           booted_at=snap.system.booted_at)
            self.extra_tracks, extra = life.tracks, list(life.findings)
        base = tuple(sort_findings([*ev.findings, *extra])) if extra else ev.findings
        findings, _ = with_staleness(base, snap, ctx.stale_limits, mono)
        if findings is not ev.findings:
            state = dataclasses.replace(state, findings=findings)
        return state  # its exposition is rendered when first scraped (State.metrics_body)
