"""The physical-layer metrics (agentd.metrics.optics): the node's hottest sensor and module
and per port the BER's counters at the defaults (series budget); every sensor, module, lane
and threshold with ``[metrics] optics_detail``; a module read from a real EEPROM dump (tests/fixtures/eeprom/)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from agentd.config import AgentConfig
from agentd.host.transceiver import decode
from agentd.model import FecStats, LinkDiag, NodeSnapshot, PhyLink, TempSensor, Transceiver
from tests.support import service_snapshots as fixtures
from tests.support.eeprom_dumps import EEPROM, paged
from tests.support.service_snapshots import parse, pick

DR8 = decode(paged(EEPROM / "cmis-osfp-800g-dr8-juniper.txt"), "recorded")
SENSORS = (TempSensor(hwmon="hwmon3", channel=1, label="asic", kind="asic", temperature_c=61.5, highest_c=70.0, critical_c=105.0),
           TempSensor(hwmon="hwmon3", channel=2, label="Module0", kind="module", temperature_c=48.0, critical_c=75.0))


def optics(*, module: Transceiver | None = DR8, phy: PhyLink | None = None, diag: LinkDiag | None = None) -> NodeSnapshot:
    snap = fixtures.snapshot()
    hcas = tuple(h.model_copy(update={"temperatures": SENSORS,
                                      "ports": tuple(p.model_copy(update={"link_diag": diag}) for p in h.ports)}) if h.name == "mlx5_0" else h
                 for h in snap.hcas)
    phy = phy or PhyLink(link=False, ext_state="link_training_failure", ext_substate="kr_fec_not_supported", link_down_events=4,
                         fec=FecStats(corrected_blocks=1200, uncorrectable_blocks=3, corrected_bits=5000))
    netdevs = tuple(n.model_copy(update={"module": module, "phy": phy}) if n.name == "ens1np0" else n for n in snap.netdevs)
    return snap.model_copy(update={"hcas": hcas, "netdevs": netdevs})


def render(snap: NodeSnapshot, **metrics: bool) -> bytes:
    return fixtures.state(snap=snap, config=AgentConfig(metrics=metrics)).metrics_bytes()


def test_defaults_fold_temperatures_to_the_node_and_keep_the_ber_per_port():
    s = parse(render(optics()))
    assert s["agentd_nic_temperature_max_celsius"] == [({}, 61.5)]  # the ASIC sensor, not the module's
    assert s["agentd_transceiver_temperature_max_celsius"] == [({}, max(48.0, DR8.temperature_c or 0))]
    lit = [lane.rx_power_w for lane in DR8.lanes_in_use if lane.rx_power_w is not None]
    assert pick(s, "agentd_transceiver_rx_power_min_watts", netdev="ens1np0") == [min(lit)]
    assert [lab for lab, _ in s["agentd_netdev_link_down_reason_info"]] == [
        {"netdev": "ens1np0", "reason": "link_training_failure", "substate": "kr_fec_not_supported"}]
    assert pick(s, "agentd_netdev_fec_uncorrectable_blocks_total", netdev="ens1np0") == [3]
    assert pick(s, "agentd_netdev_phy_corrected_bit_errors_total", netdev="ens1np0") == [5000]
    for detail in ("agentd_nic_temperature_celsius", "agentd_transceiver_info", "agentd_transceiver_temperature_celsius",
                   "agentd_transceiver_lane_rx_power_watts", "agentd_transceiver_temperature_threshold_celsius",
                   "agentd_nic_temperature_critical_celsius", "agentd_transceiver_supply_voltage_volts",
                   "agentd_netdev_link_down_events_total", "agentd_netdev_fec_corrected_blocks_total"):
        assert detail not in s


def test_detail_adds_sensors_modules_lanes_thresholds_and_link_downs():
    text = render(optics(), optics_detail=True)
    s = parse(text)
    assert pick(s, "agentd_nic_temperature_celsius", device="mlx5_0", sensor="asic") == [61.5]
    assert pick(s, "agentd_nic_temperature_celsius", device="mlx5_0", sensor="Module0") == [48.0]
    assert pick(s, "agentd_nic_temperature_critical_celsius", sensor="asic") == [105.0]
    assert pick(s, "agentd_nic_temperature_highest_celsius", sensor="asic") == [70.0]
    info = [lab for lab, _ in s["agentd_transceiver_info"]]
    assert info == [{"netdev": "ens1np0", "identifier": DR8.identifier_name, "spec": "cmis", "vendor": DR8.vendor,
                     "part_number": DR8.part_number, "revision": DR8.vendor_revision}]
    assert DR8.serial and DR8.serial not in text.decode()  # the serial is never a label
    assert pick(s, "agentd_transceiver_temperature_celsius", netdev="ens1np0") == [DR8.temperature_c]
    assert pick(s, "agentd_transceiver_supply_voltage_volts") == [DR8.vcc_v]
    lanes = {lab["lane"] for lab, _ in s["agentd_transceiver_lane_rx_power_watts"]}
    assert lanes == {str(lane.lane) for lane in DR8.lanes if lane.rx_power_w is not None} and len(lanes) == 8
    th = DR8.temperature_thresholds
    assert th is not None
    assert pick(s, "agentd_transceiver_temperature_threshold_celsius", level="high_alarm") == [th.high_alarm]
    assert pick(s, "agentd_transceiver_temperature_threshold_celsius", level="high_warning") == [th.high_warning]
    assert pick(s, "agentd_netdev_link_down_events_total", netdev="ens1np0") == [4]
    assert pick(s, "agentd_netdev_fec_corrected_blocks_total", netdev="ens1np0") == [1200]
    # the folds agree with the detail
    assert s["agentd_nic_temperature_max_celsius"] == [({}, 61.5)]
    in_use = {lane.lane for lane in DR8.lanes_in_use}
    assert pick(s, "agentd_transceiver_rx_power_min_watts") == [min(v for lab, v in s["agentd_transceiver_lane_rx_power_watts"] if int(lab["lane"]) in in_use)]


def test_an_empty_cage_or_silent_module_and_an_up_link_export_no_module_or_reason():
    s = parse(render(optics(module=Transceiver(), phy=PhyLink(link=True, link_down_events=0)), optics_detail=True))
    assert "agentd_transceiver_info" not in s and "agentd_transceiver_temperature_celsius" not in s
    assert s["agentd_transceiver_temperature_max_celsius"] == [({}, 48.0)]  # the HCA's module sensor still reads
    assert "agentd_netdev_link_down_reason_info" not in s
    assert pick(s, "agentd_netdev_link_down_events_total", netdev="ens1np0") == [0]
    assert "agentd_netdev_fec_corrected_blocks_total" not in s  # no FEC statistics: no series, not 0


def test_the_link_tool_bers_of_infiniband_ports():
    s = parse(render(optics(diag=LinkDiag(tool="mlxlink", effective_ber=1.5e-254, raw_ber=3e-9, module_temperature_c=66.0))))
    assert s["agentd_transceiver_temperature_max_celsius"] == [({}, 66.0)]  # an IB module, through the tool
    assert pick(s, "agentd_ib_port_effective_ber", device="mlx5_0", port="1") == [1.5e-254]
    assert pick(s, "agentd_ib_port_raw_ber", device="mlx5_0", port="1") == [3e-9]
    assert "agentd_ib_port_raw_ber" not in parse(render(optics()))


@pytest.mark.proc
@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package 'prometheus'; CI installs it)")
def test_promtool_check_metrics_is_clean_with_every_optics_series():
    text = render(optics(diag=LinkDiag(tool="mstlink", effective_ber=1e-15, raw_ber=1e-9)), optics_detail=True)
    res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert res.returncode == 0 and not (res.stdout + res.stderr).strip(), (res.stdout + res.stderr).decode()
