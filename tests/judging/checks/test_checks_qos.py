"""roce.qos.*: the RoCE QoS chain judged link by link (checks/qos.py over judging/qos.py)."""

from __future__ import annotations

from agentd.judging.checks import run_checks
from agentd.judging.checks.qos import check_roce_qos
from agentd.judging.checks.roce import check_roce
from agentd.model import NcclConf, Netdev, PfcConfig, RoceEcn, TclassOverride
from tests.support.check_snapshots import (
    cfg,
    inp,
    later,
    node,
    one,
    problems,
    with_counters,
    with_ethtool,
    with_netdev,
    with_port,
)

# mlx5's default dscp2prio (tests/fixtures/outputs/mlnx_qos.*: "prio:3 dscp:31,30,...,24,")
DEFAULT_MAP = {d: d >> 3 for d in range(64)}
TC106 = cfg(nccl={"ib_tc": 106})  # DSCP 26 -> priority 3 = roce.priority


def roce(trust: str | None = "dscp"):
    """RoCE node whose netdevs trust dscp with the default map: PFC and ECN on priority 3."""
    s = node(layer="Ethernet")
    for i in range(8):
        s = with_netdev(s, f"eth{i}", pfc=PfcConfig(enabled=(3,), trust=trust, source="dcbnl", dscp2prio=DEFAULT_MAP))
    return s


def mapped(s, netdev: str, dscp: int, prio: int, enabled=(3,), trust: str = "dscp"):
    return with_netdev(s, netdev, pfc=PfcConfig(enabled=enabled, trust=trust, source="dcbnl",
                                                dscp2prio={**DEFAULT_MAP, dscp: prio}))


def qos_codes(findings):
    return [(f.severity, f.code, f.subject) for f in findings if f.code.startswith("roce.qos.")]


# ---------------------------------------------------------------------------
# silent chains


def test_healthy_chain_is_silent():
    assert check_roce_qos(inp(roce(), config=TC106)) == []
    assert problems(run_checks(inp(roce(), config=TC106))) == []


def test_unconfigured_tc_is_not_judged():
    # DSCP 0 (NCCL's default TC) maps to priority 0, PFC off there: a job may set its own NCCL_IB_TC
    s = mapped(roce(), "eth2", 0, 0)
    assert check_roce_qos(inp(s)) == []


def test_priority_equal_to_roce_priority_is_left_to_roce_checks():
    s = with_netdev(roce(), "eth2", pfc=PfcConfig(enabled=(), trust="dscp", source="dcbnl", dscp2prio=DEFAULT_MAP),
                    ecn=RoceEcn(np={3: False}, rp={3: False}))
    assert check_roce_qos(inp(s, config=TC106)) == []
    codes = {f.code for f in check_roce(inp(s, config=TC106))}
    assert codes == {"roce.pfc.disabled", "roce.ecn.disabled"}


def test_unknown_trust_is_silent():
    s = roce(trust=None)
    s = mapped(s, "eth2", 26, 0)
    s = with_netdev(s, "eth2", pfc=s.netdev("eth2").pfc.model_copy(update={"trust": None}))
    assert check_roce_qos(inp(s, config=TC106)) == []


def test_dscp_without_map_entry_is_silent():
    s = with_netdev(roce(), "eth2", pfc=PfcConfig(enabled=(3,), trust="dscp", source="dcbnl"))
    assert check_roce_qos(inp(s, config=TC106)) == []


# ---------------------------------------------------------------------------
# the effective priority


def test_dscp_mapped_to_a_lossy_priority_is_critical():
    s = mapped(roce(), "eth2", 26, 0)
    f = one(check_roce_qos(inp(s, config=TC106)), "roce.qos.lossy", "eth2")
    assert f.severity == "critical"
    assert f.message.startswith("RDMA traffic runs on priority 0 without PFC: NCCL_IB_TC 106 (nccl.ib_tc)")
    for link in ("traffic class 106 = DSCP 26", "trust dscp on eth2: dscp2prio 26 -> priority 0",
                 "PFC off and ECN off for priority 0", "roce.priority 3"):
        assert link in f.message
    assert "mlnx_qos -i eth2 --dscp2prio set,26,3" in f.remediation
    assert qos_codes(check_roce_qos(inp(s, config=TC106))) == [("critical", "roce.qos.lossy", "eth2")]


