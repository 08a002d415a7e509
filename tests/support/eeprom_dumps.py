"""Real module EEPROM dumps (tests/fixtures/eeprom/, provenance in tests/fixtures/SOURCES.md)
as the pages agentd's decoder takes: ``{(page, bank, offset 0|128): 128 bytes}``.

Two published text forms are read:
- ``ethtool -m <if> hex on`` (``0x0000:`` rows of 16 bytes): the legacy ioctl's flat
  layout (ETHTOOL_GMODULEEEPROM: lower page, then upper page 00h, 01h, 02h, 03h, each 128
  bytes), which is also how net/ethtool/eeprom.c's fallback maps a paged request
  (offset = page * 128 + offset);
- a switch's paged dump (``QSFP-DD Lower Page:`` / ``Upper Page 11h:`` headings, then
  ``0x80:`` rows of 16 bytes), one page a block.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.fixtures import FIXTURES

EEPROM = FIXTURES / "eeprom"
_FLAT_ROW = re.compile(r"^0x([0-9a-f]{4}):\s+((?:[0-9a-f]{2} ){15}[0-9a-f]{2})\s*$")
_PAGE_HEAD = re.compile(r"^\s*(?:QSFP-DD )?(Lower Page|Upper Page ([0-9A-Fa-f]{2})h):\s*$")
_PAGE_ROW = re.compile(r"^\s*0x([0-9a-f]{2}):((?:[0-9a-f]{2} ){15}[0-9a-f]{2})\s*$")


def flat_bytes(path: Path) -> bytes:
    """The bytes of an ``ethtool -m hex on`` dump, in offset order."""
    rows = {}
    for line in path.read_text().splitlines():
        m = _FLAT_ROW.match(line)
        if m:
            rows[int(m.group(1), 16)] = bytes.fromhex(m.group(2))
    return b"".join(rows[k] for k in sorted(rows))


def pages_of_flat(data: bytes) -> dict[tuple[int, int, int], bytes]:
    """The legacy ioctl's flat layout as pages (the kernel's fallback mapping)."""
    out = {(0, 0, 0): data[:128], (0, 0, 128): data[128:256]}
    for page in range(1, len(data) // 128 - 1):
        out[(page, 0, 128)] = data[(page + 1) * 128 : (page + 2) * 128]
    return out


def paged(path: Path) -> dict[tuple[int, int, int], bytes]:
    """A switch's per-page dump (bank 0) as pages."""
    out: dict[tuple[int, int, int], bytearray] = {}
    key: tuple[int, int, int] | None = None
    for line in path.read_text().splitlines():
        h = _PAGE_HEAD.match(line)
        if h:
            key = (0, 0, 0) if h.group(2) is None else (int(h.group(2), 16), 0, 128)
            out[key] = bytearray()
            continue
        m = _PAGE_ROW.match(line)
        if m and key is not None:
            out[key] += bytes.fromhex(m.group(2))
    return {k: bytes(v) for k, v in out.items()}


def ethtool_printed(path: Path) -> dict[str, str]:
    """``Name : value`` lines ethtool printed beside a dump (its own decode of the bytes)."""
    out = {}
    for line in path.read_text().splitlines():
        name, sep, value = line.partition(" : ")
        if sep and not line.startswith(("0x", "$")):
            out[name.strip()] = value.strip()
    return out
