"""Inventory against expectations and the baseline.

- ``inventory.gpu.count`` (critical, subject ``node``): fewer GPUs than ``expect.gpus``.
- ``inventory.gpu.missing`` (critical, subject the PCI bus id): a baseline GPU is gone,
  by PCI bus id and by UUID (a GPU that came back at a new bus id after a BIOS or
  firmware change, or a card added before it, is not missing).
- ``inventory.hca.missing`` (critical, subject the HCA name): a baseline HCA is gone, by
  name and by PCI bus id (a device renamed by udev/rdma naming rules is not missing).
- ``inventory.port.missing`` (critical, subject ``hca:port``): the HCA is present but one
  of its baseline ports is not.
- ``baseline.foreign`` (warning, subject ``node``): the baseline is another node's
  (agentd.judging.baseline.foreign_reason); it is not used, so none of the above is judged
  against it. Raised by agentd.judging.judge, which keeps the baseline from every check.

Absence is not a read error, and a read error is not absence. A device is missing only
when the listing that would show it was read: a listing (or a device's entry) that failed
for any reason but ENOENT (EMFILE when the fds ran out, EACCES, EIO, a symlink loop) is a
read error, reported once as ``probe.failed``, and the devices it would have shown are not
judged here. A device the kernel answers ENOENT for is absent.

Absence needs a second look, as ``ib.port.unreadable`` does: a device (or fewer GPUs than
``expect.gpus``) missing in this collection but seen in the previous one (a 1 ms rename
race) is a warning; missing in two collections in a row, critical. With no earlier collection to compare (`agentd check`
with one collection, the daemon's first) it is critical at once: a check that cannot
look twice must not hide a lost device.
"""

from __future__ import annotations

from typing import Callable

from agentd.host.infiniband import CLASS_IB
from agentd.host.pci import DEVICES_DIR
from agentd.judging.baseline import Baseline, BaselineGpu, BaselineHca, NodeIdentity
from agentd.judging.checks.common import CheckInput, earlier
from agentd.judging.findings import NODE, finding, gpu_subject, hca_subject, port_subject
from agentd.model import Finding, Gpu, Hca, NodeSnapshot, ReadError, Severity

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


def _read_error(snap: NodeSnapshot, hides: Callable[[str], bool]) -> ReadError | None:
    """The read error (not an ENOENT: that is absence) on a path ``hides`` names, if any."""
    return next((e for e in snap.read_errors if e.kind != "missing" and hides(e.path)), None)


def _pci_listing_unread(snap: NodeSnapshot) -> ReadError | None:
    return _read_error(snap, lambda p: p == DEVICES_DIR)


def _find_gpu(snap: NodeSnapshot, bg: BaselineGpu) -> Gpu | ReadError | None:
    """The GPU ``bg`` is now (same bus id, or same UUID at another bus id), the read error
    that kept it from being seen (the PCI listing, its entry or its class file), or None."""
    for g in snap.gpus:
        if g.pci_bus_id == bg.pci_bus_id or (bg.uuid is not None and g.uuid == bg.uuid):
            return g
    bus = bg.pci_bus_id
    return _read_error(snap, lambda p: p in (DEVICES_DIR, f"{DEVICES_DIR}/{bus}") or p.endswith(f"/{bus}/class"))


def _find_hca(snap: NodeSnapshot, bh: BaselineHca) -> Hca | ReadError | None:
    """The HCA ``bh`` is now (same name, or same bus id under another name), the read error
    that kept it from being seen (the class listing or its entry), or None."""
    h = snap.hca(bh.name)
    if h is None and bh.pci_bus_id:
        h = next((x for x in snap.hcas if x.pci_bus_id == bh.pci_bus_id), None)
    if h is not None:
        return h
    return _read_error(snap, lambda p: p in (CLASS_IB, f"{CLASS_IB}/{bh.name}"))


def _find_port(snap: NodeSnapshot, h: Hca, number: int) -> bool | ReadError:
    """True when port ``number`` of ``h`` is there, the read error on its ports listing, or False."""
    if any(p.port == number for p in h.ports):
        return True
    return _read_error(snap, lambda p: p == f"{CLASS_IB}/{h.name}/ports") or False


