"""Typed, immutable records for one node at one instant.

Readers in ``agentd.host`` build these; checks and renderers only read them. Every record
is a frozen pydantic model so the whole snapshot serialises to JSON (``/topology``,
``agentd inspect --format json``, the baseline file) and can be validated when read back.

Conventions:
- PCI bus ids are lowercase ``dddd:bb:dd.f``.
- Unknown values are ``None``, never a made-up default.
- IB data counters (``port_xmit_data``/``port_rcv_data``) are stored raw, in the 4-byte
  words the PMA counts; conversion to bytes happens in exposition.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Iterable, Literal, Mapping, Protocol, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentd.base.ids import CLASS_BRIDGE_OTHER, CLASS_BRIDGE_PCI, GPU_CLASSES, VENDOR_NVIDIA, pci_class
from agentd.base.rdma_family import Family, rdma_family


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# ---------------------------------------------------------------------------
# read errors and probe bookkeeping

ReadErrorKind = Literal[
    "missing",  # a file the reader needs does not exist
    "unreadable",  # open/read failed (EACCES, EIO, ...)
    "unparsable",  # the content is not what the ABI says
    "timeout",  # the read or call did not finish in time
    "unavailable",  # the whole source is absent (no NVML library, ioctl refused)
    "escape",  # a symlink pointed outside the host root
]


class ReadError(Record):
    """A problem reading one thing. Becomes a ``probe.failed`` finding; never an exception."""

    source: str  # probe name: pci, infiniband, netdev, ethtool, dcb, modules, system, nvml
    path: str  # path relative to the host root, or an API call name
    kind: ReadErrorKind
    detail: str = ""


class ProbeStatus(Record):
    """Outcome of one probe run (one reader over one source)."""

    name: str
    ok: bool  # finished without a source-level failure (individual read errors allowed)
    duration_s: float
    finished_at: float  # unix time
    timed_out: bool = False
    stale: bool = False  # the data in the snapshot comes from an earlier run
    last_success_at: float | None = None  # unix time, for display and *_timestamp_seconds
    # time.monotonic() of that success in the collecting process: the staleness clock, so a
    # wall-clock jump neither hides nor invents stale data (None: no success in this process)
    last_success_mono: float | None = None
    error: str | None = None
    files_read: int = 0


# ---------------------------------------------------------------------------
# PCI


class PathType(IntEnum):
    """GPU-NIC PCIe distance in nvidia-smi topo vocabulary; lower is closer."""

    PIX = 1  # at most one PCIe switch (or bridge) between the two
    PXB = 2  # several PCIe switches, no host bridge
    PHB = 3  # through the host bridge of one root complex
    NODE = 4  # different root complexes (host bridges) of one NUMA node
    SYS = 5  # across NUMA nodes / sockets


PathName = Literal["PIX", "PXB", "PHB", "NODE", "SYS"]

PciePortType = Literal[
    "endpoint",
    "legacy_endpoint",
    "root_port",
    "upstream",
    "downstream",
    "pcie_to_pci",
    "pci_to_pcie",
    "rc_endpoint",
    "rc_event_collector",
]


class AerCounts(Record):
    """One ``aer_dev_{correctable,nonfatal,fatal}`` file: the kernel's TOTAL_ERR_* line and
    the per-type lines before it (``RxErr``, ``BadTLP``, ``dev_cor_errs_bit[12]`` ...)."""

    total: int
    by_type: dict[str, int] = Field(default_factory=dict)


class PcieAer(Record):
    """AER statistics of one PCI function (sysfs-bus-pci-devices-aer_stats). A severity is
    None when its file is absent (no AER capability, kernel < 4.19) or unparsable: unknown,
    never 0."""

    correctable: AerCounts | None = None
    nonfatal: AerCounts | None = None
    fatal: AerCounts | None = None


class PciLinkRead(Record):
    """What the medium-tier ``pci_errors`` probe reads of one function (the slow ``pci``
    probe reads the rest): AER statistics, and the current link of NICs and bridges, so a
    link that retrains between two slow polls is seen. GPUs' links are not re-read (they
    lower their speed when idle)."""

    bdf: str
    aer: PcieAer | None = None  # None: no aer_dev_* file at all
    link_read: bool = False  # current_link_* below were read by this probe
    current_link_speed: str | None = None
    current_link_speed_gts: float | None = None
    current_link_width: int | None = None


class PciDevice(Record):
    bdf: str  # 0000:1b:00.0
    class_code: int  # 0x030200
    vendor_id: int | None = None
    device_id: int | None = None
    subsystem_vendor_id: int | None = None
    subsystem_device_id: int | None = None
    numa_node: int | None = None  # None when sysfs says -1 or the file is absent
    local_cpulist: str | None = None
    current_link_speed: str | None = None  # raw sysfs text, e.g. "16.0 GT/s PCIe"
    current_link_speed_gts: float | None = None
    current_link_width: int | None = None
    max_link_speed: str | None = None
    max_link_speed_gts: float | None = None
    max_link_width: int | None = None
    # Bridges from the root complex down to the immediate parent, outermost first.
    parent_chain: tuple[str, ...] = ()
    root_complex: str | None = None  # host bridge directory, e.g. "pci0000:00"
    driver: str | None = None
    # From config space when readable (root); None when not readable.
    pcie_port_type: PciePortType | None = None
    acs_ctrl: int | None = None  # ACS control register; None: no ACS capability / not readable
    # Config space bytes the kernel returned (4096, or 256 without extended space); 64 to
    # a reader without CAP_SYS_ADMIN, so port type and ACS are unknown; None: not read.
    config_bytes: int | None = None
    # AER statistics (medium-tier pci_errors probe) of GPUs, HCAs and the bridges above
    # them; None: not read, or no AER files.
    aer: PcieAer | None = None

    @property
    def is_bridge(self) -> bool:
        return pci_class(self.class_code) == CLASS_BRIDGE_PCI

    @property
    def is_gpu(self) -> bool:
        # VGA or 3D controller. NVSwitch (0x068000) is a bridge-class device, not a GPU.
        return pci_class(self.class_code) in GPU_CLASSES

    @property
    def is_nvswitch(self) -> bool:
        return self.class_code == CLASS_BRIDGE_OTHER << 8 and self.vendor_id == VENDOR_NVIDIA


# ---------------------------------------------------------------------------
# InfiniBand / RDMA


class Gid(Record):
    index: int
    gid: str  # 8 groups of 4 lowercase hex digits, as sysfs prints it
    type: str | None = None  # "IB/RoCE v1" | "RoCE v2"; None when gid_attrs is absent
    netdev: str | None = None


class TclassOverride(Record):
    """mlx5's driver-global traffic class (MLNX_OFED/DOCA kernel modules):
    ``/sys/class/infiniband/<dev>/tc/<port>/traffic_class``. When set, the kernel puts it in
    every RoCE QP of the port, whatever the application asked for (NCCL_IB_TC included)."""

    global_tclass: int | None = None  # "Global tclass=N" (0-255); None: no global value
    rules: tuple[str, ...] = ()  # per-address rules as printed ("dst_ip=10.0.0.0/24,tclass=106")


class LinkDiag(Record):
    """What ``mstlink``/``mlxlink`` (the opt-in slow-tier reader, agentd.host.mstlink) says
    of an InfiniBand port the kernel has no PHY view of: its BERs as the firmware measures
    them and the module's monitors. Every field None: not reported."""

    tool: str  # "mstlink" | "mlxlink"
    effective_ber: float | None = None  # after FEC (what the link delivers)
    raw_ber: float | None = None  # before FEC
    symbol_ber: float | None = None
    effective_errors: int | None = None
    link_down: int | None = None  # the firmware's Link Down Counter
    link_error_recovery: int | None = None
    module_temperature_c: float | None = None
    rx_power_dbm: tuple[float, ...] = ()  # per lane
    recommendation: str | None = None  # the tool's "Troubleshooting Info" recommendation


