"""roce.ecn.disabled, roce.pfc.disabled, roce.pfc.pause_storm, roce.cnp.rate."""

from __future__ import annotations

from agentd.judging.checks.roce import check_roce
from agentd.model import Netdev, PfcConfig, RoceEcn
from tests.support.check_snapshots import (
    cfg,
    inp,
    later,
    node,
    one,
    only,
    problems,
    with_counters,
    with_ethtool,
    with_netdev,
    with_port,
)


def roce():
    return node(layer="Ethernet")


def test_healthy_roce_node_no_problems():
    s = roce()
    assert check_roce(inp(later(s, 10), [s])) == []


def test_ib_node_not_judged():
    assert check_roce(inp(node())) == []


def test_ecn_disabled_on_rp_is_critical_and_clears():
    s = with_netdev(roce(), "eth4", ecn=RoceEcn(np={3: True}, rp={3: False}))
    f = one(check_roce(inp(s)), "roce.ecn.disabled", "eth4")
    assert f.severity == "critical" and "np on, rp off" in f.message and "roce_rp/enable/3" in f.remediation
    assert check_roce(inp(roce())) == []


def test_ecn_unreadable_not_judged_and_require_off():
    s = with_netdev(roce(), "eth4", ecn=None)
    assert check_roce(inp(s)) == []
    s = with_netdev(roce(), "eth4", ecn=RoceEcn(np={3: False}, rp={3: False}))
    assert check_roce(inp(s, config=cfg(roce={"require_ecn": False}))) == []


def test_ecn_follows_configured_priority():
    f = check_roce(inp(roce(), config=cfg(roce={"priority": 5})))
    assert len(only(f, "roce.ecn.disabled")) == 8 and len(only(f, "roce.pfc.disabled")) == 8


def test_pfc_disabled_is_critical():
    s = with_netdev(roce(), "eth0", pfc=PfcConfig(enabled=(), trust="pcp", source="dcbnl"))
    f = one(check_roce(inp(s)), "roce.pfc.disabled", "eth0")
    assert f.severity == "critical" and "priorities none" in f.message
    assert check_roce(inp(s, config=cfg(roce={"require_pfc": False}))) == []
    assert check_roce(inp(with_netdev(roce(), "eth0", pfc=None))) == []


def test_pause_storm_needs_history():
    s = with_ethtool(roce(), "eth6", rx_prio3_pause=10**9)
    assert check_roce(inp(s)) == []


def test_pause_storm_rx_and_clears():
    s0 = roce()
    s1 = later(with_ethtool(s0, "eth6", rx_prio3_pause=50_000), 10)  # 5000/s
    f = one(check_roce(inp(s1, [s0])), "roce.pfc.pause_storm", "eth6")
    assert f.severity == "critical" and "rx_prio3_pause at 5000 frames/s" in f.message and "receives" in f.message
    s2 = later(s1, 70)  # counter flat, old reading out of the 60 s window
    assert check_roce(inp(s2, [s0, s1])) == []


def test_pause_below_threshold_and_tx_direction():
    s0 = roce()
    s1 = later(with_ethtool(s0, "eth6", tx_prio3_pause=5_000), 10)  # 500/s
    assert check_roce(inp(s1, [s0])) == []
    s1 = later(with_ethtool(s0, "eth6", tx_prio3_pause=50_000, rx_prio3_pause=20_000), 10)
    f = one(check_roce(inp(s1, [s0])), "roce.pfc.pause_storm", "eth6")
    assert "tx_prio3_pause" in f.message and "sends pause frames" in f.message


def test_pause_counter_reset_is_no_storm():
    s0 = with_ethtool(roce(), "eth6", rx_prio3_pause=10**9)
    s1 = later(with_ethtool(roce(), "eth6", rx_prio3_pause=0), 10)
    assert check_roce(inp(s1, [s0])) == []


def test_bond_slaves_are_judged():
    s = with_port(roce(), "mlx5_0", netdev="bond0")
    bond = Netdev(name="bond0", type=1, mtu=9000, is_virtual=True, bond_slaves=("eth0",))
    s = s.model_copy(update={"netdevs": (*s.netdevs, bond)})
    s = with_netdev(s, "eth0", pfc=PfcConfig(enabled=(4,), source="dcbnl"))
    assert problems(check_roce(inp(s))) == [("critical", "roce.pfc.disabled", "eth0")]


def test_cnp_rates_reported_ok():
    s0 = roce()
    s1 = later(with_counters(s0, "mlx5_1", hw=True, np_cnp_sent=120, np_ecn_marked_roce_packets=400), 10)
    f = check_roce(inp(s1, [s0]))
    assert problems(f) == []
    cnp = one(f, "roce.cnp.rate", "mlx5_1:1")
    assert "CNP sent 12/s" in cnp.message and "ECN-marked 40/s" in cnp.message and "handled" not in cnp.message
