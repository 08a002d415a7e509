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

Compact entries. Only the newest entry is a whole NodeSnapshot (the publisher shares the
next collection with it and returns it as the current state). When a newer one arrives,
the previous entry is compacted (``compact``) to what the history's readers use (the
checks: ib ``_seen_active``/``_flaps``/``_state_unread``/``_reset``, ib_counters rates and
saturation, nvlink error rates, roce pause-storm and CNP rates, PCIe AER and replay rates and
link retrains): per IB port its number,
state, phys_state, link layer, netdev and every counter and hw_counter; per netdev its
operstate, carrier, the ``{rx,tx}_prio<N>_pause`` and PHY (``rx_corrected_bits_phy``,
``rx_bits_phy``, ``link_down_events_phy``) ethtool statistics and the PHY's link-down and
FEC counters (optics checks); per NVLink its
number, state and error counters; per GPU its PCIe replay counter; per PCI function with AER
counters its PcieAer (shared while equal) and current link speed and width. Counter tables become ``Counters``: read-only mappings
whose names are shared between entries and whose values are packed in an array (8 bytes a
value, or 4 when the table's values fit, instead of ~70 for a dict entry and an int), and ports, netdevs and GPUs are
small slotted objects with the attributes those readers use (duck-typed IbPort, Hca,
Netdev, NvmlGpu, NvLink). A compact entry equal to the previous one shares its parts.
On a node where every counter changes every cycle an entry costs ~10 KB instead of ~380 KB.

Aged entries. Counters are read only within the rate windows (``thresholds.rate_window_s``
and ``short_rate_window_s``), but the history reaches back ``history_size`` entries (at
the defaults one per 5 min beyond the window: ~2.5 days) for flaps, seen-active and
kernel events. Once a compact entry is older than every counter window it is aged
(``Compactor.aged``): IB port states with ``link_downed``, netdev and NVLink states, GPU
PCIe replay counts, and the PCI functions whole, the rest dropped. Parts equal to the
previous aged entry's are its very objects: on a busy node, where every compact entry's
counters differ, a run of aged entries with the same link states and ``link_downed``
costs the entry object alone (under 1 KB) instead of ~15 KB; with ``link_downed`` rising
every cycle as well, ~5 KB (bench/bench_memory.py, ``history_heap_*``).
"""

from __future__ import annotations

from array import array
from typing import Any, Callable, Hashable, Iterable, Iterator, Mapping, Sequence, TypeVar

from agentd.base.memo import IdentityMemo
from agentd.model import FecStats, Hca, IbPort, Netdev, NodeSnapshot, NvmlGpu, NvmlInfo, PciDevice, PciLinkRead, PhyLink

T = TypeVar("T")
RATE_WINDOW_S = 600.0  # default of thresholds.rate_window_s
EXPORT_MAX_ENTRIES = 400  # entries a state file holds at most (History.export)
EXPORT_RATE_POINTS = 12  # readings within the rate window it keeps


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
    """``new`` with every component equal to ``prev``'s replaced by ``prev``'s object.
    A compact ``prev`` (a history seeded from the state file) shares nothing: its parts
    are not the snapshot's types."""
    if prev is None or is_compact(prev):
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
        # links the pci_errors probe re-reads: a width change is a transition, and a NIC's
        # speed (not a bridge's: the port above a GPU follows the GPU's idle downshifts)
        tuple((d.bdf, None if d.is_bridge else d.current_link_speed, d.current_link_width) for d in s.pci if d.aer is not None and not d.is_gpu),
    )


# ---------------------------------------------------------------------------
# compact entries


class Counters(Mapping[str, int]):
    """A read-only counter table: the names (and their positions) are shared between
    entries, the values packed in an array; ``start`` offsets into an array shared by
    several tables (the NVLinks of one GPU)."""

    __slots__ = ("_index", "_values", "_start")

    def __init__(self, index: Mapping[str, int], values: Sequence[int], start: int = 0):
        self._index, self._values, self._start = index, values, start

    def __getitem__(self, name: str) -> int:
        return self._values[self._start + self._index[name]]

    def get(self, name: str, default: Any = None) -> Any:
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


