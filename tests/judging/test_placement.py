"""The placement model (agentd.judging.placement): rails, rail hash, NVLink domain and its health."""

from __future__ import annotations

import hashlib

from agentd.config import FabricSettings
from agentd.judging.placement import placement, rail_hash
from agentd.judging.roles import HcaRoles
from agentd.model import IbPort
from tests.support.check_snapshots import node, with_gpu, with_hca
from tests.support.placement_snapshots import (
    CLIQUE_ID,
    CLUSTER_UUID,
    COMPUTE,
    DOMAIN_ID,
    fabric_finding,
    gb200_tray,
)

H100_COMPUTE = HcaRoles(compute=tuple(f"mlx5_{i}" for i in range(8)), other=("mlx5_8",), source="config")
AUTO = FabricSettings()


def _pairs(p) -> list[tuple[int, str]]:
    return [(r.gpu, r.nic) for r in p.rails]


def test_hgx_rails_are_the_pix_nic_of_each_gpu() -> None:
    snap = node()
    p = placement(snap, H100_COMPUTE, [], AUTO)
    assert _pairs(p) == [(i, f"mlx5_{i}") for i in range(8)]
    r = p.rails[3]
    assert (r.port, r.netdev, r.path, r.gpu_bus_id) == (1, "ib3", "PIX", snap.gpus[3].pci_bus_id)
    # the host bridges the PCI reader recorded for the GPU and for the HCA
    assert r.gpu_pcie_root == snap.pci_device(r.gpu_bus_id).root_complex
    assert r.nic_pcie_root == snap.pci_device(snap.hca("mlx5_3").pci_bus_id).root_complex
    assert r.gpu_pcie_root is not None and r.nic_pcie_root is not None
    # No fabric identity (an HGX reports none): no domain, and no multi-node domain expected.
    assert p.domain is None and p.multi_node is False


def test_gb200_pairs_tied_nics_one_to_one_and_never_uses_bluefield() -> None:
    p = placement(gb200_tray(), COMPUTE, [], AUTO)
    assert _pairs(p) == [(0, "mlx5_0"), (1, "mlx5_1"), (2, "mlx5_2"), (3, "mlx5_3")]
    assert {r.path for r in p.rails} == {"NODE"}
    assert (p.rails[0].gpu_pcie_root, p.rails[0].nic_pcie_root) == ("pci0008:00", "pci0000:00")
    assert p.rails[1].netdev == "ibp1s0"


def test_gb200_domain_is_gfd_clique_format_and_multi_node() -> None:
    p = placement(gb200_tray(), COMPUTE, [], AUTO)
    assert p.domain is not None
    assert p.domain.id == DOMAIN_ID == f"{CLUSTER_UUID}.{CLIQUE_ID}"
    assert (p.domain.cluster_uuid, p.domain.clique_id, p.domain.gpus, p.domain.health) == (CLUSTER_UUID, CLIQUE_ID, 4, "ok")
    assert p.multi_node is True
    assert placement(gb200_tray(), COMPUTE, [], FabricSettings(multi_node="no")).multi_node is False


def test_gpus_outnumbering_tied_nics_share_them_evenly() -> None:
    snap = node(gpus=8, storage=False)
    # Every GPU sees the four HCAs of GPUs 0-3 at PHB, the rest are gone.
    for i in range(8):
        snap = with_gpu(snap, i, nic_paths={f"mlx5_{k}": "PHB" for k in range(4)})
    p = placement(snap, None, [], AUTO)
    assert [nic for _, nic in _pairs(p)] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"] * 2


def test_closer_nic_wins_over_natural_order() -> None:
    snap = with_gpu(node(), 0, nic_paths={"mlx5_0": "SYS", "mlx5_5": "PXB", "mlx5_1": "PXB"})
    p = placement(snap, H100_COMPUTE, [], AUTO)
    assert p.rails[0].nic == "mlx5_1" and p.rails[0].path == "PXB"
    assert p.rails[1].nic == "mlx5_1" and p.rails[1].path == "PIX"  # GPU1's own PIX NIC, even though GPU0 took it


def test_non_compute_hca_is_never_a_rail() -> None:
    snap = with_gpu(node(), 0, nic_paths={"mlx5_8": "PIX", "mlx5_0": "SYS"})
    assert placement(snap, H100_COMPUTE, [], AUTO).rails[0].nic == "mlx5_0"
    assert placement(snap, None, [], AUTO).rails[0].nic == "mlx5_8"  # roles None: every HCA is compute


