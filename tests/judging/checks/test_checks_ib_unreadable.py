"""Issue 12 item 7: a port whose state agentd cannot read is a finding (it is left out of
NCCL_IB_HCA), and one failed read is a warning: only a miss that repeats in the next
collection is critical, for the port and for ib.ports.count."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd import sim
from agentd.collection.collector import Collector
from agentd.config import AgentConfig, Timeouts
from agentd.host.fs import HostRoot
from agentd.judging.checks.ib import check_ports
from agentd.judging.judge import judge
from agentd.nccl import render_all
from tests.support.check_snapshots import cfg, inp, later, node, one, only, with_port

STORAGE = "mlx5_8"
EIGHT = cfg(expect={"hca_ports": 8})


def test_one_unreadable_state_is_a_warning_not_a_missing_port():
    s = with_port(node(), "mlx5_3", state=None)
    f = check_ports(inp(s, config=EIGHT))
    u = one(f, "ib.port.unreadable", "mlx5_3:1")
    assert u.severity == "warning" and "NCCL_IB_HCA" in u.message
    assert only(f, "ib.ports.count") == []  # the port is not yet counted as missing
    assert [x for x in f if x.severity == "critical"] == []


def test_an_unreadable_state_that_repeats_is_critical_and_counts_as_missing():
    before = with_port(node(), "mlx5_3", state=None)
    now = later(before, 10)
    f = check_ports(inp(now, [before], config=EIGHT))
    assert one(f, "ib.port.unreadable", "mlx5_3:1").severity == "critical"
    count = one(f, "ib.ports.count", "node")
    assert count.severity == "critical" and count.measured == 7 and "mlx5_3:1" in count.message


def test_a_read_that_recovers_clears_and_a_readable_past_does_not_count_as_repeat():
    healthy = node()
    miss = later(with_port(healthy, "mlx5_3", state=None), 10)
    assert one(check_ports(inp(miss, [healthy])), "ib.port.unreadable").severity == "warning"
    assert only(check_ports(inp(later(healthy, 20), [healthy, miss])), "ib.port.unreadable") == []


def test_non_compute_port_unreadable_is_at_most_a_warning():
    before = with_port(node(), STORAGE, state=None)
    f = check_ports(inp(later(before, 10), [before]))
    assert one(f, "ib.port.unreadable", f"{STORAGE}:1").severity == "warning"


def _empty_state(root: Path) -> None:
    (root / "sys/class/infiniband/mlx5_0/ports/1/state").write_bytes(b"")


@pytest.mark.tree
def test_empty_state_file_on_a_simulated_node(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    config = AgentConfig(host_root=root, timeouts=Timeouts(nvml_s=0.3), expect={"hca_ports": 8})
    c = Collector(HostRoot.at(root), config)
    c.run_sync()
    s1 = c.snapshot(taken_at=1000.0)
    _empty_state(root)
    c.run_sync()
    s2 = c.snapshot(taken_at=1010.0)
    j2 = judge(s2, (s1,), config, None)
    u = [f for f in j2.findings if f.code == "ib.port.unreadable"]
    assert [(f.subject, f.severity) for f in u] == [("mlx5_0:1", "warning")]
    assert j2.status == "degraded"
    r = render_all(s2, list(j2.findings), config, j2.roles)
    assert "mlx5_0:1" not in (r.env.get("NCCL_IB_HCA") or "")  # left out, and now said
    c.run_sync()
    s3 = c.snapshot(taken_at=1020.0)
    j3 = judge(s3, (s1, s2), config, None)
    assert [(f.subject, f.severity) for f in j3.findings if f.code == "ib.port.unreadable"] == [("mlx5_0:1", "critical")]
    assert j3.status == "critical"
