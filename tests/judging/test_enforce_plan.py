"""The plan (agentd.judging.enforce): desired state from the checks' own rules, per knob
and target, with what may be applied now and the command a person would run."""

from __future__ import annotations

import pytest

from agentd.config import KNOBS
from agentd.judging.checks import CheckInput, run_checks
from agentd.judging.enforce import (
    CODES,
    OFFLINE,
    apply_window,
    command_for,
    drift_findings,
    from_json,
    plan,
    read_setting,
    to_json,
)
from agentd.model import GdrInfo, NcclConf, PauseConfig, PfcConfig, RoceEcn, TclassOverride
from tests.support.check_snapshots import cfg, node, port, with_gdr, with_netdev, with_port

ALL = {"enforce": {"knobs": list(KNOBS)}}
TC106 = NcclConf(path="etc/nccl.conf", variables={"NCCL_IB_TC": "106"})  # DSCP 26
DSCP_MAP = {d: d >> 3 for d in range(64)}


def roce(**enforce: object):
    s = node(gpus=2, layer="Ethernet", storage=False)
    s = s.model_copy(update={"nccl_conf": TC106})
    for nd in ("eth0", "eth1"):
        s = with_netdev(s, nd, pfc=PfcConfig(enabled=(3,), trust="dscp", source="dcbnl", dscp2prio=DSCP_MAP),
                        pause=PauseConfig(autoneg=False, rx=False, tx=False))
    for h in ("mlx5_0", "mlx5_1"):
        s = with_port(s, h, tclass=TclassOverride())
    return s, cfg(enforce={"knobs": list(KNOBS), **enforce})


def keys(p) -> set[str]:
    return {c.key for c in p.drift}


def codes_of(s, config) -> set[str]:
    return {f.code for f in run_checks(CheckInput(s, (), config)) if f.severity != "ok" and f.code != "config.drift"}


def test_a_node_as_the_checks_expect_has_no_drift() -> None:
    s, c = roce()
    p = plan(s, c)
    assert not p.drift and codes_of(s, c) == set()
    assert {ch.knob for ch in p.changes} == {"mtu", "pfc", "ecn", "trust", "dscp2prio", "tclass", "pause", "peermem"}
    assert all(ch.readable for ch in p.changes)


FAULTS = {
    "mtu": lambda s: with_netdev(s, "eth1", mtu=1500),
    "pfc": lambda s: with_netdev(s, "eth1", pfc=PfcConfig(enabled=(0,), trust="dscp", source="dcbnl", dscp2prio=DSCP_MAP)),
    "ecn": lambda s: with_netdev(s, "eth1", ecn=RoceEcn(np={3: True}, rp={3: False})),
    "trust": lambda s: with_netdev(s, "eth1", pfc=PfcConfig(enabled=(3,), trust="pcp", source="dcbnl")),
    "dscp2prio": lambda s: with_netdev(s, "eth1", pfc=PfcConfig(enabled=(3,), trust="dscp", source="dcbnl", dscp2prio={**DSCP_MAP, 26: 1})),
    "tclass": lambda s: with_port(s, "mlx5_1", tclass=TclassOverride(global_tclass=106 + 4)),
    "pause": lambda s: with_netdev(s, "eth1", pause=PauseConfig(autoneg=False, rx=True, tx=False)),
    "peermem": lambda s: with_gdr(s, peermem_loaded=False, peermem_version_path=None),
}


@pytest.mark.parametrize("knob", sorted(FAULTS))
def test_a_knob_drifts_exactly_where_its_check_raises(knob: str) -> None:
    s, c = roce()
    bad = FAULTS[knob](s)
    p = plan(bad, c)
    drift = {ch.knob for ch in p.drift}
    assert knob in drift
    assert set(CODES[knob]) & codes_of(bad, c), f"{knob}: the check raises none of {CODES[knob]}"
    # the same plan with the knob not named: nothing of it is listed
    others = [k for k in KNOBS if k != knob]
    assert all(ch.knob != knob for ch in plan(bad, c, knobs=others).changes)


@pytest.mark.parametrize("knob", sorted(FAULTS))
def test_the_desired_value_is_what_clears_the_check(knob: str) -> None:
    """Set every drifting setting to its desired value in the snapshot: the check is clean."""
    s, c = roce()
    bad = FAULTS[knob](s)
    fixed = bad
    for ch in plan(bad, c).drift:
        fixed = _set(fixed, ch)
    assert codes_of(fixed, c) == set() and not plan(fixed, c).drift


