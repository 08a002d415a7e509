"""pcie.link.downtrained, pcie.gpu_nic.*, pcie.acs.redirect."""

from __future__ import annotations

from agentd.judging.checks.pcie import check_acs, check_gpu_nic_paths, check_links
from tests.support.check_snapshots import (
    STORAGE_BDF,
    cfg,
    inp,
    layout,
    node,
    one,
    only,
    problems,
    with_gpu,
    with_pci,
)

L3 = layout(3)


def test_healthy_links_no_findings():
    assert check_links(inp(node())) == []


def test_nic_speed_downtrained_is_warning():
    s = with_pci(node(), L3["nic"], current_link_speed_gts=16.0)
    f = one(check_links(inp(s)), "pcie.link.downtrained", L3["nic"])
    assert f.severity == "warning" and "mlx5_3" in f.message and "x16 16 GT/s" in f.message and "50%" in f.message


def test_gpu_width_below_half_is_critical_and_speed_not_judged():
    s = with_pci(node(), L3["gpu"], current_link_width=4)
    f = one(check_links(inp(s)), "pcie.link.downtrained", L3["gpu"])
    assert f.severity == "critical" and "gpu3" in f.message and "x4" in f.message
    idle = with_pci(node(), L3["gpu"], current_link_speed_gts=2.5)  # idle GPU: Gen1 speed
    assert check_links(inp(idle)) == []


def test_partner_maximum_limits_expectation():
    # a Gen5 x16 NIC in a Gen4 x8 slot: trained to what the slot can do, not downtrained
    s = with_pci(node(), L3["dn_nic"], max_link_speed_gts=16.0, max_link_width=8)
    s = with_pci(s, L3["nic"], current_link_speed_gts=16.0, current_link_width=8)
    assert check_links(inp(s)) == []


def test_switch_upstream_link_downtrained_once_for_all_below():
    s = with_pci(node(), L3["up"], current_link_width=8)
    f = one(check_links(inp(s)), "pcie.link.downtrained", L3["up"])
    assert f.severity == "warning" and "upstream link above gpu3, mlx5_3" in f.message


def test_non_compute_nic_is_at_most_warning():
    s = with_pci(node(), STORAGE_BDF, current_link_width=1)
    assert problems(check_links(inp(s))) == [("warning", "pcie.link.downtrained", STORAGE_BDF)]


def test_gpu_nic_paths_reported_ok():
    f = check_gpu_nic_paths(inp(node()))
    assert problems(f) == []
    assert one(f, "pcie.gpu_nic.path", "gpu3").message == "nearest compute NIC mlx5_3 via PIX"


def test_cross_socket_when_others_are_close():
    s = with_gpu(node(), 3, nic_paths={f"mlx5_{j}": "SYS" for j in range(8)})
    f = one(check_gpu_nic_paths(inp(s)), "pcie.gpu_nic.cross_socket", "gpu3")
    assert f.severity == "warning" and f.measured == "SYS"


def test_all_sys_layout_not_judged_without_config():
    s = node(gpus=2, storage=False)
    for i in range(2):
        s = with_gpu(s, i, nic_paths={"mlx5_0": "SYS", "mlx5_1": "SYS"})
    assert problems(check_gpu_nic_paths(inp(s))) == []
    f = check_gpu_nic_paths(inp(s, config=cfg(expect={"gpu_nic_path": "PHB"})))
    assert len(only(f, "pcie.gpu_nic.cross_socket")) == 2


def test_distance_worse_than_configured():
    s = with_gpu(node(), 3, nic_paths={"mlx5_3": "PHB", "mlx5_2": "NODE"})
    f = check_gpu_nic_paths(inp(s, config=cfg(expect={"gpu_nic_path": "PXB"})))
    assert problems(f) == [("warning", "pcie.gpu_nic.distance", "gpu3")]
    assert problems(check_gpu_nic_paths(inp(s))) == []


def test_storage_nic_is_ignored_for_nearest():
    s = with_gpu(node(), 3, nic_paths={"mlx5_8": "PIX", "mlx5_3": "PXB"})
    assert one(check_gpu_nic_paths(inp(s)), "pcie.gpu_nic.path", "gpu3").measured == "PXB"


def test_acs_redirect_on_switch_port_is_critical():
    s = with_pci(node(), L3["dn_gpu"], acs_ctrl=0x001D)
    f = one(check_acs(inp(s)), "pcie.acs.redirect", L3["dn_gpu"])
    assert f.severity == "critical" and "ReqRedir+ CmpltRedir+" in f.message and "gpu3" in f.message


def test_acs_cleared_or_other_bits_only():
    assert check_acs(inp(node())) == []
    s = with_pci(node(), L3["dn_gpu"], acs_ctrl=0x0001)  # Source Validation only
    assert check_acs(inp(s)) == []


def test_acs_not_judged_in_vm():
    s = with_pci(node(), L3["dn_nic"], acs_ctrl=0x000C)
    vm = s.model_copy(update={"system": s.system.model_copy(update={"virtualization": "kvm"})})
    assert check_acs(inp(vm)) == []


def test_acs_on_root_port_is_a_warning():
    root = with_pci(node(), L3["rp"], acs_ctrl=0x001D)
    f = one(check_acs(inp(root)), "pcie.acs.redirect", L3["rp"])
    assert f.severity == "warning" and "root port above gpu3, mlx5_3" in f.message and "iommu=pt" in f.remediation
    untyped = with_pci(root, L3["rp"], pcie_port_type=None)  # first in the chain: the root port
    assert one(check_acs(inp(untyped)), "pcie.acs.redirect").severity == "warning"


def test_acs_unknown_port_type_below_root_is_judged():
    s = with_pci(node(), L3["dn_nic"], acs_ctrl=0x0004, pcie_port_type=None)
    assert one(check_acs(inp(s)), "pcie.acs.redirect", L3["dn_nic"]).message.count("mlx5_3") == 1
