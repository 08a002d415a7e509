"""Probes, their tiers, and the Collector that turns probe outputs into one NodeSnapshot.

A probe is one reader over one source with a tier (how often the daemon runs it) and a
timeout. The Collector keeps the latest output of each probe; ``snapshot()`` assembles
them into a NodeSnapshot (pure: ``assemble``). A probe that times out keeps its previous
data, marked stale, so one hung source never blanks the rest of the node.

Doing only what changed (agentd.base.memo): a probe that reads only files (every probe
but NVML, and ethtool/DCB on a live node, which ask the kernel) keeps the journal of its
last full run, every access with its answer. The next run replays the journal first:
the same reads, no parsing. When every answer is the same the probe's previous output
object is kept, so assembly, the evaluation and the metrics areas reuse their results by
identity; at the first difference the probe runs in full. A full run also happens at
least every ``FULL_READ_EVERY_S``, and whenever a probe it depends on changed.

A quick check (``run(..., quick=True)``: the daemon's scheduled fast cycles) replays only
a probe's ``signals``: the accesses that change when a link does (port state, carrier,
operstate, speed, the carrier-change count, the device lists), about a third of the fast
tier's. The whole journal is still replayed at least every ``intervals.medium_s``, and on
every run that is not quick (udev and rtnetlink events, reloads, the first run).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, wait
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Generic, Literal, NamedTuple, TypeVar, cast

from agentd.base.ids import VENDOR_NVIDIA as NVIDIA
from agentd.base.memo import IdentityMemo
from agentd.collection.backoff import ReadWindow, back_offs
from agentd.config import AgentConfig
from agentd.host import (
    daemons,
    dcb,
    ethtool,
    ethtool_nl,
    hwmon,
    infiniband,
    module_eeprom,
    modules,
    mstlink,
    ncclconf,
    netdev,
    nvml,
    pause,
    pci,
    pcie_errors,
    routes,
    system,
    versions,
)
from agentd.host.fs import HostRoot, JournalEntry, ReadContext, replay
from agentd.host.gate import DeviceGate, Gate, GateState, covers
from agentd.host.kernel_log import KernelLogSource, read_kernel_log
from agentd.host.runner import Lane, await_future
from agentd.host.topology import gpu_nic_paths
from agentd.model import (
    BackedOff,
    BackOffReads,
    FabricDaemons,
    GdrInfo,
    Gpu,
    Hca,
    IbPort,
    IgnoredDevice,
    KernelEvent,
    KernelLog,
    LinkDiag,
    NcclConf,
    Netdev,
    NodeSnapshot,
    NvmlInfo,
    PauseConfig,
    PciDevice,
    PciLinkRead,
    PfcConfig,
    PhyLink,
    ProbeStatus,
    ReadError,
    SoftwareVersions,
    SystemInfo,
    TempSensor,
    Transceiver,
)

Tier = Literal["fast", "medium", "slow"]
KERNEL_POLL_SHARE = 0.4  # of timeouts.probe_s: the most one kernel log poll reads (agentd.host.kernel_log)
# A journaled probe still runs in full at least this often (seconds), whatever its replays say.
FULL_READ_EVERY_S = 300.0
# Firmware-reading probe runs remembered for back-off (agentd.collection.backoff): a few
# fast cycles' worth of each such probe.
WINDOWS_KEPT = 64


@dataclass(frozen=True)
class ProbeOutput:
    """One probe's latest output. ``data`` is what its ProbeSpec's ``fn`` returns: read it
    through ``data_of(outputs, SPEC)``, which gives it that spec's type."""

    name: str
    data: object
    errors: tuple[ReadError, ...]
    status: ProbeStatus
    # The accesses of the full run that produced ``data`` (agentd.host.fs.replay); None:
    # this probe is not journaled (it asks the kernel or NVML) or its run failed.
    journal: tuple[JournalEntry, ...] | None = field(default=None, repr=False, compare=False)
    inputs: tuple[object, ...] = field(default=(), repr=False, compare=False)  # the data of the probes it read (``after``)
    full_at: float = 0.0  # time.monotonic() of that full run
    reused: bool = False  # this run replayed the journal and kept the previous data
    # The journal's entries a quick check replays (``ProbeSpec.signals``); None: all.
    signals: tuple[JournalEntry, ...] | None = field(default=None, repr=False, compare=False)
    checked_at: float = 0.0  # time.monotonic() of the latest full run or whole-journal replay
    ignored: tuple[IgnoredDevice, ...] = ()  # devices collect.ignore kept it from reading


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
ProbeFn = Callable[[ReadContext, Mapping[str, ProbeOutput]], T_co]
# A probe that reads what the configuration says ([optics]): given it as well.
ConfiguredProbeFn = Callable[[ReadContext, Mapping[str, ProbeOutput], AgentConfig], T_co]


@dataclass(frozen=True)
class ProbeSpec(Generic[T_co]):
    """A probe: its reader ``fn`` gives a ``T_co`` (None: ``configured`` reads it, or else a
    stream the collector reads itself, the kernel log)."""

    name: str
    tier: Tier
    fn: ProbeFn[T_co] | None
    empty: T_co  # value when the probe never produced data
    nvml: bool = False  # uses the NVML timeout
    after: tuple[str, ...] = ()  # probes whose output this one needs
    # Whether everything the probe learns comes through its ReadContext on this host (so
    # replaying its journal tells whether its output would change). NVML never: the
    # library answers (and a simulated hang must hang every time).
    journaled: Callable[[HostRoot], bool] = lambda host: True
    # Which journal entries a quick check replays (None: the whole journal, always).
    signals: Callable[[JournalEntry], bool] | None = None
    # The level of the firmware-backed reads it makes (agentd.collection.backoff), None:
    # none; and whether its quick checks (signals only) make them too.
    firmware: BackOffReads | None = None
    quick_firmware: bool = False
    # A probe that needs the configuration: called instead of ``fn``.
    configured: ConfiguredProbeFn[T_co] | None = None


