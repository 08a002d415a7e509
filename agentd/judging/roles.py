"""Which HCAs carry GPU traffic (compute) and which serve storage or management.

Pure: (snapshot, config) -> roles. Checks judge compute ports strictly and only report
the others; the NCCL renderer lists only healthy compute ports in NCCL_IB_HCA.

Default when ``hca.compute`` is empty: group HCAs by (model, link layer) and take the
largest group; ties go to the group closer to the GPUs, then to the faster one. On the
nodes this is built for (8 compute HCAs of one model beside 1-4 storage/management NICs
of another) this picks the compute rail without configuration, and a node whose compute
HCAs are not the majority says so in config.

Never inferred to be compute (``not_compute`` says why): an SR-IOV virtual function (its
PCI function links to a ``physfn``: VFs belong to guests and containers, and with two VFs
a PF they would outnumber the PFs, redteam 2026-11 finding 3), a Fabric Manager limited PF
(NVSwitch management, agentd.host.gate), and an HCA whose netdev (or its bond) carries the
node's default route (the management NIC, NVSentinel#1529). ``hca.compute`` names
compute HCAs explicitly and is taken as given.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from agentd.base.ids import natural_key
from agentd.config import HcaSelection
from agentd.model import Hca, NodeSnapshot, PathType

# Where the compute HCA list came from: hca.compute in the config, inferred from the node,
# or "error" (the roles could not be computed: agentd.judging.checks.run_checks); "" before
# any collection (an empty State).
RolesSource = Literal["config", "inferred", "error", ""]


@dataclass(frozen=True)
class HcaRoles:
    compute: tuple[str, ...]  # HCA names, sorted naturally
    other: tuple[str, ...]
    source: RolesSource

    def is_compute(self, hca: str) -> bool:
        return hca in self.compute


def _matches(name: str, patterns: list[str]) -> bool:
    return any(fnmatchcase(name, p) for p in patterns)


def _link_layer(h: Hca) -> str:
    layers = {p.link_layer for p in h.ports if p.link_layer}
    return ",".join(sorted(layers)) or "?"


def _best_rate(h: Hca) -> float:
    return max((p.rate_gbps or 0.0 for p in h.ports), default=0.0)


def _best_path(h: Hca, snap: NodeSnapshot) -> int:
    best = 99
    for g in snap.gpus:
        p = g.nic_paths.get(h.name)
        if p is not None:
            best = min(best, int(PathType[p]))
    return best


def _default_route_netdevs(snap: NodeSnapshot) -> set[str]:
    """The default route's netdevs, with the slaves of a bond that carries it."""
    out = set(snap.default_routes)
    for nd in snap.netdevs:
        if nd.master in out:
            out.add(nd.name)
    return out


def not_compute(snap: NodeSnapshot) -> dict[str, str]:
    """HCA name -> why inference never makes it compute (module docstring)."""
    lpf = {b.pci_bus_id for b in snap.backed_off if b.reason == "limited_pf"}
    routed = _default_route_netdevs(snap) if snap.default_routes else set()
    out: dict[str, str] = {}
    for h in snap.hcas:
        if h.physfn is not None:
            out[h.name] = f"an SR-IOV virtual function of {h.physfn}"
        elif h.pci_bus_id is not None and h.pci_bus_id in lpf:
            out[h.name] = "a Fabric Manager limited PF"
        elif routed and any(p.netdev in routed for p in h.ports):
            out[h.name] = "it carries the default route"
    return out


def hca_roles(snap: NodeSnapshot, sel: HcaSelection) -> HcaRoles:
    names = [h.name for h in snap.hcas if not _matches(h.name, sel.exclude)]
    source: RolesSource
    if sel.compute:
        compute = [n for n in names if _matches(n, sel.compute)]
        source = "config"
    else:
        never = not_compute(snap)
        groups: dict[tuple[str, str], list[Hca]] = {}
        for h in snap.hcas:
            if h.name in names and h.name not in never:
                groups.setdefault((h.hca_type or "?", _link_layer(h)), []).append(h)
        compute = []
        if groups:
            best = max(
                groups.values(),
                key=lambda hs: (
                    len(hs),
                    -min(_best_path(h, snap) for h in hs),
                    max(_best_rate(h) for h in hs),
                ),
            )
            compute = [h.name for h in best]
        source = "inferred"
    compute_sorted = tuple(sorted(compute, key=natural_key))
    other = tuple(sorted((h.name for h in snap.hcas if h.name not in compute), key=natural_key))
    return HcaRoles(compute=compute_sorted, other=other, source=source)
