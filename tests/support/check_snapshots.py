"""Concise snapshot builders for check tests.

``node()`` is a healthy 8-GPU node: per GPU a PCIe switch (root port -> upstream port ->
two downstream ports) holding the GPU and its compute HCA (PIX), 18 NVLinks per GPU,
peermem registered, counters flat; plus one BlueField storage HCA (non-compute). With
``layer="Ethernet"`` the compute HCAs are RoCE ports with netdevs eth0..7 (MTU 9000, ECN
and PFC on priority 3); with InfiniBand they have IPoIB netdevs ib0..7.

The ``with_*`` helpers return modified copies (records are frozen).
"""

from __future__ import annotations

from typing import Any, Iterable

from agentd.collection.collector import PROBE_TIERS
from agentd.config import AgentConfig
from agentd.judging.baseline import Baseline
from agentd.judging.checks import CheckInput
from agentd.model import (
    Finding,
    GdrInfo,
    Gpu,
    Hca,
    IbPort,
    Netdev,
    NodeSnapshot,
    NumaNode,
    NvLink,
    NvmlGpu,
    NvmlInfo,
    PciDevice,
    PfcConfig,
    ProbeStatus,
    RoceEcn,
    SystemInfo,
)

T0 = 1_700_000_000.0
GPU_CLASS, NIC_CLASS, BRIDGE_CLASS = 0x030200, 0x020700, 0x060400
PMA_ZERO = {
    "symbol_error": 0, "link_error_recovery": 0, "link_downed": 0, "port_rcv_errors": 0,
    "port_rcv_remote_physical_errors": 0, "port_rcv_switch_relay_errors": 0, "port_xmit_discards": 0,
    "port_xmit_constraint_errors": 0, "port_rcv_constraint_errors": 0, "local_link_integrity_errors": 0,
    "excessive_buffer_overrun_errors": 0, "VL15_dropped": 0, "port_xmit_data": 123_456_789_012,
    "port_rcv_data": 123_456_789_013, "port_xmit_packets": 9_876_543_210, "port_rcv_packets": 9_876_543_211,
    "port_xmit_wait": 1_000,
}
HW_ZERO = {"local_ack_timeout_err": 0, "rnr_nak_retry_err": 0, "out_of_sequence": 0, "duplicate_request": 0}
ROCE_HW_ZERO = {**HW_ZERO, "np_cnp_sent": 0, "rp_cnp_handled": 0, "np_ecn_marked_roce_packets": 0}
PROBE_NAMES = tuple(PROBE_TIERS)  # every probe the collector has, from its catalogue


def cfg(**sections: Any) -> AgentConfig:
    """cfg(expect={"gpus": 8}, thresholds={"flap_count": 2})"""
    return AgentConfig.model_validate(sections)


def ib_port(port: int = 1, *, state: str = "ACTIVE", phys: str | None = None, rate: float = 400.0, width: int = 4,
            gen: str = "NDR", layer: str = "InfiniBand", netdev: str | None = None,
            counters: dict[str, int] | None = None, hw: dict[str, int] | None = None) -> IbPort:
    return IbPort(
        port=port, state=state, phys_state=phys or ("LinkUp" if state == "ACTIVE" else "Polling"),
        rate_raw=f"{rate:g} Gb/sec ({width}X {gen})", rate_gbps=rate, width=width, generation=gen,
        link_layer=layer, netdev=netdev,
        counters=dict(PMA_ZERO if counters is None else counters),
        hw_counters=dict((ROCE_HW_ZERO if layer == "Ethernet" else HW_ZERO) if hw is None else hw),
    )


def pci(bdf: str, cls: int, chain: Iterable[str] = (), *, port_type: str | None = None, width: int = 16,
        speed: float = 32.0, max_width: int | None = None, max_speed: float | None = None,
        acs: int | None = None, numa: int = 0) -> PciDevice:
    return PciDevice(
        bdf=bdf, class_code=cls, vendor_id=0x10DE if cls == GPU_CLASS else 0x15B3 if cls == NIC_CLASS else 0x1000,
        numa_node=numa, current_link_speed=f"{speed:g} GT/s PCIe", current_link_speed_gts=speed,
        current_link_width=width, max_link_speed=f"{max_speed or speed:g} GT/s PCIe",
        max_link_speed_gts=max_speed or speed, max_link_width=max_width or width, parent_chain=tuple(chain),
        root_complex=f"pci0000:{bdf[5:7]}", pcie_port_type=port_type, acs_ctrl=acs,  # type: ignore[arg-type]
    )


def layout(i: int) -> dict[str, str]:
    """PCI bus ids around GPU i: rp, up, dn_gpu, dn_nic, gpu, nic."""
    rb = 0x00 if i < 4 else 0x80
    base = rb + 0x10 * (i % 4 + 1)
    return {
        "rp": f"0000:{rb:02x}:{i % 4 + 1:02x}.0", "up": f"0000:{base:02x}:00.0",
        "dn_gpu": f"0000:{base + 1:02x}:00.0", "dn_nic": f"0000:{base + 1:02x}:01.0",
        "gpu": f"0000:{base + 2:02x}:00.0", "nic": f"0000:{base + 3:02x}:00.0",
    }