def _signals(files: frozenset[str], listings: Callable[[str], bool]) -> Callable[[JournalEntry], bool]:
    """A quick check's entries: every resolve (a device entry retargeted), the listings
    ``listings`` keeps (the device class: devices come and go; a device's own ports and
    attributes change only with it) and the reads of ``files``."""

    def keep(entry: JournalEntry) -> bool:
        op, path = entry[0], str(entry[1])
        if op == "resolve":
            return True
        if op == "listdir":
            return listings(path)
        return op == "raw" and path.rpartition("/")[2] in files

    return keep


def _files_unless_live(host: HostRoot) -> bool:
    """ethtool and DCB ask the kernel (ioctl, netlink) on a live node, read files otherwise."""
    return not host.is_live


def _rdma_netdevs(outputs: Mapping[str, ProbeOutput], ctx: ReadContext) -> list[str]:
    """Netdevs backed by a PCI device: where ethtool statistics and DCB mean something;
    not those of a function agentd backed off from (both are firmware commands on mlx5)."""
    return [n.name for n in data_of(outputs, NETDEV)
            if not n.is_virtual and n.link_layer == "Ethernet" and ctx.firmware_ok(n.pci_bus_id)]


def _pci_netdevs(outputs: Mapping[str, ProbeOutput]) -> list[tuple[str, str | None]]:
    """(netdev, its PCI bus id) of the Ethernet netdevs backed by a PCI device."""
    return [(n.name, n.pci_bus_id) for n in data_of(outputs, NETDEV) if not n.is_virtual and n.link_layer == "Ethernet"]


def firmware_gate(ctx: ReadContext) -> Gate:
    """Which devices agentd may run firmware-backed reads on now (hwmon temperatures, module
    EEPROM pages, link state, FEC and PHY counters): not those ``collect.ignore`` names (the
    readers never list them) nor those agentd backed off from (agentd.host.gate)."""
    return lambda bus_id: ctx.firmware_ok(bus_id, "firmware")


class EthtoolRead(NamedTuple):
    """The ethtool probe's output: ``ethtool -S`` statistics, and the PHY's link state and
    FEC counters (ethtool netlink), both per netdev, read in the same medium-tier pass."""

    stats: Mapping[str, dict[str, int]]
    phy: Mapping[str, PhyLink]


def _ethtool(ctx: ReadContext, outputs: Mapping[str, ProbeOutput], config: AgentConfig) -> EthtoolRead:
    allowed = _rdma_netdevs(outputs, ctx)
    phy = ethtool_nl.read_phy(ctx, allowed) if config.optics.enabled else {}
    return EthtoolRead(ethtool.read_ethtool(ctx, allowed), phy)


class OpticsRead(NamedTuple):
    """The optics probe's output (slow tier, firmware register reads on mlx5): HCA
    temperatures by PCI bus id, Ethernet ports' modules by netdev, and what the opt-in link
    tool said of InfiniBand ports."""

    temperatures: Mapping[str, tuple[TempSensor, ...]]
    modules: Mapping[str, Transceiver]
    link_diag: Mapping[tuple[str, int], LinkDiag]


def _optics(ctx: ReadContext, outputs: Mapping[str, ProbeOutput], config: AgentConfig) -> OpticsRead:
    o = config.optics
    if not o.enabled:
        return OpticsRead({}, {}, {})
    gate = firmware_gate(ctx)
    inventory = data_of(outputs, IB_GIDS)
    temps = hwmon.read_hwmon(ctx, [h.pci_bus_id for h in inventory if h.pci_bus_id], gate)
    modules = module_eeprom.read_modules(ctx, _pci_netdevs(outputs), gate)
    diag: Mapping[tuple[str, int], LinkDiag] = {}
    if o.link_tool != "off":
        ports = [(h.name, p.port, h.pci_bus_id) for h in inventory if h.pci_bus_id for p in h.ports if p.link_layer == "InfiniBand"]
        diag = mstlink.read_link_diag(ctx, o.link_tool, ports, timeout_s=o.link_tool_timeout_s, may_read=gate)
    return OpticsRead(temps, modules, diag)


def _pcie_errors(ctx: ReadContext, outputs: Mapping[str, ProbeOutput]) -> tuple[PciLinkRead, ...]:
    """AER counters of GPUs, HCAs and the bridges above them (the slow probes' tree and HCA
    inventory say which), without re-walking the PCI tree."""
    bus_ids = [h.pci_bus_id for h in data_of(outputs, IB_GIDS) if h.pci_bus_id]
    return pcie_errors.read_pcie_errors(ctx, data_of(outputs, PCI), bus_ids)


def _fabric_daemons(ctx: ReadContext, outputs: Mapping[str, ProbeOutput]) -> FabricDaemons:
    """The fabric daemons, looked for only where they can matter: a node with NVIDIA GPUs
    or NVSwitches on its PCI bus (an idle CPU node does not scan its process table)."""
    if not any(d.is_nvswitch or (d.is_gpu and d.vendor_id == NVIDIA) for d in data_of(outputs, PCI)):
        return FabricDaemons()
    return daemons.read_daemons(ctx)


class SystemRead(NamedTuple):
    """The system probe's output: host identity, and the node's software setup read in the
    same slow pass (a few small files each; one probe, so no series of its own)."""

    info: SystemInfo
    nccl_conf: NcclConf | None
    versions: SoftwareVersions
    default_routes: tuple[str, ...] = ()


