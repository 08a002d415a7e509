"""Decode a pluggable module's EEPROM (SFF-8636 and CMIS) into a Transceiver record.

Pure: bytes in, record out. The pages come from the module EEPROM reader
(agentd.host.module_eeprom: ETHTOOL_MSG_MODULE_EEPROM_GET, or the legacy
ETHTOOL_GMODULEEEPROM ioctl, or a recording). Which pages a module has follows from its
lower page (``pages_to_read``): SFF-8636 adds page 03h (thresholds) unless its memory is
flat; CMIS adds pages 01h (what it monitors), 02h (thresholds) and 11h of every bank
(lane flags and monitors) unless flat. Offsets and units: agentd.base.sff, with the
specification sections cited there.

What is decoded is what agentd judges: identity (identifier, vendor, part, revision,
serial, date code), temperature, supply voltage, per-lane Rx/Tx power and bias, the
module's own alarm/warning thresholds, and the flags the module latched. A monitor a module
does not implement reads 0 (SFF-8636 6.2.4): a zero temperature or voltage is taken as
"not monitored" (None), as are thresholds that are all zero. A short or missing page is a
``problem`` on the record, never an exception.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

from agentd.base.sff import (
    BIAS_PER_A,
    CMIS_IDS,
    OTHER_IDS,
    PAGE_SIZE,
    POWER_PER_W,
    SFF8636_IDS,
    TEMP_PER_C,
    THRESHOLD_ORDER,
    VCC_PER_V,
    Cmis,
    Sff8636,
)
from agentd.model import EepromPage, ModuleLane, ThresholdSet, Transceiver

PageKey = tuple[int, int, int]  # (page, bank, offset 0|128)
LOWER: PageKey = (0, 0, 0)
UPPER0: PageKey = (0, 0, PAGE_SIZE)
_U16 = struct.Struct(">H")
_S16 = struct.Struct(">h")
_FLAGS = ("high_alarm", "low_alarm", "high_warning", "low_warning")


class _View:
    """Bytes of the pages read, addressed as the specifications do (page, byte 0-255)."""

    def __init__(self, pages: Mapping[PageKey, bytes]):
        self.pages = pages
        self.short: list[str] = []

    def data(self, page: int, offset: int, length: int, bank: int = 0) -> bytes | None:
        half = 0 if offset < PAGE_SIZE else PAGE_SIZE
        raw = self.pages.get((page, bank, half))
        if raw is None:
            return None
        start = offset - half
        if len(raw) < start + length:
            self.short.append(f"page {page:02x}h bank {bank} is {len(raw)} bytes")
            return None
        return raw[start : start + length]

    def u16(self, page: int, offset: int, bank: int = 0) -> int | None:
        b = self.data(page, offset, 2, bank)
        return _U16.unpack(b)[0] if b is not None else None

    def s16(self, page: int, offset: int, bank: int = 0) -> int | None:
        b = self.data(page, offset, 2, bank)
        return _S16.unpack(b)[0] if b is not None else None

    def byte(self, page: int, offset: int, bank: int = 0) -> int | None:
        b = self.data(page, offset, 1, bank)
        return b[0] if b is not None else None

    def text(self, page: int, where: tuple[int, int]) -> str | None:
        b = self.data(page, where[0], where[1])
        if b is None:
            return None
        s = "".join(chr(c) if 0x20 <= c < 0x7F else " " for c in b).strip()
        return s or None


def _identifier(lower: bytes) -> int | None:
    return lower[0] if lower else None


def spec_of(identifier: int | None) -> str | None:
    if identifier in SFF8636_IDS:
        return "sff8636"
    if identifier in CMIS_IDS:
        return "cmis"
    return None


def pages_to_read(lower: bytes, page01: bytes | None = None) -> list[PageKey]:
    """The pages to read after the lower page (and, for CMIS, after page 01h, which says
    how many banks of lanes there are). Upper page 00h always; the rest as the module
    header says (module docstring)."""
    ident = _identifier(lower)
    spec = spec_of(ident)
    out: list[PageKey] = [UPPER0]
    if spec == "sff8636":
        if len(lower) > Sff8636.STATUS_2 and not lower[Sff8636.STATUS_2] & Sff8636.FLAT_MEM:
            out.append((Sff8636.THRESH_PAGE, 0, PAGE_SIZE))
    elif spec == "cmis" and len(lower) > Cmis.MEMORY_MODEL and not lower[Cmis.MEMORY_MODEL] & Cmis.FLAT_MEM:
        out += [(Cmis.ADVERTISED_PAGE, 0, PAGE_SIZE), (Cmis.THRESH_PAGE, 0, PAGE_SIZE)]
        out += [(Cmis.LANE_PAGE, bank, PAGE_SIZE) for bank in range(cmis_banks(page01))]
    return out


def cmis_banks(page01: bytes | None) -> int:
    """Banks of lanes a CMIS module has (page 01h byte 142 bits 1-0); 1 when unknown."""
    off = Cmis.BANKS - PAGE_SIZE
    if page01 is None or len(page01) <= off:
        return 1
    return {0: 1, 1: 2, 2: 4}.get(page01[off] & 0x03, 1)


def _celsius(raw: int | None) -> float | None:
    return None if raw is None or raw == 0 else raw / TEMP_PER_C


def _volts(raw: int | None) -> float | None:
    return None if raw is None or raw == 0 else raw / VCC_PER_V


def _per(raw: int | None, divisor: float) -> float | None:
    return None if raw is None else raw / divisor


def _thresholds(v: _View, page: int, offset: int, divisor: float, signed: bool = False) -> ThresholdSet | None:
    values = [(v.s16 if signed else v.u16)(page, offset + 2 * i) for i in range(4)]
    if any(x is None for x in values) or all(x == 0 for x in values):
        return None
    return ThresholdSet(**{name: x / divisor for name, x in zip(THRESHOLD_ORDER, values, strict=True) if x is not None})


def _bits(byte: int | None, bits: Iterable[tuple[int, str]]) -> tuple[str, ...]:
    return () if byte is None else tuple(name for bit, name in bits if byte >> bit & 1)


def _threshold_sets(v: _View, spec: type[Sff8636] | type[Cmis], bias_per_a: float) -> dict[str, ThresholdSet | None]:
    """The module's own alarm/warning thresholds (SFF-8636 page 03h, CMIS page 02h: the
    same order of quantities at the same offsets, each a set of four values)."""
    P = spec.THRESH_PAGE
    return {
        "temperature_thresholds": _thresholds(v, P, spec.TEMP_THRESH, TEMP_PER_C, signed=True),
        "vcc_thresholds": _thresholds(v, P, spec.VCC_THRESH, VCC_PER_V),
        "rx_power_thresholds": _thresholds(v, P, spec.RX_POWER_THRESH, POWER_PER_W),
        "tx_bias_thresholds": _thresholds(v, P, spec.TX_BIAS_THRESH, bias_per_a),
        "tx_power_thresholds": _thresholds(v, P, spec.TX_POWER_THRESH, POWER_PER_W),
    }


def _sff8636(v: _View, t: dict[str, object]) -> None:
    S = Sff8636
    t["temperature_c"] = _celsius(v.s16(0, S.TEMP))
    t["vcc_v"] = _volts(v.u16(0, S.VCC))
    t["temperature_flags"] = _bits(v.byte(0, 6), ((7, "high_alarm"), (6, "low_alarm"), (5, "high_warning"), (4, "low_warning")))
    tech = v.byte(0, S.DEVICE_TECH)
    t["copper"] = None if tech is None else tech >> 4 >= 0xA
    lanes = []
    for i in range(S.LANES):
        rx, tx, bias = v.u16(0, S.RX_POWER + 2 * i), v.u16(0, S.TX_POWER + 2 * i), v.u16(0, S.TX_BIAS + 2 * i)
        # Rx power flags: bytes 9-10, two lanes a byte (lane 1 in the high nibble)
        fb = v.byte(0, 9 + i // 2)
        shift = 4 if i % 2 == 0 else 0
        flags = _bits(fb, ((shift + 3, "high_alarm"), (shift + 2, "low_alarm"), (shift + 1, "high_warning"), (shift, "low_warning")))
        lanes.append(ModuleLane(lane=i + 1, rx_power_w=_per(rx, POWER_PER_W), tx_power_w=_per(tx, POWER_PER_W), tx_bias_a=_per(bias, BIAS_PER_A), rx_power_flags=flags))
    t["lanes"] = tuple(lanes)
    t.update(_threshold_sets(v, S, BIAS_PER_A))


def _cmis(v: _View, t: dict[str, object]) -> None:
    C = Cmis
    rev = v.byte(0, C.REVISION)
    t["revision"] = None if rev is None else f"{rev >> 4}.{rev & 0xF}"
    t["temperature_c"] = _celsius(v.s16(0, C.TEMP))
    t["vcc_v"] = _volts(v.u16(0, C.VCC))
    t["temperature_flags"] = _bits(v.byte(0, C.MODULE_FLAGS), ((0, "high_alarm"), (1, "low_alarm"), (2, "high_warning"), (3, "low_warning")))
    mtype, tech = v.byte(0, C.MODULE_TYPE), v.byte(0, C.MEDIA_TECH)
    t["copper"] = None if tech is None else (tech >= 0x0A or mtype == 0x03)
    adv = v.byte(C.ADVERTISED_PAGE, C.LANE_MONITORS)
    # Page 01h byte 160 bits 4-3: the bias monitor's multiplier (x1, x2, x4)
    bias_per_a = BIAS_PER_A / (1 << ((adv >> 3) & 0x03)) if adv is not None else BIAS_PER_A
    lanes = []
    bank = 0
    while (C.LANE_PAGE, bank, PAGE_SIZE) in v.pages:
        rx_flags = [v.byte(C.LANE_PAGE, off, bank) for off in C.RX_POWER_FLAGS]
        los = v.byte(C.LANE_PAGE, C.RX_LOS, bank)
        for i in range(C.LANES_PER_BANK):
            rx = v.u16(C.LANE_PAGE, C.RX_POWER + 2 * i, bank)
            tx = v.u16(C.LANE_PAGE, C.TX_POWER + 2 * i, bank)
            bias = v.u16(C.LANE_PAGE, C.TX_BIAS + 2 * i, bank)
            flags = tuple(name for name, b in zip(_FLAGS, rx_flags, strict=True) if b is not None and b >> i & 1)
            lanes.append(ModuleLane(
                lane=bank * C.LANES_PER_BANK + i + 1,
                rx_power_w=None if adv is not None and not adv & 0x04 else _per(rx, POWER_PER_W),
                tx_power_w=None if adv is not None and not adv & 0x02 else _per(tx, POWER_PER_W),
                tx_bias_a=None if adv is not None and not adv & 0x01 else _per(bias, bias_per_a),
                rx_los=None if los is None else bool(los >> i & 1),
                rx_power_flags=flags,
            ))
        bank += 1
    t["lanes"] = tuple(lanes)
    t.update(_threshold_sets(v, C, bias_per_a))


def decode(pages: Mapping[PageKey, bytes], source: str = "") -> Transceiver:
    """The Transceiver the pages describe. Never raises: what cannot be decoded is left
    None and said in ``problem``."""
    v = _View(pages)
    lower = pages.get(LOWER, b"")
    kept = tuple(EepromPage(page=p, bank=b, offset=o, data=d.hex()) for (p, b, o), d in sorted(pages.items()))
    ident = _identifier(lower)
    if ident is None:
        return Transceiver(source=source, problem="no module data (empty lower page)", pages=kept)
    spec = spec_of(ident)
    name = SFF8636_IDS.get(ident) or CMIS_IDS.get(ident) or OTHER_IDS.get(ident) or f"0x{ident:02x}"
    t: dict[str, object] = {"identifier": ident, "identifier_name": name, "spec": spec, "source": source, "pages": kept}
    if spec is None:
        t["problem"] = f"identifier 0x{ident:02x} ({name}): not an SFF-8636 or CMIS module, not decoded"
        return Transceiver.model_validate(t)
    S = Sff8636 if spec == "sff8636" else Cmis
    oui = v.data(0, S.VENDOR_OUI[0], 3)
    t.update(vendor=v.text(0, S.VENDOR_NAME), part_number=v.text(0, S.VENDOR_PN), vendor_revision=v.text(0, S.VENDOR_REV),
             serial=v.text(0, S.VENDOR_SN), date_code=v.text(0, S.DATE_CODE), oui=None if oui is None else ":".join(f"{b:02x}" for b in oui))
    (_sff8636 if spec == "sff8636" else _cmis)(v, t)
    missing = [f"page {p:02x}h" + (f" bank {b}" if b else "") for (p, b, o) in pages_to_read(lower, pages.get((Cmis.ADVERTISED_PAGE, 0, PAGE_SIZE)))
               if (p, b, o) not in pages]
    notes = sorted(set(v.short)) + ([f"not read: {', '.join(missing)}"] if missing else [])
    if notes:
        t["problem"] = "; ".join(notes)
    return Transceiver.model_validate(t)


def serial_span(lower: bytes) -> tuple[int, int] | None:
    """Where the vendor serial number lies in upper page 00h (byte offset within that
    128-byte half, length), for redaction; None for a map agentd does not decode."""
    spec = spec_of(_identifier(lower))
    if spec is None:
        return None
    start, length = (Sff8636 if spec == "sff8636" else Cmis).VENDOR_SN
    return start - PAGE_SIZE, length
