"""The simulator's physical layer (agentd.sim.optics): what a collection reads from it, the
module EEPROM its encoder writes read back by the decoder that reads real modules, and its
four fault kinds as the model sees them."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd import sim
from agentd.base.sff import PAGE_SIZE, Cmis
from agentd.collection.collector import collect_once
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot
from agentd.host.transceiver import decode
from agentd.model import NodeSnapshot
from agentd.sim import optics as so
from agentd.sim.effects_optics import EXT_STATES


def collect(root: Path) -> NodeSnapshot:
    return collect_once(HostRoot.at(root), AgentConfig(host_root=root))


@pytest.fixture
def roce(tmp_path: Path) -> Path:
    return sim.build_tree("h100-roce", tmp_path / "root")


def test_the_encoded_module_decodes_to_what_was_written():
    lanes = [(0.0005, 0.0011, 0.05), (0.0004, 0.001, 0.049), (0.0003, 0.0009, 0.048), (0.0002, 0.0008, 0.047)] + [(0.0, 0.0, 0.0)] * 4
    m = decode(so.cmis_pages("SN123", temp_c=47.5, lanes=lanes, rx_flags={"low_warning": 0b1000}), "recorded")
    assert (m.identifier_name, m.spec, m.revision) == ("OSFP", "cmis", "5.0")
    assert (m.vendor, m.part_number, m.vendor_revision, m.serial, m.oui) == (so.VENDOR, so.PART, so.REVISION, "SN123", "00:02:c9")
    assert m.temperature_c == 47.5 and m.vcc_v == pytest.approx(so.MODULE_VCC_V, abs=1e-4)
    assert [lane.lane for lane in m.lanes_in_use] == [1, 2, 3, 4]
    for lane, (rx, tx, bias) in zip(m.lanes, lanes):
        assert lane.rx_power_w == pytest.approx(rx, abs=1e-7) and lane.tx_power_w == pytest.approx(tx, abs=1e-7)
        assert lane.tx_bias_a == pytest.approx(bias, abs=2e-6)
    assert m.lanes[3].rx_power_flags == ("low_warning",) and not m.lanes[0].rx_power_flags
    for field, key in (("temperature_thresholds", "temp"), ("vcc_thresholds", "vcc"), ("rx_power_thresholds", "rx_power"),
                       ("tx_power_thresholds", "tx_power"), ("tx_bias_thresholds", "tx_bias")):
        th = getattr(m, field)
        want = so.THRESHOLDS[key]
        got = (th.high_alarm, th.low_alarm, th.high_warning, th.low_warning)
        assert got == pytest.approx(want, rel=1e-3, abs=1e-7), field
    assert m.problem is None


@pytest.mark.tree
def test_a_collection_reads_sensors_modules_and_phys(roce: Path):
    snap = collect(roce)
    for h in snap.hcas:
        assert [(t.label, t.kind, t.temperature_c, t.critical_c) for t in h.temperatures] == [
            ("asic", "asic", so.ASIC_C, so.ASIC_CRIT_C), ("Module0", "module", so.MODULE_C, so.MODULE_CRIT_C)]
    hcas = {h.name: h for h in sim.PROFILES["h100-roce"].hcas}
    ethernet = [n for n in snap.netdevs if n.module is not None]
    assert ethernet and all(n.phy is not None for n in ethernet)
    for n in ethernet:
        hca = next(h for h in hcas.values() if h.netdev == n.name)
        assert n.module is not None and n.module.serial == so.serial_of(hca) and n.module.temperature_c == so.MODULE_C
        assert len(n.module.lanes_in_use) == so.LANES_USED
        assert n.phy is not None and n.phy.link and n.phy.link_down_events == so.LINK_DOWN_EVENTS
        assert n.phy.fec is not None and (n.phy.fec.corrected_blocks, n.phy.fec.uncorrectable_blocks) == (so.FEC_CORRECTED, 0)
    optics = next(p for p in snap.probes if p.name == "optics")
    assert optics.ok and optics.files_read > 0


@pytest.mark.tree
def test_faults_show_in_the_model_and_clear(roce: Path):
    before = collect(roce)
    nd = next(n for n in before.netdevs if n.module is not None).name
    sim.apply_fault(roce, f"module_hot@{nd}=80")
    sim.apply_fault(roce, f"rx_power_low@{nd}=2")
    sim.apply_fault(roce, f"link_down_reason@{nd}=overheat")
    sim.apply_fault(roce, f"fec_errors@{nd}")
    during = collect(roce)
    n = next(x for x in during.netdevs if x.name == nd)
    assert n.module is not None and n.module.temperature_c == 80 and n.module.temperature_flags == ("high_alarm", "high_warning")
    assert n.module.lanes[1].rx_power_w is not None and n.module.lanes[1].rx_power_w < so.THRESHOLDS["rx_power"][1]
    assert n.module.lanes[1].rx_power_flags == ("low_alarm", "low_warning")
    assert n.phy is not None and n.phy.link is False and n.phy.ext_state == "overheat" and EXT_STATES.index("overheat") == 9
    assert n.phy.link_down_events == so.LINK_DOWN_EVENTS + 1
    assert n.phy.fec is not None and n.phy.fec.uncorrectable_blocks == 1000 and (n.ethtool or {})["rx_corrected_bits_phy"] >= 10**12
    hca = next(h for h in during.hcas if any(p.netdev == nd for p in h.ports))
    assert [t.temperature_c for t in hca.temperatures if t.kind == "module"] == [80]
    for spec in ("module_hot", "rx_power_low", "link_down_reason", "fec_errors"):
        sim.clear_fault(roce, f"{spec}@{nd}")
    after = next(x for x in collect(roce).netdevs if x.name == nd)
    was = next(x for x in before.netdevs if x.name == nd)
    assert after.module == was.module  # the pages are back
    assert after.phy is not None and after.phy.link and after.phy.ext_state is None
    assert after.phy.link_down_events == so.LINK_DOWN_EVENTS + 1  # counters stay advanced, as on a real node
    assert after.phy.fec is not None and after.phy.fec.uncorrectable_blocks == 1000


@pytest.mark.tree
def test_module_faults_need_what_they_change(tmp_path: Path):
    ib = sim.build_tree("h100-ib", tmp_path / "ib")
    sim.apply_fault(ib, "module_hot@mlx5_0")  # the hwmon module sensor: any HCA
    assert (ib / so.hwmon_dir(sim.build.pci_layout(sim.PROFILES["h100-ib"]), sim.PROFILES["h100-ib"].hcas[0], 0) / "temp2_input").read_text().strip() == "78000"
    with pytest.raises(ValueError, match="RoCE"):
        sim.apply_fault(sim.build_tree("pcie-4gpu", tmp_path / "p"), "rx_power_low")


def test_the_pages_keep_their_layout():
    pages = so.cmis_pages("X")
    assert set(pages) == {(0, 0, 0), (0, 0, PAGE_SIZE), (1, 0, PAGE_SIZE), (2, 0, PAGE_SIZE), (Cmis.LANE_PAGE, 0, PAGE_SIZE)}
    assert all(len(v) == PAGE_SIZE for v in pages.values())
    assert so.pages_of(so.module_answer(pages)) == pages


# ---------------------------------------------------------------------------
# a 100 GbE port's QSFP28 (SFF-8636): the storage NICs


def test_the_qsfp28_has_the_real_modules_identity_and_thresholds():
    """The simulated QSFP28 decodes, through the decoder of real modules, to the identity
    and thresholds of the real Mellanox module dumped in tests/fixtures/eeprom/, with the
    serial and live lane values the simulator gives it."""
    from tests.support.eeprom_dumps import EEPROM, flat_bytes, pages_of_flat

    real = decode(pages_of_flat(flat_bytes(EEPROM / "sff8636-qsfp28-mlxsw-netdev-2019.txt")), "ioctl")
    lanes = [(0.0008, 0.0009, 0.007), (0.0007, 0.00085, 0.0069), (0.0006, 0.0008, 0.0068), (0.0005, 0.00075, 0.0067)]
    m = decode(so.sff8636_pages("SN9", temp_c=41.5, lanes=lanes, rx_flags={"low_warning": 0b1000, "high_alarm": 0b0001}), "recorded")
    assert (m.spec, m.identifier_name) == ("sff8636", "QSFP28") and m.problem is None
    keep = ("identifier", "vendor", "oui", "part_number", "vendor_revision", "date_code", "copper", "temperature_thresholds",
            "vcc_thresholds", "rx_power_thresholds", "tx_power_thresholds", "tx_bias_thresholds")
    assert m.model_dump(include=set(keep)) == real.model_dump(include=set(keep))
    assert (m.serial, m.temperature_c) == ("SN9", 41.5) and m.vcc_v == pytest.approx(so.QSFP28_VCC_V, abs=1e-4)
    assert [lane.lane for lane in m.lanes_in_use] == [1, 2, 3, 4]
    for lane, (rx, tx, bias) in zip(m.lanes, lanes):
        assert lane.rx_power_w == pytest.approx(rx, abs=1e-7) and lane.tx_power_w == pytest.approx(tx, abs=1e-7)
        assert lane.tx_bias_a == pytest.approx(bias, abs=2e-6)
    assert [lane.rx_power_flags for lane in m.lanes] == [("high_alarm",), (), (), ("low_warning",)]


@pytest.mark.tree
def test_storage_nics_carry_a_qsfp28_and_its_faults_edit_it(tmp_path: Path):
    ib = sim.build_tree("h100-ib", tmp_path / "ib")
    storage = [h for h in sim.PROFILES["h100-ib"].hcas if h.link_layer == "Ethernet"]
    assert storage and all(h.rate.startswith("100 ") for h in storage)
    before = collect(ib)
    nd = storage[0].netdev
    was = next(n for n in before.netdevs if n.name == nd).module
    assert was is not None and (was.spec, was.part_number, len(was.lanes_in_use)) == ("sff8636", so.QSFP28_PART, 4)
    sim.apply_fault(ib, f"module_hot@{nd}=82")
    sim.apply_fault(ib, f"rx_power_low@{nd}=3")
    m = next(n for n in collect(ib).netdevs if n.name == nd).module
    assert m is not None and m.temperature_c == 82 and m.temperature_flags == ("high_alarm", "high_warning")
    assert m.lanes[2].rx_power_w is not None and m.lanes[2].rx_power_w < so.QSFP28_THRESHOLDS["rx_power"][1]
    assert [lane.rx_power_flags for lane in m.lanes] == [(), (), ("low_alarm", "low_warning"), ()]
    for spec in ("module_hot", "rx_power_low"):
        sim.clear_fault(ib, f"{spec}@{nd}")
    assert next(n for n in collect(ib).netdevs if n.name == nd).module == was
