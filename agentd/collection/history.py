"""The daemon's in-memory history of snapshots (what the checks use for rates and flaps),
kept small.

Every collection re-reads the node, so consecutive snapshots are mostly equal values in
new objects: about 80 KB per fast cycle and 370 KB per medium cycle on the simulated
8-GPU node, which at the default 720 entries would be ~100 MB. Two things keep it small:

- structural sharing (``share``): a component equal to the previous entry's (an HCA, a
  netdev, the PCI tree, the NVML answer...) is replaced by the previous object, so an
  unchanged node costs almost nothing per entry;
- thinning: within the rate window entries are kept at least ``spacing_s`` apart (the
  medium interval: counters do not change faster than they are read), older entries at
  least ``long_spacing_s`` apart, and an entry where a link state changed (IB port state,
  netdev operstate/carrier, NVLink state) is always kept, so flap detection sees every
  transition. Monotonic counters lose nothing by thinning (increments add up).

``thresholds.history_size`` stays the hard cap on entries.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Iterable, TypeVar

from agentd.model import Hca, NodeSnapshot

T = TypeVar("T")
RATE_WINDOW_S = 600.0  # default of thresholds.rate_window_s


def _share_items(prev: tuple[T, ...], new: tuple[T, ...], key: Callable[[T], Hashable], inner: Callable[[T, T], T] | None = None) -> tuple[T, ...]:
    if prev is new or prev == new:
        return prev
    old = {key(x): x for x in prev}
    out = []
    for x in new:
        o = old.get(key(x))
        if o is None:
            out.append(x)
        elif o == x:
            out.append(o)
        else:
            out.append(inner(o, x) if inner is not None else x)
    return tuple(out)


def _share_hca(old: Hca, new: Hca) -> Hca:
    ports = []
    for p in new.ports:
        o = next((q for q in old.ports if q.port == p.port), None)
        if o is None or o == p:
            ports.append(o or p)
            continue
        upd: dict[str, Any] = {}
        if o.counters == p.counters and o.counters is not p.counters:
            upd["counters"] = o.counters
        if o.hw_counters == p.hw_counters and o.hw_counters is not p.hw_counters:
            upd["hw_counters"] = o.hw_counters
        if o.gids == p.gids and o.gids is not p.gids:
            upd["gids"] = o.gids
        ports.append(p.model_copy(update=upd) if upd else p)
    return new.model_copy(update={"ports": tuple(ports)})


def share(prev: NodeSnapshot | None, new: NodeSnapshot) -> NodeSnapshot:
    """``new`` with every component equal to ``prev``'s replaced by ``prev``'s object."""
    if prev is None:
        return new
    upd: dict[str, Any] = {
        "pci": _share_items(prev.pci, new.pci, lambda d: d.bdf),
        "hcas": _share_items(prev.hcas, new.hcas, lambda h: h.name, _share_hca),
        "netdevs": _share_items(prev.netdevs, new.netdevs, lambda n: n.name),
        "gpus": _share_items(prev.gpus, new.gpus, lambda g: g.pci_bus_id),
        "read_errors": prev.read_errors if prev.read_errors == new.read_errors else new.read_errors,
    }
    for name in ("system", "gdr", "nvml"):
        a, b = getattr(prev, name), getattr(new, name)
        upd[name] = a if a == b else b
    return new.model_copy(update=upd)


def link_states(s: NodeSnapshot) -> Hashable:
    """Everything whose change must survive thinning (flap detection, seen-active)."""
    return (
        tuple((h.name, p.port, p.state, p.phys_state) for h in s.hcas for p in h.ports),
        tuple((n.name, n.operstate, n.carrier) for n in s.netdevs),
        tuple((g.pci_bus_id, link.link, link.state) for g in s.nvml.gpus for link in g.nvlinks),
    )


class History:
    def __init__(self, maxlen: int, spacing_s: float, long_spacing_s: float = 300.0, recent_s: float = RATE_WINDOW_S):
        self.maxlen = maxlen
        self.spacing_s = spacing_s
        self.long_spacing_s = long_spacing_s
        self.recent_s = recent_s
        self._items: list[tuple[NodeSnapshot, Hashable]] = []
        self._appends = 0

    def __len__(self) -> int:
        return len(self._items)

    def snapshots(self) -> tuple[NodeSnapshot, ...]:
        return tuple(s for s, _ in self._items)

    def configure(self, maxlen: int, spacing_s: float) -> None:
        self.maxlen, self.spacing_s = maxlen, spacing_s
        del self._items[: max(0, len(self._items) - maxlen)]

    def append(self, snap: NodeSnapshot) -> NodeSnapshot:
        """Add the newest snapshot (shared with the previous entry); returns what is stored."""
        items = self._items
        snap = share(items[-1][0] if items else None, snap)
        sig = link_states(snap)
        if items and items[-1][1] == sig:
            sig = items[-1][1]  # share the signature too (it is ~10 KB on an 8-GPU node)
        if (
            len(items) >= 2
            and items[-1][1] == sig
            and items[-1][0].taken_at - items[-2][0].taken_at < self.spacing_s
        ):
            items[-1] = (snap, sig)  # the tail moves forward until it is spacing_s from its predecessor
        else:
            items.append((snap, sig))
        self._appends += 1
        if self._appends % 32 == 0:
            self._compact(snap.taken_at)
        del items[: max(0, len(items) - self.maxlen)]
        return snap

    def _compact(self, now: float) -> None:
        """Beyond the rate window keep transitions and one entry per long_spacing_s."""
        cutoff = now - self.recent_s
        kept: list[tuple[NodeSnapshot, Hashable]] = []
        for entry in self._items:
            s, sig = entry
            if kept and s.taken_at < cutoff:
                last_s, last_sig = kept[-1]
                if sig == last_sig and s.taken_at - last_s.taken_at < self.long_spacing_s:
                    continue
            kept.append(entry)
        self._items[:] = kept


def spans(history: Iterable[NodeSnapshot]) -> list[float]:
    """Gaps between consecutive entries (for tests and debugging)."""
    ts = [s.taken_at for s in history]
    return [b - a for a, b in zip(ts, ts[1:])]
