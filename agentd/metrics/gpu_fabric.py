"""GPU fabric metrics: each GPU's NVLink domain identity and fabric health, NVLink speed,
Grace NVLink-C2C links, and the fabric daemons (nv-fabricmanager, nvidia-imex, nvlsm).

Per-GPU identity and health sit beside agentd_gpu_fabric_info (area node); the node-level
domain view (agentd_nvlink_domain_*) comes from the placement. Series budget: a healthy
node at the defaults exports per-GPU series here only where the GPU has a multi-node
identity (GB200/GB300 trays); health and speed are counted per node, and named per GPU only
where they are not at their usual value (every GPU, and every link's speed, with
metrics.nvlink_per_link)."""

from __future__ import annotations

from typing import Final, Sequence

from agentd.base.expo import Exposition, Family, MetricType
from agentd.base.ids import bus_id_label
from agentd.judging.fabric_role import DAEMON_NAMES, FABRIC_MANAGER, IMEX, expects_fabric_manager
from agentd.metrics.registry import Area
from agentd.metrics.source import MetricsSource
from agentd.model import FabricHealth, NodeSnapshot, NvmlGpu

G: Final[MetricType] = "gauge"
GP = ("gpu", "pci_bus_id")
MB = 1_000_000  # NVML's NVLink/C2C speeds are in MB/s (10^6 bytes; nvidia-smi prints /1000 as GB/s)
ZERO_UUID = "00000000-0000-0000-0000-000000000000"

FAMILIES: tuple[Family, ...] = (
    Family("agentd_gpu_fabric_domain_info", G, "The multi-node NVLink domain the fabric put the GPU in (value 1): cluster UUID and clique id, as GPU feature discovery's nvidia.com/gpu.clique=<cluster_uuid>.<clique_id>. Absent when not reported or all zero (a single-node NVSwitch board, or a GPU the fabric did not assign: nvlink.fabric.unassigned).", ("gpu", "pci_bus_id", "cluster_uuid", "clique_id")),
    Family("agentd_gpu_fabric_health_gpus", G, "GPUs by fabric health summary as NVML reports it (healthy, unhealthy, limited_capacity); absent when no GPU reports one.", ("summary",)),
    Family("agentd_gpu_fabric_health_info", G, "Fabric health of a GPU that is not plainly healthy (summary other than healthy, or a condition set), value 1; incorrect_configuration is NVML's reason or none (every GPU that reports health with metrics.nvlink_per_link).", ("gpu", "pci_bus_id", "summary", "incorrect_configuration")),
    Family("agentd_gpu_fabric_health_condition", G, "Fabric health conditions of the GPU, 1 set, 0 clear: degraded_bandwidth, route_recovery, route_unhealthy, access_timeout_recovery, incorrect_configuration, gfm_disconnected, partition_unassigned. Only conditions that are set (every condition the GPU reports with metrics.nvlink_per_link); absent when not supported.", ("gpu", "pci_bus_id", "condition")),
    Family("agentd_gpu_fabric_health_conditions", G, "Fabric health conditions set, summed over the node's GPUs (absent when no GPU reports fabric health); agentd_gpu_fabric_health_condition names them.", ()),
    Family("agentd_nvlink_speed_expected_bytes_per_second", G, "The speed every active NVLink should run at: fabric.nvlink_speed_mb_s, or the fastest active link of the node's GPUs when unset (absent when no link reports a speed).", ()),
    Family("agentd_nvlink_slow_links", G, "Active NVLinks of the node running below agentd_nvlink_speed_expected_bytes_per_second.", ()),
    Family("agentd_nvlink_links_slow", G, "Active NVLinks of the GPU running below agentd_nvlink_speed_expected_bytes_per_second; only GPUs with a slow link (every GPU with metrics.nvlink_per_link).", GP),
    Family("agentd_nvlink_slowest_speed_bytes_per_second", G, "Speed of the GPU's slowest active NVLink; only GPUs with a slow link (every GPU with metrics.nvlink_per_link).", GP),
    Family("agentd_nvlink_speed_bytes_per_second", G, "Current speed of each NVLink that reports one (NVML NVLINK_GET_SPEED; only with metrics.nvlink_per_link).", ("gpu", "pci_bus_id", "link")),
    Family("agentd_gpu_c2c_link_up", G, "NVLink-C2C link between the GPU and its Grace CPU: 1 up, 0 down (Grace systems only).", ("gpu", "pci_bus_id", "link")),
    Family("agentd_gpu_c2c_link_max_bandwidth_bytes_per_second", G, "Maximum bandwidth of the NVLink-C2C link (NVML C2C_LINK_GET_MAX_BW).", ("gpu", "pci_bus_id", "link")),
    Family("agentd_fabric_daemon_up", G, "1 when the fabric daemon (nv-fabricmanager, nvidia-imex, nvlsm) is in the node's process table, 0 when the node's role expects it ([fabric]) and it is not. Absent for a daemon neither running nor expected, on nodes without GPUs, and when agentd cannot see the whole process table (a container without the host's /proc): absence says nothing.", ("daemon",)),
)


def identity(ng: NvmlGpu) -> tuple[str, str] | None:
    """(cluster UUID, clique id) when the fabric reported a non-zero identity."""
    uuid, clique = ng.fabric_cluster_uuid, ng.fabric_clique_id
    if (uuid is None or uuid == ZERO_UUID) and not clique:
        return None
    return uuid or "", "" if clique is None else str(clique)


