"""Inventory against expectations and the baseline.

- ``inventory.gpu.count`` (critical, subject ``node``): fewer GPUs than ``expect.gpus``.
- ``inventory.gpu.missing`` (critical, subject the PCI bus id): a baseline GPU is gone.
- ``inventory.hca.missing`` (critical, subject the HCA name): a baseline HCA is gone, by
  name and by PCI bus id (a device renamed by udev/rdma naming rules is not missing).
- ``inventory.port.missing`` (critical, subject ``hca:port``): the HCA is present but one
  of its baseline ports is not.
- ``baseline.foreign`` (warning, subject ``node``): the baseline is another node's
  (agentd.judging.baseline.foreign_reason); it is not used, so none of the above is judged
  against it. Raised by agentd.judging.judge, which keeps the baseline from every check.
"""

from __future__ import annotations

from agentd.judging.baseline import Baseline, NodeIdentity
from agentd.judging.checks.common import CheckInput
from agentd.judging.findings import NODE, finding, gpu_subject, hca_subject, port_subject
from agentd.model import Finding

_GPU_CHECK = "check `lspci -d 10de:` and dmesg (Xid 79, AER, link down); reseat or RMA the GPU"
_GPU_HINT = _GPU_CHECK + "; if it was removed on purpose, reset the baseline (`agentd baseline reset`)"
_HCA_HINT = ("check `lspci -d 15b3:`, `ibstat`, dmesg (mlx5_core errors, firmware); reload the driver or reseat the card; "
             "if it was removed on purpose, reset the baseline (`agentd baseline reset`)")
_FOREIGN_HINT = ("if this node's GPUs and HCAs are all there, `agentd baseline reset` (the next healthy collection records "
                 "this node's); find what put another node's baseline here (a copied /var/lib/agentd, an image baked with one)")


def foreign_baseline(base: Baseline, node: NodeIdentity, reason: str) -> Finding:
    """``baseline.foreign``: ``base`` is another node's (``reason``), so it is not used."""
    taken = f" from host root {base.host_root}" if base.host_root else ""
    return finding(
        "baseline.foreign", "warning", NODE,
        f"the baseline is another node's ({reason}; taken{taken} with {len(base.gpus)} GPUs and {len(base.hcas)} HCAs): "
        "it is not used, so lost GPUs, HCAs and ports are not judged until this node has its own",
        _FOREIGN_HINT, measured=base.machine_id or base.hostname or "unknown", expected=node.machine_id or node.hostname or "unknown")


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
    # collect.ignore: what agentd does not read is not missing (collect.device.ignored says so)
    ignored = {d.name for d in snap.ignored if d.kind == "rdma"} | {d.pci_bus_id for d in snap.ignored if d.pci_bus_id}
    for bh in base.hcas:
        if bh.name in ignored or (bh.pci_bus_id is not None and bh.pci_bus_id in ignored):
            continue
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