class IbPort(Record):
    port: int
    state: str | None = None  # "ACTIVE", "DOWN", "INIT", "ARMED", ...
    state_id: int | None = None
    phys_state: str | None = None  # "LinkUp", "Polling", "Disabled", ...
    phys_state_id: int | None = None
    rate_raw: str | None = None  # "400 Gb/sec (4X NDR)"
    rate_gbps: float | None = None  # 400.0; 0.0 on dead ports that print 0
    width: int | None = None  # lanes: 4 for "4X"
    generation: str | None = None  # "NDR", "HDR", ...; None for "10 Gb/sec (4X)"
    link_layer: str | None = None  # "InfiniBand" | "Ethernet"
    lid: int | None = None
    sm_lid: int | None = None
    gids: tuple[Gid, ...] = ()
    counters: dict[str, int] = Field(default_factory=dict)  # counters/ (+ counters_ext/)
    hw_counters: dict[str, int] = Field(default_factory=dict)  # mlx5 hw_counters/
    netdev: str | None = None  # the netdev of this port (RoCE: via gid ndevs / device net/)
    sm_sl: int | None = None  # ports/<n>/sm_sl: the SL the subnet manager uses (IB)
    tclass: TclassOverride | None = None  # None: no tc/<port>/traffic_class (inbox driver) or unread
    # The netdev whose operstate/carrier gave ``state``/``phys_state`` instead of the port's
    # own files: an EFA port (the efa driver hard-codes ACTIVE/LinkUp), or a port whose
    # link reads agentd backed off (agentd.collection.collector.assemble). None: sysfs.
    state_from: str | None = None
    link_diag: LinkDiag | None = None  # mstlink/mlxlink (opt-in, [optics] link_tool); None: not asked

    @property
    def is_active(self) -> bool:
        return self.state == "ACTIVE"


TempSensorKind = Literal["asic", "module", "other"]


class TempSensor(Record):
    """One temperature channel of the HCA's hwmon device (mlx5: drivers/net/ethernet/
    mellanox/mlx5/core/hwmon.c, kernel >= 6.5; name "mlx5", under the PCI function).
    The driver reads the firmware's MTMP register at every read: in 0.125 degC steps."""

    hwmon: str  # the hwmon directory: "hwmon3"
    channel: int  # N of tempN_*
    label: str | None = None  # tempN_label: "asic", "Module0"; older firmware "sensor<index>"
    kind: TempSensorKind = "other"
    temperature_c: float | None = None  # tempN_input
    highest_c: float | None = None  # tempN_highest: the maximum since the driver loaded (or reset_history)
    critical_c: float | None = None  # tempN_crit: the sensor's high threshold (MTMP temp_threshold_hi)


class Hca(Record):
    name: str  # mlx5_0
    hca_type: str | None = None  # MT4129
    fw_ver: str | None = None
    board_id: str | None = None
    node_guid: str | None = None
    pci_bus_id: str | None = None
    numa_node: int | None = None
    driver: str | None = None
    # The bus id of the physical function when this device's PCI function is an SR-IOV
    # virtual function (its ``physfn`` link); None: a physical function, or not read yet.
    physfn: str | None = None
    ports: tuple[IbPort, ...] = ()
    # hwmon temperature channels of the HCA's PCI function: ASIC sensors and, when a
    # module with a thermal monitor is plugged, one module sensor (empty: none, or not read)
    temperatures: tuple[TempSensor, ...] = ()

    @property
    def family(self) -> Family:
        """The driver family (agentd.base.rdma_family): how its ports and counters read."""
        return rdma_family(self.driver, self.name)

    @property
    def is_vf(self) -> bool:
        return self.physfn is not None


# ---------------------------------------------------------------------------
# Devices agentd does not read, or reads only in part


