"""Simulator, issue 17: the RoCE QoS chain's inputs in a fault-free tree (OFED tc files,
versions, etc/nccl.conf, VBIOS) and the faults that break the chain, each cleared back
to the fault-free bytes."""

from __future__ import annotations

import json
import os

import pytest

from agentd import sim
from agentd.base.recorded import format_mlnx_qos
from agentd.sim.build import pristine_root
from agentd.sim.faults import advancing_paths
from agentd.sim.net import parse_ethtool, parse_mlnx_qos
from agentd.sim.tree import snapshot_tree
from tests.support.fixtures import OUTPUTS

ROCE = "h100-roce"


@pytest.fixture()
def roce(tmp_path):
    return sim.build_tree(ROCE, tmp_path / "n")


# ---------------------------------------------------------------------------
# the fault-free tree


@pytest.mark.parametrize("name", sorted(sim.PROFILES))
def test_every_hca_has_an_empty_ofed_tc_file_under_its_pci_function(name):
    root = pristine_root(name)
    profile = sim.PROFILES[name]
    for hca in profile.hcas:
        tc = root / f"sys/class/infiniband/{hca.name}/tc/1/traffic_class"
        assert tc.read_bytes() == b"", hca.name  # OFED installed, nothing set
        real = os.path.realpath(tc)
        assert real.startswith(os.path.realpath(root / f"sys/bus/pci/devices/{hca.bdf}") + "/infiniband/"), real
        assert (root / f"sys/class/infiniband/{hca.name}/ports/1/sm_sl").read_text() == "0\n"


@pytest.mark.parametrize("name,triplet", [("h100-ib", "x86_64"), ("h100-roce", "x86_64"), ("pcie-4gpu", "x86_64"), ("gb200-nvl", "aarch64")])
def test_software_versions_in_the_tree(name, triplet):
    root = pristine_root(name)
    assert (root / "sys/module/mlx5_core/version").read_text() == "5.8-4.1.5\n"
    lib = root / f"usr/lib/{triplet}-linux-gnu"
    assert os.readlink(lib / "libibverbs.so.1") == "libibverbs.so.1.14.50.0"
    assert (lib / "libibverbs.so.1").resolve().is_file() and (lib / "libibverbs.so.1").read_bytes().startswith(b"\x7fELF")
    assert not (root / "sys/module/mlx5_ib/version").exists()  # only mlx5_core carries OFED's version


@pytest.mark.parametrize("name,vbios", [("h100-ib", "96.00.74.00.0D"), ("h100-roce", "96.00.74.00.0D"), ("pcie-4gpu", None), ("gb200-nvl", None)])
def test_vbios_only_where_a_real_value_is_known(name, vbios):
    gpus = json.loads((pristine_root(name) / ".agentd/nvml.json").read_text())["gpus"]
    assert gpus and all(g.get("vbios_version") == vbios for g in gpus)
    assert all(("vbios_version" in g) == (vbios is not None) for g in gpus)


@pytest.mark.parametrize("name", sorted(sim.PROFILES))
def test_nccl_conf_on_roce_profiles_marks_the_lossless_priority(name):
    root = pristine_root(name)
    conf = root / "etc/nccl.conf"
    profile = sim.PROFILES[name]
    if name != ROCE:
        assert not conf.exists()
        return
    lines = conf.read_text().splitlines()
    assert lines[0].startswith("#") and lines[1:] == ["NCCL_IB_TC=106"]
    dscp = 106 >> 2
    for netdev in profile.roce_netdevs:  # trust dscp, the default map: DSCP 26 -> priority 3, PFC on it
        qos = parse_mlnx_qos((root / f".agentd/dcb/{netdev}").read_text())
        assert qos.trust == "dscp" and qos.dscp2prio is not None
        assert qos.dscp2prio[dscp] == profile.roce_priority == 3 and qos.pfc == (3,)


# ---------------------------------------------------------------------------
# mlnx_qos text


def test_default_mlnx_qos_text_is_the_real_sample():
    assert format_mlnx_qos((3,)) == (OUTPUTS / "mlnx_qos.eth4-roce-trust-dscp-pfc3.txt").read_text()


