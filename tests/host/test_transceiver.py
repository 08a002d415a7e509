"""Module EEPROM decoding (agentd.host.transceiver) on real dumps, checked against what
the publishers' own tools printed for the same bytes (tests/fixtures/eeprom/, SOURCES.md):
ethtool's decode of an SFF-8636 QSFP28, a Juniper switch's thresholds and temperatures of
two CMIS OSFP modules."""

from __future__ import annotations

import re

import pytest

from agentd.host.transceiver import LOWER, UPPER0, decode, pages_to_read, serial_span
from tests.support.eeprom_dumps import EEPROM, ethtool_printed, flat_bytes, paged, pages_of_flat

SFF = EEPROM / "sff8636-qsfp28-mlxsw-netdev-2019.txt"
DR8 = EEPROM / "cmis-osfp-800g-dr8-juniper.txt"
AEC = EEPROM / "cmis-osfp-aec-credo.txt"
SWITCH = (EEPROM / "cmis-juniper-switch-view.txt").read_text()


def _number(text: str) -> float:
    return float(re.match(r"-?[\d.]+", text).group(0))  # type: ignore[union-attr]


def _switch_row(port: str) -> list[int]:
    line = next(x for x in SWITCH.splitlines() if x.startswith(f"FPC 0 {port} "))
    return [int(n) for n in line.split()[3:]]


def test_sff8636_thresholds_are_what_ethtool_printed():
    t = decode(pages_of_flat(flat_bytes(SFF)), "ioctl")
    printed = ethtool_printed(SFF)
    mine = {
        "Laser bias current high alarm threshold": t.tx_bias_thresholds.high_alarm * 1e3,
        "Laser bias current low alarm threshold": t.tx_bias_thresholds.low_alarm * 1e3,
        "Laser bias current high warning threshold": t.tx_bias_thresholds.high_warning * 1e3,
        "Laser bias current low warning threshold": t.tx_bias_thresholds.low_warning * 1e3,
        "Laser output power high alarm threshold": t.tx_power_thresholds.high_alarm * 1e3,
        "Laser output power low alarm threshold": t.tx_power_thresholds.low_alarm * 1e3,
        "Laser output power high warning threshold": t.tx_power_thresholds.high_warning * 1e3,
        "Laser output power low warning threshold": t.tx_power_thresholds.low_warning * 1e3,
        "Module temperature high alarm threshold": t.temperature_thresholds.high_alarm,
        "Module temperature low alarm threshold": t.temperature_thresholds.low_alarm,
        "Module temperature high warning threshold": t.temperature_thresholds.high_warning,
        "Module temperature low warning threshold": t.temperature_thresholds.low_warning,
        "Module voltage high alarm threshold": t.vcc_thresholds.high_alarm,
        "Module voltage low alarm threshold": t.vcc_thresholds.low_alarm,
    }
    assert set(mine) == set(printed)
    for name, value in mine.items():
        assert value == pytest.approx(_number(printed[name]), abs=1e-4), name


def test_sff8636_identity_monitors_and_flags():
    t = decode(pages_of_flat(flat_bytes(SFF)), "ioctl")
    assert (t.spec, t.identifier, t.identifier_name) == ("sff8636", 0x11, "QSFP28")
    assert (t.vendor, t.part_number, t.vendor_revision, t.oui) == ("Mellanox", "MMA1B00-SS1", "A2", "00:02:c9")
    assert t.serial == "MT1834FT03846" and t.date_code == "180703"
    assert t.copper is False  # byte 147 0x00: 850 nm VCSEL
    assert t.temperature_c == pytest.approx(0x2779 / 256) and t.vcc_v == pytest.approx(3.3477)
    # four lanes, no light on any (the module was not linked when dumped): bytes 9-10 = 0x55 0x55,
    # the low alarm and low warning of every lane's Rx power latched
    assert [lane.lane for lane in t.lanes] == [1, 2, 3, 4]
    assert all(lane.rx_power_w == 0.0 and lane.rx_power_flags == ("low_alarm", "low_warning") for lane in t.lanes)
    assert t.problem is None and t.source == "ioctl"


