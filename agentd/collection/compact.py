"""Compact history entries: an earlier snapshot as the history keeps it.

Only the newest history entry is a whole NodeSnapshot (the publisher shares the next
collection with it and returns it as the current state). When a newer one arrives, the
previous entry is compacted (``Compactor.snapshot``) to a ``CompactEntry``: exactly what the
history's readers use, as declared by agentd.model's ``HistoryEntry`` and its readings
(``PortReading``, ``HcaReading``, ``NetdevReading``, ``LinkReading``, ``GpuReading``,
``PciReading``). The checks see the history through those Protocols, so mypy proves that
no check reads what a compact entry does not keep. Kept: per IB port its number, state,
phys_state, link layer, netdev and every counter and hw_counter; per netdev its operstate,
carrier, carrier change counts (RoCE flaps between polls), the ``HISTORY_ETHTOOL``
statistics and the PHY's link-down and FEC counters (``phy_counters``); per NVLink its number, state and error
counters; per GPU its PCIe replay counter; per PCI function with AER counters its PcieAer
(shared while equal) and current link speed and width.

Counter tables become ``Counters``: read-only mappings whose names are shared between
entries and whose values are packed in an array (8 bytes a value, or 4 when the table's
values fit, instead of a dict entry and an int each). A compact entry equal to the previous
one shares its parts.

Aged entries. Counters are read only within the rate windows (``thresholds.rate_window_s``
and ``short_rate_window_s``), but the history reaches back ``history_size`` entries for
flaps, seen-active and kernel events. Once a compact entry is older than every counter
window it is aged (``Compactor.aged``, an ``AgedEntry``): IB port states with
``link_downed``, netdev states with their carrier change counts, NVLink states, GPU PCIe
replay counts, and the PCI functions whole, the rest dropped. Parts equal to the previous aged entry's are its very objects, so
a run of aged entries with the same link states costs little more than the entry objects
(bench/bench_memory.py, ``history_heap_*``; docs/performance.md).
"""

from __future__ import annotations

from array import array
from typing import Callable, Iterator, Mapping, Sequence, TypeVar, overload

from agentd.model import HISTORY_ETHTOOL, GpuReading, HcaReading, NetdevReading, NodeSnapshot, PcieAer, PciReading, PhyLink, PortReading, phy_counters

T = TypeVar("T")

# An NvmlGpu's NVLinks as a GpuEntry keeps them: (link, state, counter names -> position,
# where the link's values start in the GPU's array), shared between entries.
Layout = tuple[tuple[int, str, Mapping[str, int], int], ...]


class Counters(Mapping[str, int]):
    """A read-only counter table: the names (and their positions) are shared between
    entries, the values packed in an array; ``start`` offsets into an array shared by
    several tables (the NVLinks of one GPU)."""

    __slots__ = ("_index", "_values", "_start")

    def __init__(self, index: Mapping[str, int], values: Sequence[int], start: int = 0):
        self._index, self._values, self._start = index, values, start

    def __getitem__(self, name: str) -> int:
        return self._values[self._start + self._index[name]]

    @overload
    def get(self, name: str, /) -> int | None: ...

    @overload
    def get(self, name: str, /, default: int | T) -> int | T: ...

    def get(self, name: str, /, default: object = None) -> object:
        i = self._index.get(name)
        return default if i is None else self._values[self._start + i]

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def __repr__(self) -> str:
        return f"Counters({dict(self.items())!r})"


_NO_COUNTERS = Counters({}, ())
_NO_VALUES: Sequence[int] = array("I")
_ETHTOOL = tuple(sorted(HISTORY_ETHTOOL))


class PortEntry:
    """A PortReading: what the history's readers use of an IbPort."""

    __slots__ = ("port", "state", "phys_state", "link_layer", "netdev", "counters", "hw_counters")

    def __init__(self, p: PortReading, counters: Mapping[str, int], hw_counters: Mapping[str, int]):
        self.port, self.state, self.phys_state = p.port, p.state, p.phys_state
        self.link_layer, self.netdev = p.link_layer, p.netdev
        self.counters, self.hw_counters = counters, hw_counters

    @property
    def is_active(self) -> bool:
        return self.state == "ACTIVE"

    def key(self) -> tuple[object, ...]:
        return (self.port, self.state, self.phys_state, self.link_layer, self.netdev, id(self.counters), id(self.hw_counters))


class HcaEntry:
    """An HcaReading."""

    __slots__ = ("name", "ports")

    def __init__(self, name: str, ports: tuple[PortEntry, ...]):
        self.name, self.ports = name, ports


