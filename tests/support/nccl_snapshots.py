"""Small hand-built snapshots for the NCCL renderer tests.

Bus layouts follow real sysfs shapes: root port -> switch upstream port -> downstream
port -> endpoint, with ``parent_chain`` listing the bridges from the root complex down.
"""

from __future__ import annotations

from agentd.config import AgentConfig
from agentd.judging.findings import finding
from agentd.judging.roles import HcaRoles, hca_roles
from agentd.model import Finding, Gid, Gpu, Hca, IbPort, Netdev, NodeSnapshot, NumaNode, PciDevice, Subject, SystemInfo

GEN5 = ("32.0 GT/s PCIe", 32.0)
GEN4 = ("16.0 GT/s PCIe", 16.0)
BRIDGE = 0x060400


def bdf(bus: int, dev: int = 0, fn: int = 0, domain: int = 0) -> str:
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"


def pci(
    addr: str,
    cls: int,
    chain: tuple[str, ...],
    numa: int | None,
    speed: tuple[str, float] = GEN5,
    width: int = 16,
    vendor: int = 0x10DE,
    device: int = 0x2330,
) -> PciDevice:
    return PciDevice(
        bdf=addr,
        class_code=cls,
        vendor_id=vendor,
        device_id=device,
        subsystem_vendor_id=vendor,
        subsystem_device_id=0x16C1,
        numa_node=numa,
        max_link_speed=speed[0],
        max_link_speed_gts=speed[1],
        max_link_width=width,
        current_link_speed=speed[0],
        current_link_speed_gts=speed[1],
        current_link_width=width,
        parent_chain=chain,
        root_complex=f"pci{addr[:7]}" if not chain else f"pci{chain[0][:7]}",
    )


def ib_port(state: str = "ACTIVE", layer: str = "InfiniBand", rate: float = 400.0, netdev: str | None = None, gids=()) -> IbPort:
    return IbPort(port=1, state=state, phys_state="LinkUp" if state == "ACTIVE" else "Polling", rate_gbps=rate, width=4, link_layer=layer, netdev=netdev, gids=gids)


def switch_node(
    *,
    hostname: str,
    bases: dict[int, list[int]],
    pairs_per_switch: int,
    nic_class: int,
    layer: str,
    hca_type: str,
    sysinfo: SystemInfo,
    extra_pci: tuple[PciDevice, ...] = (),
    extra_hcas: tuple[Hca, ...] = (),
    netdevs: tuple[Netdev, ...] = (),
) -> NodeSnapshot:
    """``bases``: numa node -> switch base buses; each switch holds ``pairs_per_switch``
    (NIC, GPU) pairs below its own downstream ports."""
    devs: list[PciDevice] = []
    gpus: list[Gpu] = []
    hcas: list[Hca] = []
    for numa, buses in bases.items():
        for b in buses:
            rp, usp = bdf(b - 1, 1), bdf(b)
            devs += [pci(rp, BRIDGE, (), numa, vendor=0x8086, device=0x1BBE), pci(usp, BRIDGE, (rp,), numa, vendor=0x1000, device=0xC030)]
            for k in range(pairs_per_switch):
                dsp_nic, dsp_gpu = bdf(b + 1, 2 * k), bdf(b + 1, 2 * k + 1)
                nic, gpu = bdf(b + 2 + 2 * k), bdf(b + 3 + 2 * k)
                devs += [pci(dsp_nic, BRIDGE, (rp, usp), numa, vendor=0x1000, device=0xC030), pci(dsp_gpu, BRIDGE, (rp, usp), numa, vendor=0x1000, device=0xC030)]
                devs.append(pci(nic, nic_class, (rp, usp, dsp_nic), numa, vendor=0x15B3, device=0x1021))
                devs.append(pci(gpu, 0x030200, (rp, usp, dsp_gpu), numa))
                idx = len(gpus)
                gpus.append(Gpu(index=idx, pci_bus_id=gpu, numa_node=numa, nic_paths={f"mlx5_{idx}": "PIX"}))
                netdev = f"rdma{idx}" if layer == "Ethernet" else None
                gids = (Gid(index=3, gid=f"0000:0000:0000:0000:0000:ffff:0a00:{idx:04x}", type="RoCE v2", netdev=netdev),) if netdev else ()
                hcas.append(Hca(name=f"mlx5_{idx}", hca_type=hca_type, pci_bus_id=nic, numa_node=numa, ports=(ib_port(layer=layer, netdev=netdev, gids=gids),)))
    return NodeSnapshot(
        taken_at=1_760_000_000.0,
        host_root="/",
        system=sysinfo,
        pci=tuple(devs) + extra_pci,
        gpus=tuple(gpus),
        hcas=tuple(hcas) + extra_hcas,
        netdevs=netdevs,
    )


INTEL_SPR = SystemInfo(
    hostname="gpu-ib-01",
    arch="x86_64",
    cpu_vendor="GenuineIntel",
    cpu_family=6,
    cpu_model=143,
    numa_nodes=(
        NumaNode(node=0, cpulist="0-55,112-167", cpumap="00000000,000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff"),
        NumaNode(node=1, cpulist="56-111,168-223", cpumap="ffffffff,ffffff00,00000000,0000ffff,ffffffff,ff000000,00000000"),
    ),
)


