"""Node metrics: GPUs (NVML), NVLink, PCIe links and GPU-NIC paths, GPUDirect RDMA."""

from __future__ import annotations

from typing import Final

from agentd.base.expo import Exposition, Family, MetricType
from agentd.base.ids import VENDOR_NVIDIA, bus_id_label
from agentd.judging.checks.nvlink import nvml_unseen, pci_gpus
from agentd.judging.checks.pcie import config_space_truncated
from agentd.metrics.registry import Area
from agentd.metrics.source import MetricsSource
from agentd.model import GdrInfo, NodeSnapshot, PathType

G: Final[MetricType] = "gauge"
C: Final[MetricType] = "counter"
GP = ("gpu", "pci_bus_id")
PCI = ("pci_bus_id", "role")

FAMILIES: tuple[Family, ...] = (
    Family("agentd_gpu_info", G, "One series per GPU (value 1); gpu is the NVML index, as dcgm-exporter's gpu label.", ("gpu", "pci_bus_id", "uuid", "name", "numa_node")),
    Family("agentd_gpu_nvml_visible", G, "1 when NVML answers for the GPU, 0 when it is on the PCI bus but NVML lost it (absent when NVML is unavailable).", GP),
    Family("agentd_gpu_fabric_info", G, "NVSwitch fabric registration state and status of the GPU (value 1).", ("gpu", "pci_bus_id", "state", "status")),
    Family("agentd_nvml_available", G, "1 when the NVML library and driver answer.", ()),
    Family("agentd_nvml_gpus", G, "NVIDIA GPUs on the PCI bus that NVML lists (0 when NVML is unavailable); below agentd_nvml_gpus_expected, the nvml.blind finding says agentd cannot see the rest.", ()),
    Family("agentd_nvml_gpus_expected", G, "NVIDIA GPUs on the PCI bus: how many NVML should list.", ()),
    Family("agentd_nvml_info", G, "NVIDIA driver and CUDA driver versions (value 1).", ("driver_version", "cuda_driver_version")),
    Family("agentd_nvlink_state", G, "NVLink state: 1 up, 0 down (every link NVML reports as supported).", ("gpu", "pci_bus_id", "link")),
    Family("agentd_nvlink_info", G, "NVLink remote end and version (value 1).", ("gpu", "pci_bus_id", "link", "remote_pci_bus_id", "remote_type", "version")),
    Family("agentd_nvlink_errors_total", C, "NVLink error counters from NVML by type (crc_flit, crc_data, replay, recovery).", ("gpu", "pci_bus_id", "link", "type")),
    Family("agentd_pcie_device_info", G, "PCI functions agentd watches (GPUs, HCAs, NVSwitches and the bridges above them), value 1.", ("pci_bus_id", "role", "vendor_id", "device_id", "numa_node", "parent", "root_complex", "driver")),
    Family("agentd_pcie_link_current_speed_transfers_per_second", G, "Current PCIe link speed (current_link_speed, GT/s x 1e9).", PCI),
    Family("agentd_pcie_link_max_speed_transfers_per_second", G, "Maximum PCIe link speed of the device (max_link_speed, GT/s x 1e9).", PCI),
    Family("agentd_pcie_link_current_width_lanes", G, "Current PCIe link width.", PCI),
    Family("agentd_pcie_link_max_width_lanes", G, "Maximum PCIe link width of the device.", PCI),
    Family("agentd_pcie_acs_redirect_enabled", G, "1 when ACS P2P request/completion redirect is on (forces GPU-NIC peer traffic through the root complex).", PCI),
    Family("agentd_pcie_config_space_truncated", G, "PCI functions agentd watches whose config space the kernel cut short (64 bytes without CAP_SYS_ADMIN): their port type and ACS are unknown.", ()),
    Family("agentd_pcie_gpu_nic_path", G, "PCIe path from a GPU to an HCA, as rank: 1 PIX, 2 PXB, 3 PHB, 4 NODE, 5 SYS (lower is closer).", ("gpu", "pci_bus_id", "device", "path")),
    Family("agentd_pcie_gpu_nearest_nic_info", G, "The compute HCA(s) closest to each GPU, with the path type (value 1).", ("gpu", "pci_bus_id", "device", "path")),
    Family("agentd_gdr_available", G, "1 when GPUDirect RDMA can register GPU memory (nvidia_peermem registered, or DMA-BUF usable).", ()),
    Family("agentd_gdr_path_info", G, "Which GPUDirect RDMA path is active: peermem, dmabuf or none (value 1).", ("path",)),
    Family("agentd_gdr_info", G, "Inputs of the GPUDirect RDMA decision (value 1).", ("peermem_loaded", "peermem_version", "nvidia_driver_version", "open_module", "kernel_release")),
)


def gdr_path(gdr: GdrInfo) -> str:
    """peermem: nvidia_peermem loaded and registered with ib_core (NCCL's check);
    dmabuf: open kernel module on Linux >= 5.12; none otherwise."""
    if gdr.peermem_loaded and gdr.peermem_version_path:
        return "peermem"
    if gdr.nvidia_open_module and gdr.dmabuf_kernel_ok:
        return "dmabuf"
    return "none"


def _opt(v: object) -> object:
    return "" if v is None else v