class NetdevEntry:
    """A NetdevReading: link state, the carrier change counts, the HISTORY_ETHTOOL statistics and the PHY's counters."""

    __slots__ = ("name", "operstate", "carrier", "carrier_changes", "carrier_down_count", "ethtool", "phy")

    def __init__(self, n: NetdevReading, ethtool: Mapping[str, int] | None, phy: PhyLink | None = None):
        self.name, self.operstate, self.carrier, self.ethtool, self.phy = n.name, n.operstate, n.carrier, ethtool, phy
        self.carrier_changes, self.carrier_down_count = n.carrier_changes, n.carrier_down_count

    def same_link(self, n: NetdevReading) -> bool:
        """Whether ``n`` has this entry's link state and carrier counts."""
        return (self.operstate, self.carrier, self.carrier_changes, self.carrier_down_count) == (
            n.operstate, n.carrier, n.carrier_changes, n.carrier_down_count)


class LinkEntry:
    """A LinkReading."""

    __slots__ = ("link", "state", "errors")

    def __init__(self, link: int, state: str, errors: Mapping[str, int]):
        self.link, self.state, self.errors = link, state, errors


class GpuEntry:
    """A GpuReading: its NVLinks' numbers and states (a shared Layout) and every error
    counter of every link in one array; ``nvlinks`` builds the link views when read."""

    __slots__ = ("index", "pci_bus_id", "error", "pcie_replay_errors", "_layout", "_values")

    def __init__(self, g: GpuReading, layout: Layout, values: Sequence[int]):
        self.index, self.pci_bus_id, self.error, self.pcie_replay_errors = g.index, g.pci_bus_id, g.error, g.pcie_replay_errors
        self._layout, self._values = layout, values

    @property
    def nvlinks(self) -> tuple[LinkEntry, ...]:
        v = self._values
        return tuple(LinkEntry(link, state, Counters(ix, v, start)) for link, state, ix, start in self._layout)


class PciEntry:
    """A PciReading: a PCI function's AER counters (the frozen PcieAer, shared while equal)
    and current link."""

    __slots__ = ("bdf", "aer", "current_link_speed", "current_link_width")

    def __init__(self, d: PciReading):
        self.bdf, self.current_link_speed, self.current_link_width = d.bdf, d.current_link_speed, d.current_link_width
        self.aer: PcieAer | None = d.aer

    def key(self) -> tuple[object, ...]:
        return (self.bdf, self.aer, self.current_link_speed, self.current_link_width)


class NvmlEntry:
    """An NvmlReading."""

    __slots__ = ("available", "asked", "gpus")

    def __init__(self, available: bool, asked: bool, gpus: tuple[GpuEntry, ...]):
        self.available, self.asked, self.gpus = available, asked, gpus


class CompactEntry:
    """A HistoryEntry that is not a whole snapshot (``Compactor.snapshot``)."""

    __slots__ = ("taken_at", "host_root", "host_mode", "hcas", "netdevs", "nvml", "pci")

    def __init__(self, taken_at: float, host_root: str, host_mode: str | None, hcas: tuple[HcaEntry, ...],
                 netdevs: tuple[NetdevEntry, ...], nvml: NvmlEntry, pci: tuple[PciEntry, ...]):
        self.taken_at, self.host_root, self.host_mode = taken_at, host_root, host_mode
        self.hcas, self.netdevs, self.nvml, self.pci = hcas, netdevs, nvml, pci

    def hca(self, name: str) -> HcaEntry | None:
        return next((h for h in self.hcas if h.name == name), None)

    def netdev(self, name: str) -> NetdevEntry | None:
        return next((n for n in self.netdevs if n.name == name), None)

    def pci_device(self, bdf: str) -> PciEntry | None:
        return next((d for d in self.pci if d.bdf == bdf), None)


class AgedEntry(CompactEntry):
    """A compact entry older than every counter window (``Compactor.aged``): no counters
    but ``link_downed``, no ethtool statistics, no NVLink errors."""

    __slots__ = ()


def is_compact(s: object) -> bool:
    """Whether ``s`` is a compact history entry (not a whole snapshot), aged or not."""
    return isinstance(s, CompactEntry)


def is_aged(s: object) -> bool:
    """Whether ``s`` is an aged entry (``Compactor.aged``)."""
    return isinstance(s, AgedEntry)