class PortEntry:
    """What the history's readers use of an IbPort."""

    __slots__ = ("port", "state", "phys_state", "link_layer", "netdev", "counters", "hw_counters")

    def __init__(self, p: IbPort, counters: Mapping[str, int], hw_counters: Mapping[str, int]):
        self.port, self.state, self.phys_state = p.port, p.state, p.phys_state
        self.link_layer, self.netdev = p.link_layer, p.netdev
        self.counters, self.hw_counters = counters, hw_counters

    @property
    def is_active(self) -> bool:
        return self.state == "ACTIVE"

    def key(self) -> tuple[Any, ...]:
        return (self.port, self.state, self.phys_state, self.link_layer, self.netdev, id(self.counters), id(self.hw_counters))


class HcaEntry:
    __slots__ = ("name", "ports")

    def __init__(self, name: str, ports: tuple[PortEntry, ...]):
        self.name, self.ports = name, ports


class NetdevEntry:
    """What the history's readers use of a Netdev: link state, the PFC pause and PHY
    counters of ``ethtool -S``, and the PHY's link-down and FEC counters."""

    __slots__ = ("name", "operstate", "carrier", "ethtool", "phy")

    def __init__(self, n: Netdev, ethtool: Mapping[str, int] | None, phy: PhyLink | None = None):
        self.name, self.operstate, self.carrier, self.ethtool, self.phy = n.name, n.operstate, n.carrier, ethtool, phy


class LinkEntry:
    __slots__ = ("link", "state", "errors")

    def __init__(self, link: int, state: str, errors: Mapping[str, int]):
        self.link, self.state, self.errors = link, state, errors


class GpuEntry:
    """An NvmlGpu's NVLinks: their numbers and states (shared layout) and every error
    counter of every link in one array; ``nvlinks`` builds the link views when read."""

    __slots__ = ("index", "pci_bus_id", "error", "pcie_replay_errors", "_layout", "_values")

    def __init__(self, g: NvmlGpu, layout: tuple[tuple[int, str, Mapping[str, int], int], ...], values: Sequence[int]):
        self.index, self.pci_bus_id, self.error, self.pcie_replay_errors = g.index, g.pci_bus_id, g.error, g.pcie_replay_errors
        self._layout, self._values = layout, values

    @property
    def nvlinks(self) -> tuple[LinkEntry, ...]:
        v = self._values
        return tuple(LinkEntry(link, state, Counters(ix, v, start)) for link, state, ix, start in self._layout)


class PciEntry:
    """What pcie_errors' checks use of a PciDevice the pci_errors probe read: its AER
    counters (the frozen PcieAer, shared while equal) and current link."""

    __slots__ = ("bdf", "aer", "current_link_speed", "current_link_width")

    def __init__(self, d: PciDevice):
        self.bdf, self.aer, self.current_link_speed, self.current_link_width = d.bdf, d.aer, d.current_link_speed, d.current_link_width

    def key(self) -> tuple[Any, ...]:
        return (self.bdf, self.aer, self.current_link_speed, self.current_link_width)


_PAUSE = tuple(f"{d}_prio{p}_pause" for d in ("rx", "tx") for p in range(8))
_PHY_STATS = ("rx_corrected_bits_phy", "rx_bits_phy", "link_down_events_phy")  # mlx5: the pre-FEC BER and PHY link-downs
_KEPT_STATS = _PAUSE + _PHY_STATS


def phy_counters(phy: PhyLink | None) -> PhyLink | None:
    """The counters of a PhyLink the rate checks read (link-down events, FEC totals): the
    link-down reason, lanes and histogram are the current snapshot's business."""
    if phy is None or (phy.link_down_events is None and phy.fec is None):
        return None
    f = phy.fec
    fec = None if f is None else FecStats(corrected_blocks=f.corrected_blocks, uncorrectable_blocks=f.uncorrectable_blocks, corrected_bits=f.corrected_bits)
    return PhyLink(link_down_events=phy.link_down_events, fec=fec)


def _pack(values: list[int]) -> Sequence[int] | None:
    """The values in an array of 4-byte unsigned ints when they fit (error counters), else
    8-byte ones (64-bit data counters); None when they are not all 64-bit integers."""
    for code in ("I", "Q", "q"):
        try:
            return array(code, values)
        except (OverflowError, TypeError):
            continue
    return None


