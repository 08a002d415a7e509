"""Fabric detection on simulated nodes and the default expectations per fabric."""

from __future__ import annotations

import pytest

from agentd import sim
from agentd.collection.collector import collect_once
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot
from agentd.judging.roles import hca_roles
from agentd.ncclbench.expect import ExpectPolicy, Fabric, detect_fabric, expectations

MiB = 1 << 20
SIZES = [104857, MiB, 16 * MiB, 64 * MiB, 256 * MiB]


@pytest.fixture(scope="module")
def snaps(tmp_path_factory):
    out = {}
    for prof in ("h100-ib", "h100-roce", "pcie-4gpu"):
        root = sim.build_tree(prof, tmp_path_factory.mktemp(prof) / "root")
        cfg = AgentConfig(host_root=root)
        snap = collect_once(HostRoot.at(root), cfg)
        out[prof] = (snap, hca_roles(snap, cfg.hca).compute)
    return out


@pytest.mark.tree
def test_detect_h100_nvswitch_with_ndr_ib(snaps):
    f = detect_fabric(*snaps["h100-ib"])
    assert (f.intra, f.net, f.gpus, f.net_ports, f.net_rate_gbps) == ("nvswitch-nvlink4", "ib-ndr", 8, 8, 3200.0)
    assert f.gpu_name == "NVIDIA H100 80GB HBM3" and f.label == "nvswitch-nvlink4+ib-ndr"


def test_detect_h100_roce_400(snaps):
    f = detect_fabric(*snaps["h100-roce"])
    assert (f.intra, f.net, f.net_rate_gbps) == ("nvswitch-nvlink4", "roce-400", 3200.0)


def test_detect_pcie_only_node(snaps):
    f = detect_fabric(*snaps["pcie-4gpu"])
    assert f.intra == "pcie" and f.net == "ib-hdr" and f.gpus == 4
    assert f.pcie_gbps == pytest.approx(16 * 16 * 128 / 130 / 8)  # Gen4 x16 per direction


def test_storage_nics_are_not_counted_when_compute_hcas_are_given(snaps):
    snap, compute = snaps["h100-ib"]
    every = detect_fabric(snap, None)
    assert every.net_ports > 8  # the 2 storage NICs too
    assert detect_fabric(snap, compute).net_ports == 8


def _by(exps):
    return {(e.op, e.size_bytes): e for e in exps}


def test_h100_defaults_follow_published_figures():
    f = Fabric(intra="nvswitch-nvlink4", net="ib-ndr", gpus=8, net_ports=8, net_rate_gbps=3200.0)
    ex = _by(expectations(f, [(op, s) for op in ("all_reduce", "all_gather", "reduce_scatter") for s in SIZES]))
    ar = ex[("all_reduce", 256 * MiB)]
    assert ar.expected_gbps == pytest.approx(480 * 256 / 272)  # 451.8
    assert ar.min_gbps == pytest.approx(0.75 * 480 * 256 / 272)
    assert "nccl-tests#212" in ar.source
    assert ex[("all_gather", 256 * MiB)].expected_gbps == pytest.approx(370 * 256 / 272)
    # small sizes: expected shown, never judged
    assert ex[("all_reduce", 64 * MiB)].min_gbps is None and ex[("all_reduce", 64 * MiB)].expected_gbps == pytest.approx(384.0)
    assert ex[("all_reduce", 104857)].expected_gbps < 5


def test_a100_pcie_and_unknown():
    a100 = _by(expectations(Fabric(intra="nvswitch-nvlink3"), [("all_reduce", 1 << 30)]))
    assert a100[("all_reduce", 1 << 30)].expected_gbps == pytest.approx(232.5 * 1024 / 1040)
    pcie = _by(expectations(Fabric(intra="pcie", pcie_gbps=31.5), [("all_reduce", 256 * MiB)]))
    assert pcie[("all_reduce", 256 * MiB)].expected_gbps == pytest.approx(0.45 * 31.5 * 256 / 260)
    unknown = expectations(Fabric(intra="nvlink"), [("all_reduce", 256 * MiB)])
    assert unknown[0].expected_gbps is None and unknown[0].min_gbps is None


def test_net_transport_scales_with_compute_port_rate():
    ndr = Fabric(intra="nvswitch-nvlink4", net="ib-ndr", net_ports=8, net_rate_gbps=3200.0)
    e = _by(expectations(ndr, [("all_reduce", 16 << 30), ("all_gather", 16 << 30)], transport="net"))
    big = e[("all_reduce", 16 << 30)]
    assert big.min_gbps == pytest.approx(0.75 * 1.25 * 40 * (16 << 30) / ((16 << 30) + 16 * MiB))  # ~40: the Azure threshold
    assert e[("all_gather", 16 << 30)].expected_gbps is None
    half = Fabric(intra="pcie", net="roce-200", net_ports=8, net_rate_gbps=1600.0)
    assert _by(expectations(half, [("all_reduce", 1 << 30)], transport="net"))[("all_reduce", 1 << 30)].expected_gbps == pytest.approx(
        big.expected_gbps / 2, rel=0.02
    )


def test_config_overrides():
    f = Fabric(intra="nvswitch-nvlink4")
    pol = ExpectPolicy(min_busbw_gbps={"all_reduce": 430.0}, expected_busbw_gbps={"all_gather": 300.0}, judge_min_bytes=64 * MiB, min_fraction=0.5)
    ex = _by(expectations(f, [("all_reduce", 64 * MiB), ("all_reduce", 256 * MiB), ("all_gather", 256 * MiB)], pol))
    assert ex[("all_reduce", 256 * MiB)].min_gbps == 430.0  # config, at the largest size
    assert ex[("all_reduce", 64 * MiB)].min_gbps == pytest.approx(0.5 * 384.0)
    assert ex[("all_gather", 256 * MiB)].expected_gbps == pytest.approx(300 * 256 / 272) and "config" in ex[("all_gather", 256 * MiB)].source