class IgnoredDevice(Record):
    """A device ``collect.ignore`` names: no reader opened anything of it."""

    kind: Literal["rdma", "netdev", "pci"]
    name: str  # the RDMA device or netdev name; the bus id for a PCI function
    pci_bus_id: str | None = None  # its PCI function, when the class link says
    pattern: str  # the collect.ignore glob that matched it (or its function)


BackOffReads = Literal["firmware", "link"]


class BackedOff(Record):
    """A PCI function whose firmware-backed reads agentd stopped for the rest of the boot
    (agentd.host.gate). ``firmware``: what the driver answers with a firmware command and
    agentd can do without: the RDMA counters (``counters/``, ``counters_ext/``,
    ``hw_counters/``), ``ethtool -S`` statistics, DCB (PFC), the netdev's ECN switches and
    hwmon sensors; ``link``: those and the port attributes the driver also asks the
    firmware for (state, phys_state, rate, LIDs, sm_sl), the port's state then taken from
    its netdev. What the kernel keeps itself is still read: netdev state and carrier, GID
    tables, the HCA's attributes, PCI attributes."""

    pci_bus_id: str
    reads: BackOffReads
    reason: Literal["kernel_log", "limited_pf"]
    # The kernel log line that showed the failure right after agentd read the device, or
    # the VPD field that names a Fabric Manager limited PF.
    evidence: str
    since: float  # unix time


# ---------------------------------------------------------------------------
# Network interfaces


class RoceEcn(Record):
    """``/sys/class/net/<if>/ecn/roce_{np,rp}/enable/<prio>`` (mlx5)."""

    np: dict[int, bool] = Field(default_factory=dict)
    rp: dict[int, bool] = Field(default_factory=dict)


class PfcConfig(Record):
    """Priority flow control as the NIC is configured (DCB netlink or mlnx_qos)."""

    enabled: tuple[int, ...] = ()  # priorities with PFC on
    trust: str | None = None  # "pcp" | "dscp"
    source: str = ""  # "dcbnl" | "mlnx_qos"
    # DSCP (0-63) -> priority (0-7): the DCB APP table's DSCP entries (dcbnl) or mlnx_qos'
    # "dscp2prio mapping"; empty when not reported.
    dscp2prio: dict[int, int] = Field(default_factory=dict)
    # the device reports an APP trust table (DCB_ATTR_DCB_APP_TRUST_TABLE, kernels >= 6.3,
    # drivers with the op): its trust is set there; else (mlx5) by its DSCP APP entries
    apptrust: bool = False


class PauseConfig(Record):
    """Global (link-level, 802.3x) pause of a netdev: ethtool netlink ETHTOOL_MSG_PAUSE_GET
    (what ``ethtool -a`` prints). Only ``rx`` and ``tx`` are set by agentd; ``autoneg``
    is shown, never compared (mlx5 reports it off and refuses it on)."""

    autoneg: bool | None = None
    rx: bool
    tx: bool


class FecBin(Record):
    """One bin of the FEC histogram (kernel >= 6.18, ETHTOOL_A_FEC_STAT_HIST): codewords
    that needed between ``low`` and ``high`` symbol corrections (inclusive)."""

    low: int
    high: int
    count: int


class FecStats(Record):
    """FEC statistics (ETHTOOL_MSG_FEC_GET with ETHTOOL_FLAG_STATS; ethtool --show-fec -I).
    Totals and, where the driver counts per lane (mlx5: FC-FEC only; RS-FEC corrects across
    lanes), per lane. None: the driver does not report it."""

    corrected_blocks: int | None = None
    uncorrectable_blocks: int | None = None
    corrected_bits: int | None = None
    corrected_per_lane: tuple[int, ...] = ()
    uncorrectable_per_lane: tuple[int, ...] = ()
    histogram: tuple[FecBin, ...] = ()


class PhyLink(Record):
    """The kernel's view of an Ethernet port's physical layer (ethtool netlink): why the
    link is down, how often the PHY saw it go down, and its FEC counters."""

    link: bool | None = None  # ETHTOOL_A_LINKSTATE_LINK
    # ETHTOOL_A_LINKSTATE_EXT_STATE/_SUBSTATE (reported while the link is down by drivers
    # that know why: mlx5, mlxsw, bnxt, ...): "no_cable", "bad_signal_integrity", ...
    ext_state: str | None = None
    ext_substate: str | None = None
    link_down_events: int | None = None  # ETHTOOL_A_LINKSTATE_EXT_DOWN_CNT (kernel >= 6.3)
    fec: FecStats | None = None  # None: no FEC statistics (no FEC op, or none reported)


class ThresholdSet(Record):
    """A module's own alarm and warning thresholds for one monitor (SFF-8636 page 03h,
    CMIS page 02h), in base units. None: the module leaves it 0/unset."""

    high_alarm: float | None = None
    low_alarm: float | None = None
    high_warning: float | None = None
    low_warning: float | None = None


class ModuleLane(Record):
    lane: int  # 1-based, as the specifications and ethtool number them
    rx_power_w: float | None = None  # watts (the module's 0.1 uW steps)
    tx_power_w: float | None = None
    tx_bias_a: float | None = None  # amperes
    rx_los: bool | None = None  # CMIS page 11h Rx LOS flag
    # The module's own latched Rx power flags for this lane ("low_alarm", "low_warning", ...)
    rx_power_flags: tuple[str, ...] = ()


class EepromPage(Record):
    """Half a page of module memory as the kernel returned it (MODULE_EEPROM_GET: lower
    memory is page 0 offset 0, upper memory offset 128 of the page and bank)."""

    page: int
    bank: int = 0
    offset: int  # 0 (lower) or 128 (upper)
    data: str  # hex, 128 bytes (fewer where the kernel returned fewer)