def _previous(inp: CheckInput) -> NodeSnapshot | None:
    """The previous collection, when it is a whole snapshot (a compact history entry, as a
    restarted daemon's seeded history, does not say which devices it saw)."""
    past = earlier(inp.history, inp.snapshot.taken_at)
    return past[-1] if past and isinstance(past[-1], NodeSnapshot) else None


def _port_absent_before(prev: NodeSnapshot | None, before: Hca | ReadError | None, number: int) -> bool:
    """Whether the previous collection (None: there is none) missed the port too: its HCA
    was absent, or there without the port (an HCA it could not read does not confirm)."""
    if prev is None or before is None:
        return True
    return isinstance(before, Hca) and _find_port(prev, before, number) is False


def _severity(confirmed: bool) -> tuple[Severity, str]:
    if confirmed:
        return "critical", ""
    return "warning", " (not seen in this collection only: critical if the next one misses it too)"


def check_inventory(inp: CheckInput) -> list[Finding]:
    snap, expect = inp.snapshot, inp.config.expect
    out: list[Finding] = []
    prev = _previous(inp)
    pci_unread = _pci_listing_unread(snap)
    if expect.gpus is not None and len(snap.gpus) < expect.gpus and pci_unread is None:
        sev, note = _severity(prev is None or len(prev.gpus) < expect.gpus)
        out.append(finding(
            "inventory.gpu.count", sev, NODE,
            f"{len(snap.gpus)} GPUs found, expected {expect.gpus} (expect.gpus){note}",
            _GPU_CHECK + "; or fix expect.gpus", measured=len(snap.gpus), expected=expect.gpus))
    base = inp.baseline
    if base is None:
        return out
    gpus = [(bg, _find_gpu(snap, bg)) for bg in base.gpus]
    found = sum(isinstance(g, Gpu) for _, g in gpus)
    for bg, g in gpus:
        if g is not None:
            continue  # there, or not seen because of a read error (probe.failed says which)
        sev, note = _severity(prev is None or _find_gpu(prev, bg) is None)
        out.append(finding(
            "inventory.gpu.missing", sev, gpu_subject(bus_id=bg.pci_bus_id),
            f"GPU {bg.pci_bus_id} (gpu{bg.index}{', ' + bg.name if bg.name else ''}) is in the baseline "
            f"but not on the node now, by bus id or UUID ({found} of {len(base.gpus)} baseline GPUs found){note}",
            _GPU_HINT, measured="absent", expected="present"))
    # collect.ignore: what agentd does not read is not missing (collect.device.ignored says so)
    ignored = {d.name for d in snap.ignored if d.kind == "rdma"} | {d.pci_bus_id for d in snap.ignored if d.pci_bus_id}
    for bh in base.hcas:
        if bh.name in ignored or (bh.pci_bus_id is not None and bh.pci_bus_id in ignored):
            continue
        h = _find_hca(snap, bh)
        if isinstance(h, ReadError):
            continue
        if h is None:
            where = f" at {bh.pci_bus_id}" if bh.pci_bus_id else ""
            sev, note = _severity(prev is None or _find_hca(prev, bh) is None)
            out.append(finding(
                "inventory.hca.missing", sev, hca_subject(bh.name),
                f"{bh.role} HCA {bh.name}{where} ({bh.hca_type or 'unknown model'}) is in the baseline but not on the node now{note}",
                _HCA_HINT, measured="absent", expected="present"))
            continue
        before = _find_hca(prev, bh) if prev is not None else None
        for bp in bh.ports:
            if _find_port(snap, h, bp.port) is not False:
                continue
            sev, note = _severity(_port_absent_before(prev, before, bp.port))
            out.append(finding(
                "inventory.port.missing", sev, port_subject(h.name, bp.port),
                f"port {bp.port} of {bh.role} HCA {h.name} is in the baseline but not on the node now{note}",
                _HCA_HINT, measured="absent", expected="present"))
    return out
