"""What one snapshot means: judge it (as `agentd check` does), apply the findings'
lifecycle (agentd.judging.lifecycle: since, pending, sticky, observe, boot grace), derive
the expected values and render the NCCL files from the findings that count. ``evaluate``
is pure and runs in a worker thread on immutable inputs; ``Evaluator`` memoises it across
cycles that changed nothing and carries the lifecycle's tracks from one to the next."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol, Sequence

from agentd.base.memo import same_objects
from agentd.config import AgentConfig
from agentd.judging.baseline import Baseline
from agentd.judging.expected import Expected, expected_values
from agentd.judging.judge import judge
from agentd.judging.lifecycle import Tracks, advance
from agentd.judging.roles import HcaRoles
from agentd.model import CONTENT_FIELDS, Finding, HistoryEntry, NodeSnapshot, NodeStatus, counted, overall_status
from agentd.nccl import NcclRender, render_all


@dataclass(frozen=True)
class Evaluation:
    findings: tuple[Finding, ...]
    status: NodeStatus
    roles: HcaRoles
    expected: Expected
    render: NcclRender | None = None  # when nccl.enabled
    nccl_env: tuple[tuple[str, str], ...] = ()
    nccl_problems: tuple[str, ...] = ()  # every problem, for findings and metrics
    # Which problems keep which file unwritten (NcclRender.file_problems); None: the
    # renderer gave nothing to go by, so ``nccl_problems`` hold every file back.
    nccl_file_problems: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    new_baseline: Baseline | None = None
    tracks: Tracks = field(default_factory=Tracks)  # the lifecycle's, for the next evaluation
    deadline: float | None = None  # unix time the lifecycle changes on its own (agentd.judging.lifecycle.Outcome)

    def blocked(self, file: str) -> tuple[str, ...]:
        """Why the NCCL file labelled ``file`` must not be written now (empty: write it)."""
        if self.nccl_file_problems is None:
            return self.nccl_problems
        return dict(self.nccl_file_problems).get(file, ())


RenderFn = Callable[[NodeSnapshot, Sequence[Finding], AgentConfig, HcaRoles], NcclRender]


class EvaluateFn(Protocol):
    """``evaluate``, or what stands in for it (the tests' fakes): the Evaluator passes its
    memoised renderer and the lifecycle's tracks, which a fake may ignore."""

    def __call__(self, snap: NodeSnapshot, history: Sequence[HistoryEntry], config: AgentConfig, baseline: Baseline | None, *,
                 render: RenderFn = ..., tracks: Tracks | None = ...) -> Evaluation: ...


def evaluate(snap: NodeSnapshot, history: Sequence[HistoryEntry], config: AgentConfig, baseline: Baseline | None, *,
             render: RenderFn = render_all, tracks: Tracks | None = None) -> Evaluation:
    """Pure: judge the snapshot (agentd.judging.judge, as `agentd check` does), apply the
    lifecycle at the snapshot's time (``tracks``: the previous evaluation's) and render the
    NCCL files from the findings that count."""
    j = judge(snap, history, config, baseline)
    life = advance(tracks if tracks is not None else Tracks(), j.findings, now=snap.taken_at, settings=config.lifecycle,
                   booted_at=snap.system.booted_at)
    ev = Evaluation(
        findings=life.findings,
        status=overall_status(life.findings),
        roles=j.roles,
        expected=expected_values(snap, j.roles, config),
        new_baseline=j.new_baseline,  # judged on every finding: a node in boot grace is not a healthy inventory
        tracks=life.tracks,
        deadline=life.deadline,
    )
    if not config.nccl.enabled:
        return ev
    try:
        r = render(snap, counted(life.findings), config, j.roles)
    except Exception as e:
        return replace(ev, nccl_problems=(f"renderer failed: {type(e).__name__}: {e}",))
    return replace(ev, render=r, nccl_env=r.env.items(), nccl_problems=tuple(r.problems), nccl_file_problems=r.file_problems)


# What an evaluation depends on besides the config and the baseline: every content field of
# the snapshot (agentd.model.SNAPSHOT_FIELDS), compared by identity, and the probes' flags.
_CONTENT = CONTENT_FIELDS
# What the NCCL render reads: the same but the kernel log (events are judged, not rendered).
_RENDERED = tuple(f for f in CONTENT_FIELDS if f != "kernel")


def _probe_flags(snap: NodeSnapshot) -> tuple[tuple[str, bool, bool, bool], ...]:
    return tuple((p.name, p.ok, p.timed_out, p.stale) for p in snap.probes)


@dataclass
class Evaluator:
    """``evaluate`` with a memo: when a snapshot's parts are the very objects of the last
    evaluated one (``history.share`` makes unchanged parts identical), the probes are as
    healthy as before, config and baseline are the same objects, and the last evaluation is
    younger than ``refresh_s``, the last Evaluation is returned. Most fast cycles of a
    steady node change nothing; time-dependent findings (rates over a window) are still
    refreshed every ``refresh_s`` (the medium interval)."""

    fn: EvaluateFn = evaluate
    hits: int = 0
    # the lifecycle's tracks after the latest evaluation (agentd.judging.lifecycle); set
    # from the persisted history file at start, so a restart keeps every episode
    tracks: Tracks = field(default_factory=Tracks)
    _last: tuple[NodeSnapshot, Evaluation, AgentConfig, Baseline | None, float] | None = None  # snap, its evaluation, config, baseline, when
    _last_render: tuple[tuple[object, ...], tuple[Finding, ...], HcaRoles, NcclRender] | None = None

    def reuse(self, snap: NodeSnapshot, config: AgentConfig, baseline: Baseline | None, *, refresh_s: float) -> Evaluation | None:
        """The last Evaluation when a call with these inputs would return it, else None
        (O(1): no check runs; the caller can judge on the event loop)."""
        ev = self._reusable(snap, config, baseline, refresh_s, time.monotonic())
        if ev is not None:
            self.hits += 1
        return ev

    def _reusable(self, snap: NodeSnapshot, config: AgentConfig, baseline: Baseline | None, refresh_s: float, now: float) -> Evaluation | None:
        last = self._last
        if last is None:
            return None
        psnap, ev, pcfg, pbase, at = last
        if (
            pcfg is config
            and pbase is baseline
            and now - at < refresh_s
            and (ev.deadline is None or snap.taken_at < ev.deadline)
            and all(getattr(snap, f) is getattr(psnap, f) for f in _CONTENT)
            and _probe_flags(snap) == _probe_flags(psnap)
        ):
            return ev
        return None

    def __call__(self, snap: NodeSnapshot, history: Sequence[HistoryEntry], config: AgentConfig, baseline: Baseline | None, *, refresh_s: float) -> Evaluation:
        now = time.monotonic()
        reused = self._reusable(snap, config, baseline, refresh_s, now)
        if reused is not None:
            self.hits += 1
            return reused
        ev = self.fn(snap, history, config, baseline, render=self._render, tracks=self.tracks)
        self.tracks = ev.tracks
        self._last = (snap, ev, config, baseline, now)
        return ev

    def _render(self, snap: NodeSnapshot, findings: Sequence[Finding], config: AgentConfig, roles: HcaRoles) -> NcclRender:
        """render_all, reused while the snapshot content and config are the same objects and
        the findings and roles are equal (a refresh of a steady node's time-dependent
        findings changes nothing the NCCL files say)."""
        key = (config, *(getattr(snap, f) for f in _RENDERED))
        last = self._last_render
        if last is not None and same_objects(last[0], key) and last[1] == tuple(findings) and last[2] == roles:
            return last[3]
        r = render_all(snap, findings, config, roles)
        self._last_render = (key, tuple(findings), roles, r)
        return r