def test_changed_dscp_map_is_printed_as_mlnx_qos_prints_it():
    # mlnx_qos (Mellanox/mlnx-tools dcbnetlink.py printAppSelector): the DSCPs of each
    # priority in app-table order, 8 a row, more on another row of the same priority;
    # a set entry is listed first (the kernel adds it at the head of the list)
    table = {30: 6, **{d: d >> 3 for d in range(63, -1, -1) if d != 30}}
    text = format_mlnx_qos((3,), "dscp", table)
    assert "        prio:3 dscp:31,29,28,27,26,25,24,\n" in text
    assert "        prio:6 dscp:30,55,54,53,52,51,50,49,\n        prio:6 dscp:48,\n" in text
    assert parse_mlnx_qos(text).dscp2prio == table
    assert "prio:" not in format_mlnx_qos((3,), "pcp", table)  # trust pcp: no table
    only_low = format_mlnx_qos((), "dscp", {d: 0 for d in range(7, -1, -1)})
    assert "prio:0 dscp:07,06,05,04,03,02,01,00,\n" in only_low and "prio:1" not in only_low  # no row for an unused priority


# ---------------------------------------------------------------------------
# faults


def _dcb(root, netdev="ens1np0"):
    return parse_mlnx_qos((root / f".agentd/dcb/{netdev}").read_text())


@pytest.mark.tree
def test_tclass_override(roce):
    tc = roce / "sys/class/infiniband/mlx5_2/tc/1/traffic_class"
    assert sim.apply_fault(roce, "tclass_override@ens3np0").spec == "tclass_override@ens3np0=0"
    assert tc.read_text() == "Global tclass=0\n"
    sim.apply_fault(roce, "tclass_override@mlx5_2=106")
    assert tc.read_text() == "Global tclass=106\n"
    assert (roce / "sys/class/infiniband/mlx5_0/tc/1/traffic_class").read_bytes() == b""
    sim.clear_fault(roce, "tclass_override@ens3np0")
    assert tc.read_bytes() == b"" and sim.applied_faults(roce) == []


@pytest.mark.tree
def test_trust_pcp_keeps_pfc_and_drops_the_table(roce):
    sim.apply_fault(roce, "trust_pcp@ens2np0")
    text = (roce / ".agentd/dcb/ens2np0").read_text()
    assert "Priority trust state: pcp\n" in text and "dscp2prio" not in text
    assert _dcb(roce, "ens2np0").pfc == (3,) and _dcb(roce, "ens1np0").trust == "dscp"


@pytest.mark.tree
def test_dscp_map_lossy_moves_the_roce_dscp(roce):
    assert sim.apply_fault(roce, "dscp_map_lossy").spec == "dscp_map_lossy@ens1np0=0"
    q = _dcb(roce)
    assert q.trust == "dscp" and q.pfc == (3,) and q.dscp2prio is not None
    assert q.dscp2prio[26] == 0 and all(q.dscp2prio[d] == d >> 3 for d in range(64) if d != 26)
    sim.clear_fault(roce, "dscp_map_lossy")
    sim.apply_fault(roce, "dscp_map_lossy@ens1np0=5")
    assert _dcb(roce).dscp2prio[26] == 5  # type: ignore[index]
    with pytest.raises(ValueError, match="is the profile's RoCE priority"):
        sim.apply_fault(roce, "dscp_map_lossy=3")


@pytest.mark.tree
def test_qos_faults_on_one_netdev_compose(roce):
    sim.apply_fault(roce, "dscp_map_lossy=1")
    sim.apply_fault(roce, "pfc_off")
    q = _dcb(roce)
    assert q.pfc == () and q.dscp2prio is not None and q.dscp2prio[26] == 1  # pfc_off kept the map
    sim.apply_fault(roce, "trust_pcp")
    assert _dcb(roce).pfc == () and _dcb(roce).trust == "pcp"


