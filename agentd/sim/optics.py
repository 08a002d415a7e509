"""The physical layer of a simulated node: HCA hwmon sensors, and the ethtool netlink
answers of its Ethernet ports (link state, FEC statistics, module EEPROM pages).

sysfs: every HCA's PCI function gets ``hwmon/hwmon<i>/`` as mlx5 registers it
(drivers/net/ethernet/mellanox/mlx5/core/hwmon.c): ``name`` "mlx5", channel 1 the ASIC
(label "asic", crit 105 degC as the published mlx5 outputs show), channel 2 the module
(label "Module0", crit 70 degC), values in millidegrees; ``class/hwmon/hwmon<i>`` links to
it.

``.agentd/ethtool-netlink/<if>.json`` (agentd.base.recorded; the format agentd.host.ethtool_nl
documents) for each mlx5 Ethernet netdev: link up, one link-down event, RS-FEC totals (mlx5
counts no lanes in RS mode), and the EEPROM pages of its module, encoded here from the
memory map in agentd.base.sff: a 400 GbE port's CMIS 5.0 OSFP 400G DR4 module (lanes 1-4 in
use of its 8) with thresholds like a real module's; a 100 GbE port's (the ConnectX-6 Dx
storage NICs) SFF-8636 QSFP28 100GBASE-SR4 module (4 lanes) with the identity and
thresholds of a real Mellanox QSFP28 (tests/fixtures/eeprom/sff8636-qsfp28-mlxsw-netdev-2019.txt,
a dump posted to netdev in 2019). ``ethtool -S`` already carries
``link_down_events_phy`` and ``rx_corrected_bits_phy`` (agentd.sim.net).

Faults (agentd.sim.fault_kinds) change these: ``module_hot``, ``rx_power_low``,
``fec_errors``, ``link_down_reason``.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from agentd.base import recorded
from agentd.base.sff import BIAS_PER_A, PAGE_SIZE, POWER_PER_W, SFF8636_IDS, TEMP_PER_C, THRESHOLD_ORDER, VCC_PER_V, Cmis, Sff8636
from agentd.sim.pci import PciNode
from agentd.sim.profiles import HcaSpec, Profile
from agentd.sim.tree import symlink, write_attr

ASIC_C, ASIC_CRIT_C = 61.0, 105.0
MODULE_C, MODULE_CRIT_C = 55.0, 70.0
HIGHEST_ABOVE_C = 2.0
MODULE_VCC_V = 3.29
LANES_USED = 4
RX_W, TX_W, BIAS_A = 0.00091, 0.00118, 0.052
THRESHOLDS = {  # (high alarm, low alarm, high warning, low warning), base units
    "temp": (75.0, -5.0, 70.0, 0.0),
    "vcc": (3.63, 2.97, 3.465, 3.135),
    "tx_power": (0.003981, 0.000151, 0.003162, 0.000191),
    "tx_bias": (0.1, 0.002, 0.09, 0.004),
    "rx_power": (0.004467, 0.0000813, 0.003548, 0.0001023),
}
FEC_CORRECTED = 1_837_104
LINK_DOWN_EVENTS = 1
VENDOR, OUI, PART, REVISION, DATE = "NVIDIA", bytes((0x00, 0x02, 0xC9)), "MMS4X00-NS400", "A0", "230725"
# The QSFP28 of a 100 GbE port: identity and page 03h thresholds as the real module's dump
# (tests/fixtures/eeprom/sff8636-qsfp28-mlxsw-netdev-2019.txt); its lanes were dark there, so
# the live values are ours, inside its warning thresholds.
QSFP28_ID = 0x11
QSFP28_VENDOR, QSFP28_PART, QSFP28_REVISION, QSFP28_DATE = "Mellanox", "MMA1B00-SS1", "A2", "180703"
QSFP28_VCC_V = 3.3477
QSFP28_THRESHOLDS = {
    "temp": (80.0, -10.0, 70.0, 0.0),
    "vcc": (3.5, 3.1, 3.465, 3.135),
    "tx_power": (0.0034673, 0.0000724, 0.0017378, 0.0001445),
    "tx_bias": (0.0085, 0.005492, 0.008, 0.006),
    "rx_power": (0.0034673, 0.0000467, 0.0017378, 0.0000933),
}
QSFP28_RX_W, QSFP28_TX_W, QSFP28_BIAS_A = 0.00079, 0.00085, 0.0071
Pages = dict[tuple[int, int, int], bytes]


def hwmon_dir(layout: dict[str, PciNode], hca: HcaSpec, index: int) -> str:
    return f"{layout[hca.bdf].rel}/hwmon/hwmon{index}"


def mdeg(c: float) -> int:
    return round(c * 1000)


def write_hwmon(root: Path, d: Path, asic_c: float = ASIC_C, module_c: float | None = MODULE_C) -> None:
    write_attr(d / "name", "mlx5")
    channels = [("asic", asic_c, ASIC_CRIT_C)] + ([("Module0", module_c, MODULE_CRIT_C)] if module_c is not None else [])
    for i, (label, c, crit) in enumerate(channels, start=1):
        write_attr(d / f"temp{i}_label", label)
        write_attr(d / f"temp{i}_input", mdeg(c))
        write_attr(d / f"temp{i}_highest", mdeg(c + HIGHEST_ABOVE_C))
        write_attr(d / f"temp{i}_crit", mdeg(crit))
    symlink(root / "sys/class/hwmon" / d.name, d)


# ---------------------------------------------------------------------------
# module EEPROM pages (CMIS 5.0, OSFP)


def put(buf: bytearray, offset: int, data: bytes) -> None:
    start = offset - PAGE_SIZE if offset >= PAGE_SIZE else offset
    buf[start : start + len(data)] = data


def _text(s: str, n: int) -> bytes:
    return s.encode().ljust(n)[:n]


def u16(v: float, per: float) -> bytes:
    return struct.pack(">H", max(0, min(0xFFFF, round(v * per))))


def _thresholds(buf: bytearray, offset: int, values: tuple[float, ...], per: float, signed: bool = False) -> None:
    for i, v in enumerate(values):
        put(buf, offset + 2 * i, struct.pack(">h", round(v * per)) if signed else u16(v, per))


def _threshold_page(spec: type[Cmis] | type[Sff8636], thresholds: dict[str, tuple[float, float, float, float]]) -> bytearray:
    """The page of a module's thresholds (CMIS 02h, SFF-8636 03h: the same quantities at each
    specification's offsets)."""
    page = bytearray(PAGE_SIZE)
    _thresholds(page, spec.TEMP_THRESH, thresholds["temp"], TEMP_PER_C, signed=True)
    _thresholds(page, spec.VCC_THRESH, thresholds["vcc"], VCC_PER_V)
    _thresholds(page, spec.TX_POWER_THRESH, thresholds["tx_power"], POWER_PER_W)
    _thresholds(page, spec.TX_BIAS_THRESH, thresholds["tx_bias"], BIAS_PER_A)
    _thresholds(page, spec.RX_POWER_THRESH, thresholds["rx_power"], POWER_PER_W)
    return page


