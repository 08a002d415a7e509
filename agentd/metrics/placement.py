"""Placement metrics: the node's NVLink domain and its rail layout (agentd.judging.placement),
the values the NFD labels and /topology carry, so a fleet dashboard can count nodes per
domain and find nodes whose GPU->NIC layout differs from the rest.

A per-GPU rail series is left out on purpose: agentd_pcie_gpu_nearest_nic_info already
names each GPU's closest compute HCAs and agentd_ib_port_info their netdevs; the one-to-one
pairing on top of them is in the labels and /topology, and one layout hash per node is
what fleet queries compare.
"""

from __future__ import annotations

from typing import Final

from agentd.base.expo import Exposition, Family, MetricType
from agentd.metrics.registry import Area
from agentd.metrics.source import MetricsSource

G: Final[MetricType] = "gauge"

FAMILIES: tuple[Family, ...] = (
    Family("agentd_nvlink_domain_info", G, "The multi-node NVLink domain the node's GPUs are in (value 1): domain is <cluster_uuid>.<clique_id>, GPU feature discovery's nvidia.com/gpu.clique; health ok, degraded or unhealthy from the counted nvlink.fabric.*, nvlink.domain.* and fabric.* findings. Absent when the GPUs are in none (or disagree).", ("domain", "cluster_uuid", "clique_id", "health")),
    Family("agentd_nvlink_domain_gpus", G, "GPUs of the node in its NVLink domain (absent when there is none).", ()),
    Family("agentd_rail_layout_info", G, "The node's GPU->NIC rail layout hash (value 1; docs/topology.md gives the recipe): nodes with the same hash pair the same GPU index with the same HCA port.", ("hash",)),
)


def cache_key(s: MetricsSource) -> tuple[object, ...] | None:
    snap = s.snapshot
    if snap is None:
        return None
    return (snap.gpus, snap.nvml, snap.hcas, snap.pci, snap.system, s.compute_hcas, s.findings, s.config)


def render(x: Exposition, s: MetricsSource) -> None:
    snap = s.snapshot
    if snap is None:
        return
    p = s.placement()  # the State's, shared with /topology and the fingerprint
    if p is None:
        return
    if p.domain is not None:
        d = p.domain
        x.add("agentd_nvlink_domain_info", (d.id, d.cluster_uuid, d.clique_id, d.health), 1)
        x.add("agentd_nvlink_domain_gpus", (), d.gpus)
    if p.rail_hash is not None:
        x.add("agentd_rail_layout_info", (p.rail_hash,), 1)


AREA = Area("placement", FAMILIES, render, cache_key)