class Compactor:
    """Builds compact entries, sharing names and unchanged parts with the previous one."""

    def __init__(self) -> None:
        self._indexes: dict[tuple[str, ...], dict[str, int]] = {}
        self._layouts: dict[tuple[Any, ...], tuple[tuple[int, str, Mapping[str, int], int], ...]] = {}

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

    def port(self, p: IbPort, prev: PortEntry | None) -> PortEntry:
        e = PortEntry(p, self.table(p.counters, prev.counters if prev else None),
                      self.table(p.hw_counters, prev.hw_counters if prev else None))
        return prev if prev is not None and prev.key() == e.key() else e

    def hca(self, h: Hca, prev: HcaEntry | None, port: Callable[[Any, PortEntry | None], PortEntry] | None = None) -> HcaEntry:
        """``h``'s entry, its ports made by ``port`` (default: ``self.port``)."""
        make = port or self.port
        olds = {q.port: q for q in prev.ports} if prev is not None else {}
        ports = tuple(make(p, olds.get(p.port)) for p in h.ports)
        if prev is not None and len(ports) == len(prev.ports) and all(a is b for a, b in zip(ports, prev.ports)):
            return prev
        return HcaEntry(h.name, ports)

    def netdev(self, n: Netdev, prev: NetdevEntry | None) -> NetdevEntry:
        eth = None
        if n.ethtool is not None:
            eth = self.table({k: n.ethtool[k] for k in _KEPT_STATS if k in n.ethtool}, prev.ethtool if prev else None)
        phy = phy_counters(n.phy)
        if prev is not None and prev.phy == phy:
            phy = prev.phy
        if prev is not None and prev.operstate == n.operstate and prev.carrier == n.carrier and prev.ethtool is eth and prev.phy is phy:
            return prev
        return NetdevEntry(n, eth, phy)

    def _layout(self, shape: tuple[tuple[int, str, tuple[str, ...]], ...]) -> tuple[tuple[int, str, Mapping[str, int], int], ...]:
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

    def gpu(self, g: NvmlGpu, prev: GpuEntry | None) -> GpuEntry:
        layout = self._layout(tuple((x.link, x.state, tuple(x.errors)) for x in g.nvlinks))
        values = _pack([v for x in g.nvlinks for v in x.errors.values()]) or array("q")
        if prev is not None and prev._layout is layout and prev._values == values and (prev.index, prev.error, prev.pcie_replay_errors) == (g.index, g.error, g.pcie_replay_errors):
            return prev
        return GpuEntry(g, layout, values)

    def pci(self, d: PciDevice, prev: PciEntry | None) -> PciEntry:
        e = PciEntry(d)
        if prev is not None:
            if prev.aer == e.aer:
                e.aer = prev.aer
            if prev.key() == e.key():
                return prev
        return e

    def snapshot(self, s: NodeSnapshot, prev: NodeSnapshot | None) -> NodeSnapshot:
        """``s`` as a compact history entry (``prev``: the entry before it, compact)."""
        ph: dict[str, Any] = {h.name: h for h in prev.hcas} if prev is not None else {}
        pn: dict[str, Any] = {n.name: n for n in prev.netdevs} if prev is not None else {}
        pg: dict[str, Any] = {g.pci_bus_id: g for g in prev.nvml.gpus} if prev is not None else {}
        # duck-typed stand-ins for Hca, Netdev and NvmlGpu (what the readers use of them)
        hcas: tuple[Any, ...] = tuple(self.hca(h, ph.get(h.name)) for h in s.hcas)
        netdevs: tuple[Any, ...] = tuple(self.netdev(n, pn.get(n.name)) for n in s.netdevs)
        gpus: tuple[Any, ...] = tuple(self.gpu(g, pg.get(g.pci_bus_id)) for g in s.nvml.gpus)
        # PCI functions with AER counters (those the pci_errors probe reads; they carry the
        # re-read links too): what check_aer and check_retrained compare.
        pp: dict[str, Any] = {d.bdf: d for d in prev.pci} if prev is not None else {}
        pci: tuple[Any, ...] = tuple(self.pci(d, pp.get(d.bdf)) for d in s.pci if d.aer is not None)
        if prev is not None:
            pci = _same(pci, prev.pci)
            hcas = _same(hcas, prev.hcas)
            netdevs = _same(netdevs, prev.netdevs)
            gpus = _same(gpus, prev.nvml.gpus)
        nvml = (prev.nvml if prev is not None and prev.nvml.gpus is gpus and prev.nvml.available == s.nvml.available
                else NvmlInfo.model_construct(_NVML_FIELDS, available=s.nvml.available, driver_version=None, cuda_driver_version=None,
                                              gpus=gpus, error=None, asked=s.nvml.asked))
        return NodeSnapshot.model_construct(
            _SNAP_FIELDS, taken_at=s.taken_at, host_root=s.host_root, host_mode=s.host_mode, host_mode_reason=None,
            system=_SYSTEM, pci=pci, gpus=(), hcas=hcas, netdevs=netdevs, gdr=_GDR, nvml=nvml, probes=(), read_errors=())

    # -- aged entries: what is read of an entry older than every counter window --------

    def _aged_port(self, p: PortEntry, prev: PortEntry | None) -> PortEntry:
        downed = p.counters.get("link_downed")
        kept = {"link_downed": downed} if isinstance(downed, int) else {}
        e = PortEntry(p, self.table(kept, prev.counters if prev else None), _NO_COUNTERS)  # type: ignore[arg-type]
        return prev if prev is not None and prev.key() == e.key() else e

    def _aged_netdev(self, n: NetdevEntry, prev: NetdevEntry | None) -> NetdevEntry:
        if prev is not None and prev.operstate == n.operstate and prev.carrier == n.carrier and prev.ethtool is None and prev.phy is None:
            return prev
        return NetdevEntry(n, None)  # type: ignore[arg-type]

    def _aged_gpu(self, g: GpuEntry, prev: GpuEntry | None) -> GpuEntry:
        layout = self._layout(tuple((link, state, ()) for link, state, _, _ in g._layout))
        if prev is not None and prev._layout is layout and (prev.index, prev.error, prev.pcie_replay_errors) == (g.index, g.error, g.pcie_replay_errors):
            return prev
        return GpuEntry(g, layout, _NO_VALUES)  # type: ignore[arg-type]

    def aged(self, s: NodeSnapshot, prev: NodeSnapshot | None) -> NodeSnapshot:
        """A compact entry ``s`` as it is kept once it is older than every counter window
        (``prev``: the aged entry before it, or None). Only what the checks read of such an
        entry stays: IB port states with ``link_downed`` (flaps, seen-active), netdev and
        NVLink states, GPUs' PCIe replay counts, and the PCI functions whole (AER presence,
        link retrains). Parts equal to ``prev``'s are its very objects, so a steady run of
        old entries shares everything while every counter on the node moves."""
        ph: dict[str, Any] = {h.name: h for h in prev.hcas} if prev is not None else {}
        pn: dict[str, Any] = {n.name: n for n in prev.netdevs} if prev is not None else {}
        pg: dict[str, Any] = {g.pci_bus_id: g for g in prev.nvml.gpus} if prev is not None else {}
        was_hcas: tuple[Any, ...] = s.hcas  # a compact entry's parts are the entry types
        was_netdevs: tuple[Any, ...] = s.netdevs
        was_gpus: tuple[Any, ...] = s.nvml.gpus
        hcas: tuple[Any, ...] = tuple(self.hca(h, ph.get(h.name), self._aged_port) for h in was_hcas)
        netdevs: tuple[Any, ...] = tuple(self._aged_netdev(n, pn.get(n.name)) for n in was_netdevs)
        gpus: tuple[Any, ...] = tuple(self._aged_gpu(g, pg.get(g.pci_bus_id)) for g in was_gpus)
        pci: tuple[Any, ...] = s.pci
        if prev is not None:
            hcas, netdevs, gpus = _same(hcas, prev.hcas), _same(netdevs, prev.netdevs), _same(gpus, prev.nvml.gpus)
            pci = _same(pci, prev.pci)
        nvml = (prev.nvml if prev is not None and prev.nvml.gpus is gpus and (prev.nvml.available, prev.nvml.asked) == (s.nvml.available, s.nvml.asked)
                else NvmlInfo.model_construct(_NVML_FIELDS, available=s.nvml.available, driver_version=None, cuda_driver_version=None,
                                              gpus=gpus, error=None, asked=s.nvml.asked))
        return NodeSnapshot.model_construct(
            _SNAP_FIELDS, taken_at=s.taken_at, host_root=s.host_root, host_mode=s.host_mode, host_mode_reason=None,
            system=_AGED, pci=pci, gpus=(), hcas=hcas, netdevs=netdevs, gdr=_GDR, nvml=nvml, probes=(), read_errors=())