def _system(ctx: ReadContext, outputs: Mapping[str, ProbeOutput]) -> SystemRead:
    return SystemRead(system.read_system(ctx), ncclconf.read_nccl_conf(ctx), versions.read_versions(ctx), routes.read_default_routes(ctx))


class FlowControl(NamedTuple):
    """The dcb probe's output: each RDMA netdev's priority flow control (DCB) and global
    pause, the two ways a link stops its sender, read together in the slow pass."""

    pfc: Mapping[str, PfcConfig]
    pause: Mapping[str, PauseConfig]


def _flow_control(ctx: ReadContext, outputs: Mapping[str, ProbeOutput]) -> FlowControl:
    names = _rdma_netdevs(outputs, ctx)
    return FlowControl(dcb.read_pfc(ctx, names), pause.read_pause(ctx, names))


# One InfiniBand read per tier, each with only the parts that tier needs, so every file is
# read in one tier; assemble() merges the three into one Hca list.
IB_PARTS: Mapping[str, tuple[infiniband.Part, ...]] = MappingProxyType({
    "ib": ("link",),  # fast: port state, phys_state, rate, LIDs
    "ib_counters": ("counters",),  # medium
    # slow: GID tables, HCA attributes, PCI, NUMA, port netdevs; sm_sl and the mlx5 tclass
    # override (set by an administrator, rarely changed: not worth a fast-tier read)
    "ib_gids": ("gids", "inventory", "qos"),
})

SYSTEM: ProbeSpec[SystemRead] = ProbeSpec("system", "slow", _system, SystemRead(SystemInfo(), None, SoftwareVersions()))
PCI: ProbeSpec[tuple[PciDevice, ...]] = ProbeSpec("pci", "slow", lambda c, o: pci.read_pci(c), ())
PCI_ERRORS: ProbeSpec[tuple[PciLinkRead, ...]] = ProbeSpec("pci_errors", "medium", _pcie_errors, (), after=("pci", "ib_gids"))
IB: ProbeSpec[tuple[Hca, ...]] = ProbeSpec(
    "ib", "fast", lambda c, o: infiniband.read_infiniband(c, IB_PARTS["ib"]), (),
    signals=_signals(infiniband.LINK_SIGNALS, lambda p: p.endswith("/" + infiniband.CLASS_IB)), firmware="link", quick_firmware=True)
IB_COUNTERS: ProbeSpec[tuple[Hca, ...]] = ProbeSpec(
    "ib_counters", "medium", lambda c, o: infiniband.read_infiniband(c, IB_PARTS["ib_counters"]), (), firmware="firmware")
IB_GIDS: ProbeSpec[tuple[Hca, ...]] = ProbeSpec(
    "ib_gids", "slow", lambda c, o: infiniband.read_infiniband(c, IB_PARTS["ib_gids"]), (), firmware="link")
NETDEV: ProbeSpec[tuple[Netdev, ...]] = ProbeSpec(
    "netdev", "fast", lambda c, o: netdev.read_netdevs(c, ecn=True), (),
    signals=_signals(netdev.LINK_SIGNALS, lambda p: p.endswith("/" + netdev.CLASS_NET)), firmware="firmware")
GDR: ProbeSpec[GdrInfo] = ProbeSpec("gdr", "fast", lambda c, o: modules.read_gdr(c), GdrInfo())
ETHTOOL: ProbeSpec[EthtoolRead] = ProbeSpec(
    "ethtool", "medium", None, EthtoolRead({}, {}), after=("netdev",), journaled=_files_unless_live, configured=_ethtool,
    firmware="firmware")
DCB: ProbeSpec[FlowControl] = ProbeSpec(
    "dcb", "slow", _flow_control, FlowControl({}, {}), after=("netdev",), journaled=_files_unless_live, firmware="firmware")
# A stream rather than files: the collector keeps one KernelLogSource for it (no ``fn``).
KERNEL: ProbeSpec[KernelLog] = ProbeSpec("kernel", "fast", None, KernelLog(asked=False), journaled=lambda host: False)
NVML: ProbeSpec[NvmlInfo] = ProbeSpec(
    "nvml", "medium", lambda c, o: nvml.read_nvml(c), NvmlInfo(error="not collected yet"), nvml=True, journaled=lambda host: False)
# Firmware register reads (hwmon, module EEPROM, the opt-in link tool): their answers
# change with every read on a live node, so there is no journal to replay there.
OPTICS: ProbeSpec[OpticsRead] = ProbeSpec(
    "optics", "slow", None, OpticsRead({}, {}, {}), after=("netdev", "ib_gids"), journaled=_files_unless_live, configured=_optics,
    firmware="firmware")
# A live process table changes all the time: replaying its journal would only read it twice.
DAEMONS: ProbeSpec[FabricDaemons] = ProbeSpec(
    "daemons", "slow", _fabric_daemons, FabricDaemons(), after=("pci",), journaled=lambda host: not host.is_live)

PROBES: tuple[ProbeSpec[object], ...] = (SYSTEM, PCI, PCI_ERRORS, IB, IB_COUNTERS, IB_GIDS, NETDEV, GDR, ETHTOOL, DCB, KERNEL, NVML, OPTICS, DAEMONS)
PROBE_BY_NAME = {p.name: p for p in PROBES}
# The probe catalogue: every probe name with its tier, in collection order. Tests, the
# daemon's tier loops and the metrics take probe names from here.
PROBE_TIERS: Mapping[str, Tier] = MappingProxyType({p.name: p.tier for p in PROBES})


def probes_in(tiers: Iterable[Tier]) -> list[str]:
    ts = set(tiers)
    return [p.name for p in PROBES if p.tier in ts]


# ---------------------------------------------------------------------------
# assembly (pure)


