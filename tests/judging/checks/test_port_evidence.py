"""Evidence before a critical (NVSentinel#1361, #1462) and the default route's NIC never
compute (NVSentinel#1529): issue 36."""

from __future__ import annotations

from agentd.judging.baseline import baseline_from
from agentd.judging.checks import run_checks
from agentd.judging.roles import hca_roles, not_compute
from tests.support.check_snapshots import cfg, inp, later, node, one, only, problems, with_port


def _down(snap, *hcas):
    for h in hcas:
        snap = with_port(snap, h, state="DOWN", state_id=1, phys_state="Polling", phys_state_id=2)
    return snap


def test_a_compute_port_never_up_is_critical_when_its_peers_are_up():
    f = one(run_checks(inp(_down(node(), "mlx5_3"))), "ib.port.down", "mlx5_3:1")
    assert f.severity == "critical"
    assert "never seen ACTIVE; 7 compute MT4129 port(s) of its kind are" in f.message


def test_with_no_peer_up_it_is_a_warning_that_says_why():
    s = _down(node(storage=False), *[f"mlx5_{i}" for i in range(8)])
    found = run_checks(inp(s))
    downs = only(found, "ib.port.down")
    assert len(downs) == 8 and {f.severity for f in downs} == {"warning"}
    assert "no evidence it is provisioned" in downs[0].message
    assert not [p for p in problems(found) if p[0] == "critical"]


def test_a_port_seen_up_before_is_critical_whatever_its_peers_do():
    healthy = node(storage=False)
    all_down = _down(later(healthy, 10), *[f"mlx5_{i}" for i in range(8)])
    assert {f.severity for f in only(run_checks(inp(all_down, [healthy])), "ib.port.down")} == {"critical"}
    base = baseline_from(healthy, hca_roles(healthy, cfg().hca))
    assert {f.severity for f in only(run_checks(inp(all_down, baseline=base)), "ib.port.down")} == {"critical"}


def test_expect_hca_ports_still_requires_the_unprovisioned_looking_port():
    s = _down(node(storage=False), *[f"mlx5_{i}" for i in range(8)])
    f = one(run_checks(inp(s, config=cfg(expect={"hca_ports": 8}))), "ib.ports.count")
    assert f.severity == "critical"


def test_the_default_routes_nic_is_never_inferred_compute():
    s = node(layer="Ethernet").model_copy(update={"default_routes": ("eth0",)})
    roles = hca_roles(s, cfg().hca)
    assert "mlx5_0" not in roles.compute and "mlx5_1" in roles.compute
    assert not_compute(s) == {"mlx5_0": "it carries the default route"}
    configured = hca_roles(s, cfg(hca={"compute": ["mlx5_*"]}).hca)
    assert "mlx5_0" in configured.compute  # hca.compute is taken as given


def test_a_bond_carrying_the_default_route_takes_its_slaves_hcas_out():
    s = node(layer="Ethernet")
    nds = tuple(n.model_copy(update={"master": "bond0"}) if n.name in ("eth6", "eth7") else n for n in s.netdevs)
    s = s.model_copy(update={"netdevs": nds, "default_routes": ("bond0",)})
    assert set(not_compute(s)) == {"mlx5_6", "mlx5_7"}
