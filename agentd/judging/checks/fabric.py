"""The NVLink fabric's truth beyond "registration completed" (GB200/GB300 NVL racks, HGX boards).

- ``nvlink.fabric.unassigned`` (critical, gpuN): the node's role expects a multi-node NVLink
  domain (``fabric_role.expects_multi_node``), the GPU's registration completed with
  success, yet its clique id is 0/unreported or its cluster UUID is all zeros/unreported:
  the GPU is in no multi-node domain, so multi-node NVLink jobs cannot use it.
- ``nvlink.fabric.unhealthy`` (critical, gpuN): health summary unhealthy, a route is
  unhealthy, or the fabric says the configuration is incorrect.
- ``nvlink.fabric.degraded`` (warning, gpuN): degraded bandwidth, limited capacity, a route
  or access-timeout recovery in progress, or (in a multi-node domain) the global fabric
  manager is not connected.
  Not raised for a GPU that is unhealthy: that finding's message lists these too.
- ``nvlink.domain.split`` (critical, node): GPUs whose registration completed with a
  non-zero identity disagree on (cluster UUID, clique id).
- ``nvlink.link.slow`` (warning, gpuN:linkM): an active NVLink slower than
  ``fabric.nvlink_speed_mb_s``, or (unset) than the fastest active link of the node.
- ``nvlink.c2c.down`` (critical, gpuN): a Grace <-> GPU NVLink-C2C link is down.
- ``fabric.manager.down`` (critical, node): the fabric manager is expected
  (``fabric_role.expects_fabric_manager``), the process table is the node's whole one,
  and nv-fabricmanager is not in it.
- ``fabric.imex.down`` (critical, node): ``fabric.imex`` is set, the process table is
  complete, and nvidia-imex is not in it.

NVML facts of a lost GPU (``g.error``) are not judged, nor anything while NVML is unavailable
(``nvml.blind`` says so). Every field may be None: None is "not reported", never a fault.
"""

from __future__ import annotations

from agentd.config import FabricSettings
from agentd.judging.checks.common import CheckInput
from agentd.judging.fabric_role import (
    FABRIC_MANAGER,
    IMEX,
    domain_of,
    expects_fabric_manager,
    expects_multi_node,
    local_nvswitches,
    registered,
)
from agentd.judging.findings import NODE, finding, gpu_subject, nvlink_subject
from agentd.model import FabricHealth, Finding, NodeSnapshot, NvmlGpu

_FABRIC_HINT = ("`nvidia-smi -q -i {i}` (its Fabric block: State, Status, CliqueId, ClusterUUID, Health); "
                "on GB200/GB300 NVL racks check the NVLink switch trays' partition in NMX "
                "(nvlsm and the switch trays' fabric manager) and that this tray is in it; "
                "then reset the GPU or reboot the tray")


def _judged_gpus(snap: NodeSnapshot) -> list[NvmlGpu]:
    if not snap.nvml.available:
        return []
    return [g for g in snap.nvml.gpus if not g.error]


def _unassigned(g: NvmlGpu, settings: FabricSettings) -> Finding | None:
    if not registered(g) or domain_of(g) is not None:
        return None
    clique = "unreported" if g.fabric_clique_id is None else str(g.fabric_clique_id)
    uuid = g.fabric_cluster_uuid or "unreported"
    why = "fabric.multi_node = yes" if settings.multi_node == "yes" else \
        "a Grace system whose GPUs report a fabric with no NVSwitch on its own PCI bus (fabric.multi_node = auto)"
    return finding(
        "nvlink.fabric.unassigned", "critical", gpu_subject(g.index, g.pci_bus_id),
        f"fabric registration completed but clique id {clique}, cluster UUID {uuid}; expected a non-zero clique "
        f"id and cluster UUID: the GPU is in no multi-node NVLink domain ({why})",
        _FABRIC_HINT.format(i=g.index) + "; if this node is not part of a multi-node domain, set fabric.multi_node = no",
        measured=f"{uuid}.{clique}", expected="non-zero <cluster_uuid>.<clique_id>")


def _unhealthy_reasons(h: FabricHealth) -> list[str]:
    out = []
    if h.summary == "unhealthy":
        out.append("health summary unhealthy")
    if h.route_unhealthy is True:
        out.append("route unhealthy")
    if h.incorrect_configuration not in (None, "none"):
        out.append(f"incorrect configuration {h.incorrect_configuration}")
    return out


def _degraded_reasons(h: FabricHealth, multi_node: bool) -> list[str]:
    out = []
    if h.summary == "limited_capacity":
        out.append("health summary limited capacity")
    if h.degraded_bandwidth is True:
        out.append("bandwidth degraded")
    if h.route_recovery is True:
        out.append("route recovery in progress")
    if h.access_timeout_recovery is True:
        out.append("access timeout recovery in progress")
    # The global fabric manager runs on the NVL rack's switch trays: its connection means
    # something only in a multi-node domain (a board may well report none).
    if h.gfm_connected is False and multi_node:
        out.append("global fabric manager not connected")
    return out


def _health(g: NvmlGpu, multi_node: bool) -> Finding | None:
    h = g.fabric_health
    if h is None:
        return None
    bad, degraded = _unhealthy_reasons(h), _degraded_reasons(h, multi_node)
    subject = gpu_subject(g.index, g.pci_bus_id)
    if bad:
        also = f"; also {', '.join(degraded)}" if degraded else ""
        return finding(
            "nvlink.fabric.unhealthy", "critical", subject,
            f"NVLink fabric health: {', '.join(bad)}{also}; expected healthy with correct configuration",
            _FABRIC_HINT.format(i=g.index) + "; an incorrect configuration (sysguid, chassis serial, location, "
            "firmware) is fixed on the tray/switch side before the GPU can rejoin",
            measured=", ".join(bad + degraded), expected="healthy")
    if degraded:
        return finding(
            "nvlink.fabric.degraded", "warning", subject,
            f"NVLink fabric health: {', '.join(degraded)}; expected full bandwidth, no recovery in progress",
            _FABRIC_HINT.format(i=g.index) + "; a recovery in progress may clear by itself, a lasting one or "
            "degraded bandwidth means a link or switch-tray fault (check the NVLink switch trays in NMX)",
            measured=", ".join(degraded), expected="healthy")
    return None


