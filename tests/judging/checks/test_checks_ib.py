"""ib.port.down / rate_degraded / width_degraded / flapping and ib.ports.count."""

from __future__ import annotations

import pytest

from agentd.judging.baseline import baseline_from
from agentd.judging.checks.ib import check_flapping, check_ports
from agentd.judging.roles import hca_roles
from tests.support.check_snapshots import cfg, inp, later, node, one, only, with_counters, with_port

STORAGE = "mlx5_8"


def test_healthy_node_has_no_port_findings():
    s = node()
    assert check_ports(inp(s)) == []
    assert check_flapping(inp(s, [later(s, -10)])) == []


@pytest.mark.parametrize("state,phys,hint", [
    ("DOWN", "Polling", "no link partner"),
    ("DOWN", "Disabled", "disabled"),
    ("INIT", "LinkUp", "subnet manager"),
    ("ARMED", "LinkUp", "subnet manager"),
])
def test_compute_port_not_active_is_critical(state, phys, hint):
    s = with_port(node(), "mlx5_3", state=state, phys_state=phys)
    f = one(check_ports(inp(s)), "ib.port.down", "mlx5_3:1")
    assert f.severity == "critical"
    assert state in f.message and phys in f.message and "expected ACTIVE" in f.message
    assert hint in f.remediation


def test_roce_port_down_hint_names_netdev():
    s = with_port(node(layer="Ethernet"), "mlx5_2", state="DOWN", phys_state="Disabled")
    f = one(check_ports(inp(s)), "ib.port.down", "mlx5_2:1")
    assert f.severity == "critical" and "eth2" in f.remediation


def test_port_down_clears_when_active_again():
    s = with_port(node(), "mlx5_3", state="DOWN")
    assert only(check_ports(inp(s)), "ib.port.down")
    assert only(check_ports(inp(node(), [s])), "ib.port.down") == []


def test_unreadable_state_is_reported_not_judged_as_down():
    s = with_port(node(), "mlx5_3", state=None)
    assert [(f.code, f.severity) for f in check_ports(inp(s))] == [("ib.port.unreadable", "warning")]


def test_non_compute_port_never_seen_active_is_only_reported():
    s = with_port(node(), STORAGE, state="DOWN", phys_state="Disabled")
    f = one(check_ports(inp(s)), "ib.port.down", f"{STORAGE}:1")
    assert f.severity == "ok" and "non-compute" in f.message


def test_non_compute_port_that_was_active_is_a_warning():
    healthy = node()
    s = later(with_port(healthy, STORAGE, state="DOWN"), 10)
    assert one(check_ports(inp(s, [healthy])), "ib.port.down").severity == "warning"
    base = baseline_from(healthy, hca_roles(healthy, cfg().hca))
    assert one(check_ports(inp(s, baseline=base)), "ib.port.down").severity == "warning"


def test_rate_below_inferred_best_is_critical():
    s = with_port(node(), "mlx5_5", rate_gbps=200.0, rate_raw="200 Gb/sec (4X HDR)", generation="HDR")
    f = one(check_ports(inp(s)), "ib.port.rate_degraded", "mlx5_5:1")
    assert f.severity == "critical" and f.measured == 200.0 and f.expected == 400.0
    assert "best of 8 ACTIVE compute MT4129" in f.message
    assert only(check_ports(inp(s)), "ib.port.width_degraded") == []  # same 4X


def test_rate_below_configured_expectation():
    s = node()  # all at 400
    f = check_ports(inp(s, config=cfg(expect={"rate_gbps": 800})))
    assert len(only(f, "ib.port.rate_degraded")) == 8
    assert all(x.severity == "critical" and "expect.rate_gbps" in x.message for x in f)
    assert check_ports(inp(s, config=cfg(expect={"rate_gbps": 400}))) == []


def test_width_downgrade_gives_width_warning_and_rate_critical():
    s = with_port(node(), "mlx5_1", width=2, rate_gbps=200.0, rate_raw="200 Gb/sec (2X NDR)")
    f = check_ports(inp(s))
    assert one(f, "ib.port.width_degraded", "mlx5_1:1").severity == "warning"
    assert one(f, "ib.port.rate_degraded", "mlx5_1:1").severity == "critical"


