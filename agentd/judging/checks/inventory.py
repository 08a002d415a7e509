"""Inventory against expectations and the baseline.

- ``inventory.gpu.count`` (critical, subject ``node``): fewer GPUs than ``expect.gpus``.
- ``inventory.gpu.missing`` (critical, subject the PCI bus id): a baseline GPU is gone.
- ``inventory.hca.missing`` (critical, subject the HCA name): a baseline HCA is gone, by
  name and by PCI bus id (a device renamed by udev/rdma naming rules is not missing).
- ``inventory.port.missing`` (critical, subject ``hca:port``): the HCA is present but one
  of its baseline ports is not.
"""

from __future__ import annotations

from agentd.judging.checks.common import CheckInput
from agentd.judging.findings import NODE, finding, gpu_subject, hca_subject, port_subject
from agentd.model import Finding

_GPU_CHECK = "check `lspci -d 10de:` and dmesg (Xid 79, AER, link down); reseat or RMA the GPU"
_GPU_HINT = _GPU_CHECK + "; if it was removed on purpose, reset the baseline (`agentd baseline reset`)"
_HCA_HINT = ("check `lspci -d 15b3:`, `ibstat`, dmesg (mlx5_core errors, firmware); reload the driver or reseat the card; "
             "if it was removed on purpose, reset the baseline (`agentd baseline reset`)")


def check_inventory(inp: CheckInput) -> list[Finding]:
    snap, expect = inp.snapshot, inp.config.expect
    out: list[Finding] = []
    if expect.gpus is not None and len(snap.gpus) < expect.gpus:
        out.append(finding(
            "inventory.gpu.count", "critical", NODE,
            f"{len(snap.gpus)} GPUs found, expected {expect.gpus} (expect.gpus)",
            _GPU_CHECK + "; or fix expect.gpus", measured=len(snap.gpus), expected=expect.gpus))
    base = inp.baseline
    if base is None:
        return out
    gpu_buses = {g.pci_bus_id for g in snap.gpus}
    for bg in base.gpus:
        if bg.pci_bus_id not in gpu_buses:
            out.append(finding(
                "inventory.gpu.missing", "critical", gpu_subject(bus_id=bg.pci_bus_id),
                f"GPU {bg.pci_bus_id} (gpu{bg.index}{', ' + bg.name if bg.name else ''}) is in the baseline "
                f"but not on the node now ({len(snap.gpus)} of {len(base.gpus)} GPUs present)",
                _GPU_HINT, measured="absent", expected="present"))
    by_bus = {h.pci_bus_id: h for h in snap.hcas if h.pci_bus_id}
    for bh in base.hcas:
        h = snap.hca(bh.name) or (by_bus.get(bh.pci_bus_id) if bh.pci_bus_id else None)
        if h is None:
            where = f" at {bh.pci_bus_id}" if bh.pci_bus_id else ""
            out.append(finding(
                "inventory.hca.missing", "critical", hca_subject(bh.name),
                f"{bh.role} HCA {bh.name}{where} ({bh.hca_type or 'unknown model'}) is in the baseline but not on the node now",
                _HCA_HINT, measured="absent", expected="present"))
            continue
        present = {p.port for p in h.ports}
        for bp in bh.ports:
            if bp.port not in present:
                out.append(finding(
                    "inventory.port.missing", "critical", port_subject(h.name, bp.port),
                    f"port {bp.port} of {bh.role} HCA {h.name} is in the baseline but not on the node now",
                    _HCA_HINT, measured="absent", expected="present"))
    return out
