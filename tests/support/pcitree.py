"""Write fake sysfs PCI trees laid out as the kernel does, and read ``nvidia-smi topo -m``.

``PciTree`` nests function directories under ``sys/devices/pciDDDD:BB/...`` (parents
first), writes the attribute files the reader opens, a ``driver`` link (dangling, as in
the upstream fixtures) and the ``sys/bus/pci/devices/<bdf>`` relative symlink. With
``config=True`` it also writes a synthesized config space (PCIe port type, optional ACS)
of ``config_size`` bytes (64: what a non-root reader sees).
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

PORT_TYPE_CODES = {
    "endpoint": 0, "legacy_endpoint": 1, "root_port": 4, "upstream": 5, "downstream": 6,
    "pcie_to_pci": 7, "pci_to_pcie": 8, "rc_endpoint": 9, "rc_event_collector": 10,
}

BRIDGE = 0x060400
GPU_3D = 0x030200
NIC_ETH = 0x020000
NIC_IB = 0x020700
NVSWITCH = 0x068000
NVME = 0x010802


def config_space(
    *,
    vendor: int = 0x10DE,
    device: int = 0x1234,
    class_code: int = 0x030200,
    port_type: str | None = "endpoint",
    acs_ctrl: int | None = None,
    size: int = 4096,
) -> bytes:
    """A plausible config space: PM cap at 0x40 -> MSI at 0x50 -> PCIe at 0x60; extended
    AER at 0x100 -> ACS at 0x148 (when acs_ctrl is given). Truncated to ``size``."""
    buf = bytearray(4096)
    bridge = class_code >> 8 == 0x0604
    struct.pack_into("<HH", buf, 0, vendor, device)
    struct.pack_into("<H", buf, 0x06, 0x0010 if port_type is not None else 0)
    buf[0x09:0x0C] = class_code.to_bytes(3, "little")
    buf[0x0E] = 0x01 if bridge else 0x00
    if port_type is not None:
        buf[0x34] = 0x40
        buf[0x40:0x42] = bytes([0x01, 0x50])  # power management
        buf[0x50:0x52] = bytes([0x05, 0x60])  # MSI
        buf[0x60:0x62] = bytes([0x10, 0x00])  # PCI Express, end of list
        struct.pack_into("<H", buf, 0x62, 0x0002 | (PORT_TYPE_CODES[port_type] << 4))
    aer_next = 0x148 if acs_ctrl is not None else 0
    struct.pack_into("<I", buf, 0x100, 0x0001 | (1 << 16) | (aer_next << 20))
    if acs_ctrl is not None:
        struct.pack_into("<IHH", buf, 0x148, 0x000D | (1 << 16), 0x005F, acs_ctrl)
    return bytes(buf[:size])


@dataclass
class PciTree:
    root: Path  # the host root (holds sys/)
    config: bool = True  # write config space files
    config_size: int = 4096
    _dirs: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        (self.root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)

    @property
    def sys(self) -> Path:
        return self.root / "sys"

    def root_complex(self, name: str, under: str = "") -> str:
        """Create ``sys/devices/[under/]pciDDDD:BB``; returns its name for ``parent=``."""
        d = self.sys / "devices" / under / name if under else self.sys / "devices" / name
        d.mkdir(parents=True, exist_ok=True)
        self._dirs[name] = d
        return name

    def add(
        self,
        bdf: str,
        parent: str,
        class_code: int,
        *,
        vendor: int = 0x10DE,
        device: int = 0x2330,
        numa_node: int | None = -1,
        cpulist: str | None = None,
        link: tuple[str, int, str, int] | None = ("16.0 GT/s PCIe", 16, "16.0 GT/s PCIe", 16),
        driver: str | None = None,
        port_type: str | None = None,
        acs_ctrl: int | None = None,
    ) -> str:
        """Add function ``bdf`` under ``parent`` (a root complex or a bridge added before)."""
        if parent not in self._dirs:
            self.root_complex(parent)
        d = self._dirs[parent] / bdf
        d.mkdir(parents=True)
        self._dirs[bdf] = d
        attrs = {
            "class": f"0x{class_code:06x}",
            "vendor": f"0x{vendor:04x}",
            "device": f"0x{device:04x}",
            "subsystem_vendor": f"0x{vendor:04x}",
            "subsystem_device": "0x0001",
        }
        if numa_node is not None:
            attrs["numa_node"] = str(numa_node)
        if cpulist is not None:
            attrs["local_cpulist"] = cpulist
        if link is not None:
            attrs.update(current_link_speed=link[0], current_link_width=str(link[1]),
                         max_link_speed=link[2], max_link_width=str(link[3]))
        for name, value in attrs.items():
            (d / name).write_text(value + "\n")
        depth = len(d.relative_to(self.sys).parts)
        if driver is not None:
            os.symlink("../" * depth + f"bus/pci/drivers/{driver}", d / "driver")
        if self.config:
            if port_type is None:
                port_type = "root_port" if class_code >> 8 == 0x0604 else "endpoint"
            buf = config_space(vendor=vendor, device=device, class_code=class_code,
                               port_type=port_type, acs_ctrl=acs_ctrl, size=self.config_size)
            (d / "config").write_bytes(buf)
        os.symlink("../../../" + str(d.relative_to(self.sys)), self.sys / "bus/pci/devices" / bdf)
        return bdf

    def switch(self, usp: str, dsps: list[str], parent: str, **kw) -> list[str]:
        """A PCIe switch: upstream port ``usp`` under ``parent`` with downstream ports ``dsps``."""
        self.add(usp, parent, BRIDGE, port_type="upstream", **kw)
        return [self.add(d, usp, BRIDGE, port_type="downstream", **kw) for d in dsps]


# ---------------------------------------------------------------------------
# nvidia-smi topo -m


@dataclass
class TopoMatrix:
    columns: list[str]  # GPU0.., NIC0.. in header order
    cells: dict[tuple[str, str], str]  # (row, column) -> "PIX", "NV18", "X", ...
    nic_names: dict[str, str]  # NIC0 -> mlx5_0
    cpu_affinity: dict[str, str]
    numa_affinity: dict[str, int | None]

    @property
    def gpus(self) -> list[str]:
        return [c for c in self.columns if c.startswith("GPU")]

    @property
    def nics(self) -> list[str]:
        return [c for c in self.columns if c.startswith("NIC")]


_DEV_RE = re.compile(r"^(GPU|NIC)\d+$")


def parse_topo_matrix(text: str) -> TopoMatrix:
    """Tolerant ``nvidia-smi topo -m`` parser: any whitespace between cells (the GKE output
    has one space before ``GPU NUMA ID`` values), ``N/A`` affinities, the NIC legend."""
    columns: list[str] = []
    cells: dict[tuple[str, str], str] = {}
    nic_names: dict[str, str] = {}
    cpu: dict[str, str] = {}
    numa: dict[str, int | None] = {}
    for line in text.splitlines():
        tokens = line.split()
        if not tokens:
            continue
        if not columns and tokens[0] == "GPU0" and "X" not in tokens:  # header: rows hold an X
            columns = [t for t in tokens if _DEV_RE.match(t)]
            continue
        legend = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line)
        if legend:
            nic_names[legend.group(1)] = legend.group(2)
            continue
        if columns and _DEV_RE.match(tokens[0]) and len(tokens) > len(columns):
            row = tokens[0]
            for col, value in zip(columns, tokens[1 : 1 + len(columns)]):
                cells[(row, col)] = value
            rest = tokens[1 + len(columns) :]
            if rest:
                cpu[row] = rest[0]
            if len(rest) > 1:
                numa[row] = int(rest[1]) if rest[1].isdigit() else None
    return TopoMatrix(columns, cells, nic_names, cpu, numa)
