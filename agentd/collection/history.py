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
operstate, carrier and the ``{rx,tx}_prio<N>_pause`` ethtool statistics; per NVLink its
number, state and error counters; per GPU its PCIe replay counter; per PCI function with AER
counters its PcieAer (shared while equal) and current link speed and width. Counter tables become ``Counters``: read-only mappings
whose names are shared between entries and whose values are packed in an array (8 bytes a
value, or 4 when the table's values fit, instead of ~70 for a dict entry and an int), and ports, netdevs and GPUs are
small slotted objects with the attributes those readers use (duck-typed IbPort, Hca,
Netdev, NvmlGpu, NvLink). A compact entry equal to the previous one shares its parts.
On a node where every counter changes every cycle an entry costs ~10 KB instead of ~380 KB.
"""

from __future__ import annotations

from array import array
from typing import Any, Callable, Hashable, Iterable, Iterator, Mapping, Sequence, TypeVar

from agentd.model import Hca, IbPort, Netdev, NodeSnapshot, NvmlGpu, NvmlInfo, PciDevice

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
    """What the history's readers use of a Netdev: link state and the PFC pause counters."""

    __slots__ = ("name", "operstate", "carrier", "ethtool")

    def __init__(self, n: Netdev, ethtool: Mapping[str, int] | None):
        self.name, self.operstate, self.carrier, self.ethtool = n.name, n.operstate, n.carrier, ethtool


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

    def hca(self, h: Hca, prev: HcaEntry | None) -> HcaEntry:
        olds = {q.port: q for q in prev.ports} if prev is not None else {}
        ports = tuple(self.port(p, olds.get(p.port)) for p in h.ports)
        if prev is not None and len(ports) == len(prev.ports) and all(a is b for a, b in zip(ports, prev.ports)):
            return prev
        return HcaEntry(h.name, ports)

    def netdev(self, n: Netdev, prev: NetdevEntry | None) -> NetdevEntry:
        eth = None
        if n.ethtool is not None:
            eth = self.table({k: n.ethtool[k] for k in _PAUSE if k in n.ethtool}, prev.ethtool if prev else None)
        if prev is not None and prev.operstate == n.operstate and prev.carrier == n.carrier and prev.ethtool is eth:
            return prev
        return NetdevEntry(n, eth)

    def gpu(self, g: NvmlGpu, prev: GpuEntry | None) -> GpuEntry:
        shape = tuple((x.link, x.state, tuple(x.errors)) for x in g.nvlinks)
        layout = self._layouts.get(shape)
        if layout is None:
            if len(self._layouts) > 4096:
                self._layouts.clear()
            out, start = [], 0
            for link, state, names in shape:
                out.append((link, state, self._index(names), start))
                start += len(names)
            layout = self._layouts[shape] = tuple(out)
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


T2 = TypeVar("T2")


def _same(new: tuple[T2, ...], old: tuple[Any, ...]) -> tuple[T2, ...]:
    if len(new) == len(old) and all(a is b for a, b in zip(new, old)):
        return old
    return new


_SYSTEM = NodeSnapshot.model_fields["system"].get_default()
_GDR = NodeSnapshot.model_fields["gdr"].get_default()
_SNAP_FIELDS = set(NodeSnapshot.model_fields)  # shared by every entry (records are frozen: never changed)
_NVML_FIELDS = set(NvmlInfo.model_fields)


class History:
    def __init__(self, maxlen: int, spacing_s: float, long_spacing_s: float = 300.0, recent_s: float = RATE_WINDOW_S):
        self.maxlen = maxlen
        self.spacing_s = spacing_s
        self.long_spacing_s = long_spacing_s
        self.recent_s = recent_s
        self._items: list[tuple[NodeSnapshot, Hashable]] = []
        self._appends = 0
        self._compactor = Compactor()

    def __len__(self) -> int:
        return len(self._items)

    def snapshots(self) -> tuple[NodeSnapshot, ...]:
        return tuple(s for s, _ in self._items)

    def configure(self, maxlen: int, spacing_s: float) -> None:
        self.maxlen, self.spacing_s = maxlen, spacing_s
        del self._items[: max(0, len(self._items) - maxlen)]

    def append(self, snap: NodeSnapshot) -> NodeSnapshot:
        """Add the newest snapshot (shared with the previous entry); returns what is stored.
        The newest entry is kept whole; the one it follows is compacted."""
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
            if items:
                last, last_sig = items[-1]
                items[-1] = (self._compactor.snapshot(last, items[-2][0] if len(items) >= 2 else None), last_sig)
            items.append((snap, sig))
        self._appends += 1
        if self._appends % 32 == 0:
            self._thin(snap.taken_at)
        del items[: max(0, len(items) - self.maxlen)]
        return snap

    def _thin(self, now: float) -> None:
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
