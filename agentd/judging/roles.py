"""Which HCAs carry GPU traffic (compute) and which serve storage or management.

Pure: (snapshot, config) -> roles. Checks judge compute ports strictly and only report
the others; the NCCL renderer lists only healthy compute ports in NCCL_IB_HCA.

Default when ``hca.compute`` is empty: group HCAs by (model, link layer) and take the
largest group; ties go to the group closer to the GPUs, then to the faster one. On the
nodes this is built for (8 compute HCAs of one model beside 1-4 storage/management NICs
of another) this picks the compute rail without configuration, and a node whose compute
HCAs are not the majority says so in config.
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


def hca_roles(snap: NodeSnapshot, sel: HcaSelection) -> HcaRoles:
    names = [h.name for h in snap.hcas if not _matches(h.name, sel.exclude)]
    source: RolesSource
    if sel.compute:
        compute = [n for n in names if _matches(n, sel.compute)]
        source = "config"
    else:
        groups: dict[tuple[str, str], list[Hca]] = {}
        for h in snap.hcas:
            if h.name in names:
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
