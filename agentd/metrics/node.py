"""Node metrics: GPUs (NVML), NVLink, PCIe links, AER errors and GPU-NIC paths, GPUDirect RDMA."""

from __future__ import annotations

from typing import Final

from agentd.base.expo import Exposition, Family, MetricType
from agentd.base.ids import VENDOR_NVIDIA, bus_id_label
from agentd.judging.checks.nvlink import nvml_unseen, pci_gpus
from agentd.judging.checks.pcie import config_space_truncated
from agentd.metrics.registry import Area
from agentd.metrics.source import MetricsSource
from agentd.model import GdrInfo, NodeSnapshot, NvmlGpu, PathType, PciDevice

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
    Family("agentd_nvlink_links", G, "NVLinks NVML reports as supported on the GPU.", GP),
    Family("agentd_nvlink_links_up", G, "NVLinks of the GPU that are up; below agentd_nvlink_links, agentd_nvlink_state names the links that are not.", GP),
    Family("agentd_nvlink_remote_links", G, "NVLinks of the GPU by remote end (an NVSwitch or GPU, by PCI bus id) and NVLink version.", ("gpu", "pci_bus_id", "remote_pci_bus_id", "remote_type", "version")),
    Family("agentd_nvlink_state", G, "NVLink state: 1 up, 0 down; only links that are not up (every supported link with metrics.nvlink_per_link).", ("gpu", "pci_bus_id", "link")),
    Family("agentd_nvlink_info", G, "NVLink remote end and version (value 1); only links that are not up (every supported link with metrics.nvlink_per_link).", ("gpu", "pci_bus_id", "link", "remote_pci_bus_id", "remote_type", "version")),
    Family("agentd_nvlink_errors_total", C, "NVLink error counters from NVML by type (crc_flit, crc_data, replay, recovery; effective and symbol where the GPU keeps them, Blackwell and later), summed over the GPU's links (as dcgm-exporter's DCGM_FI_DEV_NVLINK_*_TOTAL).", ("gpu", "pci_bus_id", "type")),
    Family("agentd_nvlink_link_errors_total", C, "NVLink error counters per link by type (only with metrics.nvlink_per_link).", ("gpu", "pci_bus_id", "link", "type")),
    Family("agentd_pcie_device_info", G, "PCI functions agentd watches (GPUs, HCAs, NVSwitches and the bridges above them), value 1.", ("pci_bus_id", "role", "vendor_id", "device_id", "numa_node", "parent", "root_complex", "driver")),
    Family("agentd_pcie_link_current_speed_transfers_per_second", G, "Current PCIe link speed (current_link_speed, GT/s x 1e9). The four link families cover every GPU, HCA and NVSwitch; a bridge only while its link runs below its own maximum (every bridge with metrics.pcie_bridges).", PCI),
    Family("agentd_pcie_link_max_speed_transfers_per_second", G, "Maximum PCIe link speed of the device (max_link_speed, GT/s x 1e9).", PCI),
    Family("agentd_pcie_link_current_width_lanes", G, "Current PCIe link width.", PCI),
    Family("agentd_pcie_link_max_width_lanes", G, "Maximum PCIe link width of the device.", PCI),
    Family("agentd_pcie_acs_redirect_enabled", G, "1 when ACS P2P request/completion redirect is on (forces GPU-NIC peer traffic through the root complex); only bridges where it is on (every bridge whose ACS is readable with metrics.pcie_bridges).", PCI),
    Family("agentd_pcie_acs_redirect_bridges", G, "Bridges above a GPU, HCA or NVSwitch with ACS redirect on (absent when no bridge's ACS is readable).", ()),
    Family("agentd_pcie_config_space_truncated", G, "PCI functions agentd watches whose config space the kernel cut short (64 bytes without CAP_SYS_ADMIN): their port type and ACS are unknown.", ()),
    Family("agentd_pcie_aer_errors_total", C, "PCIe AER error totals the kernel counted for the function (aer_dev_correctable/nonfatal/fatal TOTAL_ERR_* lines; severity correctable, nonfatal, fatal) of every GPU and HCA (and every bridge above them with metrics.pcie_bridges); absent when the function has no AER statistics.", ("pci_bus_id", "severity")),
    Family("agentd_pcie_aer_bridge_errors_total", C, "PCIe AER error totals summed over the bridges above the GPUs and HCAs, by severity (errors of an endpoint's link often count at the port above it); per bridge in agentd_pcie_aer_errors_total with metrics.pcie_bridges.", ("severity",)),
    Family("agentd_gpu_pcie_replay_errors_total", C, "PCIe replays (link-level retransmissions) of the GPU since boot, from NVML (nvmlDeviceGetPcieReplayCounter; dcgm-exporter's DCGM_FI_DEV_PCIE_REPLAY_COUNTER).", GP),
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