def test_port_is_first_active_else_first() -> None:
    two = (IbPort(port=1, state="DOWN", netdev="ib0a"), IbPort(port=2, state="ACTIVE", netdev="ib0b"))
    r = placement(with_hca(node(), "mlx5_0", ports=two), H100_COMPUTE, [], AUTO).rails[0]
    assert (r.port, r.netdev) == (2, "ib0b")
    down = (IbPort(port=2, state="DOWN", netdev="x2"), IbPort(port=1, state="DOWN", netdev="x1"))
    r = placement(with_hca(node(), "mlx5_0", ports=down), H100_COMPUTE, [], AUTO).rails[0]
    assert (r.port, r.netdev) == (1, "x1")
    r = placement(with_hca(node(), "mlx5_0", ports=()), H100_COMPUTE, [], AUTO).rails[0]
    assert (r.nic, r.port, r.netdev) == ("mlx5_0", None, None)


def test_rail_hash_is_the_documented_recipe() -> None:
    p = placement(node(), H100_COMPUTE, [], AUTO)
    lines = sorted(f"{i}:mlx5_{i}:1\n" for i in range(8))
    assert p.rail_hash == hashlib.sha256("".join(lines).encode()).hexdigest()[:12]
    assert len(p.rail_hash) == 12


def test_rail_hash_ignores_netdev_names_and_follows_the_pairing() -> None:
    base = placement(node(), H100_COMPUTE, [], AUTO).rail_hash
    renamed = with_hca(node(), "mlx5_0", ports=(IbPort(port=1, state="ACTIVE", netdev="ibp24s0"),))
    assert placement(renamed, H100_COMPUTE, [], AUTO).rail_hash == base
    swapped = with_gpu(node(), 0, nic_paths={"mlx5_1": "PIX"})
    assert placement(swapped, H100_COMPUTE, [], AUTO).rail_hash != base
    assert rail_hash([]) is None
    assert placement(node(gpus=0), H100_COMPUTE, [], AUTO).rail_hash is None


def test_rail_hash_takes_names_that_are_not_utf8() -> None:
    odd = "mlx5_\udcff"
    snap = with_gpu(node(), 0, nic_paths={odd: "PIX"})
    p = placement(snap, None, [], AUTO)
    assert p.rails[0].nic == odd and p.rail_hash is not None


def test_gpus_outside_the_fabric_do_not_make_the_domain() -> None:
    one_failed = gb200_tray(gpu3={"fabric_status": "Insufficient Resources"})
    d = placement(one_failed, COMPUTE, [], AUTO).domain
    assert d is not None and d.gpus == 3 and d.id == DOMAIN_ID
    for bad in ({"fabric_clique_id": 0}, {"fabric_cluster_uuid": "00000000-0000-0000-0000-000000000000"},
                {"fabric_state": "in_progress"}, {"fabric_cluster_uuid": None}):
        snap = gb200_tray(**{f"gpu{i}": bad for i in range(4)})
        assert placement(snap, COMPUTE, [], AUTO).domain is None, bad


def test_gpus_that_disagree_have_no_domain() -> None:
    assert placement(gb200_tray(gpu2={"fabric_clique_id": CLIQUE_ID + 1}), COMPUTE, [], AUTO).domain is None
    other = "0a1b2c3d-0000-4000-8000-000000000001"
    assert placement(gb200_tray(gpu0={"fabric_cluster_uuid": other}), COMPUTE, [], AUTO).domain is None


def test_domain_health_from_counted_fabric_findings() -> None:
    def health(*findings) -> str:
        d = placement(gb200_tray(), COMPUTE, list(findings), AUTO).domain
        assert d is not None
        return d.health

    assert health(fabric_finding("nvlink.fabric.unhealthy", "critical")) == "unhealthy"
    assert health(fabric_finding("nvlink.fabric.degraded", "warning")) == "degraded"
    assert health(fabric_finding("fabric.imex.down", "critical", "node")) == "unhealthy"
    assert health(fabric_finding("nvlink.domain.split", "critical", "node")) == "unhealthy"
    assert health(fabric_finding("nvlink.fabric.degraded", "warning"), fabric_finding("nvlink.fabric.incomplete", "critical")) == "unhealthy"
    # Withheld findings (observe mode, pending, boot grace) and other areas say nothing about the domain.
    assert health(fabric_finding("nvlink.fabric.unhealthy", "critical", withheld="observe")) == "ok"
    assert health(fabric_finding("ib.port.down", "critical", "mlx5_0:1")) == "ok"
    assert health(fabric_finding("nvlink.fabric.incomplete", "ok")) == "ok"
