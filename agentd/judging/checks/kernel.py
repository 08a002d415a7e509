"""Kernel log events: XIDs, GPUs off the bus, NVSwitch SXIDs, mlx5 firmware, EFA admin queue, PCIe errors.

The events come with the snapshot (``NodeSnapshot.kernel``, read by agentd.host.kernel_log);
what each one means is the catalogue's (agentd.judging.kernel_policy): a rule and a
severity per kind and code, decided by the line's own words where it has them (an NVLink5
XID or SXID that says "Fatal", the recovery action an Xid 154 names). A rule is judged per
thing (a GPU, an HCA, a PCI function):

- ``once``: one event is a node fault (XID 79, an uncontained ECC error, a fatal AER
  error, mlx5 health compromised). Critical ones hold: those whose catalogue action is a
  GPU reset (RESET_GPU, Xid 154 "GPU Reset Required" / "Drain and Reset",
  NV_ERR_RESET_REQUIRED) until the GPU is seen reset (Xid 154 back to "None") or the node
  reboots, those whose action is a reboot (RESTART_BM, "Node Reboot Required", a GPU off
  the bus) until the node reboots (a new boot starts a new log), within
  ``kernel.reset_hold_s`` when set; the others for ``kernel.hold_s`` (a day by default).
  Warnings hold for ``kernel.window_s``.
- ``repeated``: only ``threshold`` events within ``kernel.window_s`` make a finding, so a
  one-off corrected error or command timeout never degrades a node.
- ``count``: never judged. Application XIDs (13, 31, 43, 45: the job's fault, not the
  node's) and non-fatal SXIDs are shown as ``info`` findings naming the GPU or switch,
  with their count and latest time, for ``kernel.window_s`` after the latest; so are
  corrected AER errors below their storm threshold. Info never counts toward health.
  Other counted events are only in the metrics (``agentd_kernel_events_total``).

One finding per code and subject, at the worst severity of its events, naming the codes
and the latest line. AER events of a PCI function whose sysfs AER counters agentd reads
are judged from those counters (pcie_errors), not again here. A log agentd cannot read
on a live node is said as a fact (``kernel.log.unreadable``, severity ok): the node is
not sick, agentd is blind to its kernel's events (alert on ``agentd_kernel_log_up``).
Records agentd never read (a flood outran it, the kernel overwrote them) are said as
``kernel.log.lost`` (info): an event among them is unseen.
"""

from __future__ import annotations

from collections import defaultdict

from agentd.judging.checks.common import CheckInput
from agentd.judging.findings import NODE, finding, gpu_subject, hca_subject, pci_subject, utc_text
from agentd.judging.kernel_policy import EventPolicy, is_reset, policy_of
from agentd.model import SEVERITY_ORDER, Finding, KernelEvent, KernelLog, NodeSnapshot, Subject

# kind -> finding code
FINDING_CODES = {
    "xid": "gpu.xid",
    "gpu_off_bus": "gpu.off_bus",
    "nvrm": "gpu.driver_error",
    "sxid": "nvswitch.sxid",
    "peermem": "gdr.peermem_error",
    "mlx5": "hca.firmware",
    "efa": "hca.firmware",
}
AER_CODES = {"fatal": "pcie.aer.fatal", "nonfatal": "pcie.aer.nonfatal", "corrected": "pcie.aer.correctable"}
PCIE_CODES = {
    "dpc": "pcie.dpc.contained",
    "recovery_failed": "pcie.recovery.failed",
    "reset_failed": "pcie.recovery.failed",
    "link_down": "pcie.hotplug.link_down",
    "link_inactive": "pcie.link.inactive",
}
Key = tuple[str, str, str | None]


def _code(e: KernelEvent) -> str | None:
    if e.kind == "aer":
        return AER_CODES.get(e.code)
    if e.kind == "pcie":
        return PCIE_CODES.get(e.code)
    return FINDING_CODES.get(e.kind)


def _subject(snap: NodeSnapshot, e: KernelEvent) -> Subject:
    bus = e.device
    if bus is None:
        return NODE
    about = FINDING_CODES.get(e.kind, "").split(".", 1)[0]  # what the kind's finding is about: a GPU, an HCA
    if about == "gpu":
        for g in snap.gpus:
            if g.pci_bus_id == bus:
                return gpu_subject(g.index, g.pci_bus_id)
        return gpu_subject(bus_id=bus)
    if about == "hca":
        for h in snap.hcas:
            if h.pci_bus_id == bus:
                return hca_subject(h.name)
    return pci_subject(bus)


def _aer_from_counters(inp: CheckInput, e: KernelEvent) -> bool:
    """Whether the sysfs AER counters of this function judge the event (pcie_errors): they
    are read, and the history reaches back before the event, so the rise it caused is
    between two readings. An error from before agentd's first reading (the ring buffer
    read at start, ``agentd check``) is judged from its line."""
    dev = inp.snapshot.pci_device(e.device) if e.device else None
    if dev is None or dev.aer is None:
        return False
    return any(h.taken_at <= e.at and (d := h.pci_device(dev.bdf)) is not None and d.aer is not None for h in inp.history)


def _label(e: KernelEvent, p: EventPolicy) -> str:
    """``XID 79 (GPU has fallen off the bus)``, ``fatal (PCIe uncorrected fatal error)``."""
    title = p.title.split(": ", 1)[1] if p.title.lower().startswith(("xid ", "sxid ", "nvswitch sxid ")) and ": " in p.title else p.title
    name = f"XID {e.code}" if e.kind == "xid" else f"SXID {e.code}" if e.kind == "sxid" else ""
    if name:
        return f"{name} ({title})" if title else name
    return title or e.code.replace("_", " ")


