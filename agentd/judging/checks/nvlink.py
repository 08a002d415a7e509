"""NVML blind, GPUs NVML lost, NVLinks down or erroring, NVSwitch fabric registration.

- ``nvml.blind`` (critical, subject ``nvml``): NVIDIA GPUs are on the PCI bus but NVML
  answered "unavailable", or a working NVML lists fewer of them than the PCI bus has.
  Every NVML-based check (lost GPUs, NVLink, fabric) is then blind for those GPUs. Not
  raised while the nvml probe itself failed or timed out: that is ``probe.failed``
  (a hung NVML), and the daemon's ``agentd.data.stale``.
- ``gpu.lost`` (critical): NVML returned an error for the GPU (e.g. "GPU is lost"). A GPU
  on the PCI bus that a working NVML does not list at all is part of ``nvml.blind``: from
  here, a GPU the driver failed to bring up and a GPU hidden from agentd (container device
  list, device cgroup) look the same.
- ``nvlink.link.down`` (critical): with ``expect.nvlinks_per_gpu`` unset, every link NVML
  reports as supported must be up (one finding per link, ``gpu3:link5``); with it set, a
  GPU with fewer active links than that is one finding on ``gpu3`` listing the down links.
- ``nvlink.link.errors`` (warning): CRC/replay/recovery counters rising faster than
  ``thresholds.nvlink_error_per_s`` over the rate window.
- ``nvlink.fabric.incomplete`` (critical): the GPU reports a fabric state that is not
  "completed" (NVSwitch systems: the fabric manager has not registered the GPU, so
  NVLink peers are unreachable), or "completed" with a failure status.
"""

from __future__ import annotations

from agentd.base.ids import VENDOR_NVIDIA
from agentd.judging.checks.common import (
    CheckInput,
    changes,
    counter_change,
    exceeds,
    flat,
    fmt,
    in_window,
)
from agentd.judging.findings import finding, gpu_subject, nvlink_subject, probe_subject
from agentd.model import Finding, HistoryEntry, LinkReading, NodeSnapshot, NvmlGpu

_LOST_HINT = ("check `nvidia-smi` and dmesg for Xid 79 (fallen off the bus) / 48 / 74; drain the node, "
              "then reset the GPU or reboot; a repeat means hardware (RMA)")


def pci_gpus(snap: NodeSnapshot) -> tuple[str, ...]:
    """Bus ids of the NVIDIA GPUs on the PCI bus (what NVML should list)."""
    return tuple(sorted(d.bdf for d in snap.pci if d.is_gpu and d.vendor_id == VENDOR_NVIDIA))


def nvml_unseen(snap: NodeSnapshot) -> tuple[str, ...]:
    """NVIDIA GPUs on the PCI bus that NVML does not list (all of them when NVML is unavailable)."""
    listed = {g.pci_bus_id for g in snap.nvml.gpus} if snap.nvml.available else set()
    return tuple(b for b in pci_gpus(snap) if b not in listed)


_BLIND_HINT = ("run `nvidia-smi` on the node. If it fails too, the driver is not loaded or does not match its library "
               "(after an upgrade): drain, reload the driver or reboot. If it works, agentd alone cannot reach NVML: "
               "systemd unit device access (missing /dev/nvidia* nodes, their group, DeviceAllow; `systemctl restart "
               "agentd` after a late driver load), or the container's NVIDIA runtime (NVIDIA_VISIBLE_DEVICES=all, "
               "NVIDIA_DRIVER_CAPABILITIES=utility); see the AgentdNvmlBlind runbook")


def _nvml_probe_failed(snap: NodeSnapshot) -> bool:
    return any(st.name == "nvml" and (not st.ok or st.timed_out) for st in snap.probes)


def nvml_blind(snap: NodeSnapshot) -> bool:
    """Whether ``nvml.blind`` is raised for this snapshot. Not for a root whose NVML
    nobody could ask (a copied tree without recorded answers): that is not the node's."""
    return snap.nvml.asked and bool(nvml_unseen(snap)) and not _nvml_probe_failed(snap)


def check_nvml_blind(inp: CheckInput) -> list[Finding]:
    """nvml.blind: NVIDIA GPUs on PCI that NVML cannot show agentd."""
    snap = inp.snapshot
    if not nvml_blind(snap):
        return []
    on_pci = pci_gpus(snap)
    unseen = nvml_unseen(snap)
    nv = snap.nvml
    if not nv.available:
        msg = (f"NVML unavailable ({nv.error or 'no reason given'}) while {len(on_pci)} NVIDIA GPUs are on the "
               "PCI bus: lost GPUs, NVLink and fabric state are not seen")
        measured: str | int = "unavailable"
    else:
        shown = ", ".join(unseen[:4]) + (f" (+{len(unseen) - 4} more)" if len(unseen) > 4 else "")
        msg = (f"NVML lists {len(on_pci) - len(unseen)} of the {len(on_pci)} NVIDIA GPUs on the PCI bus; "
               f"(not in NVML: {shown}); their health and NVLinks are not seen")
        measured = len(on_pci) - len(unseen)
    return [finding("nvml.blind", "critical", probe_subject("nvml"), msg, _BLIND_HINT,
                    measured=measured, expected=len(on_pci))]


