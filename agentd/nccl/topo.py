"""Render NCCL's topology XML (``NCCL_TOPO_FILE``) from the snapshot's PCI tree.

Pure: (snapshot, roles) -> text. The file holds only what NCCL cannot detect better at
run time (nccl-spec.md 0.1, 1.4, 1.7): ``<system version="1">``, one ``<cpu>`` per NUMA
node with devices, the PCI switches, and ``<pci>`` endpoints for the GPUs and the HCAs.
No ``gpu``/``nic``/``net``/``nvlink`` elements: NCCL keeps any value it finds in the file,
so a written ``gdr``/``speed``/NVLink count would go stale and override detection.

The tree has the shape NCCL's own sysfs walk gives (``ncclTopoGetXmlFromSys``, spec 1.8):
from a device NCCL goes up two path components at a time, so the parent of an endpoint
is the *upstream* port of its switch (downstream ports and root ports are skipped), and
a device whose walk reaches the root complex hangs directly off the ``cpu`` of its
``numa_node``. ``link_speed``/``link_width`` are the minimum of the device's and its
sysfs parent's ``max_link_*`` (NCCL does not read the current values); where sysfs has
neither (old kernels, hypervisors that hide the link capability: absent, ``Unknown``, 0),
a switch gets what NCCL's own sysfs walk writes, ``link_speed=""`` and ``link_width="0"``
(read as Gen3 x16), because NCCL never fills in a ``pci`` element of the file that a
device hangs below, and without the two attributes it fails ("Attribute link_speed of
node pci not found"). An endpoint leaves them out: NCCL fills those itself when it
attaches the device (from NVML for a GPU in 2.30, else from sysfs). NIC bus ids carry
function 0 (and device 0, as ``NCCL_IB_MERGE_VFS=1`` does), because that is the id the
IB plugin looks up.

Lexical form (spec 1.1): no prolog, 2-space indent, one tag a line, double quotes,
lowercase bus ids, decimal numbers without leading zeros.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime

from agentd.base.ids import nccl_walk_bdf
from agentd.judging.roles import HcaRoles
from agentd.model import NodeSnapshot, PciDevice

ALLOWED_LINK_SPEEDS = (
    "2.5 GT/s", "5 GT/s", "8 GT/s", "16 GT/s", "32 GT/s",  # kernels up to 5.6
    "2.5 GT/s PCIe", "5.0 GT/s PCIe", "8.0 GT/s PCIe", "16.0 GT/s PCIe", "32.0 GT/s PCIe", "64.0 GT/s PCIe",
)
_CANONICAL_SPEED = {2.5: "2.5 GT/s PCIe", 5.0: "5.0 GT/s PCIe", 8.0: "8.0 GT/s PCIe", 16.0: "16.0 GT/s PCIe", 32.0: "32.0 GT/s PCIe", 64.0: "64.0 GT/s PCIe"}
# uname machine name -> NCCL's cpu arch, the name of the target NCCL was built for
# (src/graph/xml.cc ncclTopoGetXmlFromCpu: __PPC__ ppc64, __aarch64__ arm64, __x86_64__ x86_64).
ARCH_NAMES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64", "ppc64": "ppc64"}
# The CPUID vendor strings NCCL knows (src/graph/topo.cc kvDictCpuVendor), spaces included:
# NCCL writes CPUID's 12 bytes as they are, while /proc/cpuinfo's value comes trimmed
# (Zhaoxin's "  Shanghai  " reads "Shanghai"), so the snapshot's vendor is looked up trimmed.
X86_VENDORS = ("GenuineIntel", "AuthenticAMD", "CentaurHauls", "  Shanghai  ")
NEEDS_FAMILY_MODEL = ("GenuineIntel", "CentaurHauls", "  Shanghai  ")
_NCCL_VENDOR = {v.strip(): v for v in X86_VENDORS}


@dataclass(frozen=True)
class TopoRender:
    xml: str | None
    reason: str = ""  # why xml is None
    gpus: tuple[str, ...] = ()  # endpoint bus ids written
    nics: tuple[str, ...] = ()


@dataclass
class _Node:
    busid: str
    attrs: list[tuple[str, str]]
    children: dict[str, "_Node"] = field(default_factory=dict)


class _Skip(Exception):
    pass


def nic_busid(bdf: str) -> str:
    """The bus id NCCL's IB plugin looks up for an HCA: function and device zeroed."""
    return bdf[:-4] + "00.0"


def _speed(dev: PciDevice | None) -> tuple[float | None, str | None]:
    if dev is None:
        return None, None
    gts = dev.max_link_speed_gts
    raw = dev.max_link_speed.strip() if dev.max_link_speed else None
    if gts is None and raw:
        m = re.match(r"([0-9.]+) GT/s", raw)
        gts = float(m.group(1)) if m else None
    if raw in ALLOWED_LINK_SPEEDS:
        return gts, raw
    return gts, _CANONICAL_SPEED.get(gts) if gts is not None else None


