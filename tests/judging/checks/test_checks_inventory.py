"""inventory.gpu.count and inventory.*.missing against the baseline."""

from __future__ import annotations

from agentd.judging.baseline import baseline_from
from agentd.judging.checks.inventory import check_inventory
from agentd.judging.roles import hca_roles
from tests.support.check_snapshots import (
    cfg,
    inp,
    layout,
    node,
    one,
    problems,
    with_hca,
    with_port,
    without_gpu,
    without_hca,
)


def base_of(s):
    return baseline_from(s, hca_roles(s, cfg().hca))


def test_no_baseline_no_expectation_no_findings():
    assert check_inventory(inp(without_gpu(node(), 3))) == []


def test_gpu_count():
    s = without_gpu(node(), 3)
    f = one(check_inventory(inp(s, config=cfg(expect={"gpus": 8}))), "inventory.gpu.count", "node")
    assert f.severity == "critical" and f.measured == 7
    assert check_inventory(inp(node(), config=cfg(expect={"gpus": 8}))) == []


def test_gpu_missing_and_back():
    healthy = node()
    base = base_of(healthy)
    f = check_inventory(inp(without_gpu(healthy, 3), baseline=base))
    assert problems(f) == [("critical", "inventory.gpu.missing", layout(3)["gpu"])]
    assert "gpu3" in f[0].message and "7 of 8" in f[0].message
    assert check_inventory(inp(healthy, baseline=base)) == []


def test_hca_missing():
    healthy = node()
    base = base_of(healthy)
    f = one(check_inventory(inp(without_hca(healthy, "mlx5_6"), baseline=base)), "inventory.hca.missing", "mlx5_6")
    assert f.severity == "critical" and "compute HCA mlx5_6" in f.message
    f = one(check_inventory(inp(without_hca(healthy, "mlx5_8"), baseline=base)), "inventory.hca.missing", "mlx5_8")
    assert "other HCA" in f.message


def test_renamed_hca_is_not_missing():
    healthy = node()
    base = base_of(healthy)
    renamed = with_hca(healthy, "mlx5_6", name="mlx5_16")
    assert check_inventory(inp(renamed, baseline=base)) == []


def test_port_missing():
    healthy = node()
    base = base_of(healthy)
    s = with_hca(healthy, "mlx5_2", ports=())
    assert problems(check_inventory(inp(s, baseline=base))) == [("critical", "inventory.port.missing", "mlx5_2:1")]
    # a port that is present but down is ib.port.down's business, not inventory's
    assert check_inventory(inp(with_port(healthy, "mlx5_2", state="DOWN"), baseline=base)) == []