def _below_max(d: PciDevice) -> bool:
    """The link runs slower or narrower than the function itself can (sysfs's own pair)."""
    cur_s, max_s, cur_w, max_w = d.current_link_speed_gts, d.max_link_speed_gts, d.current_link_width, d.max_link_width
    return (cur_s is not None and max_s is not None and cur_s < max_s) or (cur_w is not None and max_w is not None and cur_w < max_w)


def _nvlinks(x: Exposition, lab: tuple[object, ...], ng: NvmlGpu, every_link: bool) -> None:
    """Per GPU: link counts, links by remote end and error totals; per link: the links that
    are not up (every link with metrics.nvlink_per_link)."""
    if not ng.nvlinks:
        return
    totals: dict[str, int] = {}
    remotes: dict[tuple[str, str, str], int] = {}
    up = 0
    for link in ng.nvlinks:
        ll = (*lab, link.link)
        remote: tuple[str, str, str] = (bus_id_label(link.remote_pci_bus_id), link.remote_type or "", str(_opt(link.version)))
        remotes[remote] = remotes.get(remote, 0) + 1
        up += link.state == "up"
        if every_link or link.state != "up":
            x.add("agentd_nvlink_state", ll, link.state == "up")
            x.add("agentd_nvlink_info", (*ll, *remote), 1)
        for kind, value in sorted(link.errors.items()):
            totals[kind] = totals.get(kind, 0) + value
            if every_link:
                x.add("agentd_nvlink_link_errors_total", (*ll, kind), value)
    x.add("agentd_nvlink_links", lab, len(ng.nvlinks))
    x.add("agentd_nvlink_links_up", lab, up)
    for remote, n in sorted(remotes.items()):
        x.add("agentd_nvlink_remote_links", (*lab, *remote), n)
    for kind, total in sorted(totals.items()):
        x.add("agentd_nvlink_errors_total", (*lab, kind), total)


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
    truncated = acs_on = 0
    acs_known = False
    every_bridge = s.config.metrics.pcie_bridges
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
        if role != "bridge" or every_bridge or _below_max(d):
            if d.current_link_speed_gts is not None:
                x.add("agentd_pcie_link_current_speed_transfers_per_second", lab, d.current_link_speed_gts * 1e9)
            if d.max_link_speed_gts is not None:
                x.add("agentd_pcie_link_max_speed_transfers_per_second", lab, d.max_link_speed_gts * 1e9)
            if d.current_link_width is not None:
                x.add("agentd_pcie_link_current_width_lanes", lab, d.current_link_width)
            if d.max_link_width is not None:
                x.add("agentd_pcie_link_max_width_lanes", lab, d.max_link_width)
        if d.acs_ctrl is not None and role == "bridge":
            redirect = bool(d.acs_ctrl & 0x0C)
            acs_known = True
            acs_on += redirect
            if redirect or every_bridge:
                x.add("agentd_pcie_acs_redirect_enabled", lab, redirect)
    _aer(x, snap, roles, every_bridge)
    if roles:
        x.add("agentd_pcie_config_space_truncated", (), truncated)
    if acs_known:
        x.add("agentd_pcie_acs_redirect_bridges", (), acs_on)


def _aer(x: Exposition, snap: NodeSnapshot, roles: dict[str, str], every_bridge: bool) -> None:
    """AER totals per GPU/HCA function; the bridges' summed (per bridge with pcie_bridges)."""
    bridges: dict[str, int] = {}
    for d in snap.pci:
        if d.aer is None:
            continue
        for severity in ("correctable", "nonfatal", "fatal"):
            counts = getattr(d.aer, severity)
            if counts is None:
                continue
            if roles.get(d.bdf) == "bridge" and not every_bridge:
                bridges[severity] = bridges.get(severity, 0) + counts.total
            else:
                x.add("agentd_pcie_aer_errors_total", (bus_id_label(d.bdf), severity), counts.total)
    for severity, total in bridges.items():
        x.add("agentd_pcie_aer_bridge_errors_total", (severity,), total)


def cache_key(s: MetricsSource) -> tuple[object, ...] | None:
    snap = s.snapshot
    if snap is None:
        return None
    return (snap.gpus, snap.nvml, snap.pci, snap.hcas, snap.gdr, s.compute_hcas, s.config.metrics)


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
            _nvlinks(x, lab, ng, s.config.metrics.nvlink_per_link)
            if ng.pcie_replay_errors is not None:
                x.add("agentd_gpu_pcie_replay_errors_total", lab, ng.pcie_replay_errors)
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
