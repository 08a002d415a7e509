"""Node fingerprint metric: one series a node whose labels must match the node's peers.

The versions and fabric shape come from agentd.judging.fingerprint; the metrics layer adds
what only the rendered outputs know: the number of NCCL_IB_HCA entries, the rail layout
hash (agentd.judging.placement, the State's placement, shared with /topology) and the hash
of the rendered topology XML. Prometheus compares nodes with their peers
(grafana/alerts/agentd.rules.yml, group agentd-fleet); the labels change only when the node
does (an upgrade, a port leaving NCCL_IB_HCA), so the series churns no more than the node.
"""

from __future__ import annotations

import hashlib
from typing import Final

from agentd.base.expo import Exposition, Family, MetricType
from agentd.judging.fingerprint import fabric_shape, versions
from agentd.judging.roles import HcaRoles
from agentd.metrics.registry import Area
from agentd.metrics.source import MetricsSource

G: Final[MetricType] = "gauge"
VERSION_LABELS = ("hca_fw", "mlx5_core", "rdma_core", "nvidia_driver", "vbios", "kernel")
SHAPE_LABELS = ("compute_ports", "mtu")
OUTPUT_LABELS = ("nccl_ib_hca", "gpu_nic_map", "topology")
LABELS = VERSION_LABELS + SHAPE_LABELS + OUTPUT_LABELS
# A label value read from sysfs is at most a page, comma-joined per HCA: longer values keep
# a prefix and a hash of the whole, so two different long values stay different.
MAX_LABEL_CHARS = 128

FAMILIES: tuple[Family, ...] = (
    Family(
        "agentd_node_fingerprint_info", G,
        "What should be the same on every node of a pool (value 1; \"\" when the node has none): hca_fw the compute HCAs' "
        "firmware (fw_ver), mlx5_core the driver module version (OFED/DOCA only), rdma_core the rdma-core version (from the "
        "libibverbs file name), nvidia_driver the NVIDIA driver, vbios the GPUs' VBIOS, kernel the kernel release "
        "(several values comma-joined, sorted); compute_ports the number of compute HCA ports, mtu their netdevs' MTUs; "
        "nccl_ib_hca the number of ports in the rendered NCCL_IB_HCA; gpu_nic_map the rail layout hash "
        "(agentd_rail_layout_info); topology the first 12 hex digits of the SHA-256 of the rendered NCCL topology XML "
        "without its comment lines. The agentd-fleet rules compare each label with the node's peers.",
        LABELS,
    ),
)


def bounded(value: str | None) -> str:
    """A label value of at most MAX_LABEL_CHARS characters ("" for None)."""
    if value is None:
        return ""
    if len(value) <= MAX_LABEL_CHARS:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return f"{value[:MAX_LABEL_CHARS - 14]}~{digest}"


def nccl_ib_hca_entries(env: tuple[tuple[str, str], ...]) -> str:
    """The number of entries in the rendered NCCL_IB_HCA ("=mlx5_0:1,mlx5_1:1" is 2); "" when
    agentd renders no NCCL env (nccl.enabled off), "0" when it renders one without it."""
    if not env:
        return ""
    value = dict(env).get("NCCL_IB_HCA", "").lstrip("^=")
    return str(sum(1 for entry in value.split(",") if entry.strip()))


def cache_key(s: MetricsSource) -> tuple[object, ...] | None:
    snap = s.snapshot
    if snap is None:
        return None
    return (snap.hcas, snap.netdevs, snap.gpus, snap.nvml, snap.pci, snap.gdr, snap.versions, s.compute_hcas, s.findings,
            s.config, s.nccl_env, s.topology_hash)


def render(x: Exposition, s: MetricsSource) -> None:
    snap = s.snapshot
    if snap is None:
        return
    roles = HcaRoles(compute=s.compute_hcas, other=(), source=s.hca_roles_source)
    fields = {**versions(snap, roles), **fabric_shape(snap, roles)}
    p = s.placement()
    fields["nccl_ib_hca"] = nccl_ib_hca_entries(s.nccl_env)
    fields["gpu_nic_map"] = p.rail_hash if p is not None else None
    fields["topology"] = s.topology_hash
    x.add("agentd_node_fingerprint_info", tuple(bounded(fields.get(k)) for k in LABELS), 1)


AREA = Area("fingerprint", FAMILIES, render, cache_key)