class Transceiver(Record):
    """The pluggable module of an Ethernet port, decoded from its EEPROM
    (agentd.host.transceiver; memory maps: agentd.base.sff)."""

    identifier: int | None = None  # SFF-8024 byte 0
    identifier_name: str | None = None  # "QSFP28", "OSFP", ...
    spec: Literal["sff8636", "cmis"] | None = None  # None: a map agentd does not decode
    revision: str | None = None  # CMIS revision "5.1"
    vendor: str | None = None
    oui: str | None = None
    part_number: str | None = None
    vendor_revision: str | None = None
    serial: str | None = None  # redacted in captures made with --redact
    date_code: str | None = None
    copper: bool | None = None  # a copper cable (no optical monitors)
    temperature_c: float | None = None
    vcc_v: float | None = None
    lanes: tuple[ModuleLane, ...] = ()
    temperature_thresholds: ThresholdSet | None = None
    vcc_thresholds: ThresholdSet | None = None
    rx_power_thresholds: ThresholdSet | None = None
    tx_power_thresholds: ThresholdSet | None = None
    tx_bias_thresholds: ThresholdSet | None = None
    # The module's own latched temperature flags (CMIS lower page byte 9; SFF-8636 byte 6)
    temperature_flags: tuple[str, ...] = ()
    source: str = ""  # "netlink" | "ioctl" | "recorded"
    problem: str | None = None  # why part of it could not be decoded (short page, unknown map)
    pages: tuple[EepromPage, ...] = ()  # what was read (captures record these)

    @property
    def lanes_in_use(self) -> tuple[ModuleLane, ...]:
        """The lanes whose own laser is on (Tx bias above 0): a port uses 4 of an 8-lane
        module's lanes at 400G, and the dark ones read no light by design."""
        return tuple(lane for lane in self.lanes if lane.tx_bias_a is not None and lane.tx_bias_a > 0)


class Netdev(Record):
    name: str
    ifindex: int | None = None
    type: int | None = None  # ARPHRD: 1 ether, 32 infiniband
    mtu: int | None = None
    operstate: str | None = None  # "up", "down", "unknown", ...
    carrier: bool | None = None
    carrier_changes: int | None = None
    carrier_up_count: int | None = None
    carrier_down_count: int | None = None
    speed_mbps: int | None = None  # None when unknown (-1) or down
    address: str | None = None
    pci_bus_id: str | None = None
    is_virtual: bool = False  # no device link: bond, vlan, veth, lo, bridge
    master: str | None = None  # bond/bridge master
    bond_slaves: tuple[str, ...] = ()
    ecn: RoceEcn | None = None
    pfc: PfcConfig | None = None
    pause: PauseConfig | None = None  # None: not read, or the device has no pause parameters (EOPNOTSUPP)
    ethtool: dict[str, int] | None = None  # `ethtool -S` statistics; None if not read
    phy: PhyLink | None = None  # ethtool netlink link state and FEC; None: not read or not supported
    module: Transceiver | None = None  # the plugged module's EEPROM; None: none, not read or not supported

    @property
    def link_layer(self) -> str | None:
        if self.type == 32:
            return "InfiniBand"
        if self.type == 1:
            return "Ethernet"
        return None


# ---------------------------------------------------------------------------
# Kernel, modules and the system


class GdrInfo(Record):
    """What NCCL looks at to decide whether GPUDirect RDMA can register GPU memory."""

    peermem_loaded: bool = False  # /sys/module/nvidia_peermem exists
    # The first of NCCL's three paths that exists (relative to host root), if any.
    peermem_version_path: str | None = None
    peermem_version: str | None = None
    nvidia_loaded: bool = False
    nvidia_driver_version: str | None = None
    nvidia_open_module: bool | None = None  # None: unknown (module not loaded)
    kernel_release: str | None = None  # "6.5.0-1024-nvidia"
    dmabuf_kernel_ok: bool | None = None  # Linux >= 5.12


class NumaNode(Record):
    node: int
    cpulist: str | None = None  # "0-55,112-167"
    cpumap: str | None = None  # "ffffffff,00000000" (kernel cpumask format)


class SystemInfo(Record):
    hostname: str | None = None
    machine_id: str | None = None  # /etc/machine-id: 32 lowercase hex digits; None when absent or uninitialized
    arch: str | None = None  # x86_64 | aarch64 | ppc64le
    cpu_vendor: str | None = None  # GenuineIntel | AuthenticAMD
    cpu_family: int | None = None
    cpu_model: int | None = None
    numa_nodes: tuple[NumaNode, ...] = ()
    virtualization: str | None = None  # None on bare metal, else e.g. "kvm", "hyperv", "xen"
    loaded_modules: tuple[str, ...] = ()  # /proc/modules names
    booted_at: float | None = None  # unix time the node booted (its kernel's, never agentd's start)
    boot_time_source: str | None = None  # where booted_at came from: "proc/stat btime", "proc/uptime", ...


# ---------------------------------------------------------------------------
# GPUs and NVLink (NVML)


class NvLink(Record):
    link: int
    state: Literal["up", "down"]
    remote_pci_bus_id: str | None = None
    remote_type: Literal["gpu", "nvswitch", "cpu", "unknown"] | None = None
    version: int | None = None
    # crc_flit, crc_data, replay, recovery (NVML nvlink error counters); effective, symbol
    # (per-link field values, Blackwell and later; absent where the GPU does not keep them)
    errors: dict[str, int] = Field(default_factory=dict)
    # The link's current speed in MB/s (NVML field NVML_FI_DEV_NVLINK_GET_SPEED, scope the
    # link; `nvidia-smi nvlink -s` prints it /1000 as GB/s: 26562 on H100, 53125 on GB200).
    # None: not reported (older drivers, or a down link).
    speed_mb_s: int | None = None


IncorrectConfiguration = Literal[
    "none",  # NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE: correct configuration
    "incorrect_sysguid",
    "incorrect_chassis_sn",
    "no_partition",
    "insufficient_nvlinks",
    "incompatible_gpu_fw",
    "invalid_location",
    "gpu_state_invalid",
    "unknown",  # a value this agentd does not know (a newer driver)
]


