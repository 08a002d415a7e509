"""PCIe error counters over the history window, and links that retrained between polls.

AER (sysfs aer_dev_* totals of GPUs, HCAs and the bridges above them, read by the medium
``pci_errors`` probe), each judged from the readings within ``thresholds.rate_window_s``
(common.py's rules: a counter that went backwards was reset, and is measured from the
first reading after the reset; no earlier reading, no finding):
- ``pcie.aer.fatal`` (critical): TOTAL_ERR_FATAL rose. A fatal error takes the link
  down for a reset; in-flight DMA is lost.
- ``pcie.aer.nonfatal`` (warning): TOTAL_ERR_NONFATAL rose: transactions were lost.
- ``pcie.aer.correctable`` (warning): TOTAL_ERR_COR rose by more than
  ``thresholds.pcie_aer_correctable_max``. Corrected errors are routine (the link layer
  replayed the packet); only many of them point at a marginal link.
Counts are what the device saw: an endpoint's errors often count at its link partner, so
the finding names the function whose counter rose, and the hint says to look both ways.

- ``gpu.pcie.replay`` (warning): NVML's PCIe replay counter of a GPU rising faster than
  ``thresholds.gpu_pcie_replay_per_min`` over the window (DCGM's limit is 8/min).

- ``pcie.link.retrained`` (warning): the current link speed or width of an HCA or of a
  bridge above a GPU or HCA differs between snapshots within
  ``thresholds.pcie_retrain_window_s`` (only snapshots inside it: no older fallback): a link that
  trained down (and perhaps back up) between two polls. The medium probe re-reads these
  links so a retrain is seen within one medium interval. GPU link speed does not count,
  nor the speed of the port directly above a GPU (the same link): GPUs lower their speed
  when idle. Their widths count.
"""

from __future__ import annotations

from typing import Literal

from agentd.base.ids import VENDOR_NVIDIA
from agentd.judging.checks.common import CheckInput, changes, counter_change, exceeds, fmt, in_window
from agentd.judging.findings import finding, gpu_subject, pci_subject
from agentd.model import AerCounts, Finding, HistoryEntry, NodeSnapshot, PciDevice, PciReading, Severity

AerSeverity = Literal["fatal", "nonfatal", "correctable"]
_TOTAL = {"fatal": "TOTAL_ERR_FATAL", "nonfatal": "TOTAL_ERR_NONFATAL", "correctable": "TOTAL_ERR_COR"}
_LOOK = ("errors count where they are seen: check this function and its link partner (the device below or the port above); "
         "`dmesg | grep -i aer` names the source")
_HINTS = {
    "fatal": "a fatal PCIe error resets the link and loses in-flight DMA: drain the node; " + _LOOK + "; reseat or replace the card, riser or cable",
    "nonfatal": "uncorrectable PCIe errors lost transactions (completion timeouts, unsupported requests, poisoned TLPs): " + _LOOK + "; recurring: reseat or replace",
    "correctable": "many corrected PCIe errors (the link keeps replaying packets): a marginal link (slot, riser, retimer, cable); " + _LOOK
                   + "; watch for pcie.link.downtrained / pcie.link.retrained",
}
_SEVERITY: dict[AerSeverity, Severity] = {"fatal": "critical", "nonfatal": "warning", "correctable": "warning"}


def _aer(d: PciReading | None, severity: AerSeverity) -> AerCounts | None:
    aer = d.aer if d is not None else None
    if aer is None:
        return None
    return aer.fatal if severity == "fatal" else aer.nonfatal if severity == "nonfatal" else aer.correctable


def _total(d: PciReading | None, severity: AerSeverity) -> int | None:
    c = _aer(d, severity)
    return c.total if c is not None else None


def _types_rose(old: AerCounts | None, new: AerCounts) -> str:
    if old is None:
        return ""
    rose = [f"{name} +{v - old.by_type.get(name, 0)}" for name, v in new.by_type.items() if v > old.by_type.get(name, 0)]
    return f" ({', '.join(rose[:6])})" if rose else ""


def _pci_index(window: list[HistoryEntry]) -> list[dict[str, PciReading]]:
    return [{d.bdf: d for d in s.pci} for s in window]


def check_aer(inp: CheckInput) -> list[Finding]:
    """pcie.aer.fatal, pcie.aer.nonfatal, pcie.aer.correctable (info while the corrected
    errors stay within the allowed: routine, shown, never judged)."""
    snap = inp.snapshot
    window = changes(in_window(inp.history, snap.taken_at, inp.config.thresholds.rate_window_s), lambda s: s.pci)
    if not window:
        return []
    indexes = _pci_index(window)
    allowed = inp.config.thresholds.pcie_aer_correctable_max
    out: list[Finding] = []
    for d in snap.pci:
        if d.aer is None:
            continue
        for severity in ("fatal", "nonfatal", "correctable"):
            now = _aer(d, severity)
            if now is None:
                continue
            olds = [ix.get(d.bdf) for ix in indexes]
            change = counter_change([*((s.taken_at, _total(o, severity)) for s, o in zip(window, olds, strict=True)), (snap.taken_at, now.total)])
            if change.status != "rate" or change.delta <= 0:
                continue
            routine = severity == "correctable" and change.delta <= allowed  # shown (info), not judged
            base = next((_aer(o, severity) for o in olds if _total(o, severity) == now.total - change.delta), None)
            limit = "" if severity != "correctable" else f", {'within' if routine else 'more than'} the {allowed} allowed (thresholds.pcie_aer_correctable_max)"
            out.append(finding(
                f"pcie.aer.{severity}",
                "info" if routine else _SEVERITY[severity],
                pci_subject(d.bdf),
                f"AER {severity} errors rose {change.delta} in {fmt(change.seconds)} s "
                f"({_TOTAL[severity]} {now.total - change.delta} -> {now.total}){_types_rose(base, now)}{limit}",
                _HINTS[severity],
                measured=change.delta,
                expected=allowed if severity == "correctable" else 0,
            ))
    return out


