"""Structural sharing between consecutive snapshots.

Every collection re-reads the node, so consecutive snapshots are mostly equal values in new
objects. ``share`` replaces every part of a new snapshot that equals the previous one's (an
HCA, a netdev, the PCI tree, the NVML answer...) with the previous object: an unchanged node
costs the history almost nothing per entry, and the memos downstream (the evaluation, the
NCCL render, the file writes, the metrics areas) see unchanged parts by identity.
"""

from __future__ import annotations

from typing import Callable, Hashable, TypeVar

from agentd.model import CONTENT_FIELDS, Hca, HistoryEntry, NodeSnapshot

T = TypeVar("T")


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
        upd: dict[str, object] = {}
        if o.counters == p.counters and o.counters is not p.counters:
            upd["counters"] = o.counters
        if o.hw_counters == p.hw_counters and o.hw_counters is not p.hw_counters:
            upd["hw_counters"] = o.hw_counters
        if o.gids == p.gids and o.gids is not p.gids:
            upd["gids"] = o.gids
        ports.append(p.model_copy(update=upd) if upd else p)
    return new.model_copy(update={"ports": tuple(ports)})


def share(prev: HistoryEntry | None, new: NodeSnapshot) -> NodeSnapshot:
    """``new`` with every content part (agentd.model.CONTENT_FIELDS) equal to ``prev``'s
    replaced by ``prev``'s object; the device lists item by item. A compact ``prev`` (a
    history seeded from the state file) shares nothing: its parts are not the snapshot's
    types."""
    if not isinstance(prev, NodeSnapshot):
        return new
    upd: dict[str, object] = {
        "pci": _share_items(prev.pci, new.pci, lambda d: d.bdf),
        "hcas": _share_items(prev.hcas, new.hcas, lambda h: h.name, _share_hca),
        "netdevs": _share_items(prev.netdevs, new.netdevs, lambda n: n.name),
        "gpus": _share_items(prev.gpus, new.gpus, lambda g: g.pci_bus_id),
    }
    for name in CONTENT_FIELDS:
        if name not in upd:
            a, b = getattr(prev, name), getattr(new, name)
            upd[name] = a if a is b or a == b else b
    return new.model_copy(update=upd)


def link_states(s: NodeSnapshot) -> Hashable:
    """Everything whose change must survive thinning (flap detection, seen-active)."""
    return (
        tuple((h.name, p.port, p.state, p.phys_state) for h in s.hcas for p in h.ports),
        tuple((n.name, n.operstate, n.carrier) for n in s.netdevs),
        tuple((g.pci_bus_id, link.link, link.state) for g in s.nvml.gpus for link in g.nvlinks),
        # links the pci_errors probe re-reads: a width change is a transition, and a NIC's
        # speed (not a bridge's: the port above a GPU follows the GPU's idle downshifts)
        tuple((d.bdf, None if d.is_bridge else d.current_link_speed, d.current_link_width) for d in s.pci if d.aer is not None and not d.is_gpu),
    )