class FabricHealth(Record):
    """The GPU's fabric health (nvmlGpuFabricInfo_v2+ ``healthMask`` decoded, v3+
    ``healthSummary``; nvidia-smi -q's Fabric > Health block). Every field None: the GPU
    or driver does not report it ("Not Supported" / "N/A")."""

    summary: Literal["healthy", "unhealthy", "limited_capacity"] | None = None
    degraded_bandwidth: bool | None = None  # "Bandwidth : Degraded" (False: "Full")
    route_recovery: bool | None = None  # "Route Recovery in progress : True"
    route_unhealthy: bool | None = None
    access_timeout_recovery: bool | None = None
    incorrect_configuration: IncorrectConfiguration | None = None
    partition_assigned: bool | None = None
    gfm_connected: bool | None = None  # the global fabric manager's connection state
    mask: int | None = None  # the raw healthMask, when it came from NVML


class C2cLink(Record):
    """A Grace <-> GPU NVLink-C2C link (NVML_FI_DEV_C2C_LINK_* field values)."""

    link: int
    state: Literal["up", "down"]
    max_bw_mb_s: int | None = None  # NVML_FI_DEV_C2C_LINK_GET_MAX_BW


CLUSTER_UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


class NvmlGpu(Record):
    index: int
    pci_bus_id: str  # normalised lowercase dddd:bb:dd.f
    name: str | None = None
    uuid: str | None = None
    # Links NVML reports as supported; inactive ones are state "down".
    nvlinks: tuple[NvLink, ...] = ()
    fabric_state: Literal["not_supported", "not_started", "in_progress", "completed"] | None = None
    fabric_status: str | None = None  # "success" or the NVML error text ("Insufficient Resources")
    # The NVLink domain the fabric put the GPU in (nvmlGpuFabricInfo: clusterUuid, cliqueId);
    # GPU feature discovery's nvidia.com/gpu.clique is "<cluster_uuid>.<clique_id>". None:
    # not reported (no fabric API, or the probe has not completed). An all-zero UUID is kept
    # as read ("00000000-0000-0000-0000-000000000000"): judging it is the checks' job.
    # Only the 8-4-4-4-12 form: NVML's 16 bytes always format so, and a recording that says
    # anything else does not match the schema (a read error), since the value becomes a
    # label, a metric label and a Slurm block name.
    fabric_cluster_uuid: str | None = Field(default=None, pattern=CLUSTER_UUID_PATTERN)  # lowercase 8-4-4-4-12
    fabric_clique_id: int | None = None
    fabric_health: FabricHealth | None = None
    c2c_links: tuple[C2cLink, ...] = ()  # Grace systems only
    # nvmlDeviceGetPcieReplayCounter: PCIe replays (link-level retransmissions) since boot
    pcie_replay_errors: int | None = None
    vbios_version: str | None = None  # nvmlDeviceGetVbiosVersion: "96.00.74.00.0D"
    error: str | None = None  # per-GPU NVML error (e.g. GPU lost: "GPU is lost")


class NvmlInfo(Record):
    available: bool = False  # False: no driver/library; a normal answer, not a failure
    driver_version: str | None = None
    cuda_driver_version: int | None = None  # 12040
    gpus: tuple[NvmlGpu, ...] = ()
    error: str | None = None  # why not available
    # False: nobody could be asked (a root that is not live and recorded no NVML answer);
    # "unavailable" then says nothing about the node's NVML.
    asked: bool = True


class Gpu(Record):
    """A GPU as agentd sees it: from PCI, enriched by NVML when available."""

    index: int  # NVML index; without NVML, the ordinal by PCI bus id (NVML's default order)
    pci_bus_id: str
    name: str | None = None
    uuid: str | None = None
    numa_node: int | None = None
    nic_paths: dict[str, PathName] = Field(default_factory=dict)  # hca name -> path type
    in_nvml: bool | None = None  # None: NVML unavailable; False: on PCI but NVML lost it


class FabricDaemons(Record):
    """Fabric daemons seen in the node's process table (ROOT/proc/<pid>/comm).

    ``complete`` says the table is the node's whole one (kthreadd is PID 2: the host's PID
    namespace, or its /proc at a container's /host/proc), so a daemon missing from ``running`` is not
    running; otherwise (a container with its own PID namespace, a recording without the
    process table) absence means nothing."""

    asked: bool = False  # the process table was read at all
    complete: bool = False
    running: tuple[str, ...] = ()  # names of interest found, sorted: nv-fabricmanager, nvidia-imex, nvlsm


# ---------------------------------------------------------------------------
# The kernel log (agentd.host.kmsg): events the drivers print, not states sysfs shows


class KernelEvent(Record):
    """One kernel log record a driver catalogue recognised (agentd.host.kernel_catalog)."""

    seq: int  # the record's sequence number in this boot's log
    at: float  # unix time, estimated from the record's timestamp (or when it was first read)
    kind: str  # xid | sxid | gpu_off_bus | nvrm | peermem | mlx5 | efa | aer | pcie
    code: str  # "79", "cmd_timeout", "fatal", ... ("other": a line of the driver no rule names)
    device: str | None = None  # the PCI bus id it is about (dddd:bb:dd.f), when the line says
    detail: str = ""  # the message, one line, truncated
    # What the line itself says, beside its code: its "Fatal" / "Non-fatal" word (NVLink5
    # XIDs, SXIDs), and the recovery action Xid 154 names (none, gpu_reset, node_reboot,
    # drain_p2p, drain_and_reset, recover_imex_domain, unknown)
    fatal: bool | None = None
    action: str | None = None


class KernelCount(Record):
    """How many events of one kind, code and device were read since agentd started on this
    boot (records a previous agentd already read are not counted again)."""

    kind: str
    code: str
    device: str | None = None
    count: int = 0