def cmis_pages(serial: str, temp_c: float = MODULE_C, lanes: list[tuple[float, float, float]] | None = None,
               rx_flags: dict[str, int] | None = None, temp_flags: int = 0) -> dict[tuple[int, int, int], bytes]:
    """The pages of the simulated module: ``lanes`` (rx W, tx W, bias A) for lanes 1-8
    (default: 1-4 in use, 5-8 dark); ``rx_flags`` THRESHOLD_ORDER name -> lane bits."""
    C = Cmis
    if lanes is None:
        lanes = [(RX_W, TX_W, BIAS_A)] * LANES_USED + [(0.0, 0.0, 0.0)] * (C.LANES_PER_BANK - LANES_USED)
    lower = bytearray(PAGE_SIZE)
    lower[0], lower[C.REVISION], lower[C.MEMORY_MODEL], lower[C.MODULE_STATE] = 0x19, 0x50, 0x00, 0x03 << 1
    lower[C.MODULE_FLAGS] = temp_flags
    put(lower, C.TEMP, struct.pack(">h", round(temp_c * TEMP_PER_C)))
    put(lower, C.VCC, u16(MODULE_VCC_V, VCC_PER_V))
    lower[C.MODULE_TYPE] = 0x02  # single-mode fibre
    up0 = bytearray(PAGE_SIZE)
    up0[0] = 0x19
    for (offset, length), text in ((C.VENDOR_NAME, VENDOR), (C.VENDOR_PN, PART), (C.VENDOR_REV, REVISION), (C.VENDOR_SN, serial), (C.DATE_CODE, DATE)):
        put(up0, offset, _text(text, length))
    put(up0, C.VENDOR_OUI[0], OUI)
    up0[C.MEDIA_TECH - PAGE_SIZE] = 0x06  # 1310 nm EML
    p01 = bytearray(PAGE_SIZE)
    p01[C.BANKS - PAGE_SIZE] = 0x00
    p01[C.LANE_MONITORS - PAGE_SIZE] = 0x07  # Rx power, Tx power, Tx bias; bias x1
    p02 = _threshold_page(C, THRESHOLDS)
    p11 = bytearray(PAGE_SIZE)
    for i, (rx, tx, bias) in enumerate(lanes):
        put(p11, C.RX_POWER + 2 * i, u16(rx, POWER_PER_W))
        put(p11, C.TX_POWER + 2 * i, u16(tx, POWER_PER_W))
        put(p11, C.TX_BIAS + 2 * i, u16(bias, BIAS_PER_A))
    for name, bits in (rx_flags or {}).items():
        p11[C.RX_POWER_FLAGS[THRESHOLD_ORDER.index(name)] - PAGE_SIZE] = bits
    return {(0, 0, 0): bytes(lower), (0, 0, PAGE_SIZE): bytes(up0), (1, 0, PAGE_SIZE): bytes(p01), (2, 0, PAGE_SIZE): bytes(p02),
            (C.LANE_PAGE, 0, PAGE_SIZE): bytes(p11)}


