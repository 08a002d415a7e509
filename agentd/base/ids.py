"""Identifiers every layer spells the same way: names sorted as NCCL and humans count,
PCI bus ids in each spelling agentd meets, and the PCI class and vendor codes it acts on.

A leaf module: it imports nothing from agentd. Every bus-id pattern and constant lives
here and nowhere else; readers, checks, the baseline, NCCL renderers and metrics import it.

PCI bus ids (domain:bus:device.function, "BDF"), the spellings:

- sysfs, agentd's own: ``0000:1b:00.0``. The kernel names a function
  ``"%04x:%02x:%02x.%d"`` (drivers/pci/probe.c), so the domain is 4 lowercase hex digits,
  or more, without leading zeros, when the domain number needs them: Intel VMD puts
  the root ports behind it into domains numbered from 0x10000 (drivers/pci/controller/
  vmd.c), so ``10000:e1:00.0``; domains are 32-bit, so at most 8 digits. Snapshots,
  baselines, finding subjects and NCCL's topology XML all use this spelling.
- NVML / nvidia-smi / dcgm-exporter: ``00000000:1B:00.0`` (8 uppercase digits; the
  legacy NVML form has 4). ``parse_bdf`` reads it, ``bus_id_label`` writes it for metric
  labels that join with DCGM series.
- NCCL writes ``"%04lx:%02lx:%02lx.%01lx"`` (src/misc/utils.cc int64ToBusId): the sysfs
  spelling again, VMD domains included, and it matches bus ids as strings. Its sysfs
  parent walk is the one place NCCL takes 4-digit domains only: ``nccl_walk_bdf``.
"""

from __future__ import annotations

import re
from typing import NamedTuple


def natural_key(name: str) -> tuple[object, ...]:
    """mlx5_2 < mlx5_10 (NCCL and humans both count this way)."""
    out: list[object] = []
    num = ""
    text = ""
    for ch in name:
        if ch.isdigit():
            if text:
                out.append(text)
                text = ""
            num += ch
        else:
            if num:
                out.append(int(num))
                num = ""
            text += ch
    if num:
        out.append(int(num))
    if text:
        out.append(text)
    return tuple((0, x) if isinstance(x, int) else (1, x) for x in out)


# ---------------------------------------------------------------------------
# PCI bus ids

# The kernel's %04x domain: 4 digits, or 5-8 without a leading zero (VMD: 10000).
_SYSFS_DOMAIN = r"(?:[0-9a-f]{4}|[1-9a-f][0-9a-f]{4,7})"
# sysfs spelling of a function; also what NCCL writes and matches in its topology XML.
BDF_RE = re.compile(rf"{_SYSFS_DOMAIN}:[0-9a-f]{{2}}:[0-9a-f]{{2}}\.[0-7]")
# A host bridge directory in a resolved sysfs path: devices/pci0000:00, pci10000:e0 (VMD).
ROOT_COMPLEX_RE = re.compile(rf"pci{_SYSFS_DOMAIN}:[0-9a-f]{{2}}")
# Any spelling, any case: sysfs, NVML (8-digit domain, zero-padded), NVML legacy (4).
_ANY_BDF_RE = re.compile(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")
# NCCL's checkBDFFormat (src/graph/xml.cc, unchanged since 2.6): exactly 12 characters,
# "BBBB:BB:DD.F", any hex digit in every place. NCCL's sysfs parent walk stops at the
# first path component that fails it, taking it for the CPU root complex: a bridge in a
# VMD domain (5 digits) ends the walk, so the device hangs off the CPU in NCCL's graph.
_NCCL_WALK_BDF_RE = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]")