T2 = TypeVar("T2")


def is_compact(s: NodeSnapshot) -> bool:
    """Whether ``s`` is a compact history entry (not a whole snapshot), aged or not."""
    return s.system is _SYSTEM or s.system is _AGED


def is_aged(s: NodeSnapshot) -> bool:
    """Whether ``s`` is an aged entry (``Compactor.aged``): no counters but ``link_downed``."""
    return s.system is _AGED


def _same(new: tuple[T2, ...], old: tuple[Any, ...]) -> tuple[T2, ...]:
    if len(new) == len(old) and all(a is b for a, b in zip(new, old)):
        return old
    return new


_SYSTEM = NodeSnapshot.model_fields["system"].get_default()  # a copy: its identity marks a compact entry
_AGED = NodeSnapshot.model_fields["system"].get_default()  # another: an aged one
_NO_VALUES: Sequence[int] = array("I")
_GDR = NodeSnapshot.model_fields["gdr"].get_default()
_SNAP_FIELDS = set(NodeSnapshot.model_fields)  # shared by every entry (records are frozen: never changed)
_NVML_FIELDS = set(NvmlInfo.model_fields)


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
        self._items: list[tuple[NodeSnapshot, Hashable]] = []
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

    def snapshots(self) -> tuple[NodeSnapshot, ...]:
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
            sig = items[-1][1]  # share the signature too (it is ~10 KB on an 8-GPU node)
        if (
            len(items) >= 2
            and not is_compact(items[-1][0])
            and items[-1][1] == sig
            and items[-1][0].taken_at - items[-2][0].taken_at < self.spacing_s
        ):
            items[-1] = (snap, sig)  # the tail moves forward until it is spacing_s from its predecessor
        else:
            if items and not is_compact(items[-1][0]):
                last, last_sig = items[-1]
                items[-1] = (self._compactor.snapshot(last, items[-2][0] if len(items) >= 2 else None), last_sig)
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
        kept: list[tuple[NodeSnapshot, Hashable]] = []
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
            if is_aged(s) or not is_compact(s):  # the newest entry stays whole
                continue
            prev = kept[i - 1][0] if i and is_aged(kept[i - 1][0]) else None
            kept[i] = (self._compactor.aged(s, prev), sig)
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
               max_entries: int = EXPORT_MAX_ENTRIES, rate_points: int = EXPORT_RATE_POINTS) -> list[dict[str, Any]]:
        """What a restarted agentd needs to go on judging rates and flaps, as JSON-ready
        dicts, oldest first (``export_entries``). Safe in a worker thread: it works on a
        copy of the entry list (one atomic list copy), and stored entries never change."""
        return export_entries(list(self._items), now, flap_window_s=flap_window_s, rate_window_s=rate_window_s,
                              max_entries=max_entries, rate_points=rate_points)

    def seed(self, entries: Sequence[Any]) -> int:
        """Put exported entries (oldest first) in front of the history; returns how many
        were taken. An entry that is malformed, or not older than the one after it, is
        skipped: never raises."""
        first = self._items[0][0].taken_at if self._items else None
        seeded = seed_entries(entries, before=first)
        self._items[:0] = seeded
        del self._items[: max(0, len(self._items) - self.maxlen)]
        return len(seeded)


