"""judging/qos.py: where NCCL_IB_TC / NCCL_IB_SL come from, and the chain it computes."""

from __future__ import annotations

import pytest

from agentd.judging.qos import Setting, chain, nccl_setting, parse_nccl_int, roce_chains
from agentd.model import IbPort, NcclConf, Netdev, PfcConfig, RoceEcn, TclassOverride
from tests.support.check_snapshots import cfg, node

CONF = NcclConf(path="etc/nccl.conf", variables={"NCCL_IB_TC": "0x6a", "NCCL_IB_SL": "5"})
MAP = {d: d >> 3 for d in range(64)}


def tc(config, conf=CONF):
    return nccl_setting(config, conf, "NCCL_IB_TC", 0, 255)


def test_precedence_profile_overrides_ib_tc_conf():
    everything = cfg(nccl={"ib_tc": 98, "overrides": {"NCCL_IB_TC": "104"}, "profile": "train",
                           "profiles": {"train": {"NCCL_IB_TC": "41"}}})
    assert tc(everything) == Setting(41, "nccl.profiles.train.NCCL_IB_TC")
    assert tc(cfg(nccl={"ib_tc": 98, "overrides": {"NCCL_IB_TC": "104"}})) == Setting(104, "nccl.overrides.NCCL_IB_TC")
    assert tc(cfg(nccl={"ib_tc": 98})) == Setting(98, "nccl.ib_tc")
    assert tc(cfg()) == Setting(106, "/etc/nccl.conf")  # base 0, as NCCL's strtoll: "0x6a" = 106
    assert tc(cfg(), conf=None) is None


def test_a_profile_without_the_variable_falls_through():
    config = cfg(nccl={"ib_tc": 98, "profile": "train", "profiles": {"train": {"NCCL_IB_QPS_PER_CONNECTION": "2"}}})
    assert tc(config) == Setting(98, "nccl.ib_tc")


def test_disabled_nccl_files_leave_only_nccl_conf():
    config = cfg(nccl={"enabled": False, "ib_tc": 98, "overrides": {"NCCL_IB_TC": "104"}})
    assert tc(config) == Setting(106, "/etc/nccl.conf")
    assert tc(config, conf=None) is None


@pytest.mark.parametrize(("text", "value"), [("106", 106), ("0x6a", 106), (" 106 ", 106), ("0", 0), ("abc", None), ("", None)])
def test_parse_nccl_int(text, value):
    assert parse_nccl_int(text) == value


def test_out_of_range_or_garbage_in_nccl_conf_is_not_a_setting():
    assert tc(cfg(), conf=NcclConf(path="etc/nccl.conf", variables={"NCCL_IB_TC": "300"})) is None
    assert tc(cfg(), conf=NcclConf(path="etc/nccl.conf", variables={"NCCL_IB_TC": "high"})) is None
    sl = nccl_setting(cfg(), CONF, "NCCL_IB_SL", 0, 15)
    assert sl == Setting(5, "/etc/nccl.conf")


def _nd(trust="dscp", dscp2prio=None, enabled=(3,)):
    return Netdev(name="eth0", type=1, pfc=PfcConfig(enabled=enabled, trust=trust, source="dcbnl",
                                                      dscp2prio=MAP if dscp2prio is None else dscp2prio),
                  ecn=RoceEcn(np={3: True, 5: True}, rp={3: True, 5: False}))


def _port(override=None):
    return IbPort(port=1, link_layer="Ethernet", netdev="eth0", tclass=override)


def test_chain_dscp_trust():
    c = chain(cfg(nccl={"ib_tc": 106}), None, "mlx5_0", _port(), _nd())
    assert (c.tc, c.dscp, c.tc_source, c.trust, c.priority, c.pfc, c.ecn, c.configured) == (
        106, 26, "nccl.ib_tc", "dscp", 3, True, True, True)
    assert c.describe() == ("NCCL_IB_TC 106 (nccl.ib_tc) -> traffic class 106 = DSCP 26 -> trust dscp on eth0: "
                            "dscp2prio 26 -> priority 3 -> PFC on and ECN on for priority 3")


def test_chain_override_wins_and_ecn_states():
    c = chain(cfg(nccl={"ib_tc": 106}), None, "mlx5_0", _port(TclassOverride(global_tclass=0xA0)), _nd())
    assert (c.tc, c.tc_source, c.priority, c.pfc, c.ecn, c.override) == (160, "override", 5, False, False, 160)  # rp off on 5
    c = chain(cfg(nccl={"ib_tc": 0x80}), None, "mlx5_0", _port(), _nd(dscp2prio={**MAP, 32: 5}, enabled=(3, 5)))
    assert (c.dscp, c.priority, c.pfc, c.ecn) == (32, 5, True, False)
    c = chain(cfg(nccl={"ib_tc": 0x80}), None, "mlx5_0", _port(), _nd())
    assert (c.priority, c.pfc, c.ecn) == (4, False, None)  # ECN of priority 4 not read


def test_chain_pcp_uses_sl_low_bits_and_unset_tc_is_unconfigured():
    c = chain(cfg(nccl={"ib_sl": 11}), None, "mlx5_0", _port(), _nd(trust="pcp"))
    assert (c.trust, c.priority, c.configured, c.tc, c.tc_source) == ("pcp", 3, False, 0, "NCCL default")
    assert "NCCL_IB_TC not set (NCCL default 0)" in c.describe()
    c = chain(cfg(), None, "mlx5_0", _port(), _nd(trust=None))
    assert (c.trust, c.priority, c.pfc, c.ecn) == (None, None, None, None)
    assert "trust mode of eth0 unknown" in c.describe()


def test_roce_chains_judge_bond_slaves():
    s = node(layer="Ethernet")
    bond = Netdev(name="bond0", type=1, is_virtual=True, bond_slaves=("eth1", "eth0", "gone"))
    s = s.model_copy(update={"netdevs": (*s.netdevs, bond)})
    port = _port().model_copy(update={"netdev": "bond0"})
    chains = roce_chains(s, cfg(), [("mlx5_0", port, bond), ("mlx5_2", _port(), s.netdev("eth2"))])
    assert [(c.hca, c.netdev) for c in chains] == [("mlx5_0", "eth0"), ("mlx5_0", "eth1"), ("mlx5_2", "eth2")]
