"""Kubernetes node labels through node-feature-discovery's ``features.d`` directory.

nfd-worker's ``local`` source reads every regular file in
``/etc/kubernetes/node-feature-discovery/features.d/`` whose name does not start with a
dot (it skips hidden files), one ``name=value`` label a line. A
``# +expiry-time=<RFC3339>`` directive makes the labels after it vanish once that time
has passed, so the labels of a node whose agent died drop off by themselves instead of
advertising a health nobody measures any more. nfd-worker watches the directory
(fsnotify), so a rewrite is picked up within about a second.

Labels carry a prefix (``agentd.io/`` by default). nfd-master publishes any namespace
except ``kubernetes.io``; releases before v0.13 need ``-extra-label-ns=agentd.io``.

``render_nfd_features`` is pure; ``write_nfd_features`` writes through
``atomic_write``, whose temp file (``.agentd.XXXX.tmp``) is hidden from nfd-worker.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Iterator, Sequence

from agentd.base.atomic import WriteResult, atomic_write
from agentd.config import AgentConfig, FabricSettings
from agentd.judging.placement import Placement, placement
from agentd.judging.roles import HcaRoles
from agentd.model import SEVERITY_RANK, Finding, IbPort, NodeSnapshot, counted, overall_status

DEFAULT_PREFIX = "agentd.io/"
# Kubernetes label value: at most 63 characters, alphanumerics at both ends, '-', '_'
# and '.' inside; empty is allowed.
LABEL_VALUE_RE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
DNS_SUBDOMAIN_RE = re.compile(r"^(?=.{1,253}$)[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*$")


def label_value(raw: object) -> str:
    """``raw`` as a valid label value: invalid characters become '-', ends trimmed to
    alphanumerics, at most 63 characters."""
    text = re.sub(r"[^-A-Za-z0-9_.]", "-", str(raw))[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", text)


def rfc3339_utc(unix_time: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_time))


def default_expiry_s(config: AgentConfig) -> float:
    """How long written labels stay valid: twice the staleness limit of /health (3 min at
    default intervals), so a daemon that writes after every slow collection keeps them
    alive with margin, and a dead one loses them soon after /health would call it stale."""
    return max(120.0, 2.0 * config.intervals.stale_after * config.intervals.slow_s)


def _format_number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _compute_ports(snapshot: NodeSnapshot, roles: HcaRoles | None) -> Iterator[IbPort]:
    for hca in snapshot.hcas:
        if roles is not None and not roles.is_compute(hca.name):
            continue
        yield from hca.ports


def _gdr_mode(snapshot: NodeSnapshot, findings: Sequence[Finding]) -> str:
    """peermem: nvidia_peermem loaded; dmabuf: no peermem, but the open GPU kernel module on
    a kernel with DMA-BUF (>= 5.12); none otherwise, or when a gdr.* check is critical."""
    if any(f.code.startswith("gdr.") and f.severity == "critical" for f in findings):
        return "none"
    gdr = snapshot.gdr
    if not gdr.nvidia_loaded and not snapshot.gpus:
        return "none"
    if gdr.peermem_loaded:
        return "peermem"
    if gdr.nvidia_open_module and gdr.dmabuf_kernel_ok:
        return "dmabuf"
    return "none"


def _nvlink_state(snapshot: NodeSnapshot, findings: Sequence[Finding]) -> str:
    """none: no GPU reports NVLinks; unknown: GPUs but no NVML answer; degraded: an
    nvlink.* finding that weighs on health (warning or critical); ok otherwise."""
    if not snapshot.nvml.available:
        return "unknown" if snapshot.gpus else "none"
    if not any(g.nvlinks for g in snapshot.nvml.gpus):
        return "none"
    if any(f.code.startswith("nvlink.") and SEVERITY_RANK[f.severity] > 0 for f in findings):
        return "degraded"
    return "ok"


def placement_labels(p: Placement) -> dict[str, str]:
    """The placement labels (docs/topology.md), names without the prefix, values valid
    label values: the NVLink domain (``nvlink-domain`` is GPU feature discovery's
    ``nvidia.com/gpu.clique`` value, ``<cluster_uuid>.<clique_id>``), its size and health,
    only when the node's GPUs are in one; the rail hash; per rail (GPU index ``i``)
    ``rail.gpu<i>.{nic,port,netdev,path,pcie-root,nic-pcie-root}``. A PCIe root is the host
    bridge with ':' as '-' (``pci0000-14``: label values have no ':'). A value that is
    empty once made valid (a netdev name of odd bytes only) is left out."""
    raw: dict[str, object] = {}
    if p.domain is not None:
        raw |= {"nvlink-domain": p.domain.id, "nvlink-domain-gpus": p.domain.gpus, "nvlink-domain-health": p.domain.health}
    if p.rail_hash is not None:
        raw["rail-hash"] = p.rail_hash
    for r in p.rails:
        base = f"rail.gpu{r.gpu}."
        raw |= {base + "nic": r.nic, base + "port": r.port, base + "netdev": r.netdev, base + "path": r.path,
                base + "pcie-root": r.gpu_pcie_root, base + "nic-pcie-root": r.nic_pcie_root}
    out = {name: label_value(value) for name, value in raw.items() if value is not None}
    return {name: value for name, value in out.items() if value}


def nfd_labels(
    status: str | None,
    findings: Sequence[Finding],
    snapshot: NodeSnapshot,
    *,
    roles: HcaRoles | None = None,
    prefix: str = DEFAULT_PREFIX,
    fabric: FabricSettings | None = None,
) -> dict[str, str]:
    """The labels, name -> value, in a stable order. ``status`` is the node's overall
    status (ok|degraded|critical, or maintenance); None: computed from ``findings``.
    ``fabric``: the node's ``[fabric]`` settings (defaults when None), for the placement
    labels (agentd.judging.placement)."""
    if not prefix.endswith("/") or not DNS_SUBDOMAIN_RE.match(prefix[:-1]):
        raise ValueError(f"label prefix {prefix!r} must be a DNS subdomain followed by '/'")
    findings = counted(findings)  # withheld findings (observe, pending, boot grace) label nothing
    ports = list(_compute_ports(snapshot, roles))
    active = [p for p in ports if p.is_active]
    labels: dict[str, str] = {
        "fabric-health": status if status is not None else overall_status(findings),
        "gpus": str(len(snapshot.gpus)),
        "ib-ports-active": str(len(active)),
    }
    rates = [p.rate_gbps for p in active if p.rate_gbps]
    if rates:
        labels["ib-rate-gbps"] = _format_number(min(rates))
    layers = {p.link_layer.lower() for p in active if p.link_layer}
    if layers:
        labels["link-layer"] = layers.pop() if len(layers) == 1 else "mixed"
    labels["gdr"] = _gdr_mode(snapshot, findings)
    labels["nvlink"] = _nvlink_state(snapshot, findings)
    labels |= placement_labels(placement(snapshot, roles, findings, fabric if fabric is not None else FabricSettings()))
    return {prefix + name: label_value(value) for name, value in labels.items()}


def render_nfd_features(
    status: str | None,
    findings: Sequence[Finding],
    snapshot: NodeSnapshot,
    *,
    expiry_s: float,
    roles: HcaRoles | None = None,
    now: float | None = None,
    prefix: str = DEFAULT_PREFIX,
    fabric: FabricSettings | None = None,
) -> str:
    """The features.d file text: a comment header, the expiry directive, then the labels.

    Labels expire ``expiry_s`` after ``now`` (default: when the snapshot was taken, so the
    output is a pure function of its inputs)."""
    if expiry_s <= 0:
        raise ValueError("expiry_s must be positive")
    base = snapshot.taken_at if now is None else now
    labels = nfd_labels(status, findings, snapshot, roles=roles, prefix=prefix, fabric=fabric)
    lines = [
        # Plain comments must not start with "# +": nfd-worker parses those as directives.
        "# node-feature-discovery labels written by agentd; do not edit (rewritten every cycle).",
        f"# measured {rfc3339_utc(snapshot.taken_at)}",
        f"# +expiry-time={rfc3339_utc(base + expiry_s)}",
        *(f"{name}={value}" for name, value in labels.items()),
    ]
    return "\n".join(lines) + "\n"


def write_nfd_features(path: Path | str, text: str) -> WriteResult:
    """Atomically replace the features file (temp dot-file in the same directory, fsync,
    rename): nfd-worker sees the old file or the new one, never a partial write."""
    return atomic_write(path, text, mode=0o644)