def check_replay(inp: CheckInput) -> list[Finding]:
    """gpu.pcie.replay: NVML's PCIe replay counter rising faster than the threshold."""
    snap = inp.snapshot
    window = changes(in_window(inp.history, snap.taken_at, inp.config.thresholds.rate_window_s), lambda s: s.nvml.gpus)
    if not window:
        return []
    per_min = inp.config.thresholds.gpu_pcie_replay_per_min
    indexes = [{g.pci_bus_id: g for g in s.nvml.gpus} for s in window]
    out: list[Finding] = []
    for g in snap.nvml.gpus:
        if g.pcie_replay_errors is None:
            continue
        pts = [(s.taken_at, old.pcie_replay_errors if (old := ix.get(g.pci_bus_id)) is not None else None) for s, ix in zip(window, indexes, strict=True)]
        change = counter_change([*pts, (snap.taken_at, g.pcie_replay_errors)])
        if not exceeds(change, per_min / 60):
            continue
        rate = (change.rate or 0.0) * 60
        out.append(finding(
            "gpu.pcie.replay", "warning", gpu_subject(g.index, g.pci_bus_id),
            f"PCIe replays rose {change.delta} in {fmt(change.seconds)} s = {fmt(rate)}/min, "
            f"threshold {fmt(per_min)}/min (thresholds.gpu_pcie_replay_per_min)",
            f"the GPU's PCIe link retransmits packets (signal integrity): check `nvidia-smi -q -i {g.index} -d PCIE` and dmesg for AER "
            "errors on the port above; reseat the GPU/riser, run DCGM diagnostics, and RMA if it persists",
            measured=rate, expected=per_min,
        ))
    return out


def _watched_links(snap: NodeSnapshot) -> dict[str, bool]:
    """bdf -> whether its speed counts, for HCA functions and the bridges above GPUs and
    HCAs (the links the pci_errors probe re-reads). A port directly above a GPU shares the
    GPU's link: its speed follows the GPU's power state, so only its width counts."""
    devs = {d.bdf: d for d in snap.pci}
    gpus = [d for d in snap.pci if d.is_gpu and d.vendor_id == VENDOR_NVIDIA]
    nics = [devs[h.pci_bus_id] for h in snap.hcas if h.pci_bus_id in devs]
    out: dict[str, bool] = {}
    for d in nics:
        out[d.bdf] = not d.is_gpu
        for parent in d.parent_chain:
            out.setdefault(parent, True)
    for g in gpus:
        for parent in g.parent_chain:
            out.setdefault(parent, True)
        if g.parent_chain:
            out[g.parent_chain[-1]] = False
    return {b: v for b, v in out.items() if b in devs and not devs[b].is_gpu}


def _link_text(speed: str | None, width: int | None) -> str:
    """'32.0 GT/s PCIe x16'; what is not known (a port above a GPU: its speed is not judged)
    is left out, never named 'unknown'."""
    return " ".join(p for p in (speed, f"x{width}" if width is not None else None) if p)


def check_retrained(inp: CheckInput) -> list[Finding]:
    """pcie.link.retrained: a NIC's or bridge's current link changed within the window."""
    snap = inp.snapshot
    window_s = inp.config.thresholds.pcie_retrain_window_s
    window = changes([s for s in in_window(inp.history, snap.taken_at, window_s) if s.taken_at >= snap.taken_at - window_s], lambda s: s.pci)
    if not window:
        return []
    indexes = _pci_index(window)
    out: list[Finding] = []
    for bdf, speed_counts in sorted(_watched_links(snap).items()):
        current: PciDevice | None = snap.pci_device(bdf)
        if current is None:
            continue
        seen: list[tuple[str | None, int | None]] = []
        for d in [*(ix.get(bdf) for ix in indexes), current]:
            if d is None:
                continue
            speed = d.current_link_speed if speed_counts else None
            width = d.current_link_width
            if speed is None and width is None:
                continue
            if not seen or seen[-1] != (speed, width):
                seen.append((speed, width))
        if len(seen) < 2:
            continue
        steps = " -> ".join(_link_text(s, w) for s, w in seen[-6:])
        what = "link width" if not speed_counts else "link"
        out.append(finding(
            "pcie.link.retrained", "warning", pci_subject(bdf),
            f"PCIe {what} of {bdf} changed within the last {fmt(window_s)} s: {steps}",
            "the link retrained (a link-down/up or a downshift after errors): check `dmesg` for AER and link messages, "
            f"`lspci -vvv -s {bdf}` (LnkSta), and reseat the card, riser or cable if it repeats",
            measured=steps, expected=_link_text(*seen[0]),
        ))
    return out
