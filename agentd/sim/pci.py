"""The PCI hierarchy of a profile: its layout and its sysfs files.

``pci_layout`` turns a profile's PCI description into one ``PciNode`` per function with
its canonical sysfs path, port type, bus numbers and the *current* link speed/width (the
lower of the two ends of its link); the other writers and the faults use it to find files.

PCI device directories hold: class, vendor, device, subsystem_vendor, subsystem_device,
revision, numa_node, local_cpulist, local_cpus, {current,max}_link_{speed,width},
config (4096 bytes, see pcicfg), aer_dev_{correctable,nonfatal,fatal} (zero counts, see aer), and the links ``driver`` -> bus/pci/drivers/<drv> (the
driver directory exists and holds the matching bind link) and ``subsystem`` -> bus/pci.
Bridges also get secondary/subordinate_bus_number and ``pci_bus/<dddd:bb>`` (linked from
class/pci_bus, which NCCL walks), as do host bridges (``pci0000:XX/pci_bus/0000:XX``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agentd.sim.aer import write_aer
from agentd.sim.pcicfg import GEN_SPEED, SPEED_GEN, build_config
from agentd.sim.profiles import MODELS, DeviceModel, Endpoint, Profile, RootPort, Switch, functions
from agentd.sim.tree import cpumask, symlink, write_attr, write_bytes


@dataclass(frozen=True)
class PciNode:
    bdf: str
    rel: str  # canonical path relative to the host root
    port_type: str  # root_port | upstream | downstream | endpoint
    model: DeviceModel
    class_code: int
    numa_node: int
    parent: str | None  # bdf of the bridge above (None under a host bridge)
    cur_speed: str
    cur_width: int
    buses: tuple[int, int, int] | None  # bridges: primary, secondary, subordinate
    endpoint: Endpoint | None

    @property
    def is_bridge(self) -> bool:
        return self.buses is not None


@dataclass(frozen=True)
class _Item:
    bdf: str
    model: str
    port_type: str
    endpoint: Endpoint | None
    children: tuple["_Item", ...] = ()


def _bus(bdf: str) -> int:
    return int(bdf.split(":")[1], 16)


def _items(rp: RootPort) -> _Item:
    below = rp.below
    if isinstance(below, Switch):
        dsps = tuple(
            _Item(d, below.model, "downstream", None, tuple(_Item(ep.bdf, ep.model, "endpoint", ep) for ep in functions(eps)))
            for d, eps in below.dsps
        )
        child = _Item(below.usp, below.model, "upstream", None, dsps)
    else:
        child = _Item(below.bdf, below.model, "endpoint", below)
    return _Item(rp.bdf, rp.model, "root_port", None, (child,))


def _max_bus(item: _Item) -> int:
    return max([_bus(item.bdf)] + [_max_bus(c) for c in item.children])


def _link(a: DeviceModel, b: DeviceModel) -> tuple[str, int]:
    gen = min(SPEED_GEN[a.link_speed], SPEED_GEN[b.link_speed])
    return GEN_SPEED[gen], min(a.link_width, b.link_width)


def pci_layout(profile: Profile) -> dict[str, PciNode]:
    """bdf -> PciNode, parents before children, in host-bridge order."""
    nodes: dict[str, PciNode] = {}

    def walk(item: _Item, parent: _Item | None, base: str, numa: int) -> None:
        model = MODELS[item.model]
        partner = parent if item.port_type in ("endpoint", "upstream") else item.children[0]
        assert partner is not None
        speed, width = _link(model, MODELS[partner.model])
        buses = (_bus(item.bdf), _bus(item.children[0].bdf), _max_bus(item)) if item.children else None
        cls = item.endpoint.class_code if item.endpoint and item.endpoint.class_code else model.class_code
        rel = f"{base}/{item.bdf}"
        nodes[item.bdf] = PciNode(item.bdf, rel, item.port_type, model, cls, numa, parent.bdf if parent else None, speed, width, buses, item.endpoint)
        for c in item.children:
            walk(c, item, rel, numa)

    for hb in profile.host_bridges:
        for rp in hb.ports:
            walk(_items(rp), None, f"sys/devices/pci{hb.domain_bus}", hb.numa_node)
    return nodes


def pci_device_paths(node_: PciNode) -> list[str]:
    """Every canonical path that exists because this PCI function exists."""
    paths = [node_.rel, f"sys/bus/pci/devices/{node_.bdf}"]
    if node_.model.driver:
        paths.append(f"sys/bus/pci/drivers/{node_.model.driver}/{node_.bdf}")
    if node_.buses:
        paths.append(f"sys/class/pci_bus/{node_.bdf[:5]}{node_.buses[1]:02x}")
    return paths


def write_pci_node(root: Path, profile: Profile, n: PciNode) -> None:
    d = root / n.rel
    m = n.model
    cpulist = profile.numa_cpulists[n.numa_node]
    attrs = {
        "class": f"0x{n.class_code:06x}",
        "vendor": f"0x{m.vendor:04x}",
        "device": f"0x{m.device:04x}",
        "subsystem_vendor": f"0x{m.subsystem_vendor:04x}",
        "subsystem_device": f"0x{m.subsystem_device:04x}",
        "revision": f"0x{m.revision:02x}",
        "numa_node": n.numa_node,
        "local_cpulist": cpulist,
        "local_cpus": cpumask(cpulist, profile.nr_cpus),
        "current_link_speed": n.cur_speed,
        "current_link_width": n.cur_width,
        "max_link_speed": m.link_speed,
        "max_link_width": m.link_width,
        "enable": 1,
    }
    for name, value in attrs.items():
        write_attr(d / name, value)
    cfg = build_config(
        vendor=m.vendor,
        device=m.device,
        class_code=n.class_code,
        revision=m.revision,
        port_type=n.port_type,
        max_speed=m.link_speed,
        max_width=m.link_width,
        cur_speed=n.cur_speed,
        cur_width=n.cur_width,
        subsystem_vendor=m.subsystem_vendor,
        subsystem_device=m.subsystem_device,
        buses=n.buses,
    )
    write_bytes(d / "config", cfg)
    write_aer(d)
    symlink(d / "subsystem", root / "sys/bus/pci")
    symlink(root / "sys/bus/pci/devices" / n.bdf, d)
    if m.driver:
        drv = root / "sys/bus/pci/drivers" / m.driver
        symlink(d / "driver", drv)
        symlink(drv / n.bdf, d)
    if n.buses:
        write_attr(d / "secondary_bus_number", n.buses[1])
        write_attr(d / "subordinate_bus_number", n.buses[2])
        bus = f"{n.bdf[:5]}{n.buses[1]:02x}"
        (d / "pci_bus" / bus).mkdir(parents=True, exist_ok=True)
        symlink(root / "sys/class/pci_bus" / bus, d / "pci_bus" / bus)


def write_pci(root: Path, profile: Profile, layout: dict[str, PciNode]) -> None:
    for hb in profile.host_bridges:
        hb_dir = root / f"sys/devices/pci{hb.domain_bus}"
        (hb_dir / "pci_bus" / hb.domain_bus).mkdir(parents=True, exist_ok=True)
        symlink(root / "sys/class/pci_bus" / hb.domain_bus, hb_dir / "pci_bus" / hb.domain_bus)
    for n in layout.values():
        write_pci_node(root, profile, n)