def sff8636_pages(serial: str, temp_c: float = MODULE_C, lanes: list[tuple[float, float, float]] | None = None,
                  rx_flags: dict[str, int] | None = None, temp_flags: int = 0) -> Pages:
    """The pages of a QSFP28 module (SFF-8636): lower page 00h (monitors and flags), upper
    page 00h (identity), upper page 03h (thresholds). ``lanes``: (rx W, tx W, bias A) for
    lanes 1-4; ``rx_flags``: THRESHOLD_ORDER name -> lane bits (bit 0: lane 1);
    ``temp_flags``: byte 6."""
    S = Sff8636
    if lanes is None:
        lanes = [(QSFP28_RX_W, QSFP28_TX_W, QSFP28_BIAS_A)] * S.LANES
    lower = bytearray(PAGE_SIZE)
    lower[0], lower[1], lower[S.STATUS_2] = QSFP28_ID, 0x07, 0x00  # revision 2.8 and later; paged, data ready
    lower[6] = temp_flags
    for name, bits in (rx_flags or {}).items():
        for i in range(S.LANES):
            if bits >> i & 1:
                set_sff8636_rx_flag(lower, i + 1, name)
    put(lower, S.TEMP, struct.pack(">h", round(temp_c * TEMP_PER_C)))
    put(lower, S.VCC, u16(QSFP28_VCC_V, VCC_PER_V))
    for i, (rx, tx, bias) in enumerate(lanes):
        put(lower, S.RX_POWER + 2 * i, u16(rx, POWER_PER_W))
        put(lower, S.TX_BIAS + 2 * i, u16(bias, BIAS_PER_A))
        put(lower, S.TX_POWER + 2 * i, u16(tx, POWER_PER_W))
    up0 = bytearray(PAGE_SIZE)
    up0[0] = QSFP28_ID
    up0[S.DEVICE_TECH - PAGE_SIZE] = 0x00  # 850 nm VCSEL
    for (offset, length), text in ((S.VENDOR_NAME, QSFP28_VENDOR), (S.VENDOR_PN, QSFP28_PART), (S.VENDOR_REV, QSFP28_REVISION),
                                   (S.VENDOR_SN, serial), (S.DATE_CODE, QSFP28_DATE)):
        put(up0, offset, _text(text, length))
    put(up0, S.VENDOR_OUI[0], OUI)
    up0[S.DIAG_TYPE - PAGE_SIZE] = 0x0C  # Rx power average, Tx power monitored
    p03 = _threshold_page(S, QSFP28_THRESHOLDS)
    return {(0, 0, 0): bytes(lower), (0, 0, PAGE_SIZE): bytes(up0), (S.THRESH_PAGE, 0, PAGE_SIZE): bytes(p03)}


