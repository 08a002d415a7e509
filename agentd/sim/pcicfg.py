"""PCI configuration space images (the binary ``config`` file under each PCI device).

Root reads 4096 bytes from ``/sys/bus/pci/devices/<bdf>/config``; the simulator writes
exactly that much. The image is minimal but valid where readers look:

- header: vendor/device, command, status (capability list bit), revision, class code at
  0x09..0x0b, header type (0 endpoint, 1 bridge with primary/secondary/subordinate bus),
  subsystem ids (type 0), capability pointer at 0x34;
- capability list: Power Management at 0x40 -> PCI Express at 0x60 (port type in bits
  7:4 of the capabilities register; Link Capabilities, Link Status and Link
  Capabilities 2 consistent with the sysfs ``*_link_speed``/``*_link_width`` files);
- extended capabilities from 0x100: AER at 0x100, then on bridges ACS at 0x148 with a
  typical capability set and control 0 (ACS off, as on a bare-metal GPU node where P2P is
  meant to work). Readers must walk the list, not assume ACS sits at 0x100.

``set_link_status`` and ``set_acs_ctrl`` patch an image in place for faults; the
``find_*``/``read_*`` helpers parse images back (tests use them).
"""

from __future__ import annotations

import struct

CONFIG_SIZE = 4096

PORT_TYPES = {"endpoint": 0x0, "root_port": 0x4, "upstream": 0x5, "downstream": 0x6}
PORT_TYPE_NAMES = {v: k for k, v in PORT_TYPES.items()}

SPEED_GEN = {
    "2.5 GT/s PCIe": 1,
    "5.0 GT/s PCIe": 2,
    "8.0 GT/s PCIe": 3,
    "16.0 GT/s PCIe": 4,
    "32.0 GT/s PCIe": 5,
    "64.0 GT/s PCIe": 6,
}
GEN_SPEED = {v: k for k, v in SPEED_GEN.items()}

CAP_PM, CAP_EXP = 0x01, 0x10
EXT_AER, EXT_ACS = 0x0001, 0x000D
PM_OFF, EXP_OFF, AER_OFF, ACS_OFF = 0x40, 0x60, 0x100, 0x148

# ACS capability bits: V source validation, B translation blocking, R P2P request
# redirect, C P2P completion redirect, U upstream forwarding, T direct translated P2P.
ACS_SV, ACS_TB, ACS_RR, ACS_CR, ACS_UF, ACS_EC, ACS_DT = (1 << i for i in range(7))
ACS_CAPS = ACS_SV | ACS_TB | ACS_RR | ACS_CR | ACS_UF | ACS_DT
# What Linux's pci_std_enable_acs() turns on when it enables ACS (SV|RR|CR|UF).
ACS_KERNEL_ENABLE = ACS_SV | ACS_RR | ACS_CR | ACS_UF


def _ext_header(cap_id: int, version: int, next_off: int) -> int:
    return cap_id | (version << 16) | (next_off << 20)


