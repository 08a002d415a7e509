"""The enforcement journal: ``<state_dir>/enforce-journal.json``, every change agentd made
to the node (or tried to), with the value it replaced, so that any of them can be undone.

One JSON document, rewritten whole and atomically (agentd.base.atomic: temp file, fsync,
rename, directory fsync) at each step, under the enforcement lock
(agentd.outputs.enforce_lock). A change is journaled *before* it is made: an entry
``pending`` with its prior value (``before``) reaches the disk first, so a crash between
the two leaves the prior value behind, never loses it; the step after the change
finishes the entry with what was read back.

An entry's ``state``:

- ``pending``: written before the change; a run that finds one (the writer was killed)
  finishes it from what the node reads now (agentd.outputs.enforce.recover);
- ``applied``: the change was made and read back as desired: its ``before`` is what
  `agentd enforce rollback` restores;
- ``partial``: the change did not read back as desired and restoring ``before`` failed too:
  the setting is neither; ``before`` is kept for rollback;
- ``failed``: the interface refused it, or it did not read back as desired and ``before``
  was restored: the node is as it was;
- ``refused``: agentd did not try (no carrier, not settable, DSCP 0): nothing changed;
- ``interrupted``: a pending entry whose setting still read ``before``: the change never
  happened;
- ``restored``: an applied (or partial) entry whose ``before`` a rollback put back;
- ``rollback``: the record of a rollback itself (its ``before`` is what it replaced).

``applied``, ``partial`` and ``pending`` entries are *outstanding*: they hold a prior value
the node may still need. The journal keeps at most ``MAX_ENTRIES`` entries, dropping the
oldest that are not outstanding, then (a setting fixed again at every boot) the applied
and partial entries of a setting that has an older outstanding one: rollback restores
the oldest one's prior value.

``attempts``: the changes tried per setting within this boot (``boot_id``), and the
settings given up on (``stuck``) until the next boot or `agentd enforce status --reset`.
``healthy_at``: when the daemon first saw the node healthy this boot. From then on its
boot-grace window is over (agentd.judging.enforce.apply_window), also for a daemon
restarted later in the same boot.
A file that does not parse is set aside (renamed ``.bad-<time>``) and a new one started:
its prior values are then lost, which the set-aside file still holds for a person.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

from agentd.base.atomic import WriteResult, atomic_write, read_regular
from agentd.base.jsontypes import JsonObject, JsonValue

FILE_NAME = "enforce-journal.json"
FORMAT = "agentd-enforce-journal"
VERSION = 1
MAX_ENTRIES = 256
MAX_BYTES = 4 << 20
STATES = ("pending", "applied", "partial", "failed", "refused", "interrupted", "restored", "rollback")
OUTSTANDING = ("pending", "applied", "partial")


class JournalError(Exception):
    """The journal cannot be used (nor set aside): nothing may be changed."""


def journal_path(state_dir: Path | str) -> Path:
    return Path(state_dir) / FILE_NAME


@dataclass(frozen=True)
class Entry:
    id: int
    at: float
    by: str  # "cli:<user>" | "daemon"
    why: str  # the finding: "config.drift pfc@ens1np0 (roce.pfc.disabled)"
    knob: str
    target: str
    before: JsonValue  # the prior value (agentd.judging.enforce.to_json)
    desired: JsonValue
    command: str
    state: str = "pending"
    setting: JsonObject = field(default_factory=dict)  # netdev, hca, port, param, entries, apptrust
    after: JsonValue = None  # what was read back
    verify: str = ""  # how the read-back compared
    detail: str = ""  # what the interface said
    finished_at: float | None = None

    @property
    def key(self) -> str:
        return f"{self.knob}@{self.target}"

    @property
    def outstanding(self) -> bool:
        return self.state in OUTSTANDING

    def to_json(self) -> JsonObject:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


@dataclass(frozen=True)
class Journal:
    entries: tuple[Entry, ...] = ()
    boot_id: str | None = None
    attempts: dict[str, int] = field(default_factory=dict)  # setting key -> tries this boot
    stuck: dict[str, str] = field(default_factory=dict)  # setting key -> the last outcome
    healthy_at: float | None = None  # the node first seen healthy this boot (unix s)
    note: str = ""  # why it started empty (set aside), for the caller to say

    def next_id(self) -> int:
        return max((e.id for e in self.entries), default=0) + 1

    def outstanding(self, knobs: Iterable[str] | None = None) -> list[Entry]:
        wanted = None if knobs is None else set(knobs)
        return [e for e in self.entries if e.outstanding and (wanted is None or e.knob in wanted)]

    def with_entry(self, e: Entry) -> Journal:
        """The journal with ``e`` added, or replacing the entry of its id."""
        kept = [x for x in self.entries if x.id != e.id]
        entries = sorted([*kept, e], key=lambda x: x.id)
        over = len(entries) - MAX_ENTRIES
        if over > 0:
            drop = {x.id for x in entries if not x.outstanding}
            drop = set(sorted(drop)[:over])
            entries = [x for x in entries if x.id not in drop]
        over = len(entries) - MAX_ENTRIES
        if over > 0:
            # Still over: outstanding entries of a setting that has an older outstanding one
            # (a setting fixed again, every boot). Rollback restores the oldest one's prior
            # value; the later applied/partial ones hold nothing it needs. Pending: kept.
            oldest: dict[str, int] = {}
            for x in entries:
                if x.outstanding:
                    oldest.setdefault(x.key, x.id)
            later = sorted(x.id for x in entries if x.state in ("applied", "partial") and oldest.get(x.key) != x.id)
            drop = set(later[:over])
            entries = [x for x in entries if x.id not in drop]
        return replace(self, entries=tuple(entries))

    def for_boot(self, boot_id: str | None) -> Journal:
        """A new boot forgets the attempts and what was stuck (the node came up anew). An
        entry left pending by a run of an earlier boot is closed (``interrupted``): the
        reboot reset the runtime setting, and what the node reads now is this boot's, not
        the outcome of that change (finishing it would roll this boot's value back to
        another boot's)."""
        if boot_id == self.boot_id:
            return self
        entries = self.entries
        if boot_id is not None and self.boot_id is not None:
            now = time.time()
            entries = tuple(replace(e, state="interrupted", finished_at=now,
                                    verify="the node rebooted before this run finished it: its runtime settings started anew")
                            if e.state == "pending" else e for e in entries)
        return replace(self, boot_id=boot_id, attempts={}, stuck={}, healthy_at=None, entries=entries)

    def tried(self, key: str) -> Journal:
        return replace(self, attempts={**self.attempts, key: self.attempts.get(key, 0) + 1})

    def reset(self) -> Journal:
        return replace(self, attempts={}, stuck={})


def _entry(d: JsonValue) -> Entry:
    if not isinstance(d, dict):
        raise ValueError("an entry is an object")
    fields = Entry.__dataclass_fields__
    kw = {k: v for k, v in d.items() if k in fields}
    e = Entry(**kw)
    if not isinstance(e.id, int) or e.state not in STATES or not isinstance(e.knob, str) or not isinstance(e.target, str):
        raise ValueError(f"bad entry {d!r:.120}")
    return e


def parse_journal(data: bytes) -> Journal:
    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"not an {FORMAT} document")
    if not isinstance(doc.get("version"), int) or doc["version"] > VERSION:
        raise ValueError(f"version {doc.get('version')!r} is not one this agentd reads ({VERSION})")
    attempts = doc.get("attempts") or {}
    stuck = doc.get("stuck") or {}
    if not isinstance(attempts, dict) or not isinstance(stuck, dict):
        raise ValueError("attempts and stuck are objects")
    healthy_at = doc.get("healthy_at")
    if healthy_at is not None and (isinstance(healthy_at, bool) or not isinstance(healthy_at, (int, float)) or not math.isfinite(healthy_at)):
        raise ValueError("healthy_at is a time")
    return Journal(
        entries=tuple(_entry(d) for d in doc.get("entries") or ()),
        boot_id=doc.get("boot_id") if isinstance(doc.get("boot_id"), str) else None,
        attempts={str(k): int(v) for k, v in attempts.items()},
        stuck={str(k): str(v) for k, v in stuck.items()},
        healthy_at=float(healthy_at) if healthy_at is not None else None,
    )