def _lost(inp: CheckInput) -> list[Finding]:
    snap = inp.snapshot
    if not snap.nvml.available:
        return []
    return [
        finding("gpu.lost", "critical", gpu_subject(g.index, g.pci_bus_id),
                f"NVML error for {g.pci_bus_id}: {g.error}", _LOST_HINT, measured=g.error)
        for g in snap.nvml.gpus if g.error
    ]


def _down(inp: CheckInput, g: NvmlGpu) -> list[Finding]:
    expected = inp.config.expect.nvlinks_per_gpu
    down = [link for link in g.nvlinks if link.state == "down"]
    active = len(g.nvlinks) - len(down)
    hint = (f"check `nvidia-smi nvlink -s -i {g.index}` and the fabric manager log; reset the GPU or reboot; "
            "persistent down links mean a GPU baseboard/NVSwitch fault")
    if expected is not None:
        if active >= expected:
            return []
        names = ", ".join(str(link.link) for link in down) or "none reported"
        return [finding("nvlink.link.down", "critical", gpu_subject(g.index, g.pci_bus_id),
                        f"{active} NVLinks active, expected {expected} (expect.nvlinks_per_gpu); down links: {names}",
                        hint, measured=active, expected=expected)]
    return [
        finding("nvlink.link.down", "critical", nvlink_subject(g.index, link.link),
                f"NVLink {link.link} is supported but inactive ({active} of {len(g.nvlinks)} links up)",
                hint, measured="down", expected="up")
        for link in down
    ]


def _link_index(snap: HistoryEntry) -> dict[tuple[str, int], LinkReading]:
    return {(g.pci_bus_id, x.link): x for g in snap.nvml.gpus for x in g.nvlinks}


def _errors(inp: CheckInput, window: list[HistoryEntry], indexes: list[dict[tuple[str, int], LinkReading]],
            g: NvmlGpu) -> list[Finding]:
    limit = inp.config.thresholds.nvlink_error_per_s
    out = []
    for link in g.nvlinks:
        rising = []
        olds = [ix.get((g.pci_bus_id, link.link)) for ix in indexes]
        tables = [old.errors if old is not None else None for old in olds]
        for name, value in sorted(link.errors.items()):
            values = [t.get(name) if t is not None else None for t in tables]
            if flat(values, value):
                continue
            change = counter_change([*zip((s.taken_at for s in window), values), (inp.snapshot.taken_at, value)])
            if exceeds(change, limit):
                rising.append(f"{name} +{change.delta} in {fmt(change.seconds)} s ({fmt(change.rate or 0)}/s)")
        if rising:
            out.append(finding(
                "nvlink.link.errors", "warning", nvlink_subject(g.index, link.link),
                f"NVLink errors rising: {'; '.join(rising)}; threshold {fmt(limit)}/s (thresholds.nvlink_error_per_s)",
                f"watch `nvidia-smi nvlink -e -i {g.index}`; rising CRC/replay/recovery counts point at the GPU "
                "baseboard or NVSwitch tray: run DCGM diagnostics and plan an RMA if they persist",
                measured="; ".join(rising), expected=limit))
    return out


def _fabric(g: NvmlGpu) -> Finding | None:
    state, status = g.fabric_state, g.fabric_status
    if state is None or state == "not_supported":
        return None
    if state == "completed" and (status is None or status.lower() == "success"):
        return None
    shown = f"{state}" + (f", status {status}" if status else "")
    return finding(
        "nvlink.fabric.incomplete", "critical", gpu_subject(g.index, g.pci_bus_id),
        f"NVSwitch fabric registration {shown}, expected completed/success",
        "check that nvidia-fabricmanager (and on NVL systems the NVLink subnet manager) runs and its log; "
        "restart it, then the GPU fabric state must reach completed",
        measured=shown, expected="completed")


def check_nvlink(inp: CheckInput) -> list[Finding]:
    """gpu.lost, nvlink.link.down, nvlink.link.errors, nvlink.fabric.incomplete."""
    snap = inp.snapshot
    out = _lost(inp)
    if not snap.nvml.available:
        return out
    window = changes(in_window(inp.history, snap.taken_at, inp.config.thresholds.rate_window_s), lambda s: s.nvml.gpus)
    indexes = [_link_index(s) for s in window]
    for g in snap.nvml.gpus:
        if g.error:
            continue  # nothing else NVML says about a lost GPU is trustworthy
        out.extend(_down(inp, g))
        if window:
            out.extend(_errors(inp, window, indexes, g))
        fabric = _fabric(g)
        if fabric is not None:
            out.append(fabric)
    return out
