"""Node profiles as data: the PCI tree, the RDMA devices, and the GPU/driver facts.

A profile says *what* a node is; ``build.py`` decides how that looks in sysfs. Bus ids
follow research/nccl-spec.md 1.9 (2-socket Sapphire Rapids, one Broadcom PEX Gen5 switch
per GPU/NIC pair, NIC on bus ``hb+3`` and GPU on ``hb+4`` behind host bridge ``hb``).

Choices worth knowing:
- RDMA device names (``mlx5_N``) and netdev names are fixed by the profile, as udev rename
  rules fix them on real nodes; they are not derived from PCI probe order.
- ConnectX-7 is one device id (0x1021) in both modes; the class code says the mode
  (0x020700 InfiniBand, 0x020000 Ethernet), as on real cards.
- Link speeds are each device's *maximum*; the current speed of a link is the lower of
  its two ends (an L40S Gen4 GPU on a Gen5 root port trains at 16 GT/s, as it would).
- GUIDs, MACs and IPv4 addresses are fixed per profile, so trees are reproducible byte
  for byte (faults and tests rely on that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# "5.8-4.1.5": a documented /sys/module/mlx5_core/version of MLNX_OFED; rdma-core 50.0 is
# Ubuntu 24.04's (/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0).
OFED_VERSION = "5.8-4.1.5"
RDMA_CORE = "50.0"
H100_VBIOS = "96.00.74.00.0D"  # nvidia-smi -q "VBIOS Version" of an H100 SXM (driver 535.161.08)
NCCL_IB_TC_ROCE = 106

GT32, GT16, GT5, GT2_5 = "32.0 GT/s PCIe", "16.0 GT/s PCIe", "5.0 GT/s PCIe", "2.5 GT/s PCIe"


@dataclass(frozen=True)
class DeviceModel:
    vendor: int
    device: int
    class_code: int
    subsystem_vendor: int
    subsystem_device: int
    link_speed: str  # maximum
    link_width: int  # maximum
    driver: str | None
    revision: int = 0


MODELS: dict[str, DeviceModel] = {
    "spr-root-port": DeviceModel(0x8086, 0x352A, 0x060400, 0x8086, 0x0000, GT32, 16, "pcieport", 0x04),
    "pex-gen5-port": DeviceModel(0x1000, 0xC030, 0x060400, 0x1000, 0x100B, GT32, 16, "pcieport", 0xB0),
    "h100-sxm": DeviceModel(0x10DE, 0x2330, 0x030200, 0x10DE, 0x16C1, GT32, 16, "nvidia", 0xA1),
    "l40s": DeviceModel(0x10DE, 0x26B9, 0x030200, 0x10DE, 0x1851, GT16, 16, "nvidia", 0xA1),
    "nvswitch-gen3": DeviceModel(0x10DE, 0x22A3, 0x068000, 0x10DE, 0x1796, GT16, 2, "nvidia-nvswitch", 0xA1),
    "connectx-7": DeviceModel(0x15B3, 0x1021, 0x020700, 0x15B3, 0x0041, GT32, 16, "mlx5_core"),
    "connectx-6": DeviceModel(0x15B3, 0x101B, 0x020700, 0x15B3, 0x0006, GT16, 16, "mlx5_core"),
    "connectx-6dx": DeviceModel(0x15B3, 0x101D, 0x020000, 0x15B3, 0x0016, GT16, 16, "mlx5_core"),
    "i350": DeviceModel(0x8086, 0x1521, 0x020000, 0x8086, 0x00A3, GT5, 4, "igb", 0x01),
    # GB200 NVL compute tray (_gb200_nvl below). Ids: pci.ids and the tray's lspci (gpud testdata);
    # subsystem ids and link widths of the Grace root ports are not in those sources.
    "grace-rp-gpu": DeviceModel(0x10DE, 0x22B1, 0x060400, 0x10DE, 0x0000, GT32, 16, "pcieport"),
    "grace-rp-io": DeviceModel(0x10DE, 0x22B2, 0x060400, 0x10DE, 0x0000, GT32, 16, "pcieport"),
    "grace-rp-bmc": DeviceModel(0x10DE, 0x22B8, 0x060400, 0x10DE, 0x0000, GT5, 1, "pcieport"),
    "b200-gb200": DeviceModel(0x10DE, 0x2941, 0x030200, 0x10DE, 0x0000, GT32, 16, "nvidia", 0xA1),
    "cx7-bridge": DeviceModel(0x15B3, 0x1979, 0x060400, 0x15B3, 0x0000, GT32, 16, "pcieport"),
    "bf3-bridge": DeviceModel(0x15B3, 0x197B, 0x060400, 0x15B3, 0x0000, GT32, 16, "pcieport", 0x01),
    "bf3-eth": DeviceModel(0x15B3, 0xA2DC, 0x020000, 0x15B3, 0x0051, GT32, 16, "mlx5_core", 0x01),
    "pericom-c008": DeviceModel(0x12D8, 0xC008, 0x060400, 0x0000, 0x0000, GT5, 1, "pcieport", 0x06),
    "i210": DeviceModel(0x8086, 0x1533, 0x020000, 0x8086, 0x0000, GT2_5, 1, "igb", 0x03),
}

Role = Literal["gpu", "hca", "nic", "nvswitch"]


@dataclass(frozen=True)
class Endpoint:
    bdf: str
    model: str
    role: Role
    name: str | None = None  # HCA name (role "hca") or netdev name (role "nic")
    class_code: int | None = None  # overrides the model's (ConnectX in Ethernet mode)


@dataclass(frozen=True)
class Switch:
    usp: str
    # (downstream port bdf, device below it); a tuple: the functions of one multi-function
    # device (BlueField-3's Ethernet functions .0 and .1)
    dsps: tuple[tuple[str, Endpoint | tuple[Endpoint, ...]], ...]
    model: str = "pex-gen5-port"


def functions(below: Endpoint | tuple[Endpoint, ...]) -> tuple[Endpoint, ...]:
    """The PCI functions below a switch downstream port."""
    return below if isinstance(below, tuple) else (below,)


@dataclass(frozen=True)
class RootPort:
    bdf: str
    below: Endpoint | Switch
    model: str = "spr-root-port"


@dataclass(frozen=True)
class HostBridge:
    domain_bus: str  # "0000:14" -> directory devices/pci0000:14
    numa_node: int
    ports: tuple[RootPort, ...]


@dataclass(frozen=True)
class HcaSpec:
    name: str
    bdf: str
    netdev: str  # IPoIB (ibN) or the RoCE Ethernet interface
    link_layer: Literal["InfiniBand", "Ethernet"]
    rate: str  # sysfs ports/1/rate
    compute: bool
    hca_type: str
    fw_ver: str
    board_id: str
    node_guid: str  # sysfs form: a088:c203:0042:5f10
    mtu: int
    lid: int = 0
    ipv4: str | None = None  # RoCE: the address behind the IPv4-mapped GIDs


@dataclass(frozen=True)
class BootNic:
    netdev: str
    bdf: str
    mac: str
    mtu: int = 1500
    speed_mbps: int = 1000


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    hostname: str
    nr_cpus: int
    numa_cpulists: tuple[str, ...]
    host_bridges: tuple[HostBridge, ...]
    hcas: tuple[HcaSpec, ...]
    boot_nic: BootNic
    gpu_name: str
    nvlinks_per_gpu: int  # 18 on H100 SXM (all to NVSwitches); 0 on PCIe GPUs
    driver_version: str = "550.90.07"
    cuda_driver_version: int = 12040
    kernel_release: str = "6.5.0-1024-nvidia"
    open_module: bool = True
    peermem: bool = True
    roce_priority: int = 3  # PFC + ECN priority on RoCE netdevs
    arch: str = "x86_64"  # uname -m; "aarch64" gets an Arm proc/cpuinfo (node.py)
    cpu: str = "spr"  # proc/cpuinfo model: "spr" (Xeon 8480+) or "grace" (Neoverse V2)
    nvlink_version: int = 4
    nvlink_speed_mb_s: int = 26562  # NVML_FI_DEV_NVLINK_GET_SPEED per link (H100: 26.562 GB/s)
    # NVLinks go to NVSwitches outside the node (the rack's switch trays): remote bus id
    # unknown, and the fabric gives the GPUs a cluster UUID and clique id and reports health.
    rack_nvlink: bool = False
    c2c_links_per_gpu: int = 0  # Grace <-> GPU NVLink-C2C links
    c2c_max_bw_mb_s: int = 44712  # per link (nvidia-smi c2c -s: "44.712 GB/s")
    daemons: tuple[tuple[int, str], ...] = ()  # (pid, comm) beside systemd (and nv-fabricmanager on NVSwitch profiles)
    # MLNX_OFED's mlx5_core version (sys/module/mlx5_core/version; OFED's mlx5_ib also makes
    # each HCA's tc/1/traffic_class). None: the inbox driver, which has neither.
    ofed_version: str | None = OFED_VERSION
    rdma_core: str | None = RDMA_CORE  # rdma-core: usr/lib/<triplet>/libibverbs.so.1 -> libibverbs.so.1.14.<this>
    vbios_version: str | None = None  # NVML's VBIOS version per GPU; None: left out of nvml.json (no real value known)
    # etc/nccl.conf NCCL_IB_TC (RoCE profiles). 106 >> 2 = DSCP 26, which the default dscp2prio
    # map (DSCP d -> priority d >> 3) puts on priority 3 = roce_priority. None: no nccl.conf.
    nccl_ib_tc: int | None = None

    def endpoints(self) -> list[Endpoint]:
        out: list[Endpoint] = []
        for hb in self.host_bridges:
            for rp in hb.ports:
                if isinstance(rp.below, Switch):
                    out.extend(ep for _, below in rp.below.dsps for ep in functions(below))
                else:
                    out.append(rp.below)
        return out

    @property
    def gpu_bdfs(self) -> list[str]:
        """In NVML's default order (PCI bus id)."""
        return sorted(ep.bdf for ep in self.endpoints() if ep.role == "gpu")

    @property
    def nvswitch_bdfs(self) -> list[str]:
        return sorted(ep.bdf for ep in self.endpoints() if ep.role == "nvswitch")

    @property
    def compute_hcas(self) -> list[str]:
        return [h.name for h in self.hcas if h.compute]

    @property
    def roce_netdevs(self) -> list[str]:
        """mlx5 Ethernet netdevs (carry RoCE, ECN files, ethtool prio counters, DCB)."""
        return [h.netdev for h in self.hcas if h.link_layer == "Ethernet"]

    def hca(self, name: str) -> HcaSpec | None:
        return next((h for h in self.hcas if h.name == name), None)

    @property
    def has_fabric(self) -> bool:
        """The GPUs register with an NVLink fabric (local NVSwitches or the rack's)."""
        return bool(self.nvswitch_bdfs) or self.rack_nvlink

    def processes(self) -> list[tuple[int, str]]:
        """The process table the simulator writes (ROOT/proc/<pid>/comm), by pid."""
        procs = [(1, "systemd"), (2, "kthreadd")]
        if self.nvswitch_bdfs:
            procs.append((FABRIC_MANAGER_PID, "nv-fabricmanager"))
        return sorted(procs + list(self.daemons))

    def pid_of(self, comm: str) -> int | None:
        return next((pid for pid, name in self.processes() if name == comm), None)


