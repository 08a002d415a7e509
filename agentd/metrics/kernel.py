"""Kernel log metrics: events the drivers printed (XIDs, GPUs off the bus, SXIDs, mlx5
firmware, PCIe AER), as counters, never last-value gauges: ``increase()`` over any
window says how many happened, and two XIDs between scrapes are two."""

from __future__ import annotations

from typing import Final

from agentd.base.expo import Exposition, Family, MetricType
from agentd.base.ids import bus_id_label
from agentd.metrics.registry import Area
from agentd.metrics.source import MetricsSource

G: Final[MetricType] = "gauge"
C: Final[MetricType] = "counter"

FAMILIES: tuple[Family, ...] = (
    Family("agentd_kernel_log_up", G, "1 when agentd reads the kernel log (/dev/kmsg, or the recorded dev/kmsg), 0 when it cannot (the kernel.log.unreadable finding says why); absent where there is none to read.", ()),
    Family("agentd_kernel_log_records_total", C, "Kernel log records read since agentd started on this boot (records a previous agentd on this boot read are not counted again).", ()),
    Family("agentd_kernel_log_lost_records_total", C, "Kernel log records agentd never read: the kernel overwrote them before agentd got to them (a flood outran the reader's bounded pace), or a one-shot read passed over them.", ()),
    Family("agentd_kernel_log_behind", G, "1 while the kernel log reader stopped its last poll at its time budget with records still waiting (a flood; it goes on at the next poll), else 0.", ()),
    Family(
        "agentd_kernel_events_total", C,
        "Kernel log events by kind (xid, sxid, gpu_off_bus, nvrm, peermem, mlx5, aer, pcie) and code (the XID or SXID number, an mlx5, AER or PCIe recovery class, other), with the GPU (gpu, pci_bus_id as dcgm-exporter), the HCA (device) or the PCI function (pci_bus_id) the line names.",
        ("kind", "code", "gpu", "pci_bus_id", "device"),
    ),  # fmt: skip
)


def cache_key(s: MetricsSource) -> tuple[object, ...] | None:
    snap = s.snapshot
    return None if snap is None else (snap.kernel, snap.gpus, snap.hcas)


def render(x: Exposition, s: MetricsSource) -> None:
    snap = s.snapshot
    if snap is None:
        return
    log = snap.kernel
    if not log.asked and not log.available:
        return
    x.add("agentd_kernel_log_up", (), log.available)
    if not log.available:
        return
    x.add("agentd_kernel_log_records_total", (), log.records)
    x.add("agentd_kernel_log_lost_records_total", (), log.lost)
    x.add("agentd_kernel_log_behind", (), log.behind)
    gpus = {g.pci_bus_id: g.index for g in snap.gpus}
    hcas = {h.pci_bus_id: h.name for h in snap.hcas if h.pci_bus_id}
    for c in log.counts:
        gpu = gpus.get(c.device or "")
        x.add("agentd_kernel_events_total", (c.kind, c.code, "" if gpu is None else gpu, bus_id_label(c.device), hcas.get(c.device or "", "")), c.count)


AREA = Area("kernel", FAMILIES, render, cache_key)