def _pcie(x: Exposition, s: MetricsSource, snap: NodeSnapshot) -> None:
    roles: dict[str, str] = {}
    for d in snap.pci:
        if d.is_gpu and d.vendor_id == VENDOR_NVIDIA:
            roles[d.bdf] = "gpu"
        elif d.is_nvswitch:
            roles[d.bdf] = "nvswitch"
    for h in snap.hcas:
        if h.pci_bus_id:
            roles.setdefault(h.pci_bus_id, "nic")
    for bdf in list(roles):
        dev = snap.pci_device(bdf)
        for parent in dev.parent_chain if dev is not None else ():
            roles.setdefault(parent, "bridge")
    truncated = 0
    for d in snap.pci:
        role = roles.get(d.bdf)
        if role is None:
            continue
        truncated += config_space_truncated(d)
        lab = (bus_id_label(d.bdf), role)
        parent = d.parent_chain[-1] if d.parent_chain else ""
        x.add(
            "agentd_pcie_device_info",
            (*lab, f"0x{d.vendor_id:04x}" if d.vendor_id is not None else "", f"0x{d.device_id:04x}" if d.device_id is not None else "", _opt(d.numa_node), bus_id_label(parent), d.root_complex or "", d.driver or ""),
            1,
        )
        if d.current_link_speed_gts is not None:
            x.add("agentd_pcie_link_current_speed_transfers_per_second", lab, d.current_link_speed_gts * 1e9)
        if d.max_link_speed_gts is not None:
            x.add("agentd_pcie_link_max_speed_transfers_per_second", lab, d.max_link_speed_gts * 1e9)
        if d.current_link_width is not None:
            x.add("agentd_pcie_link_current_width_lanes", lab, d.current_link_width)
        if d.max_link_width is not None:
            x.add("agentd_pcie_link_max_width_lanes", lab, d.max_link_width)
        if d.acs_ctrl is not None and role == "bridge":
            x.add("agentd_pcie_acs_redirect_enabled", lab, bool(d.acs_ctrl & 0x0C))
    if roles:
        x.add("agentd_pcie_config_space_truncated", (), truncated)


def cache_key(s: MetricsSource) -> tuple[object, ...] | None:
    snap = s.snapshot
    if snap is None:
        return None
    return (snap.gpus, snap.nvml, snap.pci, snap.hcas, snap.gdr, s.compute_hcas)


def render(x: Exposition, s: MetricsSource) -> None:
    snap = s.snapshot
    if snap is None:
        return
    nv = snap.nvml
    nv_by_bus = {g.pci_bus_id: g for g in nv.gpus}
    for g in snap.gpus:
        bus = bus_id_label(g.pci_bus_id)
        lab = (g.index, bus)
        x.add("agentd_gpu_info", (g.index, bus, g.uuid or "", g.name or "", _opt(g.numa_node)), 1)
        if g.in_nvml is not None:
            x.add("agentd_gpu_nvml_visible", lab, g.in_nvml)
        ng = nv_by_bus.get(g.pci_bus_id)
        if ng is not None:
            if ng.fabric_state is not None:
                x.add("agentd_gpu_fabric_info", (*lab, ng.fabric_state, ng.fabric_status or ""), 1)
            for link in ng.nvlinks:
                ll = (*lab, link.link)
                x.add("agentd_nvlink_state", ll, link.state == "up")
                x.add("agentd_nvlink_info", (*ll, bus_id_label(link.remote_pci_bus_id), link.remote_type or "", _opt(link.version)), 1)
                for kind, value in sorted(link.errors.items()):
                    x.add("agentd_nvlink_errors_total", (*ll, kind), value)
        ranked = sorted(g.nic_paths.items(), key=lambda kv: (int(PathType[kv[1]]), kv[0]))
        for hca, path in ranked:
            x.add("agentd_pcie_gpu_nic_path", (*lab, hca, path), int(PathType[path]))
        compute = [(hca, path) for hca, path in ranked if hca in s.compute_hcas] or ranked
        if compute:
            best = int(PathType[compute[0][1]])
            for hca, path in compute:
                if int(PathType[path]) == best:
                    x.add("agentd_pcie_gpu_nearest_nic_info", (*lab, hca, path), 1)
    if snap.gpus or nv.available:
        x.add("agentd_nvml_available", (), nv.available)
    on_pci = pci_gpus(snap)
    if on_pci:
        x.add("agentd_nvml_gpus", (), len(on_pci) - len(nvml_unseen(snap)))
        x.add("agentd_nvml_gpus_expected", (), len(on_pci))
    if nv.available:
        x.add("agentd_nvml_info", (nv.driver_version or "", _opt(nv.cuda_driver_version)), 1)
    _pcie(x, s, snap)
    gdr = snap.gdr
    if snap.gpus or gdr.nvidia_loaded:
        gdr_kind = gdr_path(gdr)
        x.add("agentd_gdr_available", (), gdr_kind != "none")
        x.add("agentd_gdr_path_info", (gdr_kind,), 1)
        x.add(
            "agentd_gdr_info",
            (str(gdr.peermem_loaded).lower(), gdr.peermem_version or "", gdr.nvidia_driver_version or "", "" if gdr.nvidia_open_module is None else str(gdr.nvidia_open_module).lower(), gdr.kernel_release or ""),
            1,
        )


AREA = Area("node", FAMILIES, render, cache_key)
