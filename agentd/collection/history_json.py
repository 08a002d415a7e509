"""The history's entries as JSON, for its state file (agentd.outputs.history_store owns
the file; ``History.export`` and ``History.seed`` call these).

A restart must neither forget a flapping port nor count its flaps again, and rates must go
on from the counters read before it. What the checks read of the history (agentd.model's
``HistoryEntry``) decides what is kept:

- entries within the rate window, thinned to ``rate_points`` (the oldest and newest kept: a
  rate needs its first and last reading; monotonic counters lose nothing in between), in
  full;
- every entry in that window or in the flap window where a link state changed (the
  History's ``link_states`` signature: flaps and seen-active), and the oldest entry of the
  flap window (the first state and ``link_downed`` reading; in full: kernel events are
  judged from the AER counters when the history reaches back before them). Older entries
  keep only the IB port states, ``link_downed`` (the flap count; increments add up across
  the entries left out) and the PCIe links (pcie.link.retrained's window may be long);
- at most ``max_entries``, the newest.

Entry::

    {"taken_at", "host_root", "host_mode", "nvml": {"available", "asked"},
     "hcas": [{"name", "ports": [{"port", "state", "phys_state", "link_layer", "netdev",
                                  "counters", "hw_counters"}]}],
     "netdevs": [{"name", "operstate", "carrier", "carrier_changes", "carrier_down_count",
                  "ethtool": {HISTORY_ETHTOOL statistics} | null,
                  "phy": {"link_down_events", "fec": {"corrected_blocks", ...}} | null}],
     "gpus": [{"index", "pci_bus_id", "error", "pcie_replay_errors",
               "nvlinks": [{"link", "state", "errors"}]}],
     "pci": [{"bdf", "aer": PcieAer | null, "current_link_speed", "current_link_width"}]}

Field names are the model's (IbPort, Netdev, NvmlGpu, NvLink, PciLinkRead), so reading one
back is their validation. A list equal to the previous entry's is written as ``SAME``
("="), and in a list that changed, an item equal to the previous list's item at the same
position: a steady node's PCI AER counters and NVLinks are written once, not every entry, a
flap costs the one HCA.
"""

from __future__ import annotations

from typing import Hashable, Mapping, Sequence

from agentd.base.jsontypes import JsonObject, JsonValue
from agentd.collection.compact import CompactEntry, Compactor, GpuEntry, HcaEntry, NetdevEntry, PciEntry, reuse_if_same
from agentd.model import HISTORY_ETHTOOL, Hca, HistoryEntry, Netdev, NvmlGpu, PciLinkRead, PhyLink, PortReading, phy_counters

EXPORT_MAX_ENTRIES = 400  # entries a state file holds at most (History.export)
EXPORT_RATE_POINTS = 12  # readings within the rate window it keeps
SAME = "="
SHAREABLE = ("hcas", "netdevs", "gpus", "pci")
_ETHTOOL = tuple(sorted(HISTORY_ETHTOOL))


def _port_json(p: PortReading, full: bool) -> JsonObject:
    if full:
        counters, hw = dict(p.counters), dict(p.hw_counters)
    else:
        downed = p.counters.get("link_downed")
        counters, hw = ({"link_downed": downed} if isinstance(downed, int) else {}), {}
    return {"port": p.port, "state": p.state, "phys_state": p.phys_state, "link_layer": p.link_layer,
            "netdev": p.netdev, "counters": counters, "hw_counters": hw}


def _kept(ethtool: Mapping[str, int] | None) -> dict[str, int] | None:
    return None if ethtool is None else {k: ethtool[k] for k in _ETHTOOL if k in ethtool}


def _phy(phy: PhyLink | None) -> JsonObject | None:
    kept = phy_counters(phy)
    return None if kept is None else kept.model_dump(exclude_defaults=True)


