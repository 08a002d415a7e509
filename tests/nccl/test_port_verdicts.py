"""NCCL_IB_HCA from per-port verdicts: a critical finding takes a compute port out when its
typed subject is the port, its HCA, the HCA's PCI function or the port's netdev; nothing
else does, whatever its text looks like."""

import pytest

from agentd.judging.findings import (
    NODE,
    gpu_subject,
    hca_subject,
    netdev_subject,
    nvlink_subject,
    pci_subject,
    port_subject,
    probe_subject,
)
from agentd.model import Finding
from agentd.nccl.env import derive_env, port_verdicts
from tests.support.nccl_snapshots import config, critical, ib_node, roce_node, roles_for, warning

ROCE_ALL = [f"mlx5_{i}:1" for i in range(8)]


def verdicts(snap, findings):
    return port_verdicts(snap, findings, roles_for(snap))


def test_each_related_subject_kind_takes_the_port_out():
    snap = roce_node()
    nic2 = snap.hca("mlx5_2").pci_bus_id
    cases = {
        "mlx5_1:1": critical("ib.port.rate_degraded", port_subject("mlx5_1", 1)),
        "mlx5_2:1": critical("pcie.link.downtrained", pci_subject(nic2)),
        "mlx5_4:1": critical("inventory.hca.missing", hca_subject("mlx5_4")),
        "mlx5_6:1": critical("roce.ecn.disabled", netdev_subject("rdma6")),
    }
    for port, f in cases.items():
        healthy, left_out = verdicts(snap, [f])
        assert healthy == [p for p in ROCE_ALL if p != port], f.about
        assert left_out == [f"{port} critical {f.code}"]


def test_warnings_never_take_a_port_out():
    snap = roce_node()
    nic2 = snap.hca("mlx5_2").pci_bus_id
    findings = [warning("ib.port.rate_degraded", port_subject("mlx5_1", 1)), warning("pcie.link.downtrained", pci_subject(nic2)),
                warning("mtu.mismatch", netdev_subject("rdma6"))]
    assert verdicts(snap, findings) == (ROCE_ALL, [])


@pytest.mark.parametrize("subject", [
    hca_subject("mlx5_10"),  # mlx5_1 vs mlx5_10
    hca_subject("mlx5_1_"),
    port_subject("mlx5_10", 1),
    port_subject("mlx5_1", 2),  # another port of the same HCA
    netdev_subject("mlx5_1"),  # a netdev named like the HCA
    hca_subject("rdma1"),  # an HCA named like the port's netdev
    netdev_subject("rdma10"),
    pci_subject("0000:00:00.0"),
    gpu_subject(1),
    nvlink_subject(1, 0),
    probe_subject("infiniband", "class/infiniband/mlx5_1/ports/1/rate"),
    NODE,
])
def test_unrelated_subjects_with_similar_names_keep_the_port(subject):
    snap = roce_node()
    assert verdicts(snap, [critical("x.critical", subject)]) == (ROCE_ALL, [])


def test_a_gpu_bus_id_is_not_its_nics_pci_function():
    snap = roce_node()
    gpu1 = snap.gpus[1].pci_bus_id
    assert verdicts(snap, [critical("pcie.link.downtrained", pci_subject(gpu1))]) == (ROCE_ALL, [])
    assert verdicts(snap, [critical("gpu.lost", gpu_subject(1, gpu1))]) == (ROCE_ALL, [])


def test_subject_text_alone_is_never_matched():
    """A finding given only as text (tests, JSON read back) is related to no port, even when
    the text reads like one: only typed subjects are compared."""
    snap = roce_node()
    texts = [Finding(code="ib.port.down", severity="critical", subject=s, message="m")
             for s in ("mlx5_1:1", "mlx5_2", "rdma6", snap.hca("mlx5_4").pci_bus_id)]
    assert all(f.about.kind == "text" for f in texts)
    assert verdicts(snap, texts) == (ROCE_ALL, [])


def test_the_closest_subject_names_the_reason():
    """Several critical findings on one port: the port's own finding is the one named, then
    its HCA, its PCI function, its netdev (the order of the findings does not matter)."""
    snap = roce_node()
    nic3 = snap.hca("mlx5_3").pci_bus_id
    findings = [critical("roce.pfc.disabled", netdev_subject("rdma3")), critical("pcie.link.downtrained", pci_subject(nic3)),
                critical("inventory.port.missing", hca_subject("mlx5_3")), critical("ib.port.flapping", port_subject("mlx5_3", 1))]
    for order in (findings, findings[::-1]):
        assert verdicts(snap, order)[1] == ["mlx5_3:1 critical ib.port.flapping"]
    assert verdicts(snap, findings[:2])[1] == ["mlx5_3:1 critical pcie.link.downtrained"]


def test_ib_node_hca_finding_through_derive_env():
    snap = ib_node()
    cfg = config()
    env = derive_env(snap, [critical("inventory.port.missing", hca_subject("mlx5_1"))], cfg, topo_path=None, roles=roles_for(snap, cfg))
    assert env.get("NCCL_IB_HCA") == "=" + ",".join(f"mlx5_{i}:1" for i in range(8) if i != 1)
    assert "left out: mlx5_1:1 critical inventory.port.missing" in env.var("NCCL_IB_HCA").provenance