def set_sff8636_rx_flag(lower: bytearray, lane: int, name: str) -> None:
    """Latch Rx power flag ``name`` (THRESHOLD_ORDER) of ``lane`` (1-4): bytes 9-10, two
    lanes a byte, lane 1 in the high nibble, high alarm its top bit."""
    lower[9 + (lane - 1) // 2] |= 1 << ((4 if lane % 2 else 0) + 3 - THRESHOLD_ORDER.index(name))


def is_sff8636(lower: bytes | bytearray) -> bool:
    return bool(lower) and lower[0] in SFF8636_IDS


def module_pages(hca: HcaSpec) -> Pages:
    """The module in ``hca``'s port as the profile has it: a QSFP28 (SFF-8636) in a port of
    100 Gb/s or less, a CMIS OSFP above."""
    gbps = float(hca.rate.split()[0])
    return sff8636_pages(serial_of(hca)) if gbps <= 100 else cmis_pages(serial_of(hca))


def module_answer(pages: dict[tuple[int, int, int], bytes]) -> dict[str, Any]:  # Any: JSON-shaped
    return {"via": "netlink", "pages": [{"page": p, "bank": b, "i2c-address": 0x50, "offset": o, "data": d.hex()} for (p, b, o), d in sorted(pages.items())]}


def pages_of(answer: dict[str, Any]) -> dict[tuple[int, int, int], bytes]:  # Any: JSON-shaped
    return {(p["page"], p["bank"], p["offset"]): bytes.fromhex(p["data"]) for p in answer["pages"]}


def serial_of(hca: HcaSpec) -> str:
    return "MT2330FT" + hca.bdf.replace(":", "").replace(".", "")[-5:].upper()


def netdev_answers(hca: HcaSpec) -> dict[str, Any]:  # Any: JSON-shaped
    return {
        "linkstate": {"link": 1, "ext-down-cnt": LINK_DOWN_EVENTS},
        "fec": {"stats": {"corrected": [FEC_CORRECTED], "uncorr": [0]}},
        "module-eeprom": module_answer(module_pages(hca)),
    }


def answers_path(netdev: str) -> str:
    return f"{recorded.DIR}/{recorded.ETHTOOL_NETLINK}/{netdev}.json"


def write_answers(path: Path, doc: dict[str, Any]) -> None:  # Any: JSON-shaped
    write_attr(path, json.dumps(doc, indent=1))


def write_optics(root: Path, profile: Profile, layout: dict[str, PciNode]) -> None:
    for index, hca in enumerate(profile.hcas):
        write_hwmon(root, root / hwmon_dir(layout, hca, index))
        if hca.link_layer == "Ethernet":
            write_answers(root / answers_path(hca.netdev), netdev_answers(hca))