def test_width_against_config():
    f = check_ports(inp(node(gpus=2, storage=False), config=cfg(expect={"width": 8})))
    assert [x.subject for x in only(f, "ib.port.width_degraded")] == ["mlx5_0:1", "mlx5_1:1"]


def test_non_compute_rate_is_judged_only_among_its_own_group():
    # the single 200G storage port is not compared with the 400G compute ports
    assert only(check_ports(inp(node())), "ib.port.rate_degraded") == []


def test_down_port_rate_is_not_judged():
    s = with_port(node(), "mlx5_0", state="DOWN", rate_gbps=10.0)
    f = check_ports(inp(s))
    assert only(f, "ib.port.rate_degraded") == [] and len(only(f, "ib.port.down")) == 1


def test_ports_count():
    s = with_port(node(), "mlx5_2", state="DOWN")
    f = one(check_ports(inp(s, config=cfg(expect={"hca_ports": 8}))), "ib.ports.count", "node")
    assert f.severity == "critical" and f.measured == 7 and "mlx5_2:1" in f.message
    assert only(check_ports(inp(node(), config=cfg(expect={"hca_ports": 8}))), "ib.ports.count") == []


def _series(states, t0=0.0, downed=None):
    base = node()
    out = []
    for i, st in enumerate(states):
        s = with_port(base, "mlx5_4", state=st)
        if downed is not None:
            s = with_counters(s, "mlx5_4", link_downed=downed[i])
        out.append(later(s, t0 + 10 * i))
    return out


def test_flapping_needs_history():
    s = _series(["ACTIVE"], downed=[200])[0]
    assert check_flapping(inp(s)) == []  # link_downed=200 alone is no flap


def test_flapping_from_state_cycles():
    snaps = _series(["DOWN", "ACTIVE", "DOWN", "ACTIVE", "DOWN", "ACTIVE"])
    f = one(check_flapping(inp(snaps[-1], snaps[:-1])), "ib.port.flapping", "mlx5_4:1")
    assert f.severity == "critical" and f.measured == 3
    # two cycles are below the default flap_count of 3
    assert check_flapping(inp(snaps[3], snaps[:3])) == []


def test_flapping_from_link_downed_increments_one_history_snapshot():
    snaps = _series(["ACTIVE", "ACTIVE"], downed=[10, 13])
    f = one(check_flapping(inp(snaps[1], snaps[:1])), "ib.port.flapping", "mlx5_4:1")
    assert "link_downed +3" in f.message


def test_flapping_does_not_double_count_and_ignores_resets():
    # 3 link_downed increments seen together with 3 state cycles: still 3, not 6
    snaps = _series(["DOWN", "ACTIVE"] * 3, downed=[0, 1, 1, 2, 2, 3])
    assert one(check_flapping(inp(snaps[-1], snaps[:-1])), "ib.port.flapping").measured == 3
    # a counter reset (5 -> 0) is not an increment
    snaps = _series(["ACTIVE"] * 3, downed=[5, 0, 1])
    assert check_flapping(inp(snaps[-1], snaps[:-1])) == []


def test_flapping_outside_window_is_forgotten():
    snaps = _series(["DOWN", "ACTIVE"] * 3)
    now = later(node(), 10_000)
    config = cfg(thresholds={"flap_window_s": 1000})
    assert check_flapping(inp(now, snaps, config=config)) == []
    assert only(check_flapping(inp(now, snaps, config=cfg(thresholds={"flap_window_s": 20_000}))), "ib.port.flapping")


def test_flapping_non_compute_is_warning():
    base = node()
    snaps = [later(with_port(base, STORAGE, state=st), 10 * i) for i, st in enumerate(["DOWN", "ACTIVE"] * 3)]
    assert one(check_flapping(inp(snaps[-1], snaps[:-1])), "ib.port.flapping", f"{STORAGE}:1").severity == "warning"