def _link(dev: PciDevice, port: PciDevice | None, switch: bool) -> list[tuple[str, str]]:
    """min(device, sysfs parent) as NCCL computes it, over the values sysfs knows. Unknown:
    on a switch what NCCL writes itself ("" and 0); on an endpoint left out, for NCCL to
    fill when it attaches the device."""
    out: list[tuple[str, str]] = []
    d_gts, d_str = _speed(dev)
    p_gts, p_str = _speed(port)
    speed = p_str if p_gts is not None and (d_gts is None or p_gts < d_gts) else d_str
    if speed or switch:
        out.append(("link_speed", speed or ""))
    widths = [w for w in (dev.max_link_width, port.max_link_width if port else None) if w]
    if widths or switch:
        out.append(("link_width", str(min(widths, default=0))))
    return out


def _pci_attrs(busid: str, dev: PciDevice, port: PciDevice | None, *, switch: bool = False) -> list[tuple[str, str]]:
    attrs = [("busid", busid), ("class", f"0x{dev.class_code:06x}")]
    for name, value in (
        ("vendor", dev.vendor_id),
        ("device", dev.device_id),
        ("subsystem_vendor", dev.subsystem_vendor_id),
        ("subsystem_device", dev.subsystem_device_id),
    ):
        if value is not None:
            attrs.append((name, f"0x{value:04x}"))
    return attrs + _link(dev, port, switch)


def _ancestors(chain: tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]]:
    """NCCL's parent walk over a sysfs path (``chain``: the bridges from the root complex
    down to the device's immediate parent). Two components up at a time while both are
    bus ids as NCCL's checkBDFFormat takes them; stops at the root complex, and at a bridge
    in a VMD domain, which NCCL takes for one (``agentd.base.ids.nccl_walk_bdf``). Returns
    (ancestor bdf, that ancestor's chain), nearest first."""
    out: list[tuple[str, tuple[str, ...]]] = []
    while len(chain) >= 2 and nccl_walk_bdf(chain[-1]) and nccl_walk_bdf(chain[-2]):
        out.append((chain[-2], chain[:-2]))
        chain = chain[:-2]
    return out


def _sysfs_parent(snapshot: NodeSnapshot, chain: tuple[str, ...]) -> PciDevice | None:
    return snapshot.pci_device(chain[-1]) if chain else None


def _cpu_attrs(snapshot: NodeSnapshot, numa: int | None) -> list[tuple[str, str]]:
    sysinfo = snapshot.system
    arch = ARCH_NAMES.get(sysinfo.arch or "")
    if arch is None:
        raise _Skip(f"CPU architecture {sysinfo.arch!r} unknown (NCCL needs cpu arch)")
    attrs = [("numaid", str(numa) if numa is not None else "-1")]
    cpumap = next((n.cpumap for n in sysinfo.numa_nodes if n.node == numa), None)
    if cpumap:
        attrs.append(("affinity", cpumap.strip()))
    attrs.append(("arch", arch))
    if arch == "x86_64":
        vendor = _NCCL_VENDOR.get((sysinfo.cpu_vendor or "").strip())
        if vendor is None:
            raise _Skip(f"CPU vendor {sysinfo.cpu_vendor!r} unknown (NCCL needs cpu vendor on x86_64)")
        attrs.append(("vendor", vendor))
        if sysinfo.cpu_family is not None and sysinfo.cpu_model is not None:
            attrs += [("familyid", str(sysinfo.cpu_family)), ("modelid", str(sysinfo.cpu_model))]
        elif vendor in NEEDS_FAMILY_MODEL:
            raise _Skip(f"CPU family/model unknown (NCCL needs familyid and modelid for {vendor.strip()})")
    return attrs


def _endpoints(snapshot: NodeSnapshot, roles: HcaRoles) -> tuple[list[tuple[str, PciDevice]], list[str], list[str]]:
    eps: list[tuple[str, PciDevice]] = []
    gpus: list[str] = []
    nics: list[str] = []
    for gpu in sorted(snapshot.gpus, key=lambda g: g.pci_bus_id):
        dev = snapshot.pci_device(gpu.pci_bus_id)
        if dev is None:
            # NVML (medium tier) can still list a GPU the PCI scan (slow tier) no longer
            # sees, or the other way round: leave it out like a NIC without PCI data, and
            # let inventory/gpu.lost findings speak for it. NCCL attaches any GPU the file
            # lacks at its real sysfs place.
            continue
        eps.append((gpu.pci_bus_id, dev))
        gpus.append(gpu.pci_bus_id)
    for name in roles.compute + roles.other:
        hca = snapshot.hca(name)
        if hca is None or not hca.pci_bus_id:
            continue  # virtual or non-PCI device: NCCL attaches it to the first cpu itself
        dev = snapshot.pci_device(hca.pci_bus_id)
        busid = nic_busid(hca.pci_bus_id)
        if dev is None or busid in nics:
            continue  # second port/function of a NIC already written: NCCL merges them
        eps.append((busid, dev))
        nics.append(busid)
    return eps, gpus, nics