def _switch_pair(hb: int, numa: int, nic: Endpoint, gpu: Endpoint) -> HostBridge:
    """Root port hb:01.0 -> switch USP (hb+1):00.0 -> DSPs (hb+2):00.0 (NIC), (hb+2):01.0 (GPU)."""
    dsp = f"0000:{hb + 2:02x}"
    sw = Switch(usp=f"0000:{hb + 1:02x}:00.0", dsps=((f"{dsp}:00.0", nic), (f"{dsp}:01.0", gpu)))
    return HostBridge(f"0000:{hb:02x}", numa, (RootPort(f"0000:{hb:02x}:01.0", sw),))


def _single(hb: int, numa: int, ep: Endpoint, rp_dev: str = "01.0") -> HostBridge:
    return HostBridge(f"0000:{hb:02x}", numa, (RootPort(f"0000:{hb:02x}:{rp_dev}", ep),))


def storage_nic(name: str, hb: int, numa: int, *, node_guid: str, ipv4: str) -> tuple[HostBridge, HcaSpec]:
    """A ConnectX-6 Dx 100GbE storage/management NIC alone on a CPU root port."""
    bdf = f"0000:{hb + 1:02x}:00.0"
    bridge = _single(hb, numa, Endpoint(bdf, "connectx-6dx", "hca", name))
    hca = HcaSpec(
        name=name, bdf=bdf, netdev=f"enp{hb + 1}s0np0", link_layer="Ethernet", rate="100 Gb/sec (4X EDR)", compute=False,
        hca_type="MT4125", fw_ver="22.41.1000", board_id="MT_0000000359", node_guid=node_guid, mtu=9000, ipv4=ipv4,
    )  # fmt: skip
    return bridge, hca