def data_of(outputs: Mapping[str, ProbeOutput], spec: ProbeSpec[T]) -> T:
    """``spec``'s latest data in ``outputs`` (its ``empty`` when it never ran). The one
    place the type is asserted: an output is only ever recorded under its spec's name,
    from that spec's ``fn`` (or ``empty``)."""
    out = outputs.get(spec.name)
    return cast(T, out.data) if out is not None else spec.empty


def _merge_hcas(link: tuple[Hca, ...], counters: tuple[Hca, ...], slow: tuple[Hca, ...], pci_numa: Mapping[str, int | None],
                optics: OpticsRead) -> tuple[Hca, ...]:
    """The HCAs and ports of the fast read (``link``), with the medium read's counters and
    the slow read's GID tables, port netdevs, sm_sl, tclass override and HCA inventory
    (attributes, PCI, NUMA), and the optics read's temperatures and link-tool answers."""
    inventory = {h.name: h for h in slow}
    by_counters = {(h.name, p.port): p for h in counters for p in h.ports}
    by_slow = {(h.name, p.port): p for h in slow for p in h.ports}
    merged = []
    for h in link:
        ports = []
        for p in h.ports:
            c = by_counters.get((h.name, p.port))
            s = by_slow.get((h.name, p.port))
            upd: dict[str, object] = {}
            if c is not None:
                upd["counters"] = c.counters
                upd["hw_counters"] = c.hw_counters
            if s is not None:
                upd["gids"] = s.gids
                upd["netdev"] = s.netdev
                upd["sm_sl"] = s.sm_sl
                upd["tclass"] = s.tclass
            diag = optics.link_diag.get((h.name, p.port))
            if diag is not None:
                upd["link_diag"] = diag
            ports.append(p.model_copy(update=upd) if upd else p)
        base = inventory.get(h.name, h)  # the link read has no inventory: defaults until slow runs
        numa = base.numa_node if base.numa_node is not None else pci_numa.get(base.pci_bus_id or "")
        hupd: dict[str, object] = {"ports": tuple(ports), "numa_node": numa}
        temps = optics.temperatures.get(base.pci_bus_id or "")
        if temps:
            hupd["temperatures"] = temps
        merged.append(base.model_copy(update=hupd))
    return tuple(merged)


# A netdev is up for its port when its operstate is "up", or "unknown" (drivers that do
# not report one), and it has carrier: NVSentinel's EFAStateCheck rule (its
# netOperStateIsDown). Anything else is positive evidence the link is down.
_NETDEV_UP = frozenset(("up", "unknown"))


def _link_from_netdev(p: IbPort, nd: Netdev) -> IbPort:
    up = (nd.operstate or "unknown") in _NETDEV_UP and nd.carrier is not False
    if up:
        phys, phys_id = (p.phys_state, p.phys_state_id) if p.phys_state is not None else ("LinkUp", 5)
        return p.model_copy(update={"state": "ACTIVE", "state_id": 4, "phys_state": phys, "phys_state_id": phys_id, "state_from": nd.name})
    return p.model_copy(update={"state": "DOWN", "state_id": 1, "phys_state": None, "phys_state_id": None, "state_from": nd.name})


def _links_from_netdevs(hcas: tuple[Hca, ...], netdevs: tuple[Netdev, ...], backed: Mapping[str, BackedOff]) -> tuple[Hca, ...]:
    """Ports whose own state means nothing take it from their netdev: EFA's (the efa driver
    hard-codes ACTIVE/LinkUp, drivers/infiniband/hw/efa/efa_verbs.c efa_query_port) and
    those of a function whose link reads agentd backed off from. A port without a netdev
    keeps what it has (an EFA-only adapter: the driver's constant)."""
    if not any(h.family == "efa" or covers(backed.get(h.pci_bus_id or ""), "link") for h in hcas):
        return hcas
    by_name = {n.name: n for n in netdevs}
    out = []
    for h in hcas:
        if h.family != "efa" and not covers(backed.get(h.pci_bus_id or ""), "link"):
            out.append(h)
            continue
        ports = tuple(_link_from_netdev(p, by_name[p.netdev]) if p.netdev in by_name else p for p in h.ports)
        out.append(h.model_copy(update={"ports": ports}))
    return tuple(out)


def _merge_netdevs(nds: tuple[Netdev, ...], eth: EthtoolRead, flow: FlowControl, modules: Mapping[str, Transceiver]) -> tuple[Netdev, ...]:
    out = []
    for n in nds:
        upd: dict[str, object] = {}
        if n.name in eth.stats:
            upd["ethtool"] = eth.stats[n.name]
        if n.name in eth.phy:
            upd["phy"] = eth.phy[n.name]
        if n.name in modules:
            upd["module"] = modules[n.name]
        if n.name in flow.pfc:
            upd["pfc"] = flow.pfc[n.name]
        if n.name in flow.pause:
            upd["pause"] = flow.pause[n.name]
        out.append(n.model_copy(update=upd) if upd else n)
    return tuple(out)


def _merge_pci(devs: tuple[PciDevice, ...], reads: tuple[PciLinkRead, ...]) -> tuple[PciDevice, ...]:
    """The slow tree with the medium read's AER counters and (NICs, bridges) current links."""
    if not reads:
        return devs
    by_bdf = {r.bdf: r for r in reads}
    out = []
    for d in devs:
        r = by_bdf.get(d.bdf)
        if r is None:
            out.append(d)
            continue
        upd: dict[str, object] = {"aer": r.aer}
        if r.link_read and (r.current_link_speed is not None or r.current_link_width is not None):
            upd.update(current_link_speed=r.current_link_speed, current_link_speed_gts=r.current_link_speed_gts, current_link_width=r.current_link_width)
        out.append(d.model_copy(update=upd))
    return tuple(out)