def _split(gpus: list[NvmlGpu]) -> Finding | None:
    groups: dict[tuple[str, int], list[int]] = {}
    for g in gpus:
        ident = domain_of(g)
        if ident is not None:
            groups.setdefault(ident, []).append(g.index)
    if len(groups) < 2:
        return None
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1]))
    shown = "; ".join(f"{u}.{c}: gpu{','.join(str(i) for i in sorted(ix))}" for (u, c), ix in ranked)
    return finding(
        "nvlink.domain.split", "critical", NODE,
        f"the node's GPUs are in {len(groups)} NVLink domains ({shown}); expected one",
        "the GPUs of one tray must share one cluster UUID and clique id: check the partition the NVLink switch "
        "trays assigned (NMX / nvlsm) and `nvidia-smi -q` on each GPU; reboot the tray after the partition is fixed",
        measured=len(groups), expected=1)


def _slow(gpus: list[NvmlGpu], settings: FabricSettings) -> list[Finding]:
    speeds = [x.speed_mb_s for g in gpus for x in g.nvlinks if x.state == "up" and x.speed_mb_s]
    if not speeds:
        return []
    configured = settings.nvlink_speed_mb_s
    expected = configured if configured is not None else max(speeds)
    source = "fabric.nvlink_speed_mb_s" if configured is not None else "the node's fastest active NVLink"
    out = []
    for g in gpus:
        for x in g.nvlinks:
            if x.state != "up" or not x.speed_mb_s or x.speed_mb_s >= expected:
                continue
            out.append(finding(
                "nvlink.link.slow", "warning", nvlink_subject(g.index, x.link),
                f"NVLink {x.link} runs at {x.speed_mb_s} MB/s, expected {expected} MB/s ({source})",
                f"`nvidia-smi nvlink -s -i {g.index}` shows each link's speed; a slow link is a cable, connector "
                "or switch-tray port fault: reset the GPU or reboot, then plan a repair (DCGM diagnostics)",
                measured=x.speed_mb_s, expected=expected))
    return out


def _c2c(g: NvmlGpu) -> Finding | None:
    down = [c.link for c in g.c2c_links if c.state == "down"]
    if not down:
        return None
    up = len(g.c2c_links) - len(down)
    return finding(
        "nvlink.c2c.down", "critical", gpu_subject(g.index, g.pci_bus_id),
        f"NVLink-C2C (Grace <-> GPU) link {', '.join(str(n) for n in down)} down; {up} of {len(g.c2c_links)} up, "
        "expected all up",
        f"`nvidia-smi -q -i {g.index}` and dmesg (Xid); a down C2C link cuts the GPU from its Grace CPU's memory: "
        "drain, reboot the tray; a repeat means hardware (RMA)",
        measured=up, expected=len(g.c2c_links))


def _daemons(snap: NodeSnapshot, settings: FabricSettings) -> list[Finding]:
    d = snap.daemons
    if not d.complete:
        return []  # a partial process table (own PID namespace) says nothing about absence
    out = []
    if expects_fabric_manager(snap, settings) and FABRIC_MANAGER not in d.running:
        n = len(local_nvswitches(snap))
        why = (f"{n} NVSwitches on the node's PCI bus" if settings.fabric_manager == "auto"
               else "fabric.fabric_manager = required")
        out.append(finding(
            "fabric.manager.down", "critical", NODE,
            f"{FABRIC_MANAGER} is not running ({why}); expected running: without it the GPUs cannot register "
            "with the NVSwitch fabric and NVLink peers are unreachable",
            "`systemctl status nvidia-fabricmanager`, its log (/var/log/fabricmanager.log, "
            "`journalctl -u nvidia-fabricmanager`); its version must match the driver's; "
            "`systemctl restart nvidia-fabricmanager`, then the GPUs' fabric state must reach completed",
            measured="not running", expected="running"))
    if settings.imex and IMEX not in d.running:
        out.append(finding(
            "fabric.imex.down", "critical", NODE,
            f"{IMEX} is not running (fabric.imex = true); expected running: multi-node NVLink jobs cannot share "
            "GPU memory across nodes",
            "`systemctl status nvidia-imex`, `journalctl -u nvidia-imex`; check /etc/nvidia-imex/nodes_config.cfg "
            "lists the domain's nodes; `systemctl restart nvidia-imex`",
            measured="not running", expected="running"))
    return out


def check_fabric(inp: CheckInput) -> list[Finding]:
    """nvlink.fabric.unassigned/unhealthy/degraded, nvlink.domain.split, nvlink.link.slow,
    nvlink.c2c.down, fabric.manager.down, fabric.imex.down."""
    snap, settings = inp.snapshot, inp.config.fabric
    gpus = _judged_gpus(snap)
    out: list[Finding] = []
    multi_node = bool(gpus) and expects_multi_node(snap, settings)
    for g in gpus:
        if multi_node and (f := _unassigned(g, settings)) is not None:
            out.append(f)
        if (f := _health(g, multi_node)) is not None:
            out.append(f)
        if (f := _c2c(g)) is not None:
            out.append(f)
    if (f := _split(gpus)) is not None:
        out.append(f)
    out.extend(_slow(gpus, settings))
    out.extend(_daemons(snap, settings))
    return out