def render_journal(j: Journal) -> str:
    doc = {"format": FORMAT, "version": VERSION, "boot_id": j.boot_id, "attempts": j.attempts, "stuck": j.stuck,
           "healthy_at": j.healthy_at, "entries": [e.to_json() for e in j.entries]}
    return json.dumps(doc, indent=1, allow_nan=False) + "\n"


def load_journal(path: Path | str, *, set_aside: bool = True) -> Journal:
    """The journal at ``path``; an empty one when there is none. One that cannot be read
    as a journal is renamed aside (``note`` says where) and an empty one returned;
    JournalError when that fails, OSError when it cannot even be read. A reader that
    does not hold the enforcement lock (``set_aside=False``: `enforce status`, the daemon's
    look at what is stuck) gets a JournalError instead and changes nothing."""
    path = Path(path)
    try:
        data = read_regular(path, MAX_BYTES)
    except FileNotFoundError:
        return Journal()
    try:
        return parse_journal(data)
    except (ValueError, TypeError, KeyError, RecursionError) as e:
        if not set_aside:
            raise JournalError(f"{path} is not a journal ({e}); the next `agentd enforce apply` or rollback sets it aside") from None
        aside = path.with_name(f"{path.name}.bad-{int(time.time())}")
        try:
            os.replace(path, aside)
        except OSError as moved:
            raise JournalError(f"{path} is not a journal ({e}) and cannot be set aside ({moved.strerror or moved})") from None
        return Journal(note=f"{path} was not a journal ({e}): set aside as {aside}; its prior values are only there now")


def save_journal(path: Path | str, j: Journal) -> WriteResult:
    return atomic_write(Path(path), render_journal(j), mode=0o644, only_if_changed=False)