FABRIC_MANAGER_PID = 2417  # fixed pids: trees are reproducible byte for byte
IMEX_PID = 2433

H100_HOST_BRIDGES = ((0x14, 0), (0x35, 0), (0x46, 0), (0x57, 0), (0x94, 1), (0xB5, 1), (0xC6, 1), (0xD7, 1))
H100_CPUS = ("0-55,112-167", "56-111,168-223")


def _h100(name: str, description: str, ethernet: bool) -> Profile:
    hbs: list[HostBridge] = []
    hcas: list[HcaSpec] = []
    nvsw = Switch(
        usp="0000:01:00.0",
        dsps=tuple((f"0000:02:0{i}.0", Endpoint(f"0000:{3 + i:02x}:00.0", "nvswitch-gen3", "nvswitch")) for i in range(4)),
    )
    boot = BootNic("eno1", "0000:0a:00.0", "7c:c2:55:3e:10:a0")
    hbs.append(HostBridge("0000:00", 0, (RootPort("0000:00:01.0", nvsw), RootPort("0000:00:1c.0", Endpoint(boot.bdf, "i350", "nic", "eno1")))))
    for i, (hb, numa) in enumerate(H100_HOST_BRIDGES):
        nic_bdf, gpu_bdf = f"0000:{hb + 3:02x}:00.0", f"0000:{hb + 4:02x}:00.0"
        hca_name = f"mlx5_{i}"
        nic = Endpoint(nic_bdf, "connectx-7", "hca", hca_name, 0x020000 if ethernet else None)
        hbs.append(_switch_pair(hb, numa, nic, Endpoint(gpu_bdf, "h100-sxm", "gpu")))
        hcas.append(
            HcaSpec(
                name=hca_name,
                bdf=nic_bdf,
                netdev=f"ens{i + 1}np0" if ethernet else f"ib{i}",
                link_layer="Ethernet" if ethernet else "InfiniBand",
                rate="400 Gb/sec (4X NDR)",
                compute=True,
                hca_type="MT4129",
                fw_ver="28.41.1000",
                board_id="MT_0000000838" if not ethernet else "MT_0000000834",
                node_guid=f"a088:c203:00{0x42 + i:02x}:{0x5f10 + 0x11 * i:04x}",
                mtu=9000 if ethernet else 4092,
                lid=0 if ethernet else 0x1A + i,
                ipv4=f"10.{100 + i}.0.11" if ethernet else None,
            )
        )
    if not ethernet:  # storage/management RoCE NICs, one per socket, on CPU root ports
        for k, (hb, numa) in enumerate(((0x68, 0), (0xE8, 1))):
            bridge, hca = storage_nic(f"mlx5_{8 + k}", hb, numa, node_guid=f"b83f:d203:002a:{0x1a1c + k:04x}", ipv4=f"10.200.{k}.11")
            hbs.append(bridge)
            hcas.append(hca)
    hbs.sort(key=lambda h: h.domain_bus)
    return Profile(
        name=name,
        description=description,
        hostname=f"sim-{name}-01",
        nr_cpus=224,
        numa_cpulists=H100_CPUS,
        host_bridges=tuple(hbs),
        hcas=tuple(hcas),
        boot_nic=boot,
        gpu_name="NVIDIA H100 80GB HBM3",
        nvlinks_per_gpu=18,
        vbios_version=H100_VBIOS,
        nccl_ib_tc=NCCL_IB_TC_ROCE if ethernet else None,
    )


