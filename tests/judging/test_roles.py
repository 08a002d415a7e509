"""Compute vs storage/management HCA selection."""

from __future__ import annotations

from agentd.base.ids import natural_key
from agentd.config import HcaSelection
from agentd.judging.roles import hca_roles
from agentd.model import Gpu, Hca, IbPort, NodeSnapshot


def hca(name, model, layer="InfiniBand", rate=400.0):
    return Hca(name=name, hca_type=model, ports=(IbPort(port=1, state="ACTIVE", link_layer=layer, rate_gbps=rate),))


def snap(hcas, gpus=()):
    return NodeSnapshot(taken_at=0, host_root="/", hcas=tuple(hcas), gpus=tuple(gpus))


def test_natural_order():
    names = ["mlx5_10", "mlx5_2", "mlx5_bond_0", "mlx5_1"]
    assert sorted(names, key=natural_key) == ["mlx5_1", "mlx5_2", "mlx5_10", "mlx5_bond_0"]


def test_largest_group_is_compute_like_the_gpud_h100_tree():
    # gpud fixture: 8x MT4129 NDR IB + mlx5_bond_0 MT41692 Ethernet
    names = ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]
    hs = [hca(n, "MT4129") for n in names] + [hca("mlx5_bond_0", "MT41692", "Ethernet", 200)]
    r = hca_roles(snap(hs), HcaSelection())
    assert r.compute == tuple(names) and r.other == ("mlx5_bond_0",) and r.source == "inferred"


def test_tie_goes_to_the_group_near_the_gpus():
    hs = [hca("mlx5_0", "A"), hca("mlx5_1", "B", "Ethernet", 100)]
    gpus = [Gpu(index=0, pci_bus_id="0000:18:00.0", nic_paths={"mlx5_0": "SYS", "mlx5_1": "PIX"})]
    r = hca_roles(snap(hs, gpus), HcaSelection())
    assert r.compute == ("mlx5_1",)


def test_config_include_and_exclude_globs():
    hs = [hca(f"mlx5_{i}", "MT4129") for i in range(10)]
    r = hca_roles(snap(hs), HcaSelection(compute=["mlx5_[0-7]"], exclude=["mlx5_3"]))
    assert r.compute == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7")
    assert r.other == ("mlx5_3", "mlx5_8", "mlx5_9") and r.source == "config"


def test_no_hcas():
    r = hca_roles(snap([]), HcaSelection())
    assert r.compute == () and r.other == ()