def test_lossy_needs_require_pfc_and_then_is_a_mismatch():
    s = mapped(roce(), "eth2", 26, 0)
    f = check_roce_qos(inp(s, config=cfg(nccl={"ib_tc": 106}, roce={"require_pfc": False, "require_ecn": False})))
    assert qos_codes(f) == [("warning", "roce.qos.priority_mismatch", "eth2")]


def test_ecn_off_on_the_effective_priority_is_critical():
    s = mapped(roce(), "eth2", 26, 5, enabled=(3, 5))
    f = one(check_roce_qos(inp(s, config=TC106)), "roce.qos.ecn_off", "eth2")
    assert f.severity == "critical" and "priority 5 with ECN off" in f.message and "PFC on and ECN off for priority 5" in f.message
    assert "roce.priority 3" in f.message and "--dscp2prio set,26,3" in f.remediation


def test_priority_mismatch_with_pfc_and_ecn_on_is_a_warning():
    s = mapped(roce(), "eth2", 26, 5, enabled=(3, 5))
    s = with_netdev(s, "eth2", ecn=RoceEcn(np={p: p in (3, 5) for p in range(8)}, rp={p: p in (3, 5) for p in range(8)}))
    findings = check_roce_qos(inp(s, config=TC106))
    f = one(findings, "roce.qos.priority_mismatch", "eth2")
    assert f.severity == "warning" and "priority 5, not roce.priority 3" in f.message and "PFC on and ECN on for priority 5" in f.message
    assert qos_codes(findings) == [("warning", "roce.qos.priority_mismatch", "eth2")]


def test_roce_priority_setting_moves_the_judgement():
    s = mapped(roce(), "eth2", 26, 0)
    config = cfg(nccl={"ib_tc": 106}, roce={"priority": 0})
    # eth2 now uses the lossless priority 0 (PFC off there: roce.pfc.disabled's business); the others use 3
    found = qos_codes(check_roce_qos(inp(s, config=config)))
    assert ("critical", "roce.qos.lossy", "eth2") not in found and len(found) == 7


def test_nccl_conf_and_hex_value_feed_the_chain():
    s = mapped(roce(), "eth2", 26, 0).model_copy(
        update={"nccl_conf": NcclConf(path="etc/nccl.conf", variables={"NCCL_IB_TC": "0x6a"})})
    f = one(check_roce_qos(inp(s)), "roce.qos.lossy", "eth2")
    assert "NCCL_IB_TC 106 (/etc/nccl.conf)" in f.message
    assert "nccl.ib_tc" in f.remediation  # agentd's env file wins over /etc/nccl.conf


# ---------------------------------------------------------------------------
# trust mode


def test_pcp_with_sl_on_the_lossless_priority_is_healthy():
    s = roce(trust="pcp")
    assert check_roce_qos(inp(s, config=cfg(nccl={"ib_tc": 0, "ib_sl": 3}))) == []


def test_pcp_with_default_sl_is_lossy():
    s = roce(trust="pcp")
    f = one(check_roce_qos(inp(s, config=cfg(nccl={"ib_tc": 0}))), "roce.qos.lossy", "eth0")
    assert "trust pcp on eth0: the DSCP is ignored, NCCL_IB_SL 0 (NCCL default) -> priority 0" in f.message
    assert "nccl.ib_sl = 3" in f.remediation and "--trust dscp" in f.remediation


def test_pcp_while_dscp_is_marked_is_a_trust_mismatch():
    s = with_netdev(roce(), "eth2", pfc=PfcConfig(enabled=(3,), trust="pcp", source="dcbnl", dscp2prio=DEFAULT_MAP))
    findings = check_roce_qos(inp(s, config=cfg(nccl={"ib_tc": 106, "ib_sl": 3})))
    assert qos_codes(findings) == [("warning", "roce.qos.trust_mismatch", "eth2")]
    f = findings[0]
    assert "trusts pcp but DSCP 26 is marked" in f.message and "mlnx_qos -i eth2 --trust dscp" in f.remediation


def test_dscp_while_only_sl_is_set_is_a_trust_mismatch():
    findings = check_roce_qos(inp(roce(), config=cfg(nccl={"ib_sl": 3})))
    assert len(findings) == 8 and {f.code for f in findings} == {"roce.qos.trust_mismatch"}
    assert "only NCCL_IB_SL 3 (nccl.ib_sl) is set" in findings[0].message
    # SL 0, or the TC set as well: nothing to say
    assert check_roce_qos(inp(roce(), config=cfg(nccl={"ib_sl": 0}))) == []
    assert check_roce_qos(inp(roce(), config=cfg(nccl={"ib_sl": 3, "ib_tc": 106}))) == []