# ---------------------------------------------------------------------------
# persistence: compact entries <-> JSON
#
# A restart must neither forget a flapping port nor count its flaps again, and rates must
# go on from the counters read before it. What the checks read of the history (module
# doc) decides what is kept:
# - entries within the rate window, thinned to ``rate_points`` (the oldest and newest
#   kept: a rate needs its first and last reading; monotonic counters lose nothing in
#   between), in full;
# - every entry in that window or in the flap window where a link state changed (the
#   History's ``link_states`` signature: flaps and seen-active), and the oldest entry of the
#   flap window (the first state and ``link_downed`` reading; in full: kernel events are
#   judged from the AER counters when the history reaches back before them). Older entries
#   keep only the IB port states, ``link_downed`` (the flap count; increments add up across
#   the entries left out) and the PCIe links (pcie.link.retrained's window may be long);
# - at most ``max_entries``, the newest.
#
# Entry: {"taken_at", "host_root", "host_mode", "nvml": {"available", "asked"},
#         "hcas": [{"name", "ports": [{"port", "state", "phys_state", "link_layer", "netdev",
#                                      "counters", "hw_counters"}]}],
#         "netdevs": [{"name", "operstate", "carrier", "ethtool": {pause and PHY counters} | null,
#                      "phy": {"link_down_events", "fec": {"corrected_blocks", ...}} | null}],
#         "gpus": [{"index", "pci_bus_id", "error", "pcie_replay_errors",
#                   "nvlinks": [{"link", "state", "errors"}]}],
#         "pci": [{"bdf", "aer": PcieAer | null, "current_link_speed", "current_link_width"}]}
# Field names are the model's (IbPort, Netdev, NvmlGpu, NvLink, PciLinkRead), so reading
# one back is their validation. A list equal to the previous entry's is written as
# ``SAME`` ("="), and in a list that changed, an item equal to the previous list's item at
# the same position: a steady node's PCI AER counters and NVLinks are written once, not
# every entry (~40 and ~13 KB an entry on an 8-GPU node), a flap costs the one HCA.

