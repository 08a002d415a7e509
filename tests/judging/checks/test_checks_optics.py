"""The physical-layer checks (agentd.judging.checks.optics) and the link-down reason in
ib.port.down, on snapshots whose modules are real EEPROM dumps (tests/fixtures/eeprom/)
or the simulator's, so the thresholds judged by are a module's own."""

from __future__ import annotations

import pytest

from agentd.host.transceiver import decode
from agentd.judging.checks import run_checks
from agentd.judging.checks.optics import pre_fec_ber
from agentd.model import FecStats, LinkDiag, ModuleLane, PhyLink, TempSensor, Transceiver
from tests.support.check_snapshots import T0, cfg, inp, later, node, one, only, problems, with_hca, with_netdev, with_port
from tests.support.eeprom_dumps import EEPROM, flat_bytes, paged, pages_of_flat

DR8 = decode(paged(EEPROM / "cmis-osfp-800g-dr8-juniper.txt"), "recorded")  # warning 73, alarm 76 degC
MLXSW = decode(pages_of_flat(flat_bytes(EEPROM / "sff8636-qsfp28-mlxsw-netdev-2019.txt")), "ioctl")


def roce(**netdev: object) -> object:
    return with_netdev(node(layer="Ethernet"), "eth0", **netdev)


def hot(m: Transceiver, c: float) -> Transceiver:
    return m.model_copy(update={"temperature_c": c})


def codes(snap, history=(), config=None) -> list[tuple[str, str, str]]:
    return [p for p in problems(run_checks(inp(snap, history, config=config))) if p[1].startswith(("optics.", "nic."))]


@pytest.mark.parametrize("celsius, expected", [(57.9, []), (73.0, ["warning"]), (75.9, ["warning"]), (76.0, ["critical"])])
def test_module_temperature_against_its_own_thresholds(celsius, expected):
    got = codes(roce(module=hot(DR8, celsius)))
    assert [sev for sev, code, subject in got if code == "optics.module.temperature" and subject == "mlx5_0:1"] == expected


def test_a_non_compute_ports_hot_module_is_at_most_a_warning():
    s = with_netdev(node(layer="Ethernet"), "stor0", module=hot(DR8, 80.0))
    assert ("warning", "optics.module.temperature", "mlx5_8:1") in codes(s)


def test_without_eeprom_thresholds_the_hwmon_module_sensor_judges():
    module = TempSensor(hwmon="hwmon0", channel=2, label="Module0", kind="module", temperature_c=66.0, critical_c=70.0)
    asic = TempSensor(hwmon="hwmon0", channel=1, label="asic", kind="asic", temperature_c=61.0, critical_c=105.0)
    ib = with_hca(node(), "mlx5_2", temperatures=(asic, module))
    assert codes(ib) == [("warning", "optics.module.temperature", "mlx5_2:1")]  # within 5 of 70
    ib = with_hca(node(), "mlx5_2", temperatures=(asic.model_copy(update={"temperature_c": 105.0}), module.model_copy(update={"temperature_c": 70.0})))
    assert sorted(codes(ib)) == [("critical", "nic.temperature.high", "mlx5_2"), ("critical", "optics.module.temperature", "mlx5_2:1")]
    # a RoCE port whose module states thresholds is judged by them, not twice by hwmon
    both = with_hca(roce(module=hot(DR8, 74.0)), "mlx5_0", temperatures=(module.model_copy(update={"temperature_c": 74.0}),))
    assert codes(both) == [("warning", "optics.module.temperature", "mlx5_0:1")]


def _lanes(m: Transceiver, lane: int, watts: float) -> Transceiver:
    return m.model_copy(update={"lanes": tuple(x.model_copy(update={"rx_power_w": watts}) if x.lane == lane else x for x in m.lanes)})


def test_rx_power_below_the_modules_low_alarm_and_warning():
    low_alarm, low_warning = DR8.rx_power_thresholds.low_alarm, DR8.rx_power_thresholds.low_warning
    assert codes(roce(module=_lanes(DR8, 3, low_warning * 0.99))) == [("warning", "optics.rx_power.low", "mlx5_0:1")]
    f = one(run_checks(inp(roce(module=_lanes(DR8, 3, low_alarm / 2)))), "optics.rx_power.low")
    assert f.severity == "critical" and "lane 3 " in f.message and "dBm" in f.message
    assert codes(roce(module=_lanes(DR8, 3, low_alarm / 2), operstate="down")) == []  # a down link is ib.port.down's business


def test_dark_lanes_and_copper_are_not_judged():
    # the real QSFP28 above reads no light on any lane, with its lasers off (bias 0): not in use
    assert [x.tx_bias_a for x in MLXSW.lanes] == [0.0] * 4 and MLXSW.lanes_in_use == ()
    assert codes(roce(module=MLXSW)) == []
    aec = decode(paged(EEPROM / "cmis-osfp-aec-credo.txt"))
    assert codes(roce(module=aec)) == []
    dark = DR8.model_copy(update={"lanes": (ModuleLane(lane=1, rx_power_w=0.0, tx_bias_a=0.0),)})
    assert codes(roce(module=dark)) == []