def _gpus(pci_devs: tuple[PciDevice, ...], hcas: tuple[Hca, ...], nv: NvmlInfo) -> tuple[Gpu, ...]:
    pci_gpus = {d.bdf: d for d in pci_devs if d.is_gpu and d.vendor_id == NVIDIA}
    nvml_by_bus = {g.pci_bus_id: g for g in nv.gpus} if nv.available else {}
    paths = gpu_nic_paths(pci_devs, {h.name: h.pci_bus_id for h in hcas if h.pci_bus_id})
    bus_ids = sorted(set(pci_gpus) | set(nvml_by_bus))
    gpus = []
    for ordinal, bus in enumerate(bus_ids):
        dev = pci_gpus.get(bus)
        ng = nvml_by_bus.get(bus)
        gpus.append(
            Gpu(
                index=ng.index if ng is not None else ordinal,
                pci_bus_id=bus,
                name=ng.name if ng else None,
                uuid=ng.uuid if ng else None,
                numa_node=dev.numa_node if dev else None,
                nic_paths=paths.get(bus, {}),
                in_nvml=None if not nv.available else (ng is not None and ng.error is None),
            )
        )
    return tuple(sorted(gpus, key=lambda g: (g.index, g.pci_bus_id)))


def assemble(outputs: Mapping[str, ProbeOutput], host_root: str, taken_at: float, *, host_mode: Literal["live", "offline", "simulated"] | None = None,
             host_mode_reason: str | None = None, gate: GateState | None = None) -> NodeSnapshot:
    """The snapshot of ``outputs``; ``gate``: what agentd.host.gate stopped reading."""
    backed = gate.backed_off if gate is not None else {}
    pci_devs = _merge_pci(data_of(outputs, PCI), data_of(outputs, PCI_ERRORS))
    pci_numa = {d.bdf: d.numa_node for d in pci_devs}
    optics = data_of(outputs, OPTICS)
    netdevs = _merge_netdevs(data_of(outputs, NETDEV), data_of(outputs, ETHTOOL), data_of(outputs, DCB), optics.modules)
    hcas = _merge_hcas(data_of(outputs, IB), data_of(outputs, IB_COUNTERS), data_of(outputs, IB_GIDS), pci_numa, optics)
    hcas = _links_from_netdevs(hcas, netdevs, backed)
    nv = data_of(outputs, NVML)
    sysread = data_of(outputs, SYSTEM)
    # Each IB tier lists the same HCA and port directories (and ib, ib_gids both read
    # link_layer): report a bad entry once.
    errors: dict[tuple[str, str], ReadError] = {}
    ignored: dict[tuple[str, str], IgnoredDevice] = {}
    for o in outputs.values():
        for e in o.errors:
            errors.setdefault((e.path, e.kind), e)
        for d in o.ignored:
            ignored.setdefault((d.kind, d.name), d)
    return NodeSnapshot(
        taken_at=taken_at,
        host_root=host_root,
        host_mode=host_mode,
        host_mode_reason=host_mode_reason,
        system=sysread.info,
        pci=pci_devs,
        gpus=_gpus(pci_devs, hcas, nv),
        hcas=hcas,
        netdevs=netdevs,
        gdr=data_of(outputs, GDR),
        nvml=nv,
        kernel=data_of(outputs, KERNEL),
        daemons=data_of(outputs, DAEMONS),
        nccl_conf=sysread.nccl_conf,
        versions=sysread.versions,
        probes=tuple(outputs[p.name].status for p in PROBES if p.name in outputs),
        read_errors=tuple(errors.values()),
        ignored=tuple(ignored[k] for k in sorted(ignored)),
        backed_off=tuple(backed[b] for b in sorted(backed)),
        default_routes=sysread.default_routes,
    )


# ---------------------------------------------------------------------------
# running probes (shell)


@dataclass(frozen=True)
class _Run:
    """What one probe run returned to the collector (from its lane thread)."""

    data: object
    errors: tuple[ReadError, ...]
    files_read: int
    duration: float
    finished: float
    journal: tuple[JournalEntry, ...] | None = None
    inputs: tuple[object, ...] = ()
    full_at: float = 0.0
    reused: bool = False
    signals: tuple[JournalEntry, ...] | None = None
    checked_at: float = 0.0
    ignored: tuple[IgnoredDevice, ...] = ()
    began: float = 0.0  # unix time the run started (its read window: agentd.collection.backoff)
    signals_only: bool = False  # a quick check that replayed only the signals


def _inputs(spec: ProbeSpec[object], outputs: Mapping[str, ProbeOutput]) -> tuple[object, ...]:
    return tuple(outputs[a].data if a in outputs else None for a in spec.after)


def _reuse(host: HostRoot, prev: ProbeOutput | None, inputs: tuple[object, ...], now: float, quick_s: float) -> tuple[bool, bool]:
    """(True, whether only the signals were replayed) when replaying ``prev``'s journal
    shows nothing it read changed: only its signals while the last whole replay is younger
    than ``quick_s`` (0: never), else all of it."""
    if prev is None or prev.journal is None or not prev.status.ok or prev.status.stale:
        return False, False
    if now - prev.full_at >= FULL_READ_EVERY_S or len(inputs) != len(prev.inputs) or any(a is not b for a, b in zip(inputs, prev.inputs)):
        return False, False
    if prev.signals is not None and now - prev.checked_at < quick_s:
        return replay(host, prev.signals)[0], True
    return replay(host, prev.journal)[0], False