def _resets(events: tuple[KernelEvent, ...]) -> dict[str, tuple[float, int]]:
    """GPU bus id -> (when, seq) the driver last said it was reset (``is_reset``)."""
    out: dict[str, tuple[float, int]] = {}
    for e in events:
        if e.device is not None and is_reset(e):
            out[e.device] = max(out.get(e.device, (e.at, e.seq)), (e.at, e.seq))
    return out


def _shown(e: KernelEvent, pol: EventPolicy, inp: CheckInput, resets: dict[str, tuple[float, int]]) -> bool:
    """Whether the event still makes (or helps make) a finding at the snapshot's time."""
    cfg, now = inp.config.kernel, inp.snapshot.taken_at
    if pol.rule == "once" and pol.severity == "critical":
        if pol.until is None:
            return now - e.at <= cfg.hold_s
        if e.device is not None and resets.get(e.device, (-1.0, -1)) > (e.at, e.seq):
            return False  # the driver said the GPU was reset (its recovery action back to None) after it
        return cfg.reset_hold_s == 0 or now - e.at <= cfg.reset_hold_s
    return now - e.at <= cfg.window_s


def check_events(inp: CheckInput) -> list[Finding]:
    snap = inp.snapshot
    log = snap.kernel
    if not log.available:
        if log.asked and log.error and inp.config.kernel.enabled:
            return [finding(
                "kernel.log.unreadable", "ok", NODE,
                f"agentd cannot read the kernel log ({log.error}): XIDs, GPUs off the bus, mlx5 firmware and PCIe AER events go unseen",
                "Give agentd the kernel log: the shipped unit has CAP_SYSLOG and /dev/kmsg; a container needs /dev/kmsg and CAP_SYSLOG where kernel.dmesg_restrict=1 (docs/runbooks.md#kernel-log).",
            )]  # fmt: skip
        return []
    resets: dict[str, tuple[float, int]] = _resets(log.events)
    groups: dict[tuple[str, Subject], list[tuple[KernelEvent, EventPolicy]]] = defaultdict(list)
    for e in log.events:
        pol = policy_of(e)
        if pol.severity == "ok" or not _shown(e, pol, inp, resets):
            continue
        code = _code(e)
        if code is None or (e.kind == "aer" and _aer_from_counters(inp, e)):
            continue
        groups[(code, _subject(snap, e))].append((e, pol))
    totals: dict[Key, int] = {(c.kind, c.code, c.device): c.count for c in log.counts}
    out = [f for (code, subject), items in groups.items() if (f := _finding(code, subject, items, totals)) is not None]
    lost = _lost(inp, log)
    if lost is not None:
        out.append(lost)
    return out


def _finding(code: str, subject: Subject, items: list[tuple[KernelEvent, EventPolicy]], totals: dict[Key, int]) -> Finding | None:
    """One finding for the events of one code and subject: the worst of the rules that
    fire, with every one named."""
    by_rule: dict[tuple[str, EventPolicy], list[KernelEvent]] = defaultdict(list)
    for e, pol in items:
        by_rule[(e.code, pol)].append(e)
    fired: list[tuple[KernelEvent, EventPolicy, int]] = []
    for (_, pol), evs in by_rule.items():
        last = evs[-1]
        if pol.rule == "count":  # shown (info), never judged: how many since agentd started on this boot
            fired.append((last, pol, totals.get((last.kind, last.code, last.device), len(evs))))
        elif pol.rule == "repeated" and len(evs) < pol.threshold:
            if pol.below is not None:
                title = f"{pol.title.removesuffix(' storm')} (below the storm threshold of {pol.threshold})"
                fired.append((last, EventPolicy(pol.below, "count", title=title, remediation=pol.remediation), len(evs)))
        else:
            fired.append((last, pol, len(evs)))
    if not fired:
        return None
    last, pol, _ = max(fired, key=lambda f: (SEVERITY_ORDER[f[1].severity], f[0].at))
    what = ", ".join(f"{_label(e, p)} x{n}" for e, p, n in sorted(fired, key=lambda f: f[0].at))
    return finding(
        code, pol.severity, subject,
        f"{what} in the kernel log; latest at {utc_text(last.at)}: {last.detail}",
        pol.remediation, measured=sum(n for _, _, n in fired),
    )  # fmt: skip


def _lost(inp: CheckInput, log: KernelLog) -> Finding | None:
    """``kernel.log.lost`` while records went unread within ``kernel.window_s``, or the
    reader is behind: a fact (info), never a fault of the node."""
    recent = log.lost_at is not None and inp.snapshot.taken_at - log.lost_at <= inp.config.kernel.window_s
    if not recent and not log.behind:
        return None
    state = "is behind a flood of records (reading on, at its bounded pace)" if log.behind else "caught up"
    return finding(
        "kernel.log.lost", "info", NODE,
        f"{log.lost} kernel log records were never read by agentd (overwritten by the kernel, or passed over under a flood); "
        f"the reader {state}: an event among them is unseen",
        "Find what floods the kernel log (`dmesg | tail`: an iptables LOG rule without a limit, a driver error loop, audit without auditd) "
        "and stop it; raise the ring buffer (log_buf_len=) if bursts are normal (docs/runbooks.md#kernel-log).",
        measured=log.lost,
    )  # fmt: skip