def ib_node() -> NodeSnapshot:
    """8x H100 SXM + 8x CX-7 NDR IB, one Gen5 switch per GPU/NIC pair, 4 per socket; a
    dual-port CX-6 Dx (two PCI functions) for storage, and the BMC's VGA device."""
    rp_st = bdf(0x0F, 1)
    storage = (
        pci(rp_st, BRIDGE, (), 0, vendor=0x8086, device=0x1BBE),
        pci(bdf(0x10, 0, 0), 0x020000, (rp_st,), 0, speed=GEN4, vendor=0x15B3, device=0x101D),
        pci(bdf(0x10, 0, 1), 0x020000, (rp_st,), 0, speed=GEN4, vendor=0x15B3, device=0x101D),
        pci(bdf(0x00, 0x1C), BRIDGE, (), 0, vendor=0x8086, device=0x1BB8),
        pci(bdf(0x02), 0x060400, (bdf(0x00, 0x1C),), 0, vendor=0x1A03, device=0x1150),
        pci(bdf(0x03), 0x030000, (bdf(0x00, 0x1C), bdf(0x02)), 0, vendor=0x1A03, device=0x2000),
    )
    storage_hcas = tuple(
        Hca(name=f"mlx5_{8 + fn}", hca_type="MT4125", pci_bus_id=bdf(0x10, 0, fn), numa_node=0,
            ports=(ib_port(layer="Ethernet", rate=100.0, netdev=f"ens1f{fn}np{fn}"),))
        for fn in (0, 1)
    )
    return switch_node(
        hostname="gpu-ib-01",
        bases={0: [0x15, 0x36, 0x47, 0x58], 1: [0x95, 0xB6, 0xC7, 0xD8]},
        pairs_per_switch=1,
        nic_class=0x020700,
        layer="InfiniBand",
        hca_type="MT4129",
        sysinfo=INTEL_SPR,
        extra_pci=storage,
        extra_hcas=storage_hcas,
        netdevs=(Netdev(name="eth0", operstate="up", mtu=1500, type=1),),
    )


def roce_node() -> NodeSnapshot:
    """8 GPUs + 8 CX-7 400GbE RoCE NICs, two GPU/NIC pairs per switch, AMD Genoa."""
    amd = SystemInfo(
        hostname="gpu-roce-01", arch="x86_64", cpu_vendor="AuthenticAMD", cpu_family=25, cpu_model=17,
        numa_nodes=(NumaNode(node=0, cpumap="00000000,ffffffff"), NumaNode(node=1, cpumap="ffffffff,00000000")),
    )
    netdevs = tuple(Netdev(name=f"rdma{i}", operstate="up", mtu=9000, type=1) for i in range(8)) + (Netdev(name="bond0", operstate="up", type=1, is_virtual=True),)
    return switch_node(
        hostname="gpu-roce-01",
        bases={0: [0x10, 0x30], 1: [0x90, 0xB0]},
        pairs_per_switch=2,
        nic_class=0x020000,
        layer="Ethernet",
        hca_type="MT4129",
        sysinfo=amd,
        netdevs=netdevs,
    )


def pcie_node() -> NodeSnapshot:
    """4 PCIe GPUs (Gen4, on root ports, 2 per socket) and a dual-port HDR HCA on socket 1
    only: GPUs 0-1 reach the NIC across the socket link."""
    sysinfo = SystemInfo(
        hostname="gpu-pcie-01", arch="x86_64", cpu_vendor="GenuineIntel", cpu_family=6, cpu_model=106,
        numa_nodes=(NumaNode(node=0, cpumap="0000ffff"), NumaNode(node=1, cpumap="ffff0000")),
    )
    devs: list[PciDevice] = []
    gpus: list[Gpu] = []
    for i, (bus, numa) in enumerate(((0x17, 0), (0x31, 0), (0x98, 1), (0xB1, 1))):
        rp = bdf(bus - 1, 1)
        devs += [pci(rp, BRIDGE, (), numa, vendor=0x8086, device=0x347A), pci(bdf(bus), 0x030000, (rp,), numa, speed=GEN4, device=0x26B9)]
        gpus.append(Gpu(index=i, pci_bus_id=bdf(bus), numa_node=numa))
    rp = bdf(0xC9, 1)
    devs += [
        pci(rp, BRIDGE, (), 1, vendor=0x8086, device=0x347A),
        pci(bdf(0xCA, 0, 0), 0x020700, (rp,), 1, speed=GEN4, vendor=0x15B3, device=0x101B),
        pci(bdf(0xCA, 0, 1), 0x020700, (rp,), 1, speed=GEN4, vendor=0x15B3, device=0x101B),
    ]
    hcas = tuple(Hca(name=f"mlx5_{fn}", hca_type="MT4123", pci_bus_id=bdf(0xCA, 0, fn), numa_node=1, ports=(ib_port(rate=200.0),)) for fn in (0, 1))
    return NodeSnapshot(taken_at=1_760_000_000.0, host_root="/", system=sysinfo, pci=tuple(devs), gpus=tuple(gpus), hcas=hcas)


def critical(code: str, subject: Subject) -> Finding:
    return finding(code, "critical", subject, f"{code} on {subject}")


def warning(code: str, subject: Subject) -> Finding:
    return finding(code, "warning", subject, f"{code} on {subject}")


def config(**nccl) -> AgentConfig:
    return AgentConfig.model_validate({"nccl": nccl})


def unvalidated_config(**nccl) -> AgentConfig:
    """A config that skipped load-time validation (the renderer must still refuse bad values)."""
    from agentd.config import NcclSettings

    return AgentConfig().model_copy(update={"nccl": NcclSettings.model_construct(**(NcclSettings().model_dump() | nccl))})


def roles_for(snap: NodeSnapshot, cfg: AgentConfig | None = None) -> HcaRoles:
    return hca_roles(snap, (cfg or config()).hca)