def _fec(snap, t, corrected_bits=0, uncorr=0, corrected_blocks=0, downs=0, rx_bits=None):
    stats = {"rx_corrected_bits_phy": corrected_bits, **({"rx_bits_phy": rx_bits} if rx_bits is not None else {})}
    n = snap.netdev("eth0")
    return later(with_netdev(snap, "eth0", ethtool={**(n.ethtool or {}), **stats},
                             phy=PhyLink(link=True, link_down_events=downs, fec=FecStats(corrected_blocks=corrected_blocks, uncorrectable_blocks=uncorr))), t)


def test_fec_uncorrectable_pre_fec_ber_and_phy_link_downs():
    base = node(layer="Ethernet")
    then = _fec(base, 0)
    quiet = _fec(base, 600, corrected_bits=10**6)  # 1e6 bits in 600 s at 400 Gb/s: 4e-9
    assert codes(quiet, [then]) == []
    bad = _fec(base, 600, corrected_bits=10**10, uncorr=5, downs=1)  # 4.2e-5
    got = codes(bad, [then])
    assert ("warning", "optics.fec.pre_fec_ber", "mlx5_0:1") in got
    assert ("warning", "optics.fec.uncorrectable", "mlx5_0:1") in got
    assert ("warning", "optics.link.down_events", "mlx5_0:1") in got
    msg = one(run_checks(inp(bad, [then])), "optics.fec.pre_fec_ber").message
    assert "4.17e-05" in msg and "rx_corrected_bits_phy" in msg
    assert codes(bad, []) == []  # no history: no rate, never a guess


def test_pre_fec_ber_sources_in_order():
    base = node(layer="Ethernet")
    # received bits counted by the driver: the exact ratio, whatever the span
    est = pre_fec_ber([_fec(base, 0, rx_bits=0)], _fec(base, 10, corrected_bits=50, rx_bits=10**9), "eth0")
    assert est is not None and est.ber == pytest.approx(5e-8) and est.basis == "rx_corrected_bits_phy" and not est.lower_bound
    # only corrected blocks: a lower bound (at least one bit a block), over speed x time
    only_blocks = [later(with_netdev(base, "eth0", phy=PhyLink(fec=FecStats(corrected_blocks=b))), t) for b, t in ((0, 0), (4000, 10))]
    est = pre_fec_ber(only_blocks[:1], only_blocks[1], "eth0")
    assert est is not None and est.lower_bound and est.ber == pytest.approx(4000 / (400e9 * 10))
    assert pre_fec_ber([], base, "eth0") is None


def test_a_down_ethernet_port_names_the_phys_reason_and_its_remedy():
    s = with_port(roce(phy=PhyLink(link=False, ext_state="cable_issue", ext_substate="unsupported_cable"), operstate="down"), "mlx5_0", state="DOWN", phys="Polling")
    f = one(run_checks(inp(s)), "ib.port.down", "mlx5_0:1")
    assert "link-down reason cable_issue/unsupported_cable (the PHY)" in f.message
    assert "not supported" in f.remediation and "eth0" in f.remediation


def test_link_tool_effective_ber():
    diag = LinkDiag(tool="mstlink", effective_ber=3e-11, raw_ber=2e-6, recommendation="Bad signal integrity")
    s = with_port(node(), "mlx5_4", link_diag=diag)
    f = one(run_checks(inp(s)), "optics.link.effective_ber", "mlx5_4:1")
    assert f.severity == "warning" and "raw (pre-FEC) 2.0e-06" in f.message and "Bad signal integrity" in f.message
    assert codes(with_port(node(), "mlx5_4", link_diag=diag.model_copy(update={"effective_ber": 15e-255}))) == []


def test_symbol_errors_state_their_ber_proxy():
    from tests.support.check_snapshots import with_counters

    s0 = node()
    s1 = later(with_counters(s0, "mlx5_1", symbol_error=500), 600)
    f = one(run_checks(inp(s1, [s0])), "ib.counter.symbol_error")
    assert "a BER proxy of" in f.message and "at 400 Gb/s" in f.message


def test_healthy_sim_like_modules_are_quiet_and_thresholds_are_configurable():
    assert codes(roce(module=DR8)) == []
    tight = cfg(optics={"pre_fec_ber_max": 1e-10})
    base = node(layer="Ethernet")
    assert ("warning", "optics.fec.pre_fec_ber", "mlx5_0:1") in codes(_fec(base, 600, corrected_bits=10**6), [_fec(base, 0)], tight)
    assert only(run_checks(inp(base)), "optics.module.temperature") == [] and T0