def entry_json(s: HistoryEntry, full: bool = True) -> JsonObject:
    """One history entry (whole or compact) as JSON-ready data; ``full=False``: the IB port
    states with ``link_downed`` and the PCIe links only."""
    pci = [d for d in s.pci if d.aer is not None]
    return {
        "taken_at": s.taken_at, "host_root": s.host_root, "host_mode": s.host_mode,
        "nvml": {"available": s.nvml.available, "asked": s.nvml.asked},
        "hcas": [{"name": h.name, "ports": [_port_json(p, full) for p in h.ports]} for h in s.hcas],
        "netdevs": [{"name": n.name, "operstate": n.operstate, "carrier": n.carrier, "carrier_changes": n.carrier_changes,
                     "carrier_down_count": n.carrier_down_count, "ethtool": _kept(n.ethtool), "phy": _phy(n.phy)}
                    for n in s.netdevs] if full else [],
        "gpus": [{"index": g.index, "pci_bus_id": g.pci_bus_id, "error": g.error, "pcie_replay_errors": g.pcie_replay_errors,
                  "nvlinks": [{"link": x.link, "state": x.state, "errors": dict(x.errors)} for x in g.nvlinks]}
                 for g in s.nvml.gpus] if full else [],
        "pci": [{"bdf": d.bdf, **({"aer": d.aer.model_dump()} if full and d.aer is not None else {}),
                 "current_link_speed": d.current_link_speed, "current_link_width": d.current_link_width} for d in pci],
    }


def _evenly(indexes: list[int], n: int) -> set[int]:
    if len(indexes) <= n:
        return set(indexes)
    step = (len(indexes) - 1) / (n - 1)
    return {indexes[round(i * step)] for i in range(n)} | {indexes[0], indexes[-1]}


def export_entries(items: Sequence[tuple[HistoryEntry, Hashable]], now: float, *, flap_window_s: float, rate_window_s: float,
                   max_entries: int = EXPORT_MAX_ENTRIES, rate_points: int = EXPORT_RATE_POINTS) -> list[JsonObject]:
    """The entries of ``items`` (History's (entry, link_states) pairs, oldest first) a
    restart needs, as JSON-ready dicts (module doc)."""
    window = [i for i, (s, _) in enumerate(items) if now - max(flap_window_s, rate_window_s) <= s.taken_at <= now]
    if not window:
        return []
    flap_from, rate_from = now - flap_window_s, now - rate_window_s
    recent = [i for i in window if items[i][0].taken_at >= rate_from] or window[-1:]
    full = _evenly(recent, max(2, rate_points))
    full.add(window[0])
    changed = {i for i in window[1:] if items[i][1] != items[i - 1][1] and items[i][0].taken_at >= flap_from}
    picks = sorted(full | changed)[-max(1, max_entries):]
    out: list[JsonObject] = []
    prev: JsonObject | None = None
    for i in picks:
        e = entry_json(items[i][0], full=i in full or i >= recent[0])
        shown = dict(e)
        if prev is not None:
            for k in SHAREABLE:
                old = prev[k]
                if e[k] == old:
                    shown[k] = SAME
                else:
                    shown[k] = [SAME if i < len(old) and x == old[i] else x for i, x in enumerate(e[k])]
        out.append(shown)
        prev = e
    return out


def _resolved(e: JsonObject, last: JsonObject) -> JsonObject:
    """``e`` with every ``SAME`` replaced by what it stands for in ``last`` (the lists of
    the entry before, resolved; updated to ``e``'s). Standing for nothing: None."""
    e = dict(e)
    for k in SHAREABLE:
        v, old = e.get(k), last.get(k)
        if isinstance(v, str) and v == SAME:
            v = old
        elif isinstance(v, list):
            v = [(old[i] if isinstance(old, list) and i < len(old) else None) if isinstance(x, str) and x == SAME else x
                 for i, x in enumerate(v)]
        e[k] = last[k] = v
    return e


def drop_oldest(entries: Sequence[JsonValue], n: int) -> list[JsonValue]:
    """``entries`` without the oldest ``n``; the new first entry says in full what its
    ``SAME`` stood for."""
    last: JsonObject = {}
    for e in entries[: n + 1]:
        first = _resolved(e, last) if isinstance(e, dict) else e
    return [first, *entries[n + 1:]] if len(entries) > n else []


def _entry_sig(s: CompactEntry) -> Hashable:
    """A seeded entry's link states: like ``link_states`` (which needs whole PCI records)."""
    return (
        tuple((h.name, p.port, p.state, p.phys_state) for h in s.hcas for p in h.ports),
        tuple((n.name, n.operstate, n.carrier) for n in s.netdevs),
        tuple((g.pci_bus_id, link.link, link.state) for g in s.nvml.gpus for link in g.nvlinks),
        tuple((d.bdf, d.current_link_speed, d.current_link_width) for d in s.pci),
    )