def _pcie_4gpu() -> Profile:
    boot = BootNic("eno1", "0000:02:00.0", "7c:c2:55:3e:20:b0")
    gpus = {0x15: 0, 0x36: 0, 0x97: 1, 0xB7: 1}
    hbs = [HostBridge("0000:00", 0, (RootPort("0000:00:1c.0", Endpoint(boot.bdf, "i350", "nic", "eno1")),))]
    hbs += [_single(hb, numa, Endpoint(f"0000:{hb + 1:02x}:00.0", "l40s", "gpu")) for hb, numa in gpus.items()]
    hcas = []
    for i, (hb, numa) in enumerate(((0x57, 0), (0xD7, 1))):
        bdf = f"0000:{hb + 1:02x}:00.0"
        hbs.append(_single(hb, numa, Endpoint(bdf, "connectx-6", "hca", f"mlx5_{i}")))
        hcas.append(
            HcaSpec(
                name=f"mlx5_{i}",
                bdf=bdf,
                netdev=f"ib{i}",
                link_layer="InfiniBand",
                rate="200 Gb/sec (4X HDR)",
                compute=True,
                hca_type="MT4123",
                fw_ver="20.41.1000",
                board_id="MT_0000000223",
                node_guid=f"0c42:a103:00{0x7a + i:02x}:{0x3c40 + i:04x}",
                mtu=4092,
                lid=0x40 + i,
            )
        )
    hbs.sort(key=lambda h: h.domain_bus)
    return Profile(
        name="pcie-4gpu",
        description="4x L40S (PCIe, no NVLink), 2x ConnectX-6 HDR IB, one NIC per socket (GPUs 2-3 SYS from mlx5_0, 0-1 SYS from mlx5_1), proprietary GPU module (GDR via nvidia-peermem only)",
        hostname="sim-pcie-4gpu-01",
        nr_cpus=128,
        numa_cpulists=("0-31,64-95", "32-63,96-127"),
        host_bridges=tuple(hbs),
        hcas=tuple(hcas),
        boot_nic=boot,
        gpu_name="NVIDIA L40S",
        nvlinks_per_gpu=0,
        # the proprietary kernel module, as many PCIe L40S nodes run it: no DMA-BUF, so
        # GPUDirect RDMA depends on nvidia-peermem (peermem_gone is gdr.unavailable here)
        open_module=False,
    )