def build_config(
    *,
    vendor: int,
    device: int,
    class_code: int,
    revision: int,
    port_type: str,
    max_speed: str,
    max_width: int,
    cur_speed: str,
    cur_width: int,
    subsystem_vendor: int = 0,
    subsystem_device: int = 0,
    buses: tuple[int, int, int] | None = None,
) -> bytes:
    """A 4096-byte config space image. ``buses`` = (primary, secondary, subordinate) for bridges."""
    b = bytearray(CONFIG_SIZE)
    bridge = buses is not None
    struct.pack_into("<HHHH", b, 0x00, vendor, device, 0x0546 if bridge else 0x0146, 0x0010)
    struct.pack_into("<I", b, 0x08, ((class_code & 0xFFFFFF) << 8) | revision)
    b[0x0E] = 0x01 if bridge else 0x00
    if bridge:
        b[0x18], b[0x19], b[0x1A] = buses  # type: ignore[misc]
    else:
        struct.pack_into("<HH", b, 0x2C, subsystem_vendor, subsystem_device)
    b[0x34] = PM_OFF
    # Power Management capability (version 3), next -> PCI Express.
    struct.pack_into("<BBH", b, PM_OFF, CAP_PM, EXP_OFF, 0x0003)
    # PCI Express capability, version 2.
    struct.pack_into("<BBH", b, EXP_OFF, CAP_EXP, 0x00, 0x0002 | (PORT_TYPES[port_type] << 4))
    max_gen = SPEED_GEN[max_speed]
    struct.pack_into("<I", b, EXP_OFF + 0x0C, max_gen | (max_width << 4))  # Link Capabilities
    # Link Status; the Link Control register before it stays 0.
    struct.pack_into("<H", b, EXP_OFF + 0x12, SPEED_GEN[cur_speed] | (cur_width << 4))
    supported = sum(1 << g for g in range(1, max_gen + 1))
    struct.pack_into("<I", b, EXP_OFF + 0x2C, supported)  # Link Capabilities 2 (speed vector)
    # Extended capabilities.
    struct.pack_into("<I", b, AER_OFF, _ext_header(EXT_AER, 2, ACS_OFF if bridge else 0))
    if bridge:
        struct.pack_into("<I", b, ACS_OFF, _ext_header(EXT_ACS, 1, 0))
        struct.pack_into("<HH", b, ACS_OFF + 4, ACS_CAPS, 0x0000)
    return bytes(b)


def find_cap(cfg: bytes, cap_id: int) -> int | None:
    """Offset of a standard capability, following the list from 0x34."""
    if len(cfg) < 0x40 or not (cfg[0x06] & 0x10):
        return None
    off, seen = cfg[0x34] & 0xFC, 0
    while off and seen < 48:
        if cfg[off] == cap_id:
            return off
        off, seen = cfg[off + 1] & 0xFC, seen + 1
    return None


def find_ext_cap(cfg: bytes, cap_id: int) -> int | None:
    """Offset of an extended capability, following the list from 0x100."""
    off, seen = 0x100, 0
    while off and len(cfg) >= off + 4 and seen < 64:
        (hdr,) = struct.unpack_from("<I", cfg, off)
        if hdr == 0:
            return None
        if hdr & 0xFFFF == cap_id:
            return off
        off, seen = (hdr >> 20) & 0xFFC, seen + 1
    return None


def read_class_code(cfg: bytes) -> int:
    return cfg[0x09] | (cfg[0x0A] << 8) | (cfg[0x0B] << 16)


def read_port_type(cfg: bytes) -> str | None:
    off = find_cap(cfg, CAP_EXP)
    if off is None:
        return None
    (caps,) = struct.unpack_from("<H", cfg, off + 2)
    return PORT_TYPE_NAMES.get((caps >> 4) & 0xF)


def read_link_status(cfg: bytes) -> tuple[int, int] | None:
    """(speed generation, width) from Link Status."""
    off = find_cap(cfg, CAP_EXP)
    if off is None:
        return None
    (sta,) = struct.unpack_from("<H", cfg, off + 0x12)
    return sta & 0xF, (sta >> 4) & 0x3F


def read_acs_ctrl(cfg: bytes) -> int | None:
    off = find_ext_cap(cfg, EXT_ACS)
    if off is None:
        return None
    return int(struct.unpack_from("<H", cfg, off + 6)[0])


def set_link_status(cfg: bytes, speed: str, width: int) -> bytes:
    off = find_cap(cfg, CAP_EXP)
    if off is None:
        raise ValueError("no PCI Express capability in this config space")
    b = bytearray(cfg)
    struct.pack_into("<H", b, off + 0x12, SPEED_GEN[speed] | (width << 4))
    return bytes(b)


def set_acs_ctrl(cfg: bytes, ctrl: int) -> bytes:
    off = find_ext_cap(cfg, EXT_ACS)
    if off is None:
        raise ValueError("no ACS extended capability in this config space")
    b = bytearray(cfg)
    struct.pack_into("<H", b, off + 6, ctrl)
    return bytes(b)
