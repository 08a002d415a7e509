"""The daemon's in-memory history of snapshots (what the checks use for rates and flaps),
kept small.

Two things keep it small:

- structural sharing (agentd.collection.share): a component equal to the previous entry's
  is the previous object, so an unchanged node costs almost nothing per entry;
- compact entries (agentd.collection.compact): every entry but the newest keeps only what
  the checks read of it (agentd.model's ``HistoryEntry``), and once older than every
  counter window, less (aged);
- thinning: within the rate window entries are kept at least ``spacing_s`` apart (the
  medium interval: counters do not change faster than they are read), older entries at
  least ``long_spacing_s`` apart, and an entry where a link state changed (IB port state,
  netdev operstate/carrier, NVLink state) is always kept, so flap detection sees every
  transition. Monotonic counters lose nothing by thinning (increments add up).

``thresholds.history_size`` stays the hard cap on entries. What an entry costs:
bench/bench_memory.py (``history_heap_*``) and docs/performance.md. The state file's
entries: agentd.collection.history_json.
"""

from __future__ import annotations

from typing import Hashable, Iterable, Sequence

from agentd.base.jsontypes import JsonObject, JsonValue
from agentd.base.memo import IdentityMemo
from agentd.collection.compact import AgedEntry, CompactEntry, Compactor, is_aged, is_compact
from agentd.collection.history_json import EXPORT_MAX_ENTRIES, EXPORT_RATE_POINTS, export_entries, seed_entries
from agentd.collection.share import link_states, share
from agentd.config import Thresholds
from agentd.model import HistoryEntry, NodeSnapshot

__all__ = ["EXPORT_MAX_ENTRIES", "RATE_WINDOW_S", "Entry", "History", "is_aged", "is_compact", "link_states", "share", "spans"]

RATE_WINDOW_S: float = Thresholds.model_fields["rate_window_s"].default
# A history entry: the newest is a whole snapshot, the others compact (aged or not).
Entry = NodeSnapshot | CompactEntry