def test_sff8636_page_03h_follows_flat_memory():
    data = pages_of_flat(flat_bytes(SFF))
    assert (3, 0, 128) in pages_to_read(data[LOWER])
    flat = bytearray(data[LOWER])
    flat[2] |= 0x04
    assert pages_to_read(bytes(flat)) == [UPPER0]
    without_03h = {k: v for k, v in data.items() if k != (3, 0, 128)}
    t = decode(without_03h)
    assert t.temperature_thresholds is None and "not read: page 03h" in (t.problem or "")


def test_cmis_dr8_matches_the_switchs_view_of_the_same_module():
    t = decode(paged(DR8))
    assert (t.spec, t.identifier_name, t.revision) == ("cmis", "OSFP", "5.1")
    assert (t.vendor, t.part_number, t.serial) == ("JUNIPER-1G1", "740-174932", "1G1TK1AA350AZ")
    normal, high, full, bad_fan, yellow, yellow_bad, red, red_bad, shutdown = _switch_row("xcvr-0/0/40")
    # the switch's yellow/red alarms for the port are the module's own high warning/alarm
    assert (t.temperature_thresholds.high_warning, t.temperature_thresholds.high_alarm) == (yellow, red)
    assert t.temperature_c == pytest.approx(57, abs=1.5)  # "57 degrees C" in show chassis environment
    assert len(t.lanes) == 8 and t.copper is False
    assert all(1e-3 < lane.rx_power_w < 3e-3 and lane.rx_los is False and lane.rx_power_flags == () for lane in t.lanes)
    # byte 186 of page 11h: lane 1 Rx power 0x4232 in 0.1 uW
    assert t.lanes[0].rx_power_w == pytest.approx(0x4232 * 1e-7)
    assert t.rx_power_thresholds.low_alarm == pytest.approx(0x0508 * 1e-7)


def test_cmis_aec_is_copper_without_optical_monitors():
    t = decode(paged(AEC))
    assert t.copper is True and t.revision == "5.0"
    assert all(lane.rx_power_w is None and lane.tx_bias_a is None for lane in t.lanes)  # page 01h byte 160 = 0
    assert t.rx_power_thresholds is None
    _, _, _, _, yellow, _, red, _, _ = _switch_row("xcvr-0/0/0")
    assert (t.temperature_thresholds.high_warning, t.temperature_thresholds.high_alarm) == (yellow, red)


def test_cmis_pages_follow_the_banks_page_01h_advertises():
    p = paged(DR8)
    lower, page01 = p[LOWER], p[(1, 0, 128)]
    assert pages_to_read(lower, page01) == [UPPER0, (1, 0, 128), (2, 0, 128), (0x11, 0, 128)]
    four = bytearray(page01)
    four[142 - 128] = (four[142 - 128] & ~0x03) | 0x02
    assert [k for k in pages_to_read(lower, bytes(four)) if k[0] == 0x11] == [(0x11, b, 128) for b in range(4)]


@pytest.mark.parametrize("pages", [
    {},
    {(0, 0, 0): b""},
    {(0, 0, 0): b"\x03" + bytes(127)},  # an SFP: not decoded here
    {(0, 0, 0): b"\x19" + bytes(20)},  # a short lower page
    {(0, 0, 0): bytes.fromhex("ff" * 128)},
])
def test_odd_pages_never_raise(pages):
    t = decode(pages)
    assert t.problem or t.spec is None


def test_serial_span_covers_the_serial():
    for path, reader in ((SFF, lambda p: pages_of_flat(flat_bytes(p))), (DR8, paged)):
        p = reader(path)
        start, length = serial_span(p[LOWER])
        assert p[UPPER0][start : start + length].decode().strip() == decode(p).serial