def _domain_port(domain: int, numa: int, model: str, below: Endpoint | Switch) -> HostBridge:
    """A Grace root port alone in its PCI domain: ``dddd:00:00.0``, as each Grace PCIe
    controller is its own domain (segment)."""
    return HostBridge(f"{domain:04x}:00", numa, (RootPort(f"{domain:04x}:00:00.0", below, model),))


def _cx7_behind_bridges(domain: int, numa: int, name: str) -> HostBridge:
    """ConnectX-7 as on the GB200 tray: root port -> the CX7's own PCIe bridge (USP
    dddd:01:00.0, DSP dddd:02:00.0) -> the HCA at dddd:03:00.0. The bridge's second DSP
    (02:01.0, with more bridges behind it on 04/05 and nothing attached) is left out."""
    d = f"{domain:04x}"
    sw = Switch(usp=f"{d}:01:00.0", dsps=((f"{d}:02:00.0", Endpoint(f"{d}:03:00.0", "connectx-7", "hca", name)),), model="cx7-bridge")
    return _domain_port(domain, numa, "grace-rp-io", sw)


GB200_CX7 = ((0x0000, 0), (0x0002, 0), (0x0010, 1), (0x0012, 1))  # mlx5_0..3
GB200_GPUS = ((0x0008, 0), (0x0009, 0), (0x0018, 1), (0x0019, 1))
GB200_BF3 = ((0x0006, 0), (0x0016, 1))  # two Ethernet functions each: mlx5_4/5, mlx5_6/7


