"""Whether a node has anything agentd judges: GPUs or RDMA devices.

On a machine with neither (a workstation, a login or CPU node, a VM), every check passes
for want of a subject: "ok" would say the node was examined and found healthy, and a
baseline saved there would be an empty inventory. ``nothing_to_judge`` says so instead,
and its callers report ``nothing-to-judge`` (`agentd check` exits 4, /health answers it)
and write nothing workloads read (NCCL files, topology, NFD labels) and no baseline.

Pure. There is nothing to judge only when the readers that find GPUs and RDMA devices
read the node whole and found none of either, and the node's baseline (when there is
one) recorded none either: a failed read is a read error, never absence, and a node whose
GPUs were recorded and are gone now is ``inventory.*.missing``, not an empty node.
"""

from __future__ import annotations

from agentd.judging.baseline import Baseline
from agentd.model import NodeSnapshot

STATUS = "nothing-to-judge"
# the probes whose reads find GPUs (PCI, NVML) and RDMA devices (the IB class)
_FINDERS = ("pci", "ib", "ib_gids")


def nothing_to_judge(snapshot: NodeSnapshot, baseline: Baseline | None) -> str | None:
    """Why there is nothing here to judge ("no GPUs, no RDMA devices"), or None when there
    is something (or when agentd cannot tell: a finder probe failed)."""
    if snapshot.gpus or snapshot.nvml.gpus or snapshot.hcas:
        return None
    if baseline is not None and (baseline.gpus or baseline.hcas):
        return None
    ran = {p.name: p for p in snapshot.probes}
    if any(name not in ran or not ran[name].ok or ran[name].stale for name in _FINDERS):
        return None
    return "no GPUs, no RDMA devices"
