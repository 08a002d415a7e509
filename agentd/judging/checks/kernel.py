"""Kernel log events: XIDs, GPUs off the bus, NVSwitch SXIDs, mlx5 firmware, PCIe AER.

The events come with the snapshot (``NodeSnapshot.kernel``, read by agentd.host.kernel_log);
what each one means is the catalogue's (agentd.judging.kernel_policy): a rule and a
severity per kind and code. A rule is judged per thing (a GPU, an HCA, a PCI function):

- ``once``: one event is a node fault (XID 79, an uncontained ECC error, a fatal AER
  error, mlx5 health compromised). Critical ones hold for ``kernel.hold_s`` (a day by
  default: the GPU or HCA needs a reset or a reboot, and a reboot starts a new log);
  warnings for ``kernel.window_s``.
- ``repeated``: only ``threshold`` events within ``kernel.window_s`` make a finding, so a
  one-off corrected error or command timeout never degrades a node.
- ``count``: never a finding (application XIDs such as 13, 31, 43, 45: the job's fault,
  not the node's), only counted (``agentd_kernel_events_total``).

One finding per code and subject, at the worst severity of its events, naming the codes
and the latest line. AER events of a PCI function whose sysfs AER counters agentd reads
are judged from those counters (pcie_errors), not again here. A log agentd cannot read
on a live node is said as a fact (``kernel.log.unreadable``, severity ok): the node is
not sick, agentd is blind to its kernel's events (alert on ``agentd_kernel_log_up``).
"""

from __future__ import annotations

from collections import defaultdict

from agentd.judging.checks.common import CheckInput
from agentd.judging.findings import NODE, finding, gpu_subject, hca_subject, pci_subject
from agentd.judging.kernel_policy import EventPolicy, event_policy
from agentd.model import SEVERITY_RANK, Finding, KernelEvent, NodeSnapshot, Subject

# kind -> finding code
FINDING_CODES = {
    "xid": "gpu.xid",
    "gpu_off_bus": "gpu.off_bus",
    "nvrm": "gpu.driver_error",
    "sxid": "nvswitch.sxid",
    "peermem": "gdr.peermem_error",
    "mlx5": "hca.firmware",
}
AER_CODES = {"fatal": "pcie.aer.fatal", "nonfatal": "pcie.aer.nonfatal", "corrected": "pcie.aer.correctable"}


def _code(e: KernelEvent) -> str | None:
    if e.kind == "aer":
        return AER_CODES.get(e.code)
    return FINDING_CODES.get(e.kind)


def _subject(snap: NodeSnapshot, e: KernelEvent) -> Subject:
    bus = e.device
    if bus is None:
        return NODE
    if e.kind in ("xid", "gpu_off_bus", "nvrm"):
        for g in snap.gpus:
            if g.pci_bus_id == bus:
                return gpu_subject(g.index, g.pci_bus_id)
        return gpu_subject(bus_id=bus)
    if e.kind == "mlx5":
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
    title = p.title.split(": ", 1)[1] if p.title.lower().startswith(("xid ", "sxid ")) and ": " in p.title else p.title
    name = f"XID {e.code}" if e.kind == "xid" else f"SXID {e.code}" if e.kind == "sxid" else ""
    if name:
        return f"{name} ({title})" if title else name
    return title or e.code.replace("_", " ")


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
    cfg = inp.config.kernel
    now = snap.taken_at
    groups: dict[tuple[str, Subject], list[tuple[KernelEvent, EventPolicy]]] = defaultdict(list)
    for e in log.events:
        pol = event_policy(e.kind, e.code)
        if pol.rule == "count" or pol.severity == "ok":
            continue
        span = cfg.hold_s if pol.rule == "once" and pol.severity == "critical" else cfg.window_s
        if now - e.at > span:
            continue
        code = _code(e)
        if code is None or (e.kind == "aer" and _aer_from_counters(inp, e)):
            continue
        groups[(code, _subject(snap, e))].append((e, pol))
    out: list[Finding] = []
    for (code, subject), items in groups.items():
        by_code: dict[str, list[tuple[KernelEvent, EventPolicy]]] = defaultdict(list)
        for e, pol in items:
            by_code[e.code].append((e, pol))
        fired: list[tuple[KernelEvent, EventPolicy, int]] = []
        for evs in by_code.values():
            pol = evs[-1][1]
            if pol.rule == "repeated" and len(evs) < pol.threshold:
                continue
            fired.append((evs[-1][0], pol, len(evs)))
        if not fired:
            continue
        worst = max(fired, key=lambda f: (SEVERITY_RANK[f[1].severity], f[0].at))
        last, pol, _ = worst
        what = ", ".join(f"{_label(e, p)} x{n}" for e, p, n in sorted(fired, key=lambda f: f[0].seq))
        total = sum(n for _, _, n in fired)
        out.append(finding(
            code, pol.severity, subject,
            f"{what} in the kernel log; latest: {last.detail}",
            pol.remediation, measured=total,
        ))  # fmt: skip
    return out