def reuse_if_same(new: tuple[T, ...], old: tuple[T, ...]) -> tuple[T, ...]:
    if len(new) == len(old) and all(a is b for a, b in zip(new, old)):
        return old
    return new


def _pack(values: list[int]) -> Sequence[int] | None:
    """The values in an array of 4-byte unsigned ints when they fit (error counters), else
    8-byte ones (64-bit data counters); None when they are not all 64-bit integers."""
    for code in ("I", "Q", "q"):
        try:
            return array(code, values)
        except (OverflowError, TypeError):
            continue
    return None


PortMaker = Callable[[PortReading, "PortEntry | None"], PortEntry]


class Compactor:
    """Builds compact entries, sharing names and unchanged parts with the previous one."""

    def __init__(self) -> None:
        self._indexes: dict[tuple[str, ...], dict[str, int]] = {}
        self._layouts: dict[tuple[tuple[int, str, tuple[str, ...]], ...], Layout] = {}

    def _index(self, names: tuple[str, ...]) -> dict[str, int]:
        ix = self._indexes.get(names)
        if ix is None:
            if len(self._indexes) > 4096:  # names come from the node: bounded, but never let it grow
                self._indexes.clear()
            ix = self._indexes[names] = {n: i for i, n in enumerate(names)}
        return ix

    def table(self, t: Mapping[str, int], prev: Mapping[str, int] | None) -> Mapping[str, int]:
        if isinstance(t, Counters):
            return t
        if not t:
            return _NO_COUNTERS
        values = _pack(list(t.values()))
        if values is None:  # not 64-bit integers: kept as they are
            return t
        ix = self._index(tuple(t))
        if isinstance(prev, Counters) and prev._index is ix and prev._values == values:
            return prev
        return Counters(ix, values)

    def port(self, p: PortReading, prev: PortEntry | None) -> PortEntry:
        e = PortEntry(p, self.table(p.counters, prev.counters if prev else None),
                      self.table(p.hw_counters, prev.hw_counters if prev else None))
        return prev if prev is not None and prev.key() == e.key() else e

    def hca(self, h: HcaReading, prev: HcaEntry | None, port: PortMaker | None = None) -> HcaEntry:
        """``h``'s entry, its ports made by ``port`` (default: ``self.port``)."""
        make = port or self.port
        olds = {q.port: q for q in prev.ports} if prev is not None else {}
        ports = tuple(make(p, olds.get(p.port)) for p in h.ports)
        if prev is not None and len(ports) == len(prev.ports) and all(a is b for a, b in zip(ports, prev.ports)):
            return prev
        return HcaEntry(h.name, ports)

    def netdev(self, n: NetdevReading, prev: NetdevEntry | None) -> NetdevEntry:
        eth = None
        if n.ethtool is not None:
            eth = self.table({k: n.ethtool[k] for k in _ETHTOOL if k in n.ethtool}, prev.ethtool if prev else None)
        phy = phy_counters(n.phy)
        if prev is not None and prev.phy == phy:
            phy = prev.phy
        if prev is not None and prev.same_link(n) and prev.ethtool is eth and prev.phy is phy:
            return prev
        return NetdevEntry(n, eth, phy)

    def _layout(self, shape: tuple[tuple[int, str, tuple[str, ...]], ...]) -> Layout:
        layout = self._layouts.get(shape)
        if layout is None:
            if len(self._layouts) > 4096:
                self._layouts.clear()
            out, start = [], 0
            for link, state, names in shape:
                out.append((link, state, self._index(names), start))
                start += len(names)
            layout = self._layouts[shape] = tuple(out)
        return layout

    def gpu(self, g: GpuReading, prev: GpuEntry | None) -> GpuEntry:
        layout = self._layout(tuple((x.link, x.state, tuple(x.errors)) for x in g.nvlinks))
        values = _pack([v for x in g.nvlinks for v in x.errors.values()]) or array("q")
        if prev is not None and prev._layout is layout and prev._values == values and (prev.index, prev.error, prev.pcie_replay_errors) == (g.index, g.error, g.pcie_replay_errors):
            return prev
        return GpuEntry(g, layout, values)

    def pci(self, d: PciReading, prev: PciEntry | None) -> PciEntry:
        e = PciEntry(d)
        if prev is not None:
            if prev.aer == e.aer:
                e.aer = prev.aer
            if prev.key() == e.key():
                return prev
        return e

    def nvml(self, available: bool, asked: bool, gpus: tuple[GpuEntry, ...], prev: NvmlEntry | None) -> NvmlEntry:
        if prev is not None and prev.gpus is gpus and (prev.available, prev.asked) == (available, asked):
            return prev
        return NvmlEntry(available, asked, gpus)

    def snapshot(self, s: NodeSnapshot, prev: CompactEntry | None) -> CompactEntry:
        """``s`` as a compact history entry (``prev``: the entry before it, compact)."""
        ph = {h.name: h for h in prev.hcas} if prev is not None else {}
        pn = {n.name: n for n in prev.netdevs} if prev is not None else {}
        pg = {g.pci_bus_id: g for g in prev.nvml.gpus} if prev is not None else {}
        hcas = tuple(self.hca(h, ph.get(h.name)) for h in s.hcas)
        netdevs = tuple(self.netdev(n, pn.get(n.name)) for n in s.netdevs)
        gpus = tuple(self.gpu(g, pg.get(g.pci_bus_id)) for g in s.nvml.gpus)
        # PCI functions with AER counters (those the pci_errors probe reads; they carry the
        # re-read links too): what check_aer and check_retrained compare.
        pp = {d.bdf: d for d in prev.pci} if prev is not None else {}
        pci = tuple(self.pci(d, pp.get(d.bdf)) for d in s.pci if d.aer is not None)
        if prev is not None:
            pci, hcas, netdevs, gpus = reuse_if_same(pci, prev.pci), reuse_if_same(hcas, prev.hcas), reuse_if_same(netdevs, prev.netdevs), reuse_if_same(gpus, prev.nvml.gpus)
        nvml = self.nvml(s.nvml.available, s.nvml.asked, gpus, prev.nvml if prev is not None else None)
        return CompactEntry(s.taken_at, s.host_root, s.host_mode, hcas, netdevs, nvml, pci)

    # -- aged entries: what is read of an entry older than every counter window --------

    def _aged_port(self, p: PortReading, prev: PortEntry | None) -> PortEntry:
        downed = p.counters.get("link_downed")
        kept = {"link_downed": downed} if isinstance(downed, int) else {}
        e = PortEntry(p, self.table(kept, prev.counters if prev else None), _NO_COUNTERS)
        return prev if prev is not None and prev.key() == e.key() else e

    def _aged_netdev(self, n: NetdevEntry, prev: NetdevEntry | None) -> NetdevEntry:
        if prev is not None and prev.same_link(n) and prev.ethtool is None and prev.phy is None:
            return prev
        return NetdevEntry(n, None)

    def _aged_gpu(self, g: GpuEntry, prev: GpuEntry | None) -> GpuEntry:
        layout = self._layout(tuple((link, state, ()) for link, state, _, _ in g._layout))
        if prev is not None and prev._layout is layout and (prev.index, prev.error, prev.pcie_replay_errors) == (g.index, g.error, g.pcie_replay_errors):
            return prev
        return GpuEntry(g, layout, _NO_VALUES)

    def aged(self, s: CompactEntry, prev: AgedEntry | None) -> AgedEntry:
        """A compact entry ``s`` as it is kept once it is older than every counter window
        (``prev``: the aged entry before it, or None). Only what the checks read of such an
        entry stays: IB port states with ``link_downed`` (flaps, seen-active), netdev and
        NVLink states, GPUs' PCIe replay counts, and the PCI functions whole (AER presence,
        link retrains). Parts equal to ``prev``'s are its very objects, so a steady run of
        old entries shares everything while every counter on the node moves."""
        ph = {h.name: h for h in prev.hcas} if prev is not None else {}
        pn = {n.name: n for n in prev.netdevs} if prev is not None else {}
        pg = {g.pci_bus_id: g for g in prev.nvml.gpus} if prev is not None else {}
        hcas = tuple(self.hca(h, ph.get(h.name), self._aged_port) for h in s.hcas)
        netdevs = tuple(self._aged_netdev(n, pn.get(n.name)) for n in s.netdevs)
        gpus = tuple(self._aged_gpu(g, pg.get(g.pci_bus_id)) for g in s.nvml.gpus)
        pci = s.pci
        if prev is not None:
            hcas, netdevs, gpus, pci = reuse_if_same(hcas, prev.hcas), reuse_if_same(netdevs, prev.netdevs), reuse_if_same(gpus, prev.nvml.gpus), reuse_if_same(pci, prev.pci)
        nvml = self.nvml(s.nvml.available, s.nvml.asked, gpus, prev.nvml if prev is not None else None)
        return AgedEntry(s.taken_at, s.host_root, s.host_mode, hcas, netdevs, nvml, pci)
