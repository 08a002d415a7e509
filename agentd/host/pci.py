"""The PCI tree: every function under ``sys/bus/pci/devices``, with its place in the tree.

One directory a function; each attribute is one small sysfs file. A node has 200-500
functions, so the reader opens only the attributes the model holds and never lists a
device directory. Config space is read only as far as it is used: the capability list of
the first 256 bytes (PCIe port type) for every function, the extended capabilities
(ACS) only for bridges, where ACS decides whether peer-to-peer traffic is redirected.

A missing optional attribute (link speed on a PCI device, numa_node on old kernels) is
``None``, not an error. Config space is read as the kernel serves it: to an opener
without CAP_SYS_ADMIN only the first 64 bytes (drivers/pci/pci-sysfs.c pci_read_config),
which hold no capability, so port type and ACS are then unknown. The reader records how
many bytes it got (``PciDevice.config_bytes``; 0 when the read was refused, None when
the tree has no ``config`` file); the PCIe checks turn a cut config space
into one finding (``pcie.config_space.truncated``), not a read error per function.
"""

from __future__ import annotations

import os
import re
import struct

from agentd.base.ids import BDF_RE, CLASS_BRIDGE_PCI, ROOT_COMPLEX_RE, bdf_key, pci_class
from agentd.host.fs import ReadContext, parse_int, read_bounded
from agentd.model import PciDevice, PciePortType

DEVICES_DIR = "sys/bus/pci/devices"

# Config space geometry.
CONFIG_HEADER_BYTES = 64  # what a non-root reader gets
CONFIG_LEGACY_BYTES = 256
CONFIG_EXTENDED_BYTES = 4096
CAP_ID_PCIE = 0x10
EXT_CAP_ID_ACS = 0x000D
MAX_CAP_STEPS = 48  # (256 - 64) / 4: more steps than that means the list loops
MAX_EXT_CAP_STEPS = (CONFIG_EXTENDED_BYTES - CONFIG_LEGACY_BYTES) // 4

PORT_TYPES: dict[int, PciePortType] = {
    0: "endpoint",
    1: "legacy_endpoint",
    4: "root_port",
    5: "upstream",
    6: "downstream",
    7: "pcie_to_pci",
    8: "pci_to_pcie",
    9: "rc_endpoint",
    10: "rc_event_collector",
}

_SPEED_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s")
WIDTH_UNKNOWN = 255


def parse_link_speed(text: str | None) -> float | None:
    """``16.0 GT/s PCIe`` / ``8 GT/s`` -> GT/s as a float; ``Unknown``, ``Unknown speed`` -> None."""
    if not text:
        return None
    m = _SPEED_RE.match(text)
    return float(m.group(1)) if m else None


def tree_position(resolved: str) -> tuple[str | None, tuple[str, ...]]:
    """(root complex, parent chain) from a device's resolved sysfs path.

    The root complex is the last ``pciDDDD:BB`` component (Hyper-V and VMD paths hold
    other components before it); the chain is the BDF components after it, without the
    device itself, outermost first.
    """
    parts = resolved.rstrip("/").split("/")
    rc_index = -1
    for i, part in enumerate(parts):
        if ROOT_COMPLEX_RE.fullmatch(part):
            rc_index = i
    chain = tuple(p for p in parts[rc_index + 1 : -1] if BDF_RE.fullmatch(p))
    return (parts[rc_index] if rc_index >= 0 else None), chain


# ---------------------------------------------------------------------------
# config space (pure)


def _u16(buf: bytes, off: int) -> int | None:
    return struct.unpack_from("<H", buf, off)[0] if off >= 0 and off + 2 <= len(buf) else None


def _u32(buf: bytes, off: int) -> int | None:
    return struct.unpack_from("<I", buf, off)[0] if off >= 0 and off + 4 <= len(buf) else None


def find_capability(buf: bytes, cap_id: int) -> int | None:
    """Offset of a standard capability, walking the list from 0x34 (0x14 for CardBus)."""
    status = _u16(buf, 0x06)
    if status is None or not status & 0x10 or len(buf) < CONFIG_HEADER_BYTES:
        return None
    ptr_at = 0x14 if buf[0x0E] & 0x7F == 2 else 0x34
    ptr = buf[ptr_at] & 0xFC
    for _ in range(MAX_CAP_STEPS):
        if ptr < CONFIG_HEADER_BYTES or ptr + 2 > len(buf):
            return None
        if buf[ptr] == cap_id:
            return ptr
        ptr = buf[ptr + 1] & 0xFC
    return None


def find_ext_capability(buf: bytes, cap_id: int) -> int | None:
    """Offset of an extended capability (only when the 4 KiB extended space was readable)."""
    if len(buf) < CONFIG_EXTENDED_BYTES:
        return None
    off = CONFIG_LEGACY_BYTES
    for _ in range(MAX_EXT_CAP_STEPS):
        header = _u32(buf, off)
        if header is None or header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == cap_id:
            return off
        off = (header >> 20) & 0xFFC
        if off < CONFIG_LEGACY_BYTES:
            return None
    return None