# ---------------------------------------------------------------------------
# the driver-global tclass override


def test_override_disagreeing_with_nccl_ib_tc():
    s = with_port(roce(), "mlx5_2", tclass=TclassOverride(global_tclass=160, rules=("dst_ip=10.0.0.0/24,tclass=106",)))
    findings = check_roce_qos(inp(s, config=TC106))
    f = one(findings, "roce.qos.tclass_override", "mlx5_2:1")
    assert f.severity == "warning" and "global tclass 160" in f.message and "NCCL_IB_TC 106 (nccl.ib_tc)" in f.message
    assert "1 per-address tclass rule" in f.message
    assert "echo -1 > /sys/class/infiniband/mlx5_2/tc/1/traffic_class" in f.remediation
    # DSCP 40 -> priority 5, PFC off: the override makes the traffic lossy too
    lossy = one(findings, "roce.qos.lossy", "eth2")
    assert "overridden by the global tclass 160 (mlx5_2 tc/1/traffic_class)" in lossy.message
    assert "echo -1 > /sys/class/infiniband/mlx5_2/tc/1/traffic_class" in lossy.remediation


def test_override_equal_to_nccl_ib_tc_is_silent():
    s = with_port(roce(), "mlx5_2", tclass=TclassOverride(global_tclass=106))
    assert check_roce_qos(inp(s, config=TC106)) == []


def test_override_alone_configures_the_chain():
    s = with_port(roce(), "mlx5_2", tclass=TclassOverride(global_tclass=0))
    assert qos_codes(check_roce_qos(inp(s))) == [("critical", "roce.qos.lossy", "eth2")]
    empty = with_port(roce(), "mlx5_2", tclass=TclassOverride())  # OFED file present, nothing set
    assert check_roce_qos(inp(empty)) == []


# ---------------------------------------------------------------------------
# bonds


def bonded():
    s = with_port(roce(), "mlx5_0", netdev="bond0")
    bond = Netdev(name="bond0", type=1, mtu=9000, is_virtual=True, bond_slaves=("eth0", "eth9"))
    eth9 = s.netdev("eth0").model_copy(update={"name": "eth9", "master": "bond0"})
    return s.model_copy(update={"netdevs": (*s.netdevs, bond, eth9)})


def test_bond_slaves_are_judged_each():
    s = bonded()
    assert check_roce_qos(inp(s, config=TC106)) == []
    s = mapped(s, "eth9", 26, 0)
    assert qos_codes(check_roce_qos(inp(s, config=TC106))) == [("critical", "roce.qos.lossy", "eth9")]


def test_bond_override_reported_once_for_the_port():
    s = with_port(bonded(), "mlx5_0", tclass=TclassOverride(global_tclass=104))  # DSCP 26 still: priority 3
    assert qos_codes(check_roce_qos(inp(s, config=TC106))) == [("warning", "roce.qos.tclass_override", "mlx5_0:1")]


# ---------------------------------------------------------------------------
# measured: RDMA bytes on priorities without PFC


def traffic(s, netdev: str = "eth2"):
    return with_ethtool(s, netdev, **{f"tx_prio{p}_bytes": 0 for p in range(8)})


