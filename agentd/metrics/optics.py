"""Physical-layer metrics (issue 38): HCA temperatures, Ethernet ports' modules, FEC and
PHY counters, the link-down reason, and the opt-in link tool's BERs of InfiniBand ports.

At the defaults (series budget, docs/metrics.md) the node's hottest HCA sensor and hottest
module, and per Ethernet port its weakest lit lane's Rx power and the FEC counters the
pre-FEC BER is read from; ``[metrics] optics_detail`` adds every sensor, every module
(identity, temperature, supply voltage, the module's own thresholds), every lane's power
and bias, and the PHY's link-down events. Findings judge the per-item values whatever is
exported (docs/findings.md); the alert rules fire on those findings.
"""

from __future__ import annotations

from typing import Final

from agentd.base.expo import Exposition, Family, MetricType
from agentd.metrics.registry import Area
from agentd.metrics.source import MetricsSource
from agentd.model import Netdev, ThresholdSet, Transceiver

G: Final[MetricType] = "gauge"
C: Final[MetricType] = "counter"
ND = ("netdev",)
LEVELS = ("high_alarm", "low_alarm", "high_warning", "low_warning")
# (family suffix, Transceiver threshold field, what) for the detail series
THRESHOLDS: Final = (
    ("temperature_threshold_celsius", "temperature_thresholds", "module temperature"),
    ("supply_voltage_threshold_volts", "vcc_thresholds", "supply voltage"),
    ("rx_power_threshold_watts", "rx_power_thresholds", "Rx optical power"),
    ("tx_power_threshold_watts", "tx_power_thresholds", "Tx optical power"),
    ("tx_bias_threshold_amperes", "tx_bias_thresholds", "laser bias current"),
)
_DETAIL = " Only with metrics.optics_detail."

FAMILIES: tuple[Family, ...] = (
    Family("agentd_nic_temperature_max_celsius", G, "The node's hottest HCA ASIC temperature sensor (hwmon, mlx5, kernel >= 6.5); every sensor with metrics.optics_detail.", ()),
    Family("agentd_transceiver_temperature_max_celsius", G, "The node's hottest module: the HCAs' module sensors (hwmon \"Module0\", InfiniBand ports included) and the Ethernet modules' own EEPROM temperatures; every module with metrics.optics_detail.", ()),
    Family("agentd_nic_temperature_celsius", G, "HCA temperature sensor (hwmon tempN_input under the PCI function; mlx5, kernel >= 6.5): the ASIC sensors and the plugged module's sensor, by hwmon label (\"asic\", \"Module0\", or sensor<index> from older firmware)." + _DETAIL, ("device", "sensor")),
    Family("agentd_nic_temperature_critical_celsius", G, "The sensor's critical temperature (hwmon tempN_crit)." + _DETAIL, ("device", "sensor")),
    Family("agentd_nic_temperature_highest_celsius", G, "The sensor's highest temperature since the driver loaded (hwmon tempN_highest)." + _DETAIL, ("device", "sensor")),
    Family("agentd_transceiver_info", G, "The module plugged into an Ethernet port (value 1), from its EEPROM (SFF-8024 identifier, SFF-8636 or CMIS vendor fields); the serial number is not a label." + _DETAIL, ("netdev", "identifier", "spec", "vendor", "part_number", "revision")),
    Family("agentd_transceiver_temperature_celsius", G, "Module temperature from its EEPROM (SFF-8636 bytes 22-23, CMIS lower page 14-15)." + _DETAIL, ND),
    Family("agentd_transceiver_rx_power_min_watts", G, "Rx optical power of the module's weakest lane in use (its laser on), in watts (the module's 0.1 uW steps).", ND),
    Family("agentd_transceiver_supply_voltage_volts", G, "Module supply voltage (Vcc)." + _DETAIL, ND),
    Family("agentd_transceiver_lane_rx_power_watts", G, "Rx optical power per lane." + _DETAIL, ("netdev", "lane")),
    Family("agentd_transceiver_lane_tx_power_watts", G, "Tx optical power per lane." + _DETAIL, ("netdev", "lane")),
    Family("agentd_transceiver_lane_tx_bias_amperes", G, "Laser bias current per lane." + _DETAIL, ("netdev", "lane")),
    *(Family(f"agentd_transceiver_{suffix}", G, f"The module's own {what} thresholds (SFF-8636 page 03h, CMIS page 02h), by level." + _DETAIL, ("netdev", "level"))
      for suffix, _, what in THRESHOLDS),
    Family("agentd_netdev_link_down_events_total", C, "Link-down events the PHY counted (ethtool netlink ETHTOOL_A_LINKSTATE_EXT_DOWN_CNT, kernel >= 6.3; else mlx5's ethtool -S link_down_events_phy)." + _DETAIL, ND),
    Family("agentd_netdev_link_down_reason_info", G, "Why the port's link is down, as the driver tells the kernel (ETHTOOL_A_LINKSTATE_EXT_STATE/_SUBSTATE: no_cable, cable_issue, bad_signal_integrity, ...); a series only while a reason is reported.", ("netdev", "reason", "substate")),
    Family("agentd_netdev_fec_corrected_blocks_total", C, "FEC codewords corrected (ethtool netlink FEC statistics, the total over lanes)." + _DETAIL, ND),
    Family("agentd_netdev_fec_uncorrectable_blocks_total", C, "FEC codewords that could not be corrected (frames lost to bit errors).", ND),
    Family("agentd_netdev_phy_corrected_bit_errors_total", C, "Bits the FEC corrected: the pre-FEC bit errors (mlx5 ethtool -S rx_corrected_bits_phy, else the FEC statistics' corrected bits). rate() over the link's bit rate is the pre-FEC BER.", ND),
    Family("agentd_netdev_phy_received_bit_total", C, "Bits the PHY received (mlx5 ethtool -S rx_bits_phy, where the driver has it): the denominator of the pre-FEC BER.", ND),
    Family("agentd_ib_port_effective_ber", G, "Effective (post-FEC) bit error rate of an InfiniBand port, from the opt-in link tool (mstlink/mlxlink; [optics] link_tool).", ("device", "port")),
    Family("agentd_ib_port_raw_ber", G, "Raw (pre-FEC) bit error rate of an InfiniBand port, from the opt-in link tool.", ("device", "port")),
)


