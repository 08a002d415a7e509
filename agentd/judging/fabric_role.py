"""What the node's NVLink fabric role makes agentd expect: a multi-node domain, a local
fabric manager, IMEX. Pure functions of the snapshot and ``[fabric]`` (config.FabricSettings).

The defaults are conservative: a node is only expected to be part of a multi-node NVLink
domain when it plainly is one (a Grace system whose GPUs report a fabric but has no
NVSwitch on its own PCI bus: a GB200/GB300 NVL compute tray), and the fabric manager only
where NVSwitches sit on the node's own PCI bus (HGX/DGX boards). IMEX is never expected
unless configured.
"""

from __future__ import annotations

from agentd.config import FabricSettings
from agentd.model import NodeSnapshot, NvmlGpu

FABRIC_MANAGER = "nv-fabricmanager"
IMEX = "nvidia-imex"
NVLSM = "nvlsm"
DAEMON_NAMES = (FABRIC_MANAGER, IMEX, NVLSM)


def local_nvswitches(snap: NodeSnapshot) -> tuple[str, ...]:
    """Bus ids of the NVSwitches on the node's own PCI bus (HGX/DGX baseboards)."""
    return tuple(sorted(d.bdf for d in snap.pci if d.is_nvswitch))


def fabric_reported(snap: NodeSnapshot) -> bool:
    """Some GPU reports a fabric registration (state other than not supported)."""
    return any(g.fabric_state not in (None, "not_supported") for g in snap.nvml.gpus)


def grace_system(snap: NodeSnapshot) -> bool:
    """A Grace (Arm) system: aarch64, or GPUs with NVLink-C2C links to the CPU."""
    return snap.system.arch == "aarch64" or any(g.c2c_links for g in snap.nvml.gpus)


def expects_multi_node(snap: NodeSnapshot, settings: FabricSettings) -> bool:
    """Whether the GPUs must be in a multi-node NVLink domain (non-zero clique id and
    cluster UUID). auto: a Grace system whose GPUs report a fabric without a local NVSwitch."""
    if settings.multi_node != "auto":
        return settings.multi_node == "yes"
    return fabric_reported(snap) and not local_nvswitches(snap) and grace_system(snap)


def expects_fabric_manager(snap: NodeSnapshot, settings: FabricSettings) -> bool:
    if settings.fabric_manager != "auto":
        return settings.fabric_manager == "required"
    return bool(local_nvswitches(snap))


def zero_uuid(uuid: str | None) -> bool:
    """None, empty, or all zeros (``00000000-0000-0000-0000-000000000000``): no cluster."""
    return not uuid or not uuid.replace("-", "").strip("0")


def registered(g: NvmlGpu) -> bool:
    """The GPU's fabric registration completed with success (a completed state without a
    status, as a recording may hold, reads as success, as nvlink.fabric.incomplete reads it)."""
    return g.fabric_state == "completed" and (g.fabric_status is None or g.fabric_status.lower() == "success")


def domain_of(g: NvmlGpu) -> tuple[str, int] | None:
    """The multi-node NVLink domain the fabric put the GPU in, (cluster UUID lowercase,
    clique id); None when registration has not succeeded or the identity is zero."""
    if not registered(g) or zero_uuid(g.fabric_cluster_uuid) or not g.fabric_clique_id:
        return None
    return str(g.fabric_cluster_uuid).lower(), g.fabric_clique_id