def sent(s, hca: str, netdev: str, dt: float, *, rdma_bytes: int, per_prio: dict[int, int]):
    """A later snapshot: the port sent rdma_bytes (port_xmit_data in 4-byte words), counted per priority."""
    p = next(x for x in s.hca(hca).ports if x.port == 1)
    nd = s.netdev(netdev)
    out = with_counters(s, hca, port_xmit_data=p.counters["port_xmit_data"] + rdma_bytes // 4)
    out = with_ethtool(out, netdev, **{f"tx_prio{k}_bytes": nd.ethtool[f"tx_prio{k}_bytes"] + v for k, v in per_prio.items()})
    return later(out, dt)


def test_rdma_on_a_priority_without_pfc_is_critical():
    s0 = traffic(roce())
    s1 = sent(s0, "mlx5_2", "eth2", 10, rdma_bytes=4_000_000_000, per_prio={0: 4_000_000_000, 3: 1000})
    f = one(check_roce_qos(inp(s1, [s0])), "roce.qos.lossy_traffic", "eth2")
    assert f.severity == "critical"
    assert "mlx5_2 port 1 sends RDMA at 400 MB/s (port_xmit_data x 4)" in f.message
    assert "only 100 B/s is counted on PFC priorities" in f.message
    assert "priority 0 (no PFC) carries 400 MB/s on eth2" in f.message and "NCCL_IB_TC not set" in f.message
    assert "move it to priority 3" in f.remediation
    assert problems(run_checks(inp(s1, [s0]))) == [("critical", "roce.qos.lossy_traffic", "eth2")]


def test_rdma_on_pfc_priorities_is_silent():
    s0 = traffic(roce())
    s1 = sent(s0, "mlx5_2", "eth2", 10, rdma_bytes=4_000_000_000, per_prio={3: 3_900_000_000, 0: 100_000_000})
    assert check_roce_qos(inp(s1, [s0])) == []


def test_rdma_below_threshold_or_without_history_is_silent():
    s0 = traffic(roce())
    s1 = sent(s0, "mlx5_2", "eth2", 10, rdma_bytes=1_000_000_000, per_prio={0: 1_000_000_000})  # 100 MB/s
    assert check_roce_qos(inp(s1, [s0])) == []
    assert qos_codes(check_roce_qos(inp(s1, [s0], config=cfg(thresholds={"roce_lossy_min_bytes_per_s": 50e6})))) == [
        ("critical", "roce.qos.lossy_traffic", "eth2")]
    s1 = sent(s0, "mlx5_2", "eth2", 10, rdma_bytes=4_000_000_000, per_prio={0: 4_000_000_000})
    assert check_roce_qos(inp(s1)) == []


def test_lossy_traffic_clears_when_it_stops():
    s0 = traffic(roce())
    s1 = sent(s0, "mlx5_2", "eth2", 10, rdma_bytes=4_000_000_000, per_prio={0: 4_000_000_000})
    s2 = later(s1, 70)  # counters flat; s0 out of the 60 s window
    assert check_roce_qos(inp(s2, [s0, s1])) == []


def test_ethtool_rdma_counter_when_the_port_has_no_pma_data():
    s0 = with_ethtool(traffic(roce()), "eth2", tx_vport_rdma_unicast_bytes=0)
    s0 = with_port(s0, "mlx5_2", counters={})
    s1 = later(with_ethtool(s0, "eth2", tx_vport_rdma_unicast_bytes=4_000_000_000, tx_prio0_bytes=4_000_000_000), 10)
    f = one(check_roce_qos(inp(s1, [s0])), "roce.qos.lossy_traffic", "eth2")
    assert "(tx_vport_rdma_unicast_bytes)" in f.message


def test_no_lossy_traffic_where_pfc_disabled_already_says_it():
    s0 = with_netdev(traffic(roce()), "eth2", pfc=PfcConfig(enabled=(), trust="dscp", source="dcbnl", dscp2prio=DEFAULT_MAP))
    s1 = sent(s0, "mlx5_2", "eth2", 10, rdma_bytes=4_000_000_000, per_prio={3: 4_000_000_000})
    assert check_roce_qos(inp(s1, [s0])) == []
    assert problems(check_roce(inp(s1, [s0]))) == [("critical", "roce.pfc.disabled", "eth2")]


def test_lossy_traffic_needs_require_pfc_and_readable_pfc():
    s0 = traffic(roce())
    s1 = sent(s0, "mlx5_2", "eth2", 10, rdma_bytes=4_000_000_000, per_prio={0: 4_000_000_000})
    assert check_roce_qos(inp(s1, [s0], config=cfg(roce={"require_pfc": False}))) == []
    unread0, unread1 = (with_netdev(x, "eth2", pfc=None) for x in (s0, s1))
    assert check_roce_qos(inp(unread1, [unread0])) == []


def test_lossy_traffic_on_a_bond_sums_its_slaves():
    s0 = traffic(traffic(bonded(), "eth0"), "eth9")
    s1 = sent(s0, "mlx5_0", "eth0", 0, rdma_bytes=4_000_000_000, per_prio={3: 1_000_000_000})
    s1 = later(with_ethtool(s1, "eth9", tx_prio0_bytes=3_000_000_000), 10)
    f = one(check_roce_qos(inp(s1, [s0])), "roce.qos.lossy_traffic", "eth9")
    assert "only 100 MB/s is counted on PFC priorities" in f.message and "priority 0 (no PFC) carries 300 MB/s" in f.message
    s1 = sent(s0, "mlx5_0", "eth0", 0, rdma_bytes=4_000_000_000, per_prio={3: 2_000_000_000})
    s1 = later(with_ethtool(s1, "eth9", tx_prio3_bytes=1_000_000_000, tx_prio0_bytes=1_000_000_000), 10)
    assert check_roce_qos(inp(s1, [s0])) == []