def _thresholds(x: Exposition, family: str, name: str, th: ThresholdSet | None) -> None:
    if th is None:
        return
    for level in LEVELS:
        v = getattr(th, level)
        if v is not None:
            x.add(family, (name, level), v)


def _module(x: Exposition, name: str, m: Transceiver, detail: bool) -> None:
    if m.identifier is None:
        return  # an empty cage / a module that did not answer: nothing to show
    lit = [lane.rx_power_w for lane in m.lanes_in_use if lane.rx_power_w is not None]
    if lit:
        x.add("agentd_transceiver_rx_power_min_watts", (name,), min(lit))
    if not detail:
        return
    x.add("agentd_transceiver_info", (name, m.identifier_name or "", m.spec or "", m.vendor or "", m.part_number or "", m.vendor_revision or ""), 1)
    if m.temperature_c is not None:
        x.add("agentd_transceiver_temperature_celsius", (name,), m.temperature_c)
    if m.vcc_v is not None:
        x.add("agentd_transceiver_supply_voltage_volts", (name,), m.vcc_v)
    for lane in m.lanes:
        for fam, v in (("rx_power_watts", lane.rx_power_w), ("tx_power_watts", lane.tx_power_w), ("tx_bias_amperes", lane.tx_bias_a)):
            if v is not None:
                x.add(f"agentd_transceiver_lane_{fam}", (name, lane.lane), v)
    for suffix, field, _ in THRESHOLDS:
        _thresholds(x, f"agentd_transceiver_{suffix}", name, getattr(m, field))


def _phy(x: Exposition, n: Netdev, detail: bool) -> None:
    name, phy, stats = n.name, n.phy, n.ethtool or {}
    down = phy.link_down_events if phy is not None and phy.link_down_events is not None else stats.get("link_down_events_phy")
    if detail and down is not None:
        x.add("agentd_netdev_link_down_events_total", (name,), down)
    if phy is not None and phy.ext_state is not None:
        x.add("agentd_netdev_link_down_reason_info", (name, phy.ext_state, phy.ext_substate or ""), 1)
    fec = phy.fec if phy is not None else None
    if detail and fec is not None and fec.corrected_blocks is not None:
        x.add("agentd_netdev_fec_corrected_blocks_total", (name,), fec.corrected_blocks)
    if fec is not None and fec.uncorrectable_blocks is not None:
        x.add("agentd_netdev_fec_uncorrectable_blocks_total", (name,), fec.uncorrectable_blocks)
    bits = stats.get("rx_corrected_bits_phy", fec.corrected_bits if fec is not None else None)
    if bits is not None:
        x.add("agentd_netdev_phy_corrected_bit_errors_total", (name,), bits)
    if "rx_bits_phy" in stats:
        x.add("agentd_netdev_phy_received_bit_total", (name,), stats["rx_bits_phy"])


def cache_key(s: MetricsSource) -> tuple[object, ...] | None:
    snap = s.snapshot
    return None if snap is None else (snap.hcas, snap.netdevs, s.config.metrics)


def render(x: Exposition, s: MetricsSource) -> None:
    snap = s.snapshot
    if snap is None:
        return
    detail = s.config.metrics.optics_detail
    asic: list[float] = []
    module: list[float] = []
    for h in snap.hcas:
        for t in h.temperatures:
            if t.temperature_c is not None:
                (module if t.kind == "module" else asic).append(t.temperature_c)
            if not detail:
                continue
            sensor = t.label or f"temp{t.channel}"
            if t.temperature_c is not None:
                x.add("agentd_nic_temperature_celsius", (h.name, sensor), t.temperature_c)
            if t.critical_c is not None:
                x.add("agentd_nic_temperature_critical_celsius", (h.name, sensor), t.critical_c)
            if t.highest_c is not None:
                x.add("agentd_nic_temperature_highest_celsius", (h.name, sensor), t.highest_c)
        for p in h.ports:
            d = p.link_diag
            if d is not None and d.effective_ber is not None:
                x.add("agentd_ib_port_effective_ber", (h.name, p.port), d.effective_ber)
            if d is not None and d.raw_ber is not None:
                x.add("agentd_ib_port_raw_ber", (h.name, p.port), d.raw_ber)
            if d is not None and d.module_temperature_c is not None:
                module.append(d.module_temperature_c)
    for n in snap.netdevs:
        if n.module is not None:
            _module(x, n.name, n.module, detail)
            if n.module.identifier is not None and n.module.temperature_c is not None:
                module.append(n.module.temperature_c)
        if n.phy is not None or n.module is not None:
            _phy(x, n, detail)
    if asic:
        x.add("agentd_nic_temperature_max_celsius", (), max(asic))
    if module:
        x.add("agentd_transceiver_temperature_max_celsius", (), max(module))


AREA = Area("optics", FAMILIES, render, cache_key)
