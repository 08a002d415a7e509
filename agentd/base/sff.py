"""Where a pluggable module keeps what agentd reads: the memory maps of SFF-8636 and CMIS.

A leaf (data only), shared by the decoder (agentd.host.transceiver) and the simulator's
encoder (agentd.sim.optics), so both read the same offsets. Offsets are bytes within a
256-byte page view as the kernel's ETHTOOL_MSG_MODULE_EEPROM_GET addresses it (lower
memory 0-127 of page 0, upper memory 128-255 of the selected page and bank; I2C address
0x50). Sources, cited per table:

- SFF-8024 rev 4.x, table 4-1 (identifier byte 0): which memory map a module uses.
- SFF-8636 rev 2.10a ("Management Interface for 4-lane Modules and Cables"): lower page
  00h (6.2), upper page 00h (6.3), upper page 03h thresholds (6.4.4, table 6-27 ff.).
- OIF CMIS 5.x (Common Management Interface Specification): lower memory (8.2, table
  8-6/8-9), upper page 00h (8.3), page 01h advertising (8.4, table 8-43 "monitor
  advertisement"), page 02h thresholds (8.5), page 11h lane flags and monitors (8.9).

The same offsets are in ethtool's own decoders (qsfp.h, cmis.h), which agentd's tests use
as a cross-check on real module dumps (tests/fixtures/eeprom/, with ethtool's printed
values). Units of every monitor (SFF-8636 6.2.4, CMIS 8.2.5/8.9): temperature signed
1/256 degC, supply voltage 100 uV, laser bias 2 uA (CMIS: times the bias multiplier),
optical power 0.1 uW.
"""

from __future__ import annotations

from typing import Final

PAGE_SIZE: Final = 128
I2C_ADDRESS: Final = 0x50  # both maps: the module's two-wire address (A0h)

# SFF-8024 table 4-1 identifiers -> memory map
SFF8636_IDS: Final = {0x0C: "QSFP", 0x0D: "QSFP+", 0x11: "QSFP28"}
CMIS_IDS: Final = {0x18: "QSFP-DD", 0x19: "OSFP", 0x1B: "DSFP", 0x1E: "QSFP+ (CMIS)", 0x1F: "SFP-DD (CMIS)", 0x20: "SFP+ (CMIS)"}
OTHER_IDS: Final = {0x00: "unknown", 0x03: "SFP/SFP+/SFP28"}

# Monitor units (see the module docstring), as divisors into base units (a division by an
# integer keeps 3.465 V from reading 3.4650000000000003)
TEMP_PER_C: Final = 256  # 1/256 degC
VCC_PER_V: Final = 10_000  # 100 uV
BIAS_PER_A: Final = 500_000  # 2 uA
POWER_PER_W: Final = 10_000_000  # 0.1 uW

# Threshold sets are four 16-bit values in this order (both specifications)
THRESHOLD_ORDER: Final = ("high_alarm", "low_alarm", "high_warning", "low_warning")


class Sff8636:
    """SFF-8636: 4 lanes; lower page 00h, upper page 00h, thresholds on upper page 03h."""

    LANES: Final = 4
    STATUS_2: Final = 2  # bit 2 Flat_mem: 1 = upper page 00h only (no page 03h)
    FLAT_MEM: Final = 0x04
    TEMP: Final = 22  # s16
    VCC: Final = 26  # u16
    RX_POWER: Final = 34  # 4 x u16, lane 1 first
    TX_BIAS: Final = 42
    TX_POWER: Final = 50
    # upper page 00h
    DEVICE_TECH: Final = 147  # bits 7-4 transmitter technology; 0xA..0xF copper
    VENDOR_NAME: Final = (148, 16)
    VENDOR_OUI: Final = (165, 3)
    VENDOR_PN: Final = (168, 16)
    VENDOR_REV: Final = (184, 2)
    VENDOR_SN: Final = (196, 16)
    DATE_CODE: Final = (212, 8)
    DIAG_TYPE: Final = 220  # bit 3 Rx power average (1) or OMA (0); bit 2 Tx power monitored
    # upper page 03h thresholds (each THRESHOLD_ORDER)
    THRESH_PAGE: Final = 0x03
    TEMP_THRESH: Final = 128
    VCC_THRESH: Final = 144
    RX_POWER_THRESH: Final = 176
    TX_BIAS_THRESH: Final = 184
    TX_POWER_THRESH: Final = 192


class Cmis:
    """CMIS: up to 8 lanes a bank; thresholds on page 02h, lane monitors on page 11h."""

    LANES_PER_BANK: Final = 8
    REVISION: Final = 1  # major nibble . minor nibble
    MEMORY_MODEL: Final = 2  # bit 7 flat memory (no pages 01h-11h)
    FLAT_MEM: Final = 0x80
    MODULE_STATE: Final = 3  # bits 3-1 (1 LowPwr, 2 PwrUp, 3 Ready, 4 PwrDn, 5 Fault)
    MODULE_FLAGS: Final = 9  # bits 3-0 temp low warn, high warn, low alarm, high alarm
    TEMP: Final = 14  # s16
    VCC: Final = 16  # u16
    MODULE_TYPE: Final = 85  # media type: 1 MMF, 2 SMF, 3 passive copper, 4 active cable
    # upper page 00h
    VENDOR_NAME: Final = (129, 16)
    VENDOR_OUI: Final = (145, 3)
    VENDOR_PN: Final = (148, 16)
    VENDOR_REV: Final = (164, 2)
    VENDOR_SN: Final = (166, 16)
    DATE_CODE: Final = (182, 8)
    MEDIA_TECH: Final = 212  # media interface technology: 0x0A and above are copper
    # page 01h
    ADVERTISED_PAGE: Final = 0x01
    BANKS: Final = 142  # bits 1-0: 0 bank 0, 1 banks 0-1, 2 banks 0-3
    LANE_MONITORS: Final = 160  # bit 0 Tx bias, bit 1 Tx power, bit 2 Rx power; bits 4-3 bias multiplier
    # page 02h thresholds (each THRESHOLD_ORDER)
    THRESH_PAGE: Final = 0x02
    TEMP_THRESH: Final = 128
    VCC_THRESH: Final = 136
    TX_POWER_THRESH: Final = 176
    TX_BIAS_THRESH: Final = 184
    RX_POWER_THRESH: Final = 192
    # page 11h lane flags (bit n = lane n+1 of the bank) and monitors (8 x u16)
    LANE_PAGE: Final = 0x11
    RX_LOS: Final = 147
    RX_POWER_FLAGS: Final = (149, 150, 151, 152)  # THRESHOLD_ORDER
    TX_POWER: Final = 154
    TX_BIAS: Final = 170
    RX_POWER: Final = 186