class History:
    """``recent_s``: the rate window (entries within it are kept ``spacing_s`` apart, older
    ones ``long_spacing_s`` apart unless a link changed state); ``counters_s``: the
    longest window any check reads counters over (at least ``recent_s``). A compact entry
    older than ``counters_s`` is aged (``Compactor.aged``): no window that is judged later
    reaches back to it. When no reading is recent, a rate falls back to the newest entry
    (agentd.judging.checks.common.in_window), which is kept whole."""

    def __init__(self, maxlen: int, spacing_s: float, long_spacing_s: float = 300.0, recent_s: float = RATE_WINDOW_S,
                 counters_s: float | None = None):
        self.maxlen = maxlen
        self.spacing_s = spacing_s
        self.long_spacing_s = long_spacing_s
        self.recent_s = recent_s
        self.counters_s = max(recent_s, counters_s or 0.0)
        self._items: list[tuple[Entry, Hashable]] = []
        self._appends = 0
        self._compactor = Compactor()
        # a steady node's snapshots are made of the previous one's parts (``share``, and the
        # collector keeps unchanged probe outputs): its link states are the previous ones
        self._link_states: IdentityMemo[Hashable] = IdentityMemo()

    def link_states(self, snap: NodeSnapshot) -> Hashable:
        """``link_states(snap)``, the previous signature object while its parts are the very
        objects of the previous call's."""
        return self._link_states.get((snap.hcas, snap.netdevs, snap.nvml.gpus, snap.pci), lambda: link_states(snap))

    def __len__(self) -> int:
        return len(self._items)

    def snapshots(self) -> tuple[Entry, ...]:
        """The entries, oldest first: compact ones, then the newest, whole."""
        return tuple(s for s, _ in self._items)

    def configure(self, maxlen: int, spacing_s: float, recent_s: float | None = None, counters_s: float | None = None) -> None:
        """New settings (a reload). Entries already aged stay so: a window made longer
        reaches back over them with states and ``link_downed`` only."""
        self.maxlen, self.spacing_s = maxlen, spacing_s
        if recent_s is not None:
            self.recent_s = recent_s
            self.counters_s = max(recent_s, counters_s or 0.0)
        del self._items[: max(0, len(self._items) - maxlen)]

    def append(self, snap: NodeSnapshot) -> NodeSnapshot:
        """Add the newest snapshot (shared with the previous entry); returns what is stored.
        The newest entry is kept whole; the one it follows is compacted."""
        items = self._items
        snap = share(items[-1][0] if items else None, snap)
        sig = self.link_states(snap)
        if items and items[-1][1] is not sig and items[-1][1] == sig:
            sig = items[-1][1]  # share the signature too (a tuple per port, netdev and link)
        if (
            len(items) >= 2
            and isinstance(items[-1][0], NodeSnapshot)
            and items[-1][1] == sig
            and items[-1][0].taken_at - items[-2][0].taken_at < self.spacing_s
        ):
            items[-1] = (snap, sig)  # the tail moves forward until it is spacing_s from its predecessor
        else:
            last, last_sig = items[-1] if items else (None, None)
            if isinstance(last, NodeSnapshot):
                before = items[-2][0] if len(items) >= 2 else None
                items[-1] = (self._compactor.snapshot(last, before if isinstance(before, CompactEntry) else None), last_sig)
            items.append((snap, sig))
        self._appends += 1
        if self._appends % 32 == 0:
            self._thin(snap.taken_at)
        del items[: max(0, len(items) - self.maxlen)]
        return snap

    def _thin(self, now: float) -> None:
        """Beyond the rate window keep transitions and one entry per long_spacing_s; age
        the compact entries older than every counter window."""
        cutoff = now - self.recent_s
        kept: list[tuple[Entry, Hashable]] = []
        for entry in self._items:
            s, sig = entry
            if kept and s.taken_at < cutoff:
                last_s, last_sig = kept[-1]
                if sig == last_sig and s.taken_at - last_s.taken_at < self.long_spacing_s:
                    continue
            kept.append(entry)
        old = now - self.counters_s
        for i, (s, sig) in enumerate(kept):  # in taken_at order: the aged ones lead
            if s.taken_at >= old:
                break
            if isinstance(s, AgedEntry) or not isinstance(s, CompactEntry):  # the newest entry stays whole
                continue
            before = kept[i - 1][0] if i else None
            kept[i] = (self._compactor.aged(s, before if isinstance(before, AgedEntry) else None), sig)
        self._items[:] = kept

    # -- persistence (agentd.outputs.history_store writes and reads the file) ----------
    def newest_mark(self) -> Hashable:
        """Changes when a link of the newest entry changed state or a port's
        ``link_downed`` rose: a flap the state file must hold at once."""
        if not self._items:
            return None
        s, sig = self._items[-1]
        return sig, tuple((h.name, p.port, p.counters.get("link_downed")) for h in s.hcas for p in h.ports)

    def export(self, now: float, *, flap_window_s: float, rate_window_s: float,
               max_entries: int = EXPORT_MAX_ENTRIES, rate_points: int = EXPORT_RATE_POINTS) -> list[JsonObject]:
        """What a restarted agentd needs to go on judging rates and flaps, as JSON-ready
        dicts, oldest first (``export_entries``). Safe in a worker thread: it works on a
        copy of the entry list (one atomic list copy), and stored entries never change."""
        return export_entries(list(self._items), now, flap_window_s=flap_window_s, rate_window_s=rate_window_s,
                              max_entries=max_entries, rate_points=rate_points)

    def seed(self, entries: Sequence[JsonValue]) -> int:
        """Put exported entries (oldest first) in front of the history; returns how many
        were taken. An entry that is malformed, or not older than the one after it, is
        skipped: never raises."""
        first = self._items[0][0].taken_at if self._items else None
        seeded = seed_entries(entries, before=first)
        self._items[:0] = seeded
        del self._items[: max(0, len(self._items) - self.maxlen)]
        return len(seeded)


def spans(history: Iterable[HistoryEntry]) -> list[float]:
    """Gaps between consecutive entries (for tests and debugging)."""
    ts = [s.taken_at for s in history]
    return [b - a for a, b in zip(ts, ts[1:])]