def conditions(h: FabricHealth) -> dict[str, bool]:
    """The conditions the GPU reports, True when set (a fault or a recovery in progress)."""
    out: dict[str, bool] = {}
    for name in ("degraded_bandwidth", "route_recovery", "route_unhealthy", "access_timeout_recovery"):
        value = getattr(h, name)
        if value is not None:
            out[name] = bool(value)
    if h.incorrect_configuration is not None:
        out["incorrect_configuration"] = h.incorrect_configuration != "none"
    if h.gfm_connected is not None:
        out["gfm_disconnected"] = not h.gfm_connected
    if h.partition_assigned is not None:
        out["partition_unassigned"] = not h.partition_assigned
    return out


def _health(x: Exposition, lab: tuple[object, ...], h: FabricHealth | None, every: bool, by_summary: dict[str, int]) -> int:
    if h is None:
        return 0
    conds = conditions(h)
    if h.summary is not None:
        by_summary[h.summary] = by_summary.get(h.summary, 0) + 1
    if not conds and h.summary is None:
        return 0
    if every or any(conds.values()) or h.summary not in (None, "healthy"):
        x.add("agentd_gpu_fabric_health_info", (*lab, h.summary or "", h.incorrect_configuration or ""), 1)
    for name, on in conds.items():
        if on or every:
            x.add("agentd_gpu_fabric_health_condition", (*lab, name), on)
    return sum(conds.values())


def _speeds(x: Exposition, s: MetricsSource, labelled: Sequence[tuple[tuple[object, ...], NvmlGpu]]) -> None:
    """Expected speed and slow links per node; per GPU where slow; per link with nvlink_per_link."""
    every = s.config.metrics.nvlink_per_link
    active = {lab: [ln.speed_mb_s for ln in ng.nvlinks if ln.state == "up" and ln.speed_mb_s is not None] for lab, ng in labelled}
    known = [v for speeds in active.values() for v in speeds]
    if not known:
        return
    expected = s.config.fabric.nvlink_speed_mb_s or max(known)
    x.add("agentd_nvlink_speed_expected_bytes_per_second", (), expected * MB)
    x.add("agentd_nvlink_slow_links", (), sum(v < expected for v in known))
    for lab, speeds in active.items():
        slow = sum(v < expected for v in speeds)
        if speeds and (slow or every):
            x.add("agentd_nvlink_links_slow", lab, slow)
            x.add("agentd_nvlink_slowest_speed_bytes_per_second", lab, min(speeds) * MB)
    if every:
        for lab, ng in labelled:
            for ln in ng.nvlinks:
                if ln.speed_mb_s is not None:
                    x.add("agentd_nvlink_speed_bytes_per_second", (*lab, ln.link), ln.speed_mb_s * MB)


def cache_key(s: MetricsSource) -> tuple[object, ...] | None:
    snap = s.snapshot
    if snap is None:
        return None
    return (snap.gpus, snap.nvml, snap.daemons, s.config.metrics, s.config.fabric)


def render(x: Exposition, s: MetricsSource) -> None:
    snap: NodeSnapshot | None = s.snapshot
    if snap is None:
        return
    every = s.config.metrics.nvlink_per_link
    nv_by_bus = {g.pci_bus_id: g for g in snap.nvml.gpus}
    labelled = [((g.index, bus_id_label(g.pci_bus_id)), nv_by_bus[g.pci_bus_id]) for g in snap.gpus if g.pci_bus_id in nv_by_bus]
    by_summary: dict[str, int] = {}
    health_reported = False
    conditions_set = 0
    for lab, ng in labelled:
        ident = identity(ng)
        if ident is not None:
            x.add("agentd_gpu_fabric_domain_info", (*lab, *ident), 1)
        if ng.fabric_health is not None and (ng.fabric_health.summary is not None or conditions(ng.fabric_health)):
            health_reported = True
        conditions_set += _health(x, lab, ng.fabric_health, every, by_summary)
        for c2c in ng.c2c_links:
            x.add("agentd_gpu_c2c_link_up", (*lab, c2c.link), c2c.state == "up")
            if c2c.max_bw_mb_s is not None:
                x.add("agentd_gpu_c2c_link_max_bandwidth_bytes_per_second", (*lab, c2c.link), c2c.max_bw_mb_s * MB)
    for summary, n in sorted(by_summary.items()):
        x.add("agentd_gpu_fabric_health_gpus", (summary,), n)
    if health_reported:
        x.add("agentd_gpu_fabric_health_conditions", (), conditions_set)
    _speeds(x, s, labelled)
    if snap.daemons.complete and snap.gpus:
        # a daemon the node runs or its role expects ([fabric]): 0 for an expected one that
        # is missing; daemons neither running nor expected export nothing (series budget)
        expected = {FABRIC_MANAGER: expects_fabric_manager(snap, s.config.fabric), IMEX: s.config.fabric.imex}
        for name in DAEMON_NAMES:
            if name in snap.daemons.running or expected.get(name, False):
                x.add("agentd_fabric_daemon_up", (name,), name in snap.daemons.running)


AREA = Area("gpu_fabric", FAMILIES, render, cache_key)
