"""What agentd did not read, and why: facts, never faults (severity ok).

- ``collect.device.ignored``: ``collect.ignore`` names the device; no reader opened
  anything of it. One finding a device: a PCI function with its RDMA devices and netdevs
  is one (subject its bus id), a device whose function is unknown is its own.
- ``collect.device.backed_off``: agentd stopped the firmware-backed reads of a PCI
  function for the rest of the boot (agentd.host.gate): a command failure logged right
  after it read the function (the message quotes the kernel log line), or a Fabric
  Manager limited PF (its VPD says so). Its counters (and at the ``link`` level, its
  ports' state) are then not judged; the metric ``agentd_collect_backed_off_info`` says
  the same.
"""

from __future__ import annotations

from agentd.judging.checks.common import CheckInput
from agentd.judging.findings import finding, hca_subject, netdev_subject, pci_subject
from agentd.model import Finding, IgnoredDevice, Subject

_WHAT = {"rdma": "RDMA device", "netdev": "netdev", "pci": "PCI function"}
_READS = {
    "firmware": "its RDMA counters, ethtool statistics, DCB, ECN switches and hwmon sensors are no longer read (port state still is)",
    "link": "its RDMA counters, statistics and port state are no longer read (the ports' state comes from their netdevs)",
}


def _subject(group: list[IgnoredDevice]) -> Subject:
    d = group[0]
    if d.pci_bus_id is not None:
        return pci_subject(d.pci_bus_id)
    return hca_subject(d.name) if d.kind == "rdma" else netdev_subject(d.name)


def check_collect(inp: CheckInput) -> list[Finding]:
    """collect.device.ignored, collect.device.backed_off."""
    snap = inp.snapshot
    groups: dict[str, list[IgnoredDevice]] = {}
    for d in snap.ignored:
        groups.setdefault(d.pci_bus_id or f"{d.kind}:{d.name}", []).append(d)
    out: list[Finding] = []
    for group in groups.values():
        names = ", ".join(f"{_WHAT[d.kind]} {d.name}" for d in sorted(group, key=lambda d: (d.kind != "pci", d.kind, d.name)))
        patterns = sorted({d.pattern for d in group})
        out.append(finding(
            "collect.device.ignored", "ok", _subject(group),
            f"not read: collect.ignore {', '.join(repr(p) for p in patterns)} names it ({names}); nothing of it is read or judged",
            "remove the pattern from collect.ignore to watch it again", measured="ignored"))
    for b in snap.backed_off:
        why = ("a Fabric Manager limited PF" if b.reason == "limited_pf"
               else "its firmware failed a command right after agentd read it")
        out.append(finding(
            "collect.device.backed_off", "ok", pci_subject(b.pci_bus_id),
            f"firmware-backed reads stopped for this boot ({b.reads}): {why}; {_READS[b.reads]}; evidence: {b.evidence}",
            "nothing to do for agentd: a reboot starts over. If the failures go on, something else reads the device "
            "(another exporter: exclude it there too); to stop every read of it, name it in collect.ignore",
            measured=b.reads))
    return out