def _seed_one(c: Compactor, e: JsonObject, prev: CompactEntry | None, reuse: set[str]) -> CompactEntry:
    """A compact entry from one exported entry (``SAME`` resolved; ``reuse``: the lists
    that are the very ones ``prev`` was made of), what ``Compactor.snapshot`` makes of a
    whole one; raises on anything malformed."""
    t = e["taken_at"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or t != t or t in (float("inf"), float("-inf")):
        raise TypeError("taken_at is not a time")
    host_root, host_mode, nvml = e["host_root"], e.get("host_mode"), e.get("nvml") or {}
    if not isinstance(host_root, str) or host_mode not in (None, "live", "offline", "simulated") or not isinstance(nvml, dict):
        raise TypeError("host_root, host_mode or nvml")
    available, asked = nvml.get("available", False), nvml.get("asked", True)
    if not isinstance(available, bool) or not isinstance(asked, bool):
        raise TypeError("nvml")
    ph = {h.name: h for h in prev.hcas} if prev is not None else {}
    pn = {n.name: n for n in prev.netdevs} if prev is not None else {}
    pg = {g.pci_bus_id: g for g in prev.nvml.gpus} if prev is not None else {}
    pp = {d.bdf: d for d in prev.pci} if prev is not None else {}
    hcas: tuple[HcaEntry, ...] = prev.hcas if "hcas" in reuse and prev is not None else tuple(
        c.hca(Hca.model_validate(h), ph.get(h.get("name"))) for h in e["hcas"])
    netdevs: tuple[NetdevEntry, ...] = prev.netdevs if "netdevs" in reuse and prev is not None else tuple(
        c.netdev(Netdev.model_validate(n), pn.get(n.get("name"))) for n in e["netdevs"])
    gpus: tuple[GpuEntry, ...] = prev.nvml.gpus if "gpus" in reuse and prev is not None else tuple(
        c.gpu(NvmlGpu.model_validate(g), pg.get(g.get("pci_bus_id"))) for g in e["gpus"])
    pci: tuple[PciEntry, ...] = prev.pci if "pci" in reuse and prev is not None else tuple(
        c.pci(PciLinkRead.model_validate(d), pp.get(d.get("bdf"))) for d in e["pci"])
    if prev is not None:
        pci, hcas, netdevs, gpus = reuse_if_same(pci, prev.pci), reuse_if_same(hcas, prev.hcas), reuse_if_same(netdevs, prev.netdevs), reuse_if_same(gpus, prev.nvml.gpus)
    nvml_entry = c.nvml(available, asked, gpus, prev.nvml if prev is not None else None)
    return CompactEntry(float(t), host_root, host_mode, hcas, netdevs, nvml_entry, pci)


def seed_entries(entries: JsonValue, before: float | None = None) -> list[tuple[CompactEntry, Hashable]]:
    """History items from exported entries, oldest first: compact entries exactly as the
    Compactor makes them. Malformed entries, and entries not strictly older than the next
    taken one and than ``before``, are skipped."""
    c = Compactor()
    out: list[tuple[CompactEntry, Hashable]] = []
    prev: CompactEntry | None = None
    if not isinstance(entries, (list, tuple)):
        return out
    last: JsonObject = {}  # per list, the last one written out (what a SAME stands for)
    made_of: JsonObject = {}  # per list, the one ``prev`` was made of
    for e in entries:
        if not isinstance(e, dict):
            continue
        e = _resolved(e, last)  # a SAME standing for nothing (None) makes the entry malformed
        try:
            s = _seed_one(c, e, prev, {k for k in SHAREABLE if e.get(k) is not None and e.get(k) is made_of.get(k)})
        except Exception:  # a damaged entry costs that entry, never the start
            continue
        if (prev is not None and s.taken_at <= prev.taken_at) or (before is not None and s.taken_at >= before):
            continue
        made_of = {k: e.get(k) for k in SHAREABLE}
        sig = _entry_sig(s)
        if out and out[-1][1] == sig:
            sig = out[-1][1]
        out.append((s, sig))
        prev = s
    return out