class _Turn:
    """The file-reading probes of one phase, run one after another in one lane run.

    Probes that read files run in turn anyway (Python threads reading in parallel only
    fight over the GIL); handing each to its own lane from the event loop costs a thread
    wake-up and a loop round trip per probe, most of what a steady cycle costs beside the
    reading. One run for the phase keeps every probe's own timeout: the caller waits while
    the run makes progress, and a probe that has not finished within its timeout of the
    previous one's end is the hung one, recorded as timed out as in its own lane. The
    probes after it, never started, then go to their own lanes; while the hung run holds
    its thread this group's lane is busy, and later cycles run each probe in its own lane.
    """

    def __init__(self, collector: Collector, specs: list[ProbeSpec[object]], quick: bool = False):
        self.collector, self.specs, self.deps, self.quick = collector, specs, dict(collector.outputs), quick
        self.began = time.monotonic()
        # (run, error, when it ended (monotonic), how long it took): appended by the lane's thread
        self.progress: list[tuple[_Run | None, str | None, float, float]] = []
        self.fut: Future[None] = Future()
        self.recorded: list[ProbeOutput] = []  # in the caller's thread, as probes finish
        self._taken = 0

    def job(self) -> None:
        for spec in self.specs:
            t0 = time.monotonic()
            run, error = None, None
            try:
                run = self.collector._body(spec, self.deps, self.quick)
            except Exception as e:
                error = f"{type(e).__name__}: {e}"
            t1 = time.monotonic()
            self.progress.append((run, error, t1, t1 - t0))

    def waiting(self) -> tuple[int, float]:
        """(index of the probe running now, seconds left of its timeout)."""
        self._take()
        n = self._taken
        if n >= len(self.specs):
            return n, 0.0
        since = self.progress[n - 1][2] if n else self.began
        return n, self.collector._timeout(self.specs[n]) - (time.monotonic() - since)

    def _take(self) -> None:
        """Record the probes that finished since the last look (in the caller's thread)."""
        while self._taken < len(self.progress):
            run, error, _, took = self.progress[self._taken]
            spec = self.specs[self._taken]
            self.recorded.append(self.collector._record(spec, run, error, False, took))
            self._taken += 1

    def stalled(self, n: int) -> bool:
        """After a wait ran out: whether probe ``n`` is still the one running (hung). If
        so it is recorded as timed out; what this run does after that is ignored."""
        self._take()
        if self._taken > n:
            return False
        spec = self.specs[n]
        self.recorded.append(self.collector._record(spec, None, None, True, self.collector._timeout(spec)))
        self._taken = n + 1
        return True

    def unstarted(self) -> list[ProbeSpec[object]]:
        """After the wait: the probes this run will not record (those after a hung one,
        or the rest when the run itself died), for their own lanes."""
        self._take()
        return self.specs[self._taken:]


