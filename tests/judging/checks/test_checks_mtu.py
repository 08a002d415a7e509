"""mtu.mismatch and mtu.ipoib."""

from __future__ import annotations

import pytest

from agentd.judging.checks.mtu import check_mtu
from agentd.judging.expected import expected_values
from agentd.judging.roles import hca_roles
from tests.support.check_snapshots import cfg, inp, node, one, only, problems, with_netdev


def test_healthy_roce_node_matches_9000():
    assert check_mtu(inp(node(layer="Ethernet"))) == []


def test_roce_mtu_changed_is_critical_and_clears():
    s = with_netdev(node(layer="Ethernet"), "eth5", mtu=1500)
    f = one(check_mtu(inp(s)), "mtu.mismatch", "eth5")
    assert f.severity == "critical" and f.measured == 1500 and f.expected == 9000
    assert "mlx5_5:1" in f.message and "other RoCE compute netdevs: 9000" in f.message
    assert check_mtu(inp(with_netdev(s, "eth5", mtu=9000))) == []


def test_configured_roce_mtu():
    s = node(layer="Ethernet")
    assert len(only(check_mtu(inp(s, config=cfg(expect={"roce_mtu": 4200}))), "mtu.mismatch")) == 8
    s4200 = s
    for i in range(8):
        s4200 = with_netdev(s4200, f"eth{i}", mtu=4200)
    assert check_mtu(inp(s4200, config=cfg(expect={"roce_mtu": 4200}))) == []


def test_non_compute_roce_netdev_not_judged():
    # stor0 (storage BlueField) runs MTU 1500 in the builder
    assert problems(check_mtu(inp(node(layer="Ethernet")))) == []


def test_ipoib_reported_not_judged_by_default():
    f = check_mtu(inp(node()))
    assert problems(f) == []
    assert one(f, "mtu.ipoib", "ib0").measured == 4092


def test_ipoib_judged_when_configured():
    s = with_netdev(node(), "ib2", mtu=2044)
    f = check_mtu(inp(s, config=cfg(expect={"ipoib_mtu": 4092})))
    assert problems(f) == [("warning", "mtu.mismatch", "ib2")]
    assert only(f, "mtu.ipoib") and all(x.subject != "ib2" for x in only(f, "mtu.ipoib"))


def test_unknown_mtu_not_judged():
    s = with_netdev(node(layer="Ethernet"), "eth1", mtu=None)
    assert check_mtu(inp(s)) == []


# One MTU rule (mtu_rules) for the check and the exported expected values: every netdev
# with an expected MTU is judged against exactly that value, and no other netdev is.
@pytest.mark.parametrize("layer", ["Ethernet", "InfiniBand"])
@pytest.mark.parametrize("expect", [{}, {"roce_mtu": 4200}, {"ipoib_mtu": 2044}, {"roce_mtu": 1500, "ipoib_mtu": 4092}])
def test_check_and_expected_values_hold_the_same_netdevs_to_the_same_mtu(layer, expect):
    config = cfg(expect=expect)
    base = node(layer=layer)
    expected = expected_values(base, hca_roles(base, config.hca), config).netdev_mtu
    assert expected or layer == "InfiniBand" and "ipoib_mtu" not in expect
    for nd in base.netdevs:
        mtu = expected.get(nd.name)
        for value in ([mtu, mtu + 8] if mtu is not None else [576, 9000, 65520]):
            mismatched = {f.subject for f in only(check_mtu(inp(with_netdev(base, nd.name, mtu=value), config=config)), "mtu.mismatch")}
            assert (nd.name in mismatched) == (mtu is not None and value != mtu), (nd.name, value, mtu)
