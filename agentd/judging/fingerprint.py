"""The node's fingerprint: what must be the same on every node of a pool (pure).

Versions (HCA firmware, mlx5_core/OFED, rdma-core, NVIDIA driver, VBIOS, kernel) and the
shape of its fabric (compute ports, their MTU). The metrics layer adds the NCCL_IB_HCA
count and short hashes of the GPU->NIC map and the rendered topology, and exports one
``agentd_node_fingerprint_info`` series; Prometheus rules compare nodes with their peers
(grafana/alerts/agentd.rules.yml, group agentd-fleet). ``[expect] versions`` pins the
versions on the node itself (checks/versions.py).

A field with several values on one node (two HCA firmware versions) is their sorted,
comma-joined set; a field the node does not have is None.
"""

from __future__ import annotations

import re

from agentd.judging.roles import HcaRoles
from agentd.model import NodeSnapshot

_TOKEN = re.compile(r"[0-9]+|[A-Za-z]+")
_VBIOS = re.compile(r"[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f]{2}){4}")


def _joined(values: list[str | None]) -> str | None:
    seen = sorted({v.strip() for v in values if v is not None and v.strip()})
    return ",".join(seen) or None


def versions(snapshot: NodeSnapshot, roles: HcaRoles) -> dict[str, str | None]:
    """agentd.config.VERSION_FIELDS -> the node's value. HCA firmware is that of the compute HCAs (all
    HCAs when none is compute)."""
    hcas = [h for h in snapshot.hcas if roles.is_compute(h.name)] or list(snapshot.hcas)
    out: dict[str, str | None] = {
        "hca_fw": _joined([h.fw_ver for h in hcas]),
        "mlx5_core": snapshot.versions.mlx5_core,
        "rdma_core": snapshot.versions.rdma_core,
        "nvidia_driver": snapshot.nvml.driver_version or snapshot.gdr.nvidia_driver_version,
        "vbios": _joined([g.vbios_version for g in snapshot.nvml.gpus]),
        "kernel": snapshot.gdr.kernel_release,
    }
    return out


def fabric_shape(snapshot: NodeSnapshot, roles: HcaRoles) -> dict[str, str | None]:
    """``compute_ports``: the number of compute HCA ports (any state); ``mtu``: the MTUs of
    their netdevs (comma-joined when they differ)."""
    ports = [(h, p) for h in snapshot.hcas if roles.is_compute(h.name) for p in h.ports]
    mtus: list[str | None] = []
    for _h, p in ports:
        nd = snapshot.netdev(p.netdev) if p.netdev else None
        if nd is not None and nd.mtu is not None:
            mtus.append(str(nd.mtu))
    return {"compute_ports": str(len(ports)) if snapshot.hcas else None, "mtu": _joined(mtus)}


def version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    """Order versions token by token: numbers as numbers ("28.9" < "28.10"), letters
    case-blind. An NVIDIA VBIOS version ("96.00.74.00.0D": five groups of two hex digits)
    is read group by group as hex, so "...00.1A" > "...00.10" > "...00.0D" (token by token,
    "1A" would be 1 then "a" and order below "10")."""
    text = version.strip()
    if _VBIOS.fullmatch(text):
        return tuple((0, int(group, 16)) for group in text.split("."))
    return tuple((0, int(t)) if t.isdigit() else (1, t.lower()) for t in _TOKEN.findall(text))


def expectation_miss(have: str | None, spec: str) -> tuple[str, str] | None:
    """(kind, wanted) when ``have`` does not satisfy ``spec`` ('>=V' minimum; 'V' or '==V'
    exact); kind is "below_minimum", "mismatch" or "unknown" (the node has no value).
    Every value of a comma-joined field must satisfy it. None: satisfied."""
    spec = spec.strip()
    minimum = spec.startswith(">=")
    wanted = spec.removeprefix(">=").removeprefix("==").strip()
    if have is None:
        return "unknown", wanted
    for value in have.split(","):
        if minimum and version_key(value) < version_key(wanted):
            return "below_minimum", wanted
        if not minimum and value != wanted:
            return "mismatch", wanted
    return None