@dataclass
class Collector:
    host: HostRoot
    config: AgentConfig
    outputs: dict[str, ProbeOutput] = field(default_factory=dict)
    _lanes: dict[str, Lane] = field(default_factory=dict)
    _last_ok: dict[str, float] = field(default_factory=dict)
    _last_ok_mono: dict[str, float] = field(default_factory=dict)
    # The snapshot content of the last assembly, reused while every probe's data and read
    # errors are the same objects (shared by the private copies the daemon snapshots from).
    _assembled: IdentityMemo[NodeSnapshot] = field(default_factory=IdentityMemo)
    # The kernel log's reader: a stream read once (agentd.host.kernel_log). Shared by the
    # copies ``with_config`` and the daemon make, as the lanes are.
    kernel_source: KernelLogSource | None = None
    # What the readers may open (collect.ignore, firmware back-off): shared likewise.
    gate: DeviceGate = field(default_factory=DeviceGate)
    # Recent firmware-reading probe runs, and the newest kernel record already matched
    # against them (agentd.collection.backoff). Shared by the copies (the same objects).
    _windows: deque[ReadWindow] = field(default_factory=lambda: deque(maxlen=WINDOWS_KEPT))
    _backoff_seen: list[int | None] = field(default_factory=lambda: [None])

    def __post_init__(self) -> None:
        if self.kernel_source is None:
            self.kernel_source = KernelLogSource(self.host)
        self.gate.bind(self.host, self.config.collect.ignore)

    def _timeout(self, spec: ProbeSpec[object]) -> float:
        return self.config.timeouts.nvml_s if spec.nvml else self.config.timeouts.probe_s

    def _body(self, spec: ProbeSpec[object], deps: Mapping[str, ProbeOutput], quick: bool = False) -> _Run:
        """One run of a probe (in its lane thread): the journal replayed when there is one
        (only its signals when ``quick`` and the whole was replayed recently), the reader
        in full when that shows a change (or there is none)."""
        journaled = spec.journaled(self.host) and self.host.recorder is None
        t0, mono, began = time.perf_counter(), time.monotonic(), time.time()
        # The gate's state is an input: a device ignored or backed off since the last run
        # must not be read again by replaying that run's journal.
        inputs = (*_inputs(spec, deps), self.gate.state)
        if journaled:
            prev = deps.get(spec.name)
            same, signals_only = _reuse(self.host, prev, inputs, mono, self.config.intervals.medium_s if quick else 0.0)
            if same and prev is not None:
                # files_read stays the probe's whole count (a replay reads what the run read;
                # a quick check reads fewer, and the gauge would saw-tooth with the schedule)
                return _Run(prev.data, prev.errors, prev.status.files_read, time.perf_counter() - t0, time.time(), prev.journal, inputs,
                            prev.full_at, reused=True, signals=prev.signals, checked_at=prev.checked_at if signals_only else mono,
                            ignored=prev.ignored, began=began, signals_only=signals_only)
        ctx = ReadContext(self.host, spec.name, journal=[] if journaled else None, gate=self.gate)
        try:
            if spec.configured is not None:
                data = spec.configured(ctx, deps, self.config)
            elif spec.fn is None:
                data = self._stream(ctx)
            else:
                data = spec.fn(ctx, deps)
        finally:
            ctx.close()
        journal = tuple(ctx.journal) if ctx.journal is not None else None
        signals = tuple(e for e in journal if spec.signals(e)) if journal is not None and spec.signals is not None else None
        return _Run(data, tuple(ctx.errors), ctx.files_read, time.perf_counter() - t0, time.time(), journal, inputs, mono,
                    signals=signals, checked_at=mono, ignored=tuple(ctx.ignored), began=began)

    def _stream(self, ctx: ReadContext) -> KernelLog:
        k = self.config.kernel
        if not k.enabled:
            return KernelLog(asked=False, error="kernel.enabled = false")
        # a poll reads for at most a share of the probe's timeout: a flood never makes it late
        return read_kernel_log(ctx, self.kernel_source, keep_s=max(k.window_s, k.hold_s), max_events=k.max_events,
                               limit_s=KERNEL_POLL_SHARE * self.config.timeouts.probe_s)

    def _lane(self, name: str) -> Lane:
        lane = self._lanes.get(name)
        if lane is None:
            lane = self._lanes[name] = Lane(name)
        return lane

    def _turn(self, specs: list[ProbeSpec[object]], quick: bool = False) -> _Turn | None:
        """Start ``specs`` one after another as one run in one lane (None: fewer than two,
        or this group's earlier run still hangs: then each goes to its own lane)."""
        if len(specs) < 2:
            return None
        turn = _Turn(self, specs, quick)
        fut, started = self._lane("turn:" + ",".join(s.name for s in specs)).submit(turn.job)
        if not started:
            return None
        turn.fut = fut
        return turn

    def _record(self, spec: ProbeSpec[object], result: _Run | None, error: str | None, timed_out: bool, waited: float) -> ProbeOutput:
        now = time.time()
        prev = self.outputs.get(spec.name)
        if result is not None:
            finished = result.finished
            self._last_ok[spec.name] = finished
            self._last_ok_mono[spec.name] = mono = time.monotonic()
            data, errors = result.data, result.errors
            if not result.reused and prev is not None and prev.status.ok:
                # A probe without a journal (NVML) that answered the same keeps the previous
                # objects too, so what is built from them is reused (agentd.base.memo).
                data = prev.data if data == prev.data else data
                errors = prev.errors if errors == prev.errors else errors
            out = ProbeOutput(
                spec.name,
                data,
                errors,
                ProbeStatus(name=spec.name, ok=True, duration_s=result.duration, finished_at=finished, last_success_at=finished, last_success_mono=mono, files_read=result.files_read),
                journal=result.journal, inputs=result.inputs, full_at=result.full_at, reused=result.reused,
                signals=result.signals, checked_at=result.checked_at, ignored=result.ignored,
            )
            if spec.firmware is not None and (spec.quick_firmware or not result.signals_only):
                self._windows.append(ReadWindow(spec.name, spec.firmware, result.began, finished, self._skipped(spec.firmware)))
        else:
            # The failure itself is on the ProbeStatus (one probe.failed finding); the
            # previous data and its read errors stay, marked stale.
            data = prev.data if prev is not None else spec.empty
            detail = f"no answer within {waited:.1f}s" if timed_out else (error or "failed")
            out = ProbeOutput(
                spec.name,
                data,
                prev.errors if prev is not None else (),
                ProbeStatus(
                    name=spec.name, ok=False, duration_s=waited, finished_at=now, timed_out=timed_out,
                    stale=prev is not None, last_success_at=self._last_ok.get(spec.name), last_success_mono=self._last_ok_mono.get(spec.name), error=detail,
                ),
                ignored=prev.ignored if prev is not None else (),
            )
        self.outputs[spec.name] = out
        if spec.fn is None and result is not None:  # the kernel log
            self._back_off(out.data)
        return out

    def _skipped(self, reads: BackOffReads) -> frozenset[str]:
        backed = self.gate.state.backed_off
        return frozenset(b for b, rec in backed.items() if covers(rec, reads))

    def _read_functions(self) -> frozenset[str]:
        """The PCI functions agentd reads firmware-backed files of: the HCAs' and the
        physical netdevs' (as the latest inventory and netdev reads know them)."""
        hcas = {h.pci_bus_id for h in data_of(self.outputs, IB_GIDS) if h.pci_bus_id}
        return frozenset(hcas | {n.pci_bus_id for n in data_of(self.outputs, NETDEV) if n.pci_bus_id})

    def _back_off(self, log: object) -> None:
        """Match the kernel log's new events against the recent read windows; back off
        from the functions whose firmware failed right after agentd read them."""
        if not isinstance(log, KernelLog) or not log.available:
            return
        seen = self._backoff_seen[0]
        last = log.last_seq if log.last_seq is not None else -1
        if seen is not None and last <= seen:
            return  # nothing new (a steady cycle stops here)
        self._backoff_seen[0] = max(seen if seen is not None else -1, last)
        if seen is None and not self.host.is_live:
            return  # a recorded log's first read: history, stamped when read (agentd.collection.backoff)
        new: list[KernelEvent] = []
        for e in reversed(log.events):  # oldest first: the new ones are at the end
            if seen is not None and e.seq <= seen:
                break
            new.append(e)
        if not new or not self._windows:
            return
        new.reverse()
        for rec in back_offs(new, list(self._windows), self._read_functions(), self.gate.state.backed_off):
            self.gate.back_off(rec)

    def _phases(self, names: Iterable[str]) -> list[list[ProbeSpec[object]]]:
        wanted = [PROBE_BY_NAME[n] for n in names]
        first = [s for s in wanted if not any(a in {w.name for w in wanted} for a in s.after)]
        second = [s for s in wanted if s not in first]
        return [p for p in (first, second) if p]

    def run_sync(self, names: Iterable[str] | None = None) -> None:
        """Run probes (all by default) and wait for each up to its timeout (``run``'s order)."""
        for phase in self._phases(names or [p.name for p in PROBES]):
            aside = [(s, self._lane(s.name).submit(self._body, s, dict(self.outputs))[0], time.monotonic()) for s in phase if s.nvml]
            turn = self._turn([s for s in phase if not s.nvml])
            if turn is None:
                for spec in phase:
                    if not spec.nvml:
                        self._wait_sync(spec, self._lane(spec.name).submit(self._body, spec, dict(self.outputs))[0], time.monotonic())
            else:
                while not turn.fut.done():
                    n, left = turn.waiting()
                    if n >= len(turn.specs):
                        break
                    wait([turn.fut], timeout=max(0.0, left))
                    if not turn.fut.done() and turn.stalled(n):
                        break
                for spec in turn.unstarted():
                    self._wait_sync(spec, self._lane(spec.name).submit(self._body, spec, dict(self.outputs))[0], time.monotonic())
            for spec, fut, t0 in aside:
                self._wait_sync(spec, fut, t0)

    def _wait_sync(self, spec: ProbeSpec[object], fut: Future[_Run], t0: float) -> None:
        left = max(0.0, self._timeout(spec) - (time.monotonic() - t0))
        try:
            self._record(spec, fut.result(timeout=left), None, False, 0)
        except TimeoutError:
            self._record(spec, None, None, True, self._timeout(spec))
        except Exception as e:
            self._record(spec, None, f"{type(e).__name__}: {e}", False, time.monotonic() - t0)

    async def run(self, names: Iterable[str], *, quick: bool = False) -> list[ProbeOutput]:
        """Async variant for the daemon: the event loop never blocks on a probe. ``quick``:
        a scheduled check, which may replay only the probes' signals (module docstring).

        Within a phase, NVML runs beside the others (its library waits on the driver), and
        the probes that read files run one after another, each in its own lane with its
        own timeout: Python threads reading in parallel only contend for the GIL (which
        cost as much CPU as the reading), and a hung one still costs only its timeout."""
        done: list[ProbeOutput] = []
        for phase in self._phases(names):

            async def one(spec: ProbeSpec[object]) -> ProbeOutput:
                t0 = time.monotonic()
                fut, _ = self._lane(spec.name).submit(self._body, spec, dict(self.outputs), quick)
                try:
                    result = await await_future(fut, self._timeout(spec))
                    return self._record(spec, result, None, False, 0)
                except TimeoutError:
                    return self._record(spec, None, None, True, self._timeout(spec))
                except Exception as e:
                    return self._record(spec, None, f"{type(e).__name__}: {e}", False, time.monotonic() - t0)

            async def in_turn(specs: list[ProbeSpec[object]]) -> list[ProbeOutput]:
                turn = self._turn(specs, quick)
                if turn is None:
                    return [await one(s) for s in specs]
                while not turn.fut.done():
                    n, left = turn.waiting()
                    if n >= len(specs):
                        break
                    try:
                        await await_future(turn.fut, max(0.0, left))
                    except TimeoutError:
                        if turn.stalled(n):
                            break
                rest = turn.unstarted()
                return [*turn.recorded, *[await one(s) for s in rest]]

            beside = [asyncio.ensure_future(one(s)) for s in phase if s.nvml]
            try:
                outs = await in_turn([s for s in phase if not s.nvml])
                outs += await asyncio.gather(*beside)
            finally:
                for task in beside:
                    task.cancel()  # done already, unless this run was cancelled (stop)
            by_name = {o.name: o for o in outs}
            done.extend(by_name[s.name] for s in phase)
        return done

    def snapshot(self, taken_at: float | None = None) -> NodeSnapshot:
        """The NodeSnapshot of the latest outputs. Its content parts are the previous
        snapshot's very objects while no probe's data or read errors changed (a steady node
        assembles once); ``taken_at`` and the probe statuses are always this call's."""
        h, outputs = self.host, self.outputs
        when = time.time() if taken_at is None else taken_at
        gate = self.gate.state
        content = self._assembled.get(_content_key(outputs, gate),
                                      lambda: assemble(outputs, str(h.root), when, host_mode=h.mode, host_mode_reason=h.mode_reason, gate=gate))
        probes = tuple(outputs[p.name].status for p in PROBES if p.name in outputs)
        return content.model_copy(update={"taken_at": when, "probes": probes})

    def snapshot_job(self) -> Callable[[], NodeSnapshot]:
        """``snapshot`` over a private copy of the outputs, to call in a worker thread while
        the probes go on recording theirs."""
        return replace(self, outputs=dict(self.outputs)).snapshot

    def steady_snapshot(self, taken_at: float | None = None) -> NodeSnapshot | None:
        """``snapshot()`` when its content would be the last assembly's (cheap: no probe's
        data or read errors changed), else None (assembling belongs off the event loop)."""
        return self.snapshot(taken_at) if self._assembled.would_reuse(_content_key(self.outputs, self.gate.state)) else None

    def with_config(self, config: AgentConfig) -> Collector:
        return replace(self, config=config)  # the shared gate takes the new collect.ignore


def _content_key(outputs: Mapping[str, ProbeOutput], gate: GateState) -> list[object]:
    """What a snapshot's content is assembled from: every probe's data, read errors and
    ignored devices, and the gate's state."""
    key: list[object] = [gate]
    for p in PROBES:
        o = outputs.get(p.name)
        key += (o.data, o.errors, o.ignored) if o is not None else (None, None, None)
    return key


def collect_once(host: HostRoot, config: AgentConfig) -> NodeSnapshot:
    c = Collector(host, config)
    c.run_sync()
    return c.snapshot()