SAME = "="
SHAREABLE = ("hcas", "netdevs", "gpus", "pci")

def _port_json(p: Any, full: bool) -> dict[str, Any]:
    if full:
        counters, hw = dict(p.counters), dict(p.hw_counters)
    else:
        downed = p.counters.get("link_downed")
        counters, hw = ({"link_downed": downed} if isinstance(downed, int) else {}), {}
    return {"port": p.port, "state": p.state, "phys_state": p.phys_state, "link_layer": p.link_layer,
            "netdev": p.netdev, "counters": counters, "hw_counters": hw}


def _pause(ethtool: Mapping[str, int] | None) -> dict[str, int] | None:
    return None if ethtool is None else {k: ethtool[k] for k in _KEPT_STATS if k in ethtool}


def _phy_json(phy: PhyLink | None) -> dict[str, Any] | None:
    kept = phy_counters(phy)
    return None if kept is None else kept.model_dump(exclude_defaults=True)


def entry_json(s: NodeSnapshot, full: bool = True) -> dict[str, Any]:
    """One history entry (whole or compact) as JSON-ready data; ``full=False``: the IB port
    states with ``link_downed`` and the PCIe links only."""
    pci = [d for d in s.pci if d.aer is not None]
    return {
        "taken_at": s.taken_at, "host_root": s.host_root, "host_mode": s.host_mode,
        "nvml": {"available": s.nvml.available, "asked": s.nvml.asked},
        "hcas": [{"name": h.name, "ports": [_port_json(p, full) for p in h.ports]} for h in s.hcas],
        "netdevs": [{"name": n.name, "operstate": n.operstate, "carrier": n.carrier, "ethtool": _pause(n.ethtool), "phy": _phy_json(n.phy)}
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


def export_entries(items: Sequence[tuple[NodeSnapshot, Hashable]], now: float, *, flap_window_s: float, rate_window_s: float,
                   max_entries: int = EXPORT_MAX_ENTRIES, rate_points: int = EXPORT_RATE_POINTS) -> list[dict[str, Any]]:
    """The entries of ``items`` (History's (entry, link_states) pairs, oldest first) a
    restart needs, as JSON-ready dicts (see the comment above)."""
    window = [i for i, (s, _) in enumerate(items) if now - max(flap_window_s, rate_window_s) <= s.taken_at <= now]
    if not window:
        return []
    flap_from, rate_from = now - flap_window_s, now - rate_window_s
    recent = [i for i in window if items[i][0].taken_at >= rate_from] or window[-1:]
    full = _evenly(recent, max(2, rate_points))
    full.add(window[0])
    changed = {i for i in window[1:] if items[i][1] != items[i - 1][1] and items[i][0].taken_at >= flap_from}
    picks = sorted(full | changed)[-max(1, max_entries):]
    out: list[dict[str, Any]] = []
    prev: dict[str, Any] | None = None
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


def _resolved(e: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
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


def drop_oldest(entries: Sequence[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``entries`` without the oldest ``n``; the new first entry says in full what its
    ``SAME`` stood for."""
    last: dict[str, Any] = {}
    for e in entries[: n + 1]:
        first = _resolved(e, last) if isinstance(e, dict) else e
    return [first, *entries[n + 1:]] if len(entries) > n else []


def _entry_sig(s: NodeSnapshot) -> Hashable:
    """A seeded entry's link states: like ``link_states`` (which needs whole PCI records)."""
    return (
        tuple((h.name, p.port, p.state, p.phys_state) for h in s.hcas for p in h.ports),
        tuple((n.name, n.operstate, n.carrier) for n in s.netdevs),
        tuple((g.pci_bus_id, link.link, link.state) for g in s.nvml.gpus for link in g.nvlinks),
        tuple((d.bdf, d.current_link_speed, d.current_link_width) for d in s.pci),
    )


def _seed_one(c: Compactor, e: dict[str, Any], prev: NodeSnapshot | None, reuse: set[str]) -> NodeSnapshot:
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
    ph: dict[str, Any] = {h.name: h for h in prev.hcas} if prev is not None else {}
    pn: dict[str, Any] = {n.name: n for n in prev.netdevs} if prev is not None else {}
    pg: dict[str, Any] = {g.pci_bus_id: g for g in prev.nvml.gpus} if prev is not None else {}
    pp: dict[str, Any] = {d.bdf: d for d in prev.pci} if prev is not None else {}
    hcas: tuple[Any, ...] = prev.hcas if "hcas" in reuse and prev is not None else tuple(
        c.hca(Hca.model_validate(h), ph.get(h.get("name"))) for h in e["hcas"])
    netdevs: tuple[Any, ...] = prev.netdevs if "netdevs" in reuse and prev is not None else tuple(
        c.netdev(Netdev.model_validate(n), pn.get(n.get("name"))) for n in e["netdevs"])
    gpus: tuple[Any, ...] = prev.nvml.gpus if "gpus" in reuse and prev is not None else tuple(
        c.gpu(NvmlGpu.model_validate(g), pg.get(g.get("pci_bus_id"))) for g in e["gpus"])
    # a duck PciDevice: PciEntry reads bdf, aer and the current link (aer None: link only)
    pci: tuple[Any, ...] = prev.pci if "pci" in reuse and prev is not None else tuple(
        c.pci(PciLinkRead.model_validate(d), pp.get(d.get("bdf"))) for d in e["pci"])  # type: ignore[arg-type]
    if prev is not None:
        pci, hcas, netdevs, gpus = _same(pci, prev.pci), _same(hcas, prev.hcas), _same(netdevs, prev.netdevs), _same(gpus, prev.nvml.gpus)
    nvml_info = (prev.nvml if prev is not None and prev.nvml.gpus is gpus and (prev.nvml.available, prev.nvml.asked) == (available, asked)
                 else NvmlInfo.model_construct(_NVML_FIELDS, available=available, driver_version=None, cuda_driver_version=None,
                                               gpus=gpus, error=None, asked=asked))
    return NodeSnapshot.model_construct(
        _SNAP_FIELDS, taken_at=float(t), host_root=host_root, host_mode=host_mode, host_mode_reason=None,
        system=_SYSTEM, pci=pci, gpus=(), hcas=hcas, netdevs=netdevs, gdr=_GDR, nvml=nvml_info, probes=(), read_errors=())


def seed_entries(entries: Sequence[Any], before: float | None = None) -> list[tuple[NodeSnapshot, Hashable]]:
    """History items from exported entries, oldest first: compact entries exactly as the
    Compactor makes them. Malformed entries, and entries not strictly older than the next
    taken one and than ``before``, are skipped."""
    c = Compactor()
    out: list[tuple[NodeSnapshot, Hashable]] = []
    prev: NodeSnapshot | None = None
    if not isinstance(entries, (list, tuple)):
        return out
    last: dict[str, Any] = {}  # per list, the last one written out (what a SAME stands for)
    made_of: dict[str, Any] = {}  # per list, the one ``prev`` was made of
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


def spans(history: Iterable[NodeSnapshot]) -> list[float]:
    """Gaps between consecutive entries (for tests and debugging)."""
    ts = [s.taken_at for s in history]
    return [b - a for a, b in zip(ts, ts[1:])]
