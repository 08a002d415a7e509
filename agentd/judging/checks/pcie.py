"""PCIe links of GPUs and NICs, GPU -> nearest compute NIC distance, ACS redirect.

Links judged (each once, subject = the PCI bus id whose Link Status describes it):
- the link of each GPU and HCA PCI function (to its parent port): current width/speed
  against the lower of the two ends' maximums, so a x8 card in a x16 slot (or a Gen5 NIC
  in a Gen4 slot) is not called downtrained;
- the upstream links of PCIe switches above them (ports typed ``upstream`` in config
  space), against the lower of that port's and its parent's maximums.
GPU link *speed* is not judged: NVIDIA GPUs lower it when idle (P8 runs at 2.5 GT/s);
their width is. Severity: critical when the link carries less than half the bandwidth it
should, else warning; links that serve only non-compute NICs are at most warnings.

ACS: P2P Request Redirect (ACS control bit 2) or Completion Redirect (bit 3) on a bridge
above a GPU or compute NIC, on bare metal. On a PCIe switch port it is critical: P2P and
GPUDirect RDMA between devices under the switch detour through the root complex (slow,
and it can hang NCCL); NVIDIA says to disable ACS on PCIe switches. On a root port it is
a warning: traffic across root ports passes the root complex anyway, but the redirect
sends it through IOMMU translation (Linux sets these bits when the IOMMU is on, itself a
GPUDirect hazard). Nothing is judged in a VM, where ACS is what makes device assignment
safe.

Config space: port types (which tells switch uplinks apart) live in the PCIe capability
in the first 256 bytes, ACS in the extended space. The kernel serves only the first 64
bytes to a reader without CAP_SYS_ADMIN (the shipped unit, unless the ACS drop-in is
installed), so both are unknown then, and the checks above cannot see a redirect or an
uplink. That is said once for the node (``pcie.config_space.truncated``), never read as
"no ACS": as a fact (severity ok) when it is the shipped unit's deliberate 64 bytes, so a
healthy node on the default install is not degraded; as a warning when the read was refused
or cut in an unexpected place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentd.base.ids import natural_key
from agentd.judging.checks.common import CheckInput
from agentd.judging.findings import NODE, finding, gpu_subject, pci_subject
from agentd.model import Finding, PathType, PciDevice, Severity

ACS_P2P_REQ_REDIRECT = 1 << 2
ACS_P2P_CMPL_REDIRECT = 1 << 3
ACS_REDIRECT_BITS = ACS_P2P_REQ_REDIRECT | ACS_P2P_CMPL_REDIRECT
CONFIG_UNPRIVILEGED_BYTES = 64  # what pci_read_config() gives an opener without CAP_SYS_ADMIN
CONFIG_LEGACY_BYTES = 256  # the capability list (PCIe port type) lies within these


@dataclass
class _Link:
    dev: PciDevice
    partner: PciDevice | None
    judge_speed: bool
    compute: bool
    upstream: bool  # a switch's upstream link (else the link of a GPU/NIC itself)
    serves: list[str] = field(default_factory=list)


def _low(a: float | int | None, b: float | int | None) -> float | int | None:
    vals = [v for v in (a, b) if v]
    return min(vals) if vals else None


def _endpoints(inp: CheckInput) -> list[tuple[str, str, bool, bool]]:
    """(label, bdf, is_gpu, compute) for every GPU and HCA PCI function."""
    roles = inp.resolved_roles()
    out = [(str(gpu_subject(g.index)), g.pci_bus_id, True, True) for g in inp.snapshot.gpus]
    out += [(h.name, h.pci_bus_id, False, roles.is_compute(h.name)) for h in inp.snapshot.hcas if h.pci_bus_id]
    return out


def _links(inp: CheckInput) -> dict[str, _Link]:
    snap = inp.snapshot
    links: dict[str, _Link] = {}

    def add(dev: PciDevice, partner: PciDevice | None, judge_speed: bool, compute: bool, label: str, upstream: bool) -> None:
        link = links.setdefault(dev.bdf, _Link(dev, partner, judge_speed, False, upstream))
        link.compute = link.compute or compute
        if label not in link.serves:
            link.serves.append(label)

    for label, bdf, is_gpu, compute in _endpoints(inp):
        dev = snap.pci_device(bdf)
        if dev is None:
            continue
        chain = [snap.pci_device(b) for b in dev.parent_chain]
        add(dev, chain[-1] if chain else None, not is_gpu, compute, label, False)
        for i, bridge in enumerate(chain):
            if bridge is not None and i > 0 and bridge.pcie_port_type == "upstream":
                add(bridge, chain[i - 1], True, compute, label, True)
    return links


def _judge(link: _Link) -> Finding | None:
    d, p = link.dev, link.partner
    exp_w = _low(d.max_link_width, p.max_link_width if p else None)
    exp_s = _low(d.max_link_speed_gts, p.max_link_speed_gts if p else None)
    cur_w, cur_s = d.current_link_width, d.current_link_speed_gts
    ratio = 1.0
    if exp_w and cur_w is not None and cur_w <= exp_w:
        ratio *= cur_w / exp_w
    if link.judge_speed and exp_s and cur_s is not None and cur_s < exp_s - 1e-6:  # the speed is low
        ratio *= cur_s / exp_s
    if ratio >= 1.0:
        return None
    sev: Severity = "critical" if ratio < 0.5 else "warning"
    if not link.compute:
        sev = "warning"
    speed_now = f" {cur_s:g} GT/s" if link.judge_speed and cur_s is not None else ""
    speed_exp = f" {exp_s:g} GT/s" if link.judge_speed and exp_s else ""
    note = "" if link.judge_speed else " (GPU link speed not judged: it drops when idle)"
    serves = ", ".join(link.serves)
    what = f"switch upstream link above {serves}" if link.upstream else f"link of {serves}"
    return finding(
        "pcie.link.downtrained",
        sev,
        pci_subject(d.bdf),
        f"PCIe {what} runs x{cur_w}{speed_now}, capable of x{exp_w}{speed_exp} ({ratio:.0%} of its bandwidth){note}",
        "reseat the card or riser and check the slot; `lspci -vv -s "
        f"{d.bdf}` shows LnkSta vs LnkCap; a retrain or reboot may restore it, a repeat means hardware",
        measured=f"x{cur_w}{speed_now}",
        expected=f"x{exp_w}{speed_exp}",
    )


def check_links(inp: CheckInput) -> list[Finding]:
    """pcie.link.downtrained."""
    return [f for link in _links(inp).values() if (f := _judge(link)) is not None]


def check_gpu_nic_paths(inp: CheckInput) -> list[Finding]:
    """pcie.gpu_nic.path (ok), pcie.gpu_nic.cross_socket, pcie.gpu_nic.distance."""
    roles = inp.resolved_roles()
    expected = inp.config.expect.gpu_nic_path
    nearest: dict[int, tuple[str, str]] = {}
    bus_ids = {g.index: g.pci_bus_id for g in inp.snapshot.gpus}
    for g in inp.snapshot.gpus:
        paths = [(PathType[p], n) for n, p in g.nic_paths.items() if roles.is_compute(n)]
        if paths:
            best = min(paths, key=lambda x: (x[0], natural_key(x[1])))
            nearest[g.index] = (best[1], best[0].name)
    closer_layout = any(PathType[p] <= PathType.PXB for _, p in nearest.values())
    out: list[Finding] = []
    for index, (nic, path) in sorted(nearest.items()):
        subject = gpu_subject(index, bus_ids.get(index))
        out.append(finding("pcie.gpu_nic.path", "ok", subject, f"nearest compute NIC {nic} via {path}", measured=path))
        worse_than_config = expected is not None and PathType[path] > PathType[expected]
        if path == "SYS" and (worse_than_config or (expected is None and closer_layout)):
            why = f"expect.gpu_nic_path {expected}" if expected else "other GPUs have a PIX/PXB NIC"
            out.append(finding(
                "pcie.gpu_nic.cross_socket",
                "warning",
                subject,
                f"nearest compute NIC {nic} is across the CPU sockets (SYS), expected a closer NIC ({why})",
                "check the NIC-to-GPU cabling/slot layout against the platform guide and that every compute NIC is "
                "present (a missing NIC sends its GPU across the socket); GPUDirect RDMA is not used over SYS by default",
                measured=path,
                expected=expected or "PXB",
            ))
        elif worse_than_config:
            out.append(finding(
                "pcie.gpu_nic.distance",
                "warning",
                subject,
                f"nearest compute NIC {nic} via {path}, expected {expected} or closer (expect.gpu_nic_path)",
                "check the slot layout and that every compute NIC is present; NCCL uses GPUDirect RDMA only up to "
                "NCCL_NET_GDR_LEVEL (PXB by default)",
                measured=path,
                expected=expected,
            ))
    return out


def _acs_bits(ctrl: int) -> str:
    names = [("ReqRedir", ACS_P2P_REQ_REDIRECT), ("CmpltRedir", ACS_P2P_CMPL_REDIRECT)]
    return " ".join(f"{n}+" for n, bit in names if ctrl & bit)


def check_acs(inp: CheckInput) -> list[Finding]:
    """pcie.acs.redirect (bare metal only)."""
    snap = inp.snapshot
    if snap.system.virtualization is not None:
        return []
    affected: dict[str, tuple[bool, list[str]]] = {}
    for label, bdf, _is_gpu, compute in _endpoints(inp):
        dev = snap.pci_device(bdf)
        if dev is None or not compute:
            continue
        for i, b in enumerate(dev.parent_chain):
            bridge = snap.pci_device(b)
            if bridge is None or bridge.acs_ctrl is None or not bridge.acs_ctrl & ACS_REDIRECT_BITS:
                continue
            root = bridge.pcie_port_type == "root_port" or (bridge.pcie_port_type is None and i == 0)
            labels = affected.setdefault(b, (root, []))[1]
            if label not in labels:
                labels.append(label)
    out = []
    for b, (root, labels) in sorted(affected.items()):
        bridge = snap.pci_device(b)
        ctrl = bridge.acs_ctrl if bridge is not None else None
        assert ctrl is not None  # only bridges with redirect bits were collected
        where = "root port" if root else "PCIe switch port"
        effect = ("peer-to-peer and GPUDirect RDMA across the root complex go through IOMMU translation" if root else
                  "peer-to-peer and GPUDirect RDMA detour through the root complex")
        out.append(finding(
            "pcie.acs.redirect",
            "warning" if root else "critical",
            pci_subject(b),
            f"ACS {_acs_bits(ctrl)} (ACSCtl {ctrl:#06x}) on the {where} above {', '.join(labels)} on bare metal: {effect}",
            f"disable ACS in the BIOS or at boot (`setpci -s {b} ECAP_ACS+0x6.w=0000`), as NCCL's troubleshooting guide says"
            + ("; with the IOMMU on, use iommu=pt (or turn it off) for GPUDirect" if root else ""),
            measured=f"{ctrl:#06x}",
            expected="ReqRedir- CmpltRedir-",
        ))
    return out


def config_space_truncated(dev: PciDevice) -> bool:
    """The kernel returned less config space than holds the capability list: port type
    (and on bridges ACS) are unknown, not absent."""
    return dev.config_bytes is not None and dev.config_bytes < CONFIG_LEGACY_BYTES


def check_config_space(inp: CheckInput) -> list[Finding]:
    """pcie.config_space.truncated: one finding for every function the PCIe checks judge
    (GPUs, HCAs and the bridges above them) whose config space was cut short."""
    snap = inp.snapshot
    judged: list[PciDevice] = []
    seen: set[str] = set()
    for _label, bdf, _is_gpu, _compute in _endpoints(inp):
        dev = snap.pci_device(bdf)
        if dev is None:
            continue
        for b in (*dev.parent_chain, dev.bdf):
            d = snap.pci_device(b)
            if d is not None and d.bdf not in seen:
                seen.add(d.bdf)
                judged.append(d)
    cut = [d for d in judged if config_space_truncated(d)]
    if not cut:
        return []
    sizes = sorted({d.config_bytes for d in cut if d.config_bytes is not None})
    unprivileged = sizes == [CONFIG_UNPRIVILEGED_BYTES]
    if unprivileged:
        why = "the kernel serves only the first 64 bytes of config space to a reader without CAP_SYS_ADMIN"
    elif sizes == [0]:
        why = "the read was refused (a security module such as AppArmor or SELinux, or an I/O error) or returned nothing"
    else:
        why = f"the kernel returned only {'/'.join(map(str, sizes))} bytes, or refused the read"
    unseen = "PCIe port types (switch uplinks) and ACS" if any(d.is_bridge for d in cut) else "PCIe port types"
    return [finding(
        "pcie.config_space.truncated",
        "ok" if unprivileged else "warning",  # 64 bytes: the default unit's choice, said, not judged
        NODE,
        f"PCI config space of {len(cut)} of the {len(judged)} functions the PCIe checks judge (GPUs, HCAs and "
        f"the bridges above them) could not be read {f'past byte {sizes[-1]}' if sizes[-1] else 'at all'}: {why}. {unseen} are unknown, so the "
        f"ACS redirect and switch uplink checks cannot run (first: {cut[0].bdf})",
        "install systemd/agentd-acs.conf.example as a drop-in (CAP_SYS_ADMIN; the trade-off is described inside), "
        "or run `agentd check` as root on a schedule to judge ACS; `lspci -vvv` as root shows ACSCtl",
        measured=len(cut),
        expected=f"at least {CONFIG_LEGACY_BYTES} bytes",
    )]
