"""ConnectX firmware that changes what congestion-control readings mean (issue 36):
congestion control applied globally from 22.45.1020/28.45.1020 (release notes issue
4394475), CNP counters not counting in Programmable CC mode from 28.36.1010 (3327847)."""

from __future__ import annotations

import pytest

from agentd.judging.checks import run_checks
from agentd.judging.nic_firmware import cc_global, cnp_note, parse_fw
from agentd.model import RoceEcn
from tests.support.check_snapshots import ROCE_HW_ZERO, inp, later, node, only, with_hca, with_netdev, with_port

ONLY_PRIO_3 = RoceEcn(np={p: p == 3 for p in range(8)}, rp={p: p == 3 for p in range(8)})
PRIO_3_OFF = RoceEcn(np={p: p != 3 for p in range(8)}, rp={p: p != 3 for p in range(8)})
ALL_OFF = RoceEcn(np=dict.fromkeys(range(8), False), rp=dict.fromkeys(range(8), False))


def _roce(fw: str, ecn: RoceEcn):
    s = with_hca(node(layer="Ethernet"), "mlx5_0", fw_ver=fw)
    return with_netdev(s, "eth0", ecn=ecn)


@pytest.mark.parametrize("fw,expected", [("28.45.1020", True), ("28.47.1088 (MT_0000000838)", True), ("22.45.1020", True),
                                         ("28.44.1036", False), ("28.39.1002", False), ("20.45.1020", False), (None, False)])
def test_which_firmware_applies_congestion_control_globally(fw, expected):
    hca = node().hca("mlx5_0").model_copy(update={"fw_ver": fw})
    assert (cc_global(hca) is not None) == expected


def test_parse_fw():
    assert parse_fw("28.45.1020") == (28, 45, 1020) and parse_fw("garbage") is None


def test_per_priority_ecn_is_judged_where_the_firmware_honours_it():
    found = run_checks(inp(_roce("28.44.1036", PRIO_3_OFF)))
    assert [(f.code, f.severity) for f in only(found, "roce.ecn.disabled")] == [("roce.ecn.disabled", "critical")]
    assert only(found, "roce.ecn.not_uniform") == []


def test_mixed_switches_on_global_cc_firmware_stand_down_with_the_reason():
    for ecn in (PRIO_3_OFF, ONLY_PRIO_3):
        found = run_checks(inp(_roce("28.45.1020", ecn)))
        assert only(found, "roce.ecn.disabled") == []
        f = only(found, "roce.ecn.not_uniform")
        assert [(x.severity, x.subject) for x in f] == [("warning", "eth0")]
        assert "28.45.1020 applies congestion control to every priority alike" in f[0].message


def test_uniform_switches_on_global_cc_firmware_are_judged():
    found = run_checks(inp(_roce("28.45.1020", ALL_OFF)))
    assert [f.severity for f in only(found, "roce.ecn.disabled")] == ["critical"]
    assert only(found, "roce.ecn.not_uniform") == []


def test_the_cnp_rate_says_when_cnps_may_not_be_counted():
    s0 = with_port(with_hca(node(layer="Ethernet"), "mlx5_0", fw_ver="28.39.1002"), "mlx5_0", hw_counters=dict(ROCE_HW_ZERO))
    s1 = with_port(later(s0, 30), "mlx5_0", hw_counters={**ROCE_HW_ZERO, "np_ecn_marked_roce_packets": 3000})
    f = only(run_checks(inp(s1, [s0])), "roce.cnp.rate")
    assert len(f) == 1 and "Programmable Congestion Control" in f[0].message
    assert cnp_note(s0.hca("mlx5_0")) is not None
    assert cnp_note(s0.hca("mlx5_0").model_copy(update={"fw_ver": "28.35.1012"})) is None
