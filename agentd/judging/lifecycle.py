"""When a finding counts, and for how long: the lifecycle between the checks' verdicts and
the node's health. Pure: every call takes the previous ``Tracks`` and returns new ones.

A check says what is wrong *now*. Health that SREs can act on also needs *since when* and
*for how long*; ``advance`` adds that, per finding (keyed by code and subject), from the
policy in ``[lifecycle]``:

- ``since``: when the condition was first seen in this episode (an episode ends when the
  finding clears).
- ``raise_after_s`` / ``raise_after_collections``: a new condition is *pending*
  (``withheld="pending"``, ``raises_at``) until it has held that long and that many
  collections in a row; one that disappears while pending leaves no trace.
- ``clear_after_s``: a condition that counted and is no longer seen keeps counting
  (sticky, ``clears_at``) until it has been gone that long; seen again before, the same
  episode goes on (same ``since``).
- ``observe`` (a code or check name glob, or a policy's ``mode``): shown, never counted
  (``withheld="observe"``): how a fleet rolls a new check out.
- boot grace: within ``boot_grace_s`` of the node's boot, codes that are normal while a
  node comes up are withheld as ``boot_grace``.

Withheld findings never count toward the node's health (``agentd.model.overall_status``,
``counted``): not for /health, the Slurm wrapper, NFD labels or the NCCL files. ok-severity
facts pass through untouched. With the default policy (nothing observed, no windows, no
grace) the findings are the checks' own, plus ``since``.

``Tracks`` round-trip through JSON (``to_json``/``from_json``) so a restart keeps every
episode: its ``since``, its sticky window, its pending count.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from agentd.base.jsontypes import JsonObject, JsonValue
from agentd.config import FindingPolicy, LifecycleSettings
from agentd.judging.findings import restored
from agentd.model import Finding, Withheld, sort_findings

Key = tuple[str, str]  # (code, subject)
_DEFAULT = FindingPolicy()
# A condition seen again within this long of its last sighting (agentd restarted, or a
# collection failed meanwhile) goes on in the same episode; after longer it starts anew.
RESUME_GAP_S = 3600.0
MAX_TRACKS = 4096  # bound on tracked conditions (findings are per device: far fewer on any node)


@dataclass(frozen=True, slots=True)
class Track:
    """One condition's episode."""

    since: float  # first seen
    last_seen: float
    seen: int  # collections in a row that saw it
    raised: bool  # it has counted (raise_after met) in this episode
    finding: Finding  # as last seen (what a sticky one shows)


@dataclass(frozen=True)
class Tracks:
    by_key: Mapping[Key, Track] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.by_key)

    def to_json(self) -> list[JsonObject]:
        return [
            {"since": t.since, "last_seen": t.last_seen, "seen": t.seen, "raised": t.raised,
             "finding": {**t.finding.model_dump(mode="json", exclude_none=True, exclude={"since", "raises_at", "clears_at", "withheld"}),
                         "about": t.finding.about.model_dump(mode="json", exclude_none=True)}}
            for t in self.by_key.values()
        ]  # fmt: skip

    @classmethod
    def from_json(cls, items: JsonValue) -> Tracks:
        """Tracks from ``to_json``'s list; malformed items are skipped, never raised on."""
        out: dict[Key, Track] = {}
        for item in items if isinstance(items, (list, tuple)) else ():
            try:
                f = restored(item["finding"])
                since, last = float(item["since"]), float(item["last_seen"])
                seen, raised = int(item["seen"]), item["raised"]
                if not (math.isfinite(since) and math.isfinite(last)) or seen < 1 or not isinstance(raised, bool) or f.severity == "ok":
                    continue
            except Exception:
                continue
            out[(f.code, f.subject)] = Track(since=since, last_seen=last, seen=seen, raised=raised, finding=f)
            if len(out) >= MAX_TRACKS:
                break
        return cls(out)


@dataclass(frozen=True)
class Outcome:
    findings: tuple[Finding, ...]  # sorted (agentd.model.sort_findings)
    tracks: Tracks
    # When the outcome changes with no new input (a pending finding raises, a sticky one
    # clears, boot grace ends): a memo of it is good until then. None: never.
    deadline: float | None