class KernelLog(Record):
    available: bool = False  # the log could be read (False: why in ``error``)
    source: str | None = None  # "/dev/kmsg" (live) or the recorded file ("dev/kmsg")
    error: str | None = None
    # False: nobody could be asked (a root that is neither live nor holds a recorded log)
    asked: bool = True
    boot_id: str | None = None
    last_seq: int | None = None  # the newest record read
    records: int = 0  # records read since agentd started (on this boot)
    # records agentd never read: the kernel overwrote them before agentd got to them, or a
    # one-shot read passed over them (its time was up under a flood)
    lost: int = 0
    lost_at: float | None = None  # unix time of the latest loss
    behind: bool = False  # the last poll stopped at its time budget with records still waiting
    # recent events, oldest first (bounded), and the latest of every kind, code and device
    # however old (a storm of other events never pushes out the one that matters)
    events: tuple[KernelEvent, ...] = ()
    counts: tuple[KernelCount, ...] = ()


# ---------------------------------------------------------------------------
# The snapshot


class NcclConf(Record):
    """The node's ``/etc/nccl.conf`` as NCCL reads it: ``KEY=VALUE`` lines, ``#`` comments.
    NCCL applies it to every job on the node; a job's environment (agentd's env file
    included) wins over it."""

    path: str  # relative to the host root: "etc/nccl.conf"
    variables: dict[str, str] = Field(default_factory=dict)


class SoftwareVersions(Record):
    """Versions of the RDMA stack that sysfs and the library names tell (the NVIDIA driver,
    kernel release and VBIOS are in GdrInfo and NvmlGpu; HCA firmware in Hca)."""

    # /sys/module/mlx5_core/version: MLNX_OFED/DOCA-OFED modules ("5.8-4.1.5"); inbox
    # drivers have no version file (None: the kernel's own driver, or mlx5_core not loaded).
    mlx5_core: str | None = None
    # rdma-core's version from libibverbs' file name, libibverbs.so.1.14.<version>
    # ("50.0"); the library path it came from, relative to the host root.
    rdma_core: str | None = None
    rdma_core_library: str | None = None