def parse_config_space(buf: bytes | None) -> tuple[PciePortType | None, int | None]:
    """(PCIe port type, ACS control register) from a config space image of any length."""
    if not buf or len(buf) < CONFIG_HEADER_BYTES or _u16(buf, 0) == 0xFFFF:
        return None, None
    port_type: PciePortType | None = None
    pcie = find_capability(buf, CAP_ID_PCIE)
    if pcie is not None:
        caps = _u16(buf, pcie + 2)
        if caps is not None:
            port_type = PORT_TYPES.get((caps >> 4) & 0xF)
    acs_ctrl = None
    acs = find_ext_capability(buf, EXT_CAP_ID_ACS)
    if acs is not None:
        acs_ctrl = _u16(buf, acs + 6)
    return port_type, acs_ctrl


# ---------------------------------------------------------------------------
# the reader


def _config(ctx: ReadContext, dev_dir: str, class_code: int) -> bytes | None:
    # Bridges are where ACS matters; reading 4 KiB makes the kernel do ~1000 config
    # cycles, so endpoints get only the legacy space that holds the PCIe capability.
    # None: no config file in this tree (nothing to judge); b"": refused (EACCES from a
    # security module, EIO), judged as cut. Read through this module's read_bounded.
    size = CONFIG_EXTENDED_BYTES if pci_class(class_code) == CLASS_BRIDGE_PCI else CONFIG_LEGACY_BYTES
    return ctx.config_bytes(f"{dev_dir}/config", size, read_bounded)


def _width(value: int | None) -> int | None:
    return None if value is None or value == WIDTH_UNKNOWN else value


def read_device(ctx: ReadContext, bdf: str, dev_dir: str) -> PciDevice | None:
    """One function from its (resolved) sysfs directory; None when its class is unreadable."""
    class_path = f"{dev_dir}/class"
    class_text = ctx.text(class_path, required=True)
    if class_text is None:
        return None
    class_code = parse_int(class_text, 16)
    if class_code is None:
        ctx.error(class_path, "unparsable", f"expected a hex class code, got {class_text[:40]!r}")
        return None
    numa = ctx.integer(f"{dev_dir}/numa_node")
    cur_speed = ctx.text(f"{dev_dir}/current_link_speed")
    max_speed = ctx.text(f"{dev_dir}/max_link_speed")
    root_complex, chain = tree_position(ctx.host.rel(dev_dir))
    config = _config(ctx, dev_dir, class_code)
    port_type, acs_ctrl = parse_config_space(config)
    return PciDevice(
        bdf=bdf,
        class_code=class_code,
        vendor_id=ctx.integer(f"{dev_dir}/vendor", base=16),
        device_id=ctx.integer(f"{dev_dir}/device", base=16),
        subsystem_vendor_id=ctx.integer(f"{dev_dir}/subsystem_vendor", base=16),
        subsystem_device_id=ctx.integer(f"{dev_dir}/subsystem_device", base=16),
        numa_node=numa if numa is not None and numa >= 0 else None,
        local_cpulist=ctx.text(f"{dev_dir}/local_cpulist") or None,
        current_link_speed=cur_speed or None,
        current_link_speed_gts=parse_link_speed(cur_speed),
        current_link_width=_width(ctx.integer(f"{dev_dir}/current_link_width")),
        max_link_speed=max_speed or None,
        max_link_speed_gts=parse_link_speed(max_speed),
        max_link_width=_width(ctx.integer(f"{dev_dir}/max_link_width")),
        parent_chain=chain,
        root_complex=root_complex,
        driver=ctx.readlink_name(f"{dev_dir}/driver"),
        pcie_port_type=port_type,
        acs_ctrl=acs_ctrl,
        config_bytes=len(config) if config is not None else None,
    )


def read_pci(ctx: ReadContext) -> tuple[PciDevice, ...]:
    """Every PCI function of the host root, sorted by bus id."""
    devices = []
    for name in ctx.listdir(DEVICES_DIR):
        bdf = name.lower()
        entry = f"{DEVICES_DIR}/{name}"
        if not BDF_RE.fullmatch(bdf):
            ctx.error(entry, "unparsable", "not a PCI bus id")
            continue
        if ctx.skip_ignored("pci", bdf):
            continue  # collect.ignore: not even its config space
        dev_dir = ctx.resolve(entry, required=True)
        if dev_dir is None:
            continue
        if not os.path.isdir(dev_dir):
            ctx.error(entry, "unparsable", "not a link to a device directory")
            continue
        dev = read_device(ctx, bdf, str(dev_dir))
        if dev is not None:
            devices.append(dev)
    devices.sort(key=lambda d: bdf_key(d.bdf))
    return tuple(devices)
