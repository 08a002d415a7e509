"""GPUs NVML lost, NVLinks down or erroring, NVSwitch fabric registration.

- ``gpu.lost`` (critical): NVML returned an error for the GPU (e.g. "GPU is lost"), or a
  GPU on the PCI bus is unknown to a working NVML (``Gpu.in_nvml`` False).
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

from agentd.judging.checks.common import (
    CheckInput,
    counter_change,
    exceeds,
    fmt,
    in_window,
)
from agentd.judging.findings import finding, gpu_subject, nvlink_subject
from agentd.model import Finding, NodeSnapshot, NvLink, NvmlGpu

_LOST_HINT = ("check `nvidia-smi` and dmesg for Xid 79 (fallen off the bus) / 48 / 74; drain the node, "
              "then reset the GPU or reboot; a repeat means hardware (RMA)")


def _lost(inp: CheckInput) -> list[Finding]:
    snap = inp.snapshot
    if not snap.nvml.available:
        return []
    out: dict[int, Finding] = {}
    for g in snap.nvml.gpus:
        if g.error:
            out[g.index] = finding("gpu.lost", "critical", gpu_subject(g.index, g.pci_bus_id),
                                   f"NVML error for {g.pci_bus_id}: {g.error}", _LOST_HINT, measured=g.error)
    for gpu in snap.gpus:
        if gpu.in_nvml is False and gpu.index not in out:
            out[gpu.index] = finding(
                "gpu.lost", "critical", gpu_subject(gpu.index, gpu.pci_bus_id),
                f"GPU {gpu.pci_bus_id} is on the PCI bus but NVML does not see it "
                f"({len(snap.nvml.gpus)} GPUs in NVML, {len(snap.gpus)} on PCI)",
                _LOST_HINT, measured="not in NVML", expected="in NVML")
    return list(out.values())


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


def _link_index(snap: NodeSnapshot) -> dict[tuple[str, int], NvLink]:
    return {(g.pci_bus_id, x.link): x for g in snap.nvml.gpus for x in g.nvlinks}


def _errors(inp: CheckInput, window: list[NodeSnapshot], indexes: list[dict[tuple[str, int], NvLink]],
            g: NvmlGpu) -> list[Finding]:
    limit = inp.config.thresholds.nvlink_error_per_s
    out = []
    for link in g.nvlinks:
        rising = []
        olds = [ix.get((g.pci_bus_id, link.link)) for ix in indexes]
        for name, value in sorted(link.errors.items()):
            pts = [(s.taken_at, old.errors.get(name) if old is not None else None)
                   for s, old in zip(window, olds, strict=True)]
            change = counter_change([*pts, (inp.snapshot.taken_at, value)])
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
    window = in_window(inp.history, snap.taken_at, inp.config.thresholds.rate_window_s)
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
