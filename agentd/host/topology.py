"""GPU-NIC PCIe distance in ``nvidia-smi topo -m`` vocabulary (pure: no I/O).

NCCL uses GPUDirect RDMA between a GPU and a NIC only when they are close enough
(``NCCL_NET_GDR_LEVEL``, default PXB), so this classification decides whether a rail runs
at full speed. The rules follow nvidia-smi:

- PIX: the two meet under at most one PCIe switch (or one bridge, e.g. both ports of a
  dual-port NIC under one root port);
- PXB: several switches between them, but not the host bridge;
- PHB: no common bridge, but one root complex (host bridge);
- NODE: different root complexes of one NUMA node;
- SYS: different NUMA nodes.

A switch is counted once: its upstream port and all its downstream ports are one unit;
a root port is a unit of its own. Port types come from config space when it was readable
(root); otherwise from position: the bridge directly under the root complex is a root
port, and below it bridges alternate upstream, downstream.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from agentd.model import PathName, PathType, PciDevice, PciePortType


def _port_type(chain: Sequence[str], i: int, devices: Mapping[str, PciDevice]) -> PciePortType:
    dev = devices.get(chain[i])
    if dev is not None and dev.pcie_port_type is not None:
        return dev.pcie_port_type
    if i == 0:
        return "root_port"
    return "downstream" if _port_type(chain, i - 1, devices) == "upstream" else "upstream"


def _unit(chain: Sequence[str], i: int, devices: Mapping[str, PciDevice]) -> str:
    """The switch (or lone bridge) that bridge ``chain[i]`` belongs to, named by its top bridge.

    A downstream port joins its upstream port's switch; any other bridge (root port,
    upstream port, PCI or PCIe-to-PCI bridge) is a unit of its own."""
    if i > 0 and _port_type(chain, i, devices) == "downstream" and _port_type(chain, i - 1, devices) == "upstream":
        return chain[i - 1]
    return chain[i]


def bridge_units(a: PciDevice, b: PciDevice, devices: Mapping[str, PciDevice]) -> set[str] | None:
    """Distinct switch units between a and b under one root complex; None when they share no bridge."""
    full_a = (*a.parent_chain, a.bdf)
    full_b = (*b.parent_chain, b.bdf)
    common = 0
    for x, y in zip(full_a, full_b):
        if x != y:
            break
        common += 1
    if common == 0:
        return None
    lca = common - 1  # index of the lowest common ancestor in both chains
    units: set[str] = set()
    for dev in (a, b):
        chain = dev.parent_chain
        for i in range(lca, len(chain)):
            units.add(_unit(chain, i, devices))
    return units


def _same_numa(a: PciDevice, b: PciDevice) -> bool:
    if a.numa_node is not None and b.numa_node is not None:
        return a.numa_node == b.numa_node
    if a.numa_node is None and b.numa_node is None:
        return True  # single-socket machines report -1 everywhere
    if a.local_cpulist and b.local_cpulist:
        return a.local_cpulist == b.local_cpulist
    return True  # nothing to tell them apart: do not claim a socket crossing


def classify_path(a: PciDevice, b: PciDevice, devices: Mapping[str, PciDevice]) -> PathName:
    """nvidia-smi topo path type between two PCI functions; ``devices`` maps bus id -> device."""
    if a.root_complex is not None and a.root_complex == b.root_complex:
        units = bridge_units(a, b, devices)
        if units is None:
            return "PHB"
        return "PIX" if len(units) <= 1 else "PXB"
    return "NODE" if _same_numa(a, b) else "SYS"


def gpu_nic_paths(pci: Sequence[PciDevice], nic_bus_ids: Mapping[str, str]) -> dict[str, dict[str, PathName]]:
    """gpu bus id -> {hca name -> path type}. HCAs whose bus id is not in the PCI tree are left out."""
    devices = {d.bdf: d for d in pci}
    nics = {name: devices.get(bus.lower()) for name, bus in nic_bus_ids.items()}
    out: dict[str, dict[str, PathName]] = {}
    for gpu in pci:
        if not gpu.is_gpu:
            continue
        out[gpu.bdf] = {name: classify_path(gpu, nic, devices) for name, nic in sorted(nics.items()) if nic is not None}
    return out


def nearest(paths: Mapping[str, PathName]) -> list[str]:
    """Names at the closest path type present (sorted); empty when there are none."""
    if not paths:
        return []
    best = min(PathType[p] for p in paths.values())
    return sorted(name for name, p in paths.items() if PathType[p] == best)