def build_topo(snapshot: NodeSnapshot, roles: HcaRoles) -> TopoRender:
    if not snapshot.gpus:
        return TopoRender(None, "the node has no GPUs")
    if not snapshot.pci:
        return TopoRender(None, "the snapshot has no PCI data")
    try:
        eps, gpus, nics = _endpoints(snapshot, roles)
        cpus: dict[int, tuple[list[tuple[str, str]], dict[str, _Node]]] = {}
        nodes: dict[str, _Node] = {}
        for busid, dev in eps:
            leaf = _Node(busid, _pci_attrs(busid, dev, _sysfs_parent(snapshot, dev.parent_chain)))
            top, child = dev, leaf
            for anc_bdf, anc_chain in _ancestors(dev.parent_chain):
                anc_dev = snapshot.pci_device(anc_bdf)
                if anc_dev is None:
                    raise _Skip(f"PCI bridge {anc_bdf} above {busid} is not in the PCI data")
                node = nodes.get(anc_bdf)
                if node is None:
                    node = nodes[anc_bdf] = _Node(anc_bdf, _pci_attrs(anc_bdf, anc_dev, _sysfs_parent(snapshot, anc_chain), switch=True))
                node.children.setdefault(child.busid, child)
                top, child = anc_dev, node
            numa = top.numa_node  # NCCL reads numa_node of the device whose walk reaches the root
            key = numa if numa is not None else -1
            if key not in cpus:
                cpus[key] = (_cpu_attrs(snapshot, numa), {})
            cpus[key][1].setdefault(child.busid, child)
    except _Skip as e:
        return TopoRender(None, str(e))
    lines = _header(snapshot)
    lines.append('<system version="1">')
    for key in sorted(cpus):
        attrs, children = cpus[key]
        lines.append(f"  <cpu {_fmt(attrs)}>")
        for busid in sorted(children):
            _emit(children[busid], 2, lines)
        lines.append("  </cpu>")
    lines.append("</system>")
    return TopoRender("\n".join(lines) + "\n", gpus=tuple(gpus), nics=tuple(nics))


def render_topo_xml(snapshot: NodeSnapshot, roles: HcaRoles) -> str | None:
    """The XML text, or None when no file should be written (no GPUs, no PCI data, or
    facts NCCL requires are unknown; ``build_topo`` says why)."""
    return build_topo(snapshot, roles).xml


def _fmt(attrs: list[tuple[str, str]]) -> str:
    return " ".join(f'{k}="{v}"' for k, v in attrs)


def _emit(node: _Node, depth: int, lines: list[str]) -> None:
    pad = "  " * depth
    if not node.children:
        lines.append(f"{pad}<pci {_fmt(node.attrs)}/>")
        return
    lines.append(f"{pad}<pci {_fmt(node.attrs)}>")
    for busid in sorted(node.children):
        _emit(node.children[busid], depth + 1, lines)
    lines.append(f"{pad}</pci>")


def _comment_text(text: str) -> str:
    return re.sub(r"[<>&\"\r\n]|-{2,}", " ", text)


def _header(snapshot: NodeSnapshot) -> list[str]:
    host = snapshot.system.hostname or "this node"
    taken = datetime.fromtimestamp(snapshot.taken_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [
        f"<!-- NCCL topology of {_comment_text(host)}, written by agentd from sysfs: PCI switches, GPUs and NICs only;"
        " NCCL detects the rest. Do not edit: agentd rewrites this file. -->",
        f"<!-- generated: from measurements taken {taken} -->",
    ]


TOPOLOGY_HASH_CHARS = 12


def topology_hash(xml: str) -> str:
    """The first 12 hex digits of the SHA-256 of the rendered XML without its comment lines
    (the header names the host and the measurement time), so nodes of one design get the
    same hash: ``grep -v '^<!--' topo.xml | sha256sum | cut -c1-12`` (lines joined with
    newlines, each ending in one)."""
    body = "".join(line + "\n" for line in xml.splitlines() if not line.startswith("<!--"))
    return hashlib.sha256(body.encode("utf-8", "surrogateescape")).hexdigest()[:TOPOLOGY_HASH_CHARS]