def _set(s, ch):
    v, st = ch.desired, ch.setting
    nd = s.netdev(st.netdev or "")
    if ch.knob == "mtu":
        return with_netdev(s, nd.name, mtu=v)
    if ch.knob == "pfc":
        return with_netdev(s, nd.name, pfc=nd.pfc.model_copy(update={"enabled": v}))
    if ch.knob == "ecn":
        return with_netdev(s, nd.name, ecn=RoceEcn(np={**nd.ecn.np, st.param: v[0]}, rp={**nd.ecn.rp, st.param: v[1]}))
    if ch.knob == "trust":  # mlx5: the entries added make it trust DSCP
        return with_netdev(s, nd.name, pfc=nd.pfc.model_copy(update={"trust": v, "dscp2prio": dict(st.entries)}))
    if ch.knob == "dscp2prio":
        return with_netdev(s, nd.name, pfc=nd.pfc.model_copy(update={"dscp2prio": {**nd.pfc.dscp2prio, st.param: v}}))
    if ch.knob == "tclass":
        return with_port(s, st.hca, st.port, tclass=TclassOverride(global_tclass=v))
    if ch.knob == "pause":
        return with_netdev(s, nd.name, pause=PauseConfig(autoneg=False, rx=v[0], tx=v[1]))
    if ch.knob == "peermem":
        return with_gdr(s, peermem_loaded=True, peermem_version_path="sys/module/nvidia_peermem/version")
    raise AssertionError(ch.knob)


def test_every_current_value_is_what_the_read_back_reads() -> None:
    s, c = roce()
    bad = s
    for f in FAULTS.values():
        bad = f(bad)
    for ch in plan(bad, c).changes:
        readable, value = read_setting(bad, ch.setting)
        assert readable == ch.readable and (not readable or value == ch.current), ch.key


def test_commands_are_the_tools_own() -> None:
    s, c = roce()
    cmds = {ch.key: ch.command for f in FAULTS.values() for ch in plan(f(s), c).drift}
    assert cmds == {
        "peermem@node": "modprobe nvidia_peermem",
        "mtu@eth1": "ip link set dev eth1 mtu 9000",
        "pfc@eth1": "dcb pfc set dev eth1 prio-pfc 3:on",
        "ecn@eth1": "echo 1 > /sys/class/net/eth1/ecn/roce_rp/enable/3",
        "trust@eth1": "dcb app add dev eth1 dscp-prio 26:3",
        "tclass@mlx5_1:1": "echo -1 > /sys/class/infiniband/mlx5_1/tc/1/traffic_class",
        "pause@eth1": "ethtool -A eth1 rx off tx off",
        "dscp2prio@eth1": "dcb app replace dev eth1 dscp-prio 26:3",
    }


def test_a_device_with_an_app_trust_table_is_set_there() -> None:
    s, c = roce()
    bad = with_netdev(s, "eth1", pfc=PfcConfig(enabled=(3,), trust="pcp", source="dcbnl", apptrust=True))
    (ch,) = [x for x in plan(bad, c).drift if x.knob == "trust"]
    assert ch.command == "dcb apptrust set dev eth1 order dscp pcp" and ch.setting.apptrust and not ch.setting.entries


def test_without_carrier_a_netdev_setting_waits() -> None:
    s, c = roce()
    bad = with_netdev(FAULTS["pfc"](s), "eth1", carrier=False, operstate="down")
    (ch,) = [x for x in plan(bad, c).drift if x.knob == "pfc"]
    assert not ch.applicable and "no carrier" in (ch.blocked or "")


def test_an_offline_root_plans_and_applies_nothing() -> None:
    s, c = roce()
    bad = FAULTS["mtu"](s).model_copy(update={"host_mode": "offline"})
    (ch,) = plan(bad, c).drift
    assert ch.blocked == OFFLINE and not ch.applicable


def test_dscp_0_is_never_moved_to_the_lossless_priority() -> None:
    """The global tclass 0 (not cleared: tclass not named) makes RDMA DSCP 0; mapping it to
    priority 3 would make all unmarked traffic lossless: listed, never applicable."""
    s, c = roce()
    bad = with_port(s, "mlx5_1", tclass=TclassOverride(global_tclass=0))
    p = plan(bad, c, knobs=["dscp2prio"])
    (ch,) = p.drift
    assert (ch.knob, ch.target, ch.current, ch.desired) == ("dscp2prio", "eth1", 0, 3)
    assert not ch.applicable and "DSCP 0" in (ch.blocked or "")
    # with the tclass knob named, the override is cleared first: the DSCP is 26 again, mapped right
    assert keys(plan(bad, c, knobs=["tclass", "dscp2prio"])) == {"tclass@mlx5_1:1"}


def test_an_override_without_nccl_ib_tc_anywhere_is_left_alone() -> None:
    s, c = roce()
    bad = with_port(s.model_copy(update={"nccl_conf": None}), "mlx5_1", tclass=TclassOverride(global_tclass=0))
    assert not plan(bad, c, knobs=["tclass"]).drift