STORAGE_BDF = "0000:d0:00.0"


def node(*, gpus: int = 8, layer: str = "InfiniBand", storage: bool = True, t: float = T0,
         nvlinks: int = 18, hostname: str = "node1") -> NodeSnapshot:
    devs: list[PciDevice] = []
    hcas: list[Hca] = []
    netdevs: list[Netdev] = []
    gpu_recs: list[Gpu] = []
    nvml_gpus: list[NvmlGpu] = []
    for i in range(gpus):
        b, numa = layout(i), (0 if i < 4 else 1)
        devs += [
            pci(b["rp"], BRIDGE_CLASS, port_type="root_port", numa=numa, acs=0),
            pci(b["up"], BRIDGE_CLASS, (b["rp"],), port_type="upstream", numa=numa),
            pci(b["dn_gpu"], BRIDGE_CLASS, (b["rp"], b["up"]), port_type="downstream", numa=numa, acs=0),
            pci(b["dn_nic"], BRIDGE_CLASS, (b["rp"], b["up"]), port_type="downstream", numa=numa, acs=0),
            pci(b["gpu"], GPU_CLASS, (b["rp"], b["up"], b["dn_gpu"]), numa=numa),
            pci(b["nic"], NIC_CLASS, (b["rp"], b["up"], b["dn_nic"]), numa=numa),
        ]
        nd = f"eth{i}" if layer == "Ethernet" else f"ib{i}"
        hcas.append(Hca(name=f"mlx5_{i}", hca_type="MT4129", fw_ver="28.39.1002", pci_bus_id=b["nic"], numa_node=numa,
                        driver="mlx5_core", ports=(ib_port(layer=layer, netdev=nd),)))
        if layer == "Ethernet":
            netdevs.append(Netdev(
                name=nd, type=1, mtu=9000, operstate="up", carrier=True, speed_mbps=400000, pci_bus_id=b["nic"],
                ecn=RoceEcn(np={p: p == 3 for p in range(8)}, rp={p: p == 3 for p in range(8)}),
                pfc=PfcConfig(enabled=(3,), trust="dscp", source="dcbnl"),
                ethtool={f"{d}_prio{p}_pause": 0 for d in ("rx", "tx") for p in range(8)} | {"rx_bytes": 10**9},
            ))
        else:
            netdevs.append(Netdev(name=nd, type=32, mtu=4092, operstate="up", carrier=True, pci_bus_id=b["nic"]))
        paths: dict[str, Any] = {f"mlx5_{j}": "PIX" if j == i else ("NODE" if (j < 4) == (i < 4) else "SYS") for j in range(gpus)}
        if storage:
            paths[f"mlx5_{gpus}"] = "SYS" if i < 4 else "NODE"
        gpu_recs.append(Gpu(index=i, pci_bus_id=b["gpu"], name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i:04d}",
                            numa_node=numa, nic_paths=paths, in_nvml=True))
        nvml_gpus.append(NvmlGpu(
            index=i, pci_bus_id=b["gpu"], name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i:04d}",
            nvlinks=tuple(NvLink(link=k, state="up", remote_type="nvswitch", version=4,
                                 errors={"crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0}) for k in range(nvlinks)),
            fabric_state="completed" if nvlinks else None, fabric_status="success" if nvlinks else None,
        ))
    if storage:
        devs += [pci("0000:80:05.0", BRIDGE_CLASS, port_type="root_port", numa=1),
                 pci(STORAGE_BDF, NIC_CLASS, ("0000:80:05.0",), numa=1, width=16, speed=16.0)]
        hcas.append(Hca(name=f"mlx5_{gpus}", hca_type="MT41692", pci_bus_id=STORAGE_BDF, numa_node=1, driver="mlx5_core",
                        ports=(ib_port(layer="Ethernet", rate=200.0, width=2, netdev="stor0"),)))
        netdevs.append(Netdev(name="stor0", type=1, mtu=1500, operstate="up", carrier=True, pci_bus_id=STORAGE_BDF))
    netdevs.append(Netdev(name="lo", type=772, mtu=65536, is_virtual=True))
    return NodeSnapshot(
        taken_at=t, host_root="/",
        system=SystemInfo(hostname=hostname, arch="x86_64", numa_nodes=(NumaNode(node=0), NumaNode(node=1))),
        pci=tuple(devs), gpus=tuple(gpu_recs), hcas=tuple(hcas), netdevs=tuple(netdevs),
        gdr=GdrInfo(peermem_loaded=True, peermem_version_path="/sys/kernel/mm/memory_peers/nv_mem/version",
                    peermem_version="1.3", nvidia_loaded=True, nvidia_driver_version="535.161.08",
                    nvidia_open_module=False, kernel_release="5.15.0-105-generic", dmabuf_kernel_ok=True),
        nvml=NvmlInfo(available=True, driver_version="535.161.08", cuda_driver_version=12020, gpus=tuple(nvml_gpus)),
        probes=tuple(ProbeStatus(name=n, ok=True, duration_s=0.01, finished_at=t, last_success_at=t) for n in PROBE_NAMES),
    )


# ---------------------------------------------------------------------------
# modifiers


def at(snap: NodeSnapshot, t: float) -> NodeSnapshot:
    return snap.model_copy(update={"taken_at": t})


def later(snap: NodeSnapshot, dt: float) -> NodeSnapshot:
    return at(snap, snap.taken_at + dt)


def port(snap: NodeSnapshot, hca: str, number: int = 1) -> IbPort:
    h = snap.hca(hca)
    assert h is not None
    return next(p for p in h.ports if p.port == number)


def with_hca(snap: NodeSnapshot, hca_name: str, /, **changes: Any) -> NodeSnapshot:
    hcas = tuple(h.model_copy(update=changes) if h.name == hca_name else h for h in snap.hcas)
    return snap.model_copy(update={"hcas": hcas})


def without_hca(snap: NodeSnapshot, name: str) -> NodeSnapshot:
    return snap.model_copy(update={"hcas": tuple(h for h in snap.hcas if h.name != name)})


def with_port(snap: NodeSnapshot, hca: str, number: int = 1, **changes: Any) -> NodeSnapshot:
    h = snap.hca(hca)
    assert h is not None
    ports = tuple(p.model_copy(update=changes) if p.port == number else p for p in h.ports)
    return with_hca(snap, hca, ports=ports)


def with_counters(snap: NodeSnapshot, hca: str, number: int = 1, *, hw: bool = False, **values: int) -> NodeSnapshot:
    p = port(snap, hca, number)
    if hw:
        return with_port(snap, hca, number, hw_counters={**p.hw_counters, **values})
    return with_port(snap, hca, number, counters={**p.counters, **values})


def with_netdev(snap: NodeSnapshot, name: str, **changes: Any) -> NodeSnapshot:
    return snap.model_copy(update={"netdevs": tuple(n.model_copy(update=changes) if n.name == name else n for n in snap.netdevs)})


def with_ethtool(snap: NodeSnapshot, name: str, **values: int) -> NodeSnapshot:
    nd = snap.netdev(name)
    assert nd is not None
    return with_netdev(snap, name, ethtool={**(nd.ethtool or {}), **values})


def with_pci(snap: NodeSnapshot, bdf: str, **changes: Any) -> NodeSnapshot:
    assert snap.pci_device(bdf) is not None, bdf
    return snap.model_copy(update={"pci": tuple(d.model_copy(update=changes) if d.bdf == bdf else d for d in snap.pci)})


def with_gdr(snap: NodeSnapshot, **changes: Any) -> NodeSnapshot:
    return snap.model_copy(update={"gdr": snap.gdr.model_copy(update=changes)})


def with_gpu(snap: NodeSnapshot, index: int, **changes: Any) -> NodeSnapshot:
    return snap.model_copy(update={"gpus": tuple(g.model_copy(update=changes) if g.index == index else g for g in snap.gpus)})


def with_nvml_gpu(snap: NodeSnapshot, index: int, **changes: Any) -> NodeSnapshot:
    gpus = tuple(g.model_copy(update=changes) if g.index == index else g for g in snap.nvml.gpus)
    return snap.model_copy(update={"nvml": snap.nvml.model_copy(update={"gpus": gpus})})


def with_nvlink(snap: NodeSnapshot, gpu: int, link: int, **changes: Any) -> NodeSnapshot:
    g = next(x for x in snap.nvml.gpus if x.index == gpu)
    links = tuple(k.model_copy(update=changes) if k.link == link else k for k in g.nvlinks)
    return with_nvml_gpu(snap, gpu, nvlinks=links)


def without_gpu(snap: NodeSnapshot, index: int) -> NodeSnapshot:
    """The GPU is gone from PCI and NVML (fallen off the bus)."""
    bus = next(g.pci_bus_id for g in snap.gpus if g.index == index)
    return snap.model_copy(update={
        "gpus": tuple(g for g in snap.gpus if g.index != index),
        "pci": tuple(d for d in snap.pci if d.bdf != bus),
        "nvml": snap.nvml.model_copy(update={"gpus": tuple(g for g in snap.nvml.gpus if g.index != index)}),
    })


# ---------------------------------------------------------------------------
# running and reading


def inp(snap: NodeSnapshot, history: Iterable[NodeSnapshot] = (), config: AgentConfig | None = None,
        baseline: Baseline | None = None) -> CheckInput:
    return CheckInput(snapshot=snap, history=tuple(history), config=config or AgentConfig(), baseline=baseline)


def only(findings: list[Finding], code: str) -> list[Finding]:
    return [f for f in findings if f.code == code]


def one(findings: list[Finding], code: str, subject: str | None = None) -> Finding:
    hits = [f for f in findings if f.code == code and (subject is None or f.subject == subject)]
    assert len(hits) == 1, f"expected one {code} {subject or ''}, got {hits!r}; all: {[(f.code, f.subject) for f in findings]}"
    return hits[0]


def problems(findings: list[Finding]) -> list[tuple[str, str, str]]:
    """(severity, code, subject) of every finding that is not severity ok."""
    return [(f.severity, f.code, f.subject) for f in findings if f.severity != "ok"]