class Bdf(NamedTuple):
    """A parsed PCI bus id; compares and sorts numerically (0000:ff < 10000:00)."""

    domain: int
    bus: int
    device: int
    function: int

    @property
    def sysfs(self) -> str:
        """``0000:1b:00.0``, ``10000:e1:00.0``."""
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function}"

    @property
    def nvml(self) -> str:
        """``00000000:1B:00.0``, ``00010000:E1:00.0`` (NVML, nvidia-smi, dcgm-exporter)."""
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.{self.function}"


def is_bdf(text: str | None) -> bool:
    """True for a bus id in the sysfs spelling (``0000:1b:00.0``, ``10000:e1:00.0``)."""
    return bool(text) and BDF_RE.fullmatch(text or "") is not None


def parse_bdf(text: str | bytes | None) -> Bdf | None:
    """A bus id in any spelling agentd meets (sysfs, NVML's 8-digit or legacy 4-digit
    domain; any case; NVML's trailing NULs and blanks ignored); None when it is not one."""
    if text is None:
        return None
    s = text.decode("ascii", "replace") if isinstance(text, bytes) else str(text)
    m = _ANY_BDF_RE.fullmatch(s.strip().rstrip("\0").strip())
    if m is None:
        return None
    return Bdf(*(int(g, 16) for g in m.groups()))


def normalize_bdf(text: str | bytes | None) -> str | None:
    """Any spelling -> sysfs spelling: ``00000000:1B:00.0`` -> ``0000:1b:00.0``; None when
    ``text`` is not a bus id."""
    b = parse_bdf(text)
    return None if b is None else b.sysfs


def bus_id_label(bdf: str | None) -> str:
    """sysfs ``0000:1b:00.0`` -> NVML/dcgm-exporter ``00000000:1B:00.0`` (joins with DCGM
    series); ``""`` for none; text that is not a bus id is shown upper-cased as given."""
    if not bdf:
        return ""
    b = parse_bdf(bdf)
    return bdf.upper() if b is None else b.nvml


def bdf_key(bdf: str) -> Bdf:
    """Numeric sort key for a bus id (domains of different widths sort by value)."""
    b = parse_bdf(bdf)
    if b is None:
        raise ValueError(f"{bdf!r} is not a PCI bus id")
    return b


def nccl_walk_bdf(component: str) -> bool:
    """True when NCCL's sysfs parent walk takes this path component for a PCI device
    (checkBDFFormat); a VMD-domain bus id is not one (see above)."""
    return _NCCL_WALK_BDF_RE.fullmatch(component) is not None


# ---------------------------------------------------------------------------
# PCI class and vendor codes

# Base class + subclass: the class code (sysfs ``class``, 0x030200) shifted right by 8.
CLASS_DISPLAY_VGA = 0x0300
CLASS_DISPLAY_3D = 0x0302
CLASS_BRIDGE_PCI = 0x0604
CLASS_BRIDGE_OTHER = 0x0680  # NVSwitch reports 0x068000
GPU_CLASSES = frozenset({CLASS_DISPLAY_VGA, CLASS_DISPLAY_3D})

VENDOR_NVIDIA = 0x10DE


def pci_class(class_code: int) -> int:
    """0x030200 -> 0x0302 (base class and subclass, without the programming interface)."""
    return class_code >> 8


# Device names (RDMA devices, netdevs) as they may be written into NCCL lists, metric
# labels and file names unchanged: ASCII letters, digits and ``_ . + -``, starting with a
# letter or digit; IB_DEVICE_NAME_MAX (64, with the NUL) bounds RDMA names, IFNAMSIZ (16)
# netdev names. The kernel refuses only ``/`` (and, for netdevs, ``:`` and whitespace), so
# a name can carry NCCL list syntax (``mlx5_8:1,mlx5_9``), ``^``/``=`` prefixes or bytes
# that are not UTF-8: such a name is not plain.
_PLAIN_DEVICE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,62}")


def plain_device_name(name: str) -> bool:
    """True when ``name`` is a device name every consumer reads as exactly one device."""
    return _PLAIN_DEVICE_NAME_RE.fullmatch(name) is not None