def test_peermem_is_not_wanted_where_dma_buf_carries_gdr() -> None:
    s, c = roce()
    open_mod = with_gdr(s, peermem_loaded=False, peermem_version_path=None, nvidia_open_module=True)
    assert not plan(open_mod, c, knobs=["peermem"]).drift
    unregistered = with_gdr(s, peermem_version_path=None)  # loaded, not registered: a reload, never done
    (ch,) = plan(unregistered, c, knobs=["peermem"]).drift
    assert not ch.applicable and "reload" in (ch.blocked or "")


def test_netdev_globs_cover_netdevs_no_rdma_device_carries() -> None:
    s, c = roce(netdevs=["lo"])
    p = plan(s, c, knobs=["mtu"])
    lo = p.find("mtu", "lo")
    assert lo is not None and (lo.current, lo.desired) == (65536, 9000)


def test_not_required_settings_are_not_planned() -> None:
    s, _ = roce()
    c = cfg(enforce={"knobs": list(KNOBS)}, roce={"require_pfc": False, "require_ecn": False})
    assert not {ch.knob for ch in plan(s, c).changes} & {"pfc", "ecn", "pause"}


def test_drift_findings_name_the_setting_the_difference_and_the_command() -> None:
    s, c = roce()
    (f,) = drift_findings(plan(FAULTS["pfc"](s), c, knobs=["pfc"]), "plan")
    assert (f.code, f.severity, f.subject) == ("config.drift", "warning", "pfc@eth1")
    assert "PFC on 0, desired PFC on 0,3" in f.message and "dcb pfc set dev eth1 prio-pfc 3:on" in f.remediation


def test_no_drift_finding_unless_a_knob_is_named_and_the_mode_is_not_off() -> None:
    s, _ = roce()
    bad = FAULTS["pfc"](s)
    for c in (cfg(), cfg(enforce={"knobs": ["pfc"], "mode": "off"})):
        assert not [f for f in run_checks(CheckInput(bad, (), c)) if f.code == "config.drift"]
    assert [f.subject for f in run_checks(CheckInput(bad, (), cfg(enforce={"knobs": ["pfc"]}))) if f.code == "config.drift"] == ["pfc@eth1"]


@pytest.mark.parametrize("knob,value", [("peermem", True), ("mtu", 9000), ("pfc", (3,)), ("ecn", (True, False)),
                                        ("trust", "dscp"), ("dscp2prio", None), ("tclass", 106), ("pause", (False, True))])
def test_values_survive_the_journal(knob: str, value: object) -> None:
    assert from_json(knob, to_json(knob, value)) == value  # type: ignore[arg-type]


def test_a_journal_value_of_the_wrong_type_is_refused() -> None:
    for knob, bad in (("mtu", "9000"), ("pfc", [9]), ("ecn", [1, 0]), ("trust", "dscpx"), ("peermem", 1)):
        with pytest.raises(ValueError):
            from_json(knob, bad)


def test_rollback_commands_invert_the_change() -> None:
    s, c = roce()
    ch = next(x for x in plan(FAULTS["pfc"](s), c, knobs=["pfc"]).drift)
    assert command_for(ch.setting, ch.desired, ch.current) == "dcb pfc set dev eth1 prio-pfc 3:off"


@pytest.mark.parametrize("kw,open_", [
    (dict(maintenance=True), True),
    (dict(booted_at=1000.0, now=1100.0, boot_grace_s=600), True),
    (dict(booted_at=1000.0, now=1100.0, boot_grace_s=600, healthy_seen=True), False),
    (dict(booted_at=1000.0, now=1700.0, boot_grace_s=600), False),
    (dict(when_gpus_idle=True, gpus_busy=False), True),
    (dict(when_gpus_idle=True, gpus_busy=True), False),
    (dict(when_gpus_idle=True, gpus_busy=None), False),
    (dict(gpus_busy=False), False),  # idle GPUs count only when opted in
    (dict(), False),
])
def test_the_apply_window(kw: dict, open_: bool) -> None:
    args = dict(maintenance=False, booted_at=None, now=0.0, boot_grace_s=0.0, healthy_seen=False, when_gpus_idle=False, gpus_busy=None)
    args.update(kw)
    assert apply_window(**args)[0] is open_  # type: ignore[arg-type]


def test_gdr_info_default_is_read_as_no_peermem() -> None:
    assert read_setting(node().model_copy(update={"gdr": GdrInfo()}), plan(*roce(), knobs=["peermem"]).changes[0].setting) == (True, False)
    assert port(node(), "mlx5_0").tclass is None