def _gb200_nvl() -> Profile:
    """One compute tray of a GB200 NVL72 rack: 2 Grace (Neoverse V2, 72 cores each), 4
    B200 GPUs, 4 ConnectX-7 NDR InfiniBand compute HCAs, 2 BlueField-3 (Ethernet, not
    compute), an i210 boot NIC. Every device has a root port of its own in a PCI domain of
    its own; the bus ids are a real tray's (leptonai/gpud pkg/nvidia-query/testdata/
    lspci.gb200, Apache-2.0). The NVLinks go to the rack's NVSwitch trays, so no NVSwitch is
    on this node's PCI bus; NVML reports the fabric (cluster UUID, clique id, health) and
    NVLink-C2C links to the Grace CPU.
    Left out: NVMe drives, the BlueField-3's management function (.2) and the BMC's
    ASPEED VGA and USB controller behind the Pericom switch."""
    hbs: list[HostBridge] = []
    hcas: list[HcaSpec] = []
    for i, (domain, numa) in enumerate(GB200_CX7):
        name = f"mlx5_{i}"
        hbs.append(_cx7_behind_bridges(domain, numa, name))
        hcas.append(
            HcaSpec(
                name=name, bdf=f"{domain:04x}:03:00.0", netdev=f"ib{i}", link_layer="InfiniBand", rate="400 Gb/sec (4X NDR)",
                compute=True, hca_type="MT4129", fw_ver="28.43.1014", board_id="MT_0000000838",
                node_guid=f"a088:c203:02{0x42 + i:02x}:{0x7f10 + 0x11 * i:04x}", mtu=4092, lid=0x20 + i,
            )
        )  # fmt: skip
    for k, (domain, numa) in enumerate(GB200_BF3):
        d = f"{domain:04x}"
        fns = []
        for fn in range(2):
            name, bdf = f"mlx5_{4 + 2 * k + fn}", f"{d}:03:00.{fn}"
            fns.append(Endpoint(bdf, "bf3-eth", "hca", name))
            hcas.append(
                HcaSpec(
                    name=name, bdf=bdf, netdev=f"enP{domain}p3s0f{fn}np{fn}", link_layer="Ethernet", rate="200 Gb/sec (4X HDR)",
                    compute=False, hca_type="MT41692", fw_ver="32.43.1014", board_id="MT_0000001093",
                    node_guid=f"5c25:7303:00{0x9a + k:02x}:{0x4e20 + fn:04x}", mtu=9000, ipv4=f"10.210.{2 * k + fn}.11",
                )
            )  # fmt: skip
        sw = Switch(usp=f"{d}:01:00.0", dsps=((f"{d}:02:00.0", tuple(fns)),), model="bf3-bridge")
        hbs.append(_domain_port(domain, numa, "grace-rp-io", sw))
    for domain, numa in GB200_GPUS:
        hbs.append(_domain_port(domain, numa, "grace-rp-gpu", Endpoint(f"{domain:04x}:01:00.0", "b200-gb200", "gpu")))
    # The i210 sits behind a Pericom packet switch (its DSPs 0005:02:01.0-07.0 lead to the
    # BMC's VGA, USB and this NIC); 02:06.0 -> bus 09 is deduced from the bus numbering.
    boot = BootNic("enP5p9s0", "0005:09:00.0", "7c:c2:55:3e:40:d0")
    pericom = Switch(usp="0005:01:00.0", dsps=(("0005:02:06.0", Endpoint(boot.bdf, "i210", "nic", boot.netdev)),), model="pericom-c008")
    hbs.append(_domain_port(0x0005, 0, "grace-rp-bmc", pericom))
    hbs.sort(key=lambda h: h.domain_bus)
    return Profile(
        name="gb200-nvl",
        description="GB200 NVL72 compute tray: 2x Grace (aarch64) + 4x B200, NVLink 5 to the rack's switch trays (multi-node domain), 4x ConnectX-7 NDR IB, 2x BlueField-3 Ethernet",
        hostname="sim-gb200-nvl-01",
        nr_cpus=144,
        numa_cpulists=("0-71", "72-143"),
        host_bridges=tuple(hbs),
        hcas=tuple(hcas),
        boot_nic=boot,
        gpu_name="NVIDIA GB200",
        nvlinks_per_gpu=18,
        driver_version="570.124.06",
        cuda_driver_version=12080,
        kernel_release="6.8.0-1021-nvidia-64k",
        arch="aarch64",
        cpu="grace",
        nvlink_version=5,
        nvlink_speed_mb_s=53125,
        rack_nvlink=True,
        c2c_links_per_gpu=C2C_LINKS_GB200,
        daemons=((IMEX_PID, "nvidia-imex"),),
    )


# NVLink-C2C links per GPU. A GH200 reports 10 (`nvidia-smi c2c -s`: "C2C Link 0..9:
# 44.712 GB/s", as published in xgboost's tests); a Grace of a GB200 shares its C2C
# between two GPUs, and published GB200 tooling expects 5 links of 44.712 GB/s per GPU.
# No real GB200 `nvidia-smi c2c -s` output was found to confirm the count.
C2C_LINKS_GB200 = 5


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        _h100("h100-ib", "8x H100 SXM + 4 NVSwitch, 8x ConnectX-7 NDR IB (PIX, one per GPU), 2x ConnectX-6 Dx 100GbE storage", False),
        _h100("h100-roce", "8x H100 SXM + 4 NVSwitch, 8x ConnectX-7 400GbE RoCE v2 (PIX), MTU 9000, PFC+ECN on priority 3", True),
        _pcie_4gpu(),
        _gb200_nvl(),
    )
}