@pytest.mark.tree
def test_nccl_tc_mismatch(roce, tmp_path):
    assert sim.apply_fault(roce, "nccl_tc_mismatch").spec == "nccl_tc_mismatch=0"
    lines = (roce / "etc/nccl.conf").read_text().splitlines()
    assert lines[0].startswith("#") and lines[1:] == ["NCCL_IB_TC=0"]
    sim.apply_fault(roce, "nccl_tc_mismatch=96")
    assert (roce / "etc/nccl.conf").read_text().splitlines()[1:] == ["NCCL_IB_TC=96"]
    sim.clear_fault(roce, "nccl_tc_mismatch")
    assert (roce / "etc/nccl.conf").read_bytes() == (pristine_root(ROCE) / "etc/nccl.conf").read_bytes()
    ib = sim.build_tree("h100-ib", tmp_path / "ib", faults=["nccl_tc_mismatch=106"])
    assert (ib / "etc/nccl.conf").read_text() == "NCCL_IB_TC=106\n"
    sim.clear_fault(ib, "nccl_tc_mismatch")
    assert not (ib / "etc").exists()


@pytest.mark.tree
def test_roce_lossy_traffic_advances_and_stays_advanced(roce):
    stats = lambda: parse_ethtool((roce / ".agentd/ethtool/ens4np0").read_text())  # noqa: E731
    xmit = roce / "sys/class/infiniband/mlx5_3/ports/1/counters/port_xmit_data"
    before, words = stats(), int(xmit.read_text())
    assert sim.apply_fault(roce, "roce_lossy_traffic@ens4np0").spec == "roce_lossy_traffic@ens4np0=100000000000"
    sim.apply_fault(roce, "roce_lossy_traffic@mlx5_3=4000")  # applying again adds more
    after = stats()
    n = 10**11 + 4000
    assert after["tx_prio0_bytes"] - before["tx_prio0_bytes"] == n
    assert after["tx_vport_rdma_unicast_bytes"] - before["tx_vport_rdma_unicast_bytes"] == n
    assert int(xmit.read_text()) - words == n // 4
    assert {k: v for k, v in after.items() if k not in ("tx_prio0_bytes", "tx_vport_rdma_unicast_bytes")} == {
        k: v for k, v in before.items() if k not in ("tx_prio0_bytes", "tx_vport_rdma_unicast_bytes")}
    sim.clear_fault(roce, "roce_lossy_traffic@ens4np0")
    assert sim.applied_faults(roce) == [] and stats() == after  # counters do not go back


@pytest.mark.tree
def test_all_qos_faults_clear_byte_for_byte(roce):
    before = snapshot_tree(roce)
    specs = ["tclass_override@ens1np0=106", "trust_pcp@ens2np0", "dscp_map_lossy@ens3np0=0", "pfc_off@ens3np0",
             "nccl_tc_mismatch=0", "roce_lossy_traffic@ens5np0"]
    for spec in specs:
        sim.apply_fault(roce, spec)
    during = snapshot_tree(roce)
    changed = {k for k in before if before[k] != during.get(k)}
    assert {"etc/nccl.conf", ".agentd/dcb/ens2np0", ".agentd/dcb/ens3np0", ".agentd/ethtool/ens5np0"} <= changed
    advanced = set(advancing_paths(roce, "roce_lossy_traffic@ens5np0"))
    for spec in reversed(specs):
        sim.clear_fault(roce, spec)
    after = snapshot_tree(roce)
    diff = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)} - {".agentd/simulation.json"}
    assert diff == advanced and sim.applied_faults(roce) == []


@pytest.mark.tree
@pytest.mark.parametrize("spec", ["tclass_override", "trust_pcp", "dscp_map_lossy", "roce_lossy_traffic"])
def test_roce_kinds_need_a_roce_netdev(tmp_path, spec):
    with pytest.raises(ValueError, match="no RoCE"):
        sim.build_tree("pcie-4gpu", tmp_path / "n", faults=[spec])


@pytest.mark.parametrize("spec", ["tclass_override=256", "dscp_map_lossy=8", "nccl_tc_mismatch=-1", "roce_lossy_traffic=0", "trust_pcp=1"])
def test_bad_qos_values_are_refused(spec):
    with pytest.raises(ValueError, match="bad fault spec"):
        sim.parse_fault(spec)