class Policy:
    """``[lifecycle]`` compiled: the policy of a finding, observe mode, boot grace."""

    def __init__(self, settings: LifecycleSettings):
        self.settings = settings
        exact: dict[str, FindingPolicy] = {}
        globs: list[tuple[str, FindingPolicy]] = []
        for pattern, pol in settings.findings.items():
            if any(c in pattern for c in "*?["):
                globs.append((pattern, pol))
            else:
                exact[pattern] = pol
        self._exact = exact
        # the longest glob is the most specific; ties: file order
        self._globs = sorted(globs, key=lambda g: -len(g[0]))
        self._observe = tuple(settings.observe)
        self._grace = tuple(settings.boot_grace_codes)
        self._memo: dict[tuple[str, str | None], tuple[FindingPolicy, bool]] = {}

    @property
    def trivial(self) -> bool:
        """Nothing to withhold or hold: every finding counts as the checks say."""
        return not (self._exact or self._globs or self._observe or self.settings.boot_grace_s > 0)

    def of(self, f: Finding) -> tuple[FindingPolicy, bool]:
        """(its policy, whether it is observed)."""
        key = (f.code, f.check)
        hit = self._memo.get(key)
        if hit is None:
            names = [f.code] + ([f.check] if f.check else [])
            pol = next((self._exact[n] for n in names if n in self._exact), None)
            if pol is None:
                pol = next((p for pattern, p in self._globs if any(fnmatch.fnmatchcase(n, pattern) for n in names)), _DEFAULT)
            observed = pol.mode == "observe" or any(fnmatch.fnmatchcase(n, pattern) for pattern in self._observe for n in names)
            if len(self._memo) > 4096:
                self._memo.clear()
            hit = self._memo[key] = (pol, observed)
        return hit

    def grace_ends(self, booted_at: float | None) -> float | None:
        if booted_at is None or self.settings.boot_grace_s <= 0:
            return None
        return booted_at + self.settings.boot_grace_s

    def in_grace(self, f: Finding) -> bool:
        return any(fnmatch.fnmatchcase(f.code, pattern) for pattern in self._grace)


_POLICIES: dict[int, tuple[LifecycleSettings, Policy]] = {}


def policy_for(settings: LifecycleSettings) -> Policy:
    """The compiled policy of a settings object (cached while the object lives: a config
    is immutable and replaced whole on reload)."""
    hit = _POLICIES.get(id(settings))
    if hit is not None and hit[0] is settings:
        return hit[1]
    if len(_POLICIES) > 16:
        _POLICIES.clear()
    pol = Policy(settings)
    _POLICIES[id(settings)] = (settings, pol)
    return pol


def _withheld(observed: bool, graced: bool, pending: bool) -> Withheld | None:
    if observed:
        return "observe"
    if graced:
        return "boot_grace"
    if pending:
        return "pending"
    return None


def advance(tracks: Tracks, findings: Iterable[Finding], *, now: float, settings: LifecycleSettings,
            booted_at: float | None = None, one_shot: bool = False) -> Outcome:
    """The findings of one collection (``now``: its time) with their lifecycle applied, and
    the tracks to pass to the next call. ``booted_at``: the node's boot time (None: unknown,
    no boot grace). ``one_shot`` (`agentd check` without the daemon's tracks): nothing has
    been seen before, so raise_after cannot be judged and every condition counts at once
    (a health check that cannot tell must not hide a fault); observe and boot grace apply."""
    pol = policy_for(settings)
    grace_end = pol.grace_ends(booted_at)
    in_grace = grace_end is not None and now < grace_end
    old = tracks.by_key
    new: dict[Key, Track] = {}
    out: list[Finding] = []
    deadlines: list[float] = []
    for f in findings:
        if f.severity == "ok":
            out.append(f)
            continue
        key = (f.code, f.subject)
        p, observed = pol.of(f)
        t = old.get(key)
        if t is not None and t.last_seen <= now <= t.last_seen + max(p.clear_after_s, RESUME_GAP_S):
            # the same episode: seen again in a row, or a sticky one seen again before it
            # cleared (or across a restart of agentd within RESUME_GAP_S)
            since, seen = t.since, t.seen + 1
            raised_before = t.raised
        else:
            since, seen, raised_before = now, 1, False
        raises_at = since + p.raise_after_s
        raised = one_shot or raised_before or (seen >= p.raise_after_collections and now >= raises_at)
        if not raised:
            deadlines.append(raises_at if seen + 1 >= p.raise_after_collections else now)
        graced = in_grace and pol.in_grace(f)
        if graced and grace_end is not None:
            deadlines.append(grace_end)
        if len(new) < MAX_TRACKS:
            new[key] = Track(since=since, last_seen=now, seen=seen, raised=raised, finding=f)
        out.append(f.model_copy(update={
            "since": since,
            "raises_at": None if raised else raises_at,
            "withheld": _withheld(observed, graced, not raised),
        }))  # fmt: skip
    for key, t in old.items():
        if key in new or not t.raised:
            continue  # seen again, or a pending one that went away: no trace
        p, observed = pol.of(t.finding)
        clears_at = t.last_seen + p.clear_after_s
        if now >= clears_at:
            continue  # cleared
        deadlines.append(clears_at)
        graced = in_grace and pol.in_grace(t.finding)
        if len(new) < MAX_TRACKS:
            new[key] = t
        out.append(t.finding.model_copy(update={
            "since": t.since, "clears_at": clears_at, "withheld": _withheld(observed, graced, False),
        }))  # fmt: skip
    return Outcome(findings=tuple(sort_findings(out)), tracks=Tracks(new), deadline=min(deadlines) if deadlines else None)