class NodeSnapshot(Record):
    taken_at: float  # unix time the collection finished
    host_root: str
    host_mode: Literal["live", "offline", "simulated"] | None = None  # which kernel answered (agentd.host.fs.HostRoot)
    host_mode_reason: str | None = None
    system: SystemInfo = SystemInfo()
    pci: tuple[PciDevice, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    hcas: tuple[Hca, ...] = ()
    netdevs: tuple[Netdev, ...] = ()
    gdr: GdrInfo = GdrInfo()
    nvml: NvmlInfo = NvmlInfo()
    kernel: KernelLog = KernelLog(asked=False)
    daemons: FabricDaemons = FabricDaemons()
    nccl_conf: NcclConf | None = None  # None: no /etc/nccl.conf (or not read)
    versions: SoftwareVersions = SoftwareVersions()
    probes: tuple[ProbeStatus, ...] = ()
    read_errors: tuple[ReadError, ...] = ()
    # Devices collect.ignore names (nothing of them read), and functions whose
    # firmware-backed reads were stopped (agentd.host.gate).
    ignored: tuple[IgnoredDevice, ...] = ()
    backed_off: tuple[BackedOff, ...] = ()
    # Netdevs that carry a default route (IPv4 or IPv6): the node's management path.
    default_routes: tuple[str, ...] = ()

    def pci_device(self, bdf: str) -> PciDevice | None:
        for dev in self.pci:
            if dev.bdf == bdf:
                return dev
        return None

    def hca(self, name: str) -> Hca | None:
        for h in self.hcas:
            if h.name == name:
                return h
        return None

    def netdev(self, name: str) -> Netdev | None:
        for n in self.netdevs:
            if n.name == name:
                return n
        return None



# How each NodeSnapshot field counts for what is derived from a snapshot (every field
# once: tests/test_snapshot_fields.py fails on a field missing here):
# - "time": when it was taken; never content;
# - "probes": the probe statuses, judged by their flags (ok, timed out, stale), not identity;
# - "content": everything else: a check, a render or the writer may read it, so a change of
#   it alone is evaluated and written again (agentd.outputs.evaluate.Evaluator,
#   agentd.daemon.publisher), and ``agentd.collection.share.share`` replaces it with the
#   previous snapshot's object when equal.
SnapshotFieldKind = Literal["time", "probes", "content"]
SNAPSHOT_FIELDS: Mapping[str, SnapshotFieldKind] = {
    "taken_at": "time",
    "host_root": "content",
    "host_mode": "content",
    "host_mode_reason": "content",
    "system": "content",
    "pci": "content",
    "gpus": "content",
    "hcas": "content",
    "netdevs": "content",
    "gdr": "content",
    "nvml": "content",
    "kernel": "content",
    "daemons": "content",
    "nccl_conf": "content",
    "versions": "content",
    "probes": "probes",
    "read_errors": "content",
    "ignored": "content",
    "backed_off": "content",
    "default_routes": "content",
}
CONTENT_FIELDS: tuple[str, ...] = tuple(f for f in NodeSnapshot.model_fields if SNAPSHOT_FIELDS.get(f, "content") == "content")


# ---------------------------------------------------------------------------
# What the history keeps: the checks read earlier snapshots through these read-only views.
# Every history entry but the newest is a compact one (agentd.collection.compact), which
# keeps only these; a whole NodeSnapshot has them all, so it is a HistoryEntry as it is.
# A check that reads anything else of an earlier snapshot does not type-check.

# The ``ethtool -S`` statistics a compact entry keeps (the rates the checks measure over the
# history: roce.pfc.pause_storm, roce.qos.lossy_traffic, and mlx5's PHY counters for the
# pre-FEC BER and link-down events of the optics checks); the others are the newest entry's.
HISTORY_ETHTOOL: frozenset[str] = frozenset(
    [f"{d}_prio{p}_pause" for d in ("rx", "tx") for p in range(8)]
    + [f"tx_prio{p}_bytes" for p in range(8)]
    + ["tx_vport_rdma_unicast_bytes"]
    + ["rx_corrected_bits_phy", "rx_bits_phy", "link_down_events_phy"]
)


def phy_counters(phy: PhyLink | None) -> PhyLink | None:
    """The counters of a PhyLink a compact history entry keeps (link-down events, FEC
    totals: the optics checks' rates); the link-down reason, lanes and histogram are the
    newest entry's business."""
    if phy is None or (phy.link_down_events is None and phy.fec is None):
        return None
    f = phy.fec
    fec = None if f is None else FecStats(corrected_blocks=f.corrected_blocks, uncorrectable_blocks=f.uncorrectable_blocks, corrected_bits=f.corrected_bits)
    return PhyLink(link_down_events=phy.link_down_events, fec=fec)


class PortReading(Protocol):
    """An IB port as the history keeps it. An aged entry (older than every counter window)
    keeps ``counters`` with ``link_downed`` only and no ``hw_counters``."""

    @property
    def port(self) -> int: ...
    @property
    def state(self) -> str | None: ...
    @property
    def phys_state(self) -> str | None: ...
    @property
    def link_layer(self) -> str | None: ...
    @property
    def netdev(self) -> str | None: ...
    @property
    def counters(self) -> Mapping[str, int]: ...
    @property
    def hw_counters(self) -> Mapping[str, int]: ...
    @property
    def is_active(self) -> bool: ...


class HcaReading(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def ports(self) -> tuple[PortReading, ...]: ...


class NetdevReading(Protocol):
    """A netdev as the history keeps it: link state, the carrier change counts (RoCE flaps
    between polls), the ``HISTORY_ETHTOOL`` statistics and the PHY's counters
    (``phy_counters``) (None: not read, or an aged entry)."""

    @property
    def name(self) -> str: ...
    @property
    def operstate(self) -> str | None: ...
    @property
    def carrier(self) -> bool | None: ...
    @property
    def carrier_changes(self) -> int | None: ...
    @property
    def carrier_down_count(self) -> int | None: ...
    @property
    def ethtool(self) -> Mapping[str, int] | None: ...
    @property
    def phy(self) -> PhyLink | None: ...


class LinkReading(Protocol):
    """An NVLink as the history keeps it (aged: no ``errors``)."""

    @property
    def link(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def errors(self) -> Mapping[str, int]: ...


class GpuReading(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def pci_bus_id(self) -> str: ...
    @property
    def error(self) -> str | None: ...
    @property
    def pcie_replay_errors(self) -> int | None: ...
    @property
    def nvlinks(self) -> tuple[LinkReading, ...]: ...


class NvmlReading(Protocol):
    @property
    def available(self) -> bool: ...
    @property
    def asked(self) -> bool: ...
    @property
    def gpus(self) -> tuple[GpuReading, ...]: ...


class PciReading(Protocol):
    """A PCI function as the history keeps it: those with AER counters (the functions the
    pci_errors probe reads), with their current link."""

    @property
    def bdf(self) -> str: ...
    @property
    def aer(self) -> PcieAer | None: ...
    @property
    def current_link_speed(self) -> str | None: ...
    @property
    def current_link_width(self) -> int | None: ...


class HistoryEntry(Protocol):
    """An earlier snapshot as the checks (agentd.judging.checks.common.CheckInput.history)
    and the history's state file read it."""

    @property
    def taken_at(self) -> float: ...
    @property
    def host_root(self) -> str: ...
    @property
    def host_mode(self) -> str | None: ...
    @property
    def hcas(self) -> tuple[HcaReading, ...]: ...
    @property
    def netdevs(self) -> tuple[NetdevReading, ...]: ...
    @property
    def nvml(self) -> NvmlReading: ...
    @property
    def pci(self) -> tuple[PciReading, ...]: ...

    def hca(self, name: str) -> HcaReading | None: ...

    def netdev(self, name: str) -> NetdevReading | None: ...

    def pci_device(self, bdf: str) -> PciReading | None: ...


# ---------------------------------------------------------------------------
# Findings

# ok: a fact (shown with `check --all`); info: an event worth seeing (an application's XID,
# a corrected PCIe error), shown wherever findings are shown but never counted toward
# health; warning: the node is degraded; critical: drain it.
Severity = Literal["ok", "info", "warning", "critical"]
SEVERITIES: tuple[str, ...] = get_args(Severity)  # least first: the order findings are shown in
SEVERITY_ORDER: dict[str, int] = {s: i for i, s in enumerate(SEVERITIES)}
# What a severity weighs in the node's health (overall_status): ok and info nothing.
SEVERITY_RANK: dict[str, int] = {"ok": 0, "info": 0, "warning": 1, "critical": 2}
# Why a finding does not count toward health: its code or check is in observe mode
# (lifecycle.observe), it has not held for lifecycle raise_after yet, or the node is
# within lifecycle.boot_grace_s of booting and the code is one that is normal then.
Withheld = Literal["observe", "pending", "boot_grace"]


SubjectKind = Literal[
    "node",  # the node as a whole: "node"
    "hca",  # an RDMA device: name "mlx5_0"
    "port",  # a port of an RDMA device: name (the HCA) and port: "mlx5_0:1"
    "pci",  # a PCI function (a link, a bridge): bus_id "0000:1b:00.0"
    "gpu",  # a GPU: index "gpu3", or only its bus_id when it has no index (gone from the node)
    "nvlink",  # one NVLink of a GPU: index and link "gpu3:link5"
    "netdev",  # a network interface: name "ens1np0"
    "probe",  # a data source: name "nvml"; with path, one read of it "infiniband:class/..." ("*": the rest)
    "check",  # one of agentd's checks: name "ib.check_ports"
    "file",  # a file (or set of files) agentd writes for others: name "nfd-features", "nccl"
    "bench",  # the NCCL benchmark: name the runner, or "all_reduce/256MiB" for one op and size
    "setting",  # one enforced setting of one thing: name the knob, path its target "pfc@ens1np0", "peermem@node"
    "text",  # given as text only (tests, JSON read back): shown as given, joined to nothing
]

# kind -> (fields it must have, fields it may have); any other id field must be None.
_SUBJECT_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "node": ((), ()),
    "hca": (("name",), ()),
    "port": (("name", "port"), ()),
    "pci": (("bus_id",), ()),
    "gpu": ((), ("index", "bus_id")),
    "nvlink": (("index", "link"), ()),
    "netdev": (("name",), ()),
    "probe": (("name",), ("path",)),
    "check": (("name",), ()),
    "file": (("name",), ()),
    "bench": (("name",), ()),
    "setting": (("name", "path"), ()),
    "text": (("name",), ()),
}


class Subject(Record):
    """What a finding is about, as data: a kind and the ids that name the thing.

    ``str(subject)`` is the text every output shows (JSON ``subject``, text lines, the
    ``agentd_finding`` label): ``mlx5_3:1``, ``gpu3``, ``0000:1b:00.0``, ``ens1np0``,
    ``node``. Code that relates findings to devices (``NCCL_IB_HCA``) compares these fields,
    never the text. Build them with the constructors in ``agentd.judging.findings``.
    """

    kind: SubjectKind
    name: str | None = None  # hca, port (the HCA), netdev, probe, check, file, bench, text; setting: the knob
    port: int | None = None  # port
    index: int | None = None  # gpu, nvlink: the GPU index
    link: int | None = None  # nvlink
    bus_id: str | None = None  # pci; gpu (optional)
    path: str | None = None  # probe: the path one read failed on, "*" for the rest; setting: its target ("ens1np0", "mlx5_0:1", "node")

    @model_validator(mode="after")
    def _ids_fit_kind(self) -> Subject:
        required, optional = _SUBJECT_FIELDS[self.kind]
        for f in ("name", "port", "index", "link", "bus_id", "path"):
            given = getattr(self, f) is not None
            if f in required and not given:
                raise ValueError(f"a {self.kind} subject needs {f}")
            if given and f not in required and f not in optional:
                raise ValueError(f"a {self.kind} subject has no {f}")
        if self.kind == "gpu" and self.index is None and self.bus_id is None:
            raise ValueError("a gpu subject needs index or bus_id")
        return self

    def __str__(self) -> str:
        k = self.kind
        if k == "node":
            return "node"
        if k == "port":
            return f"{self.name}:{self.port}"
        if k == "pci":
            return str(self.bus_id)
        if k == "gpu":
            return f"gpu{self.index}" if self.index is not None else str(self.bus_id)
        if k == "nvlink":
            return f"gpu{self.index}:link{self.link}"
        if k == "probe" and self.path is not None:
            return f"{self.name}:{self.path}"
        if k == "setting":
            return f"{self.name}@{self.path}"
        return str(self.name)


class Finding(Record):
    """One judgement about one thing. ``about`` is the thing, as data; ``subject`` is its
    text (``str(about)``), kept as a field so every output shows it exactly as before.

    Production code builds findings with ``agentd.judging.findings.finding`` only (a test
    keeps it so). Given ``subject`` text without ``about`` (tests, JSON read back), the
    finding is about a ``text`` subject: shown the same, related to no device.
    ``about`` is not serialised: JSON has the ``subject`` text only.
    """

    code: str  # stable, dotted: ib.port.down
    severity: Severity
    subject: str  # str(about): mlx5_3:1, gpu3, 0000:1b:00.0, node
    message: str  # one line, measured and expected values
    remediation: str = ""
    measured: str | float | int | None = None
    expected: str | float | int | None = None
    about: Subject = Field(exclude=True)
    # The check that raised it (agentd.judging.checks.check_name: ``ib.check_ports``).
    check: str | None = None
    # Its lifecycle (agentd.judging.lifecycle), unix times: when the condition was first
    # seen (this episode), when a pending one will count, when a sticky one that is no
    # longer seen stops counting.
    since: float | None = None
    raises_at: float | None = None
    clears_at: float | None = None
    # Set when it does not count toward the node's health (/health, the Slurm wrapper,
    # NFD labels, NCCL files) and why; shown everywhere else.
    withheld: Withheld | None = None

    @model_validator(mode="before")
    @classmethod
    def _subject_text(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        about = data.get("about")
        if about is None:
            if "subject" in data:
                return {**data, "about": Subject(kind="text", name=data["subject"])}
            return data
        about = about if isinstance(about, Subject) else Subject.model_validate(about)
        text = str(about)
        if data.get("subject", text) != text:
            raise ValueError(f"subject {data['subject']!r} is not the text of about ({text!r})")
        return {**data, "about": about, "subject": text}


def judged(f: Finding) -> bool:
    """Whether a finding weighs in the node's health: a warning or a critical one that is
    not withheld (ok facts and info findings never do)."""
    return f.withheld is None and SEVERITY_RANK[f.severity] > 0


def counted(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that count toward the node's health (not ``withheld``)."""
    return [f for f in findings if f.withheld is None]


# The node's health as its findings say (``/health`` adds starting and maintenance)
NodeStatus = Literal["ok", "degraded", "critical"]


def overall_status(findings: Iterable[Finding]) -> NodeStatus:
    """The worst severity of the findings that count (withheld ones never do)."""
    worst = max((SEVERITY_RANK[f.severity] for f in findings if f.withheld is None), default=0)
    return ("ok", "degraded", "critical")[worst]


def sort_findings(findings: list[Finding] | tuple[Finding, ...]) -> list[Finding]:
    """Most severe first, then by code and subject, so output is stable."""
    return sorted(findings, key=lambda f: (-SEVERITY_ORDER[f.severity], f.code, f.subject))
