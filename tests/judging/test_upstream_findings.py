"""The real upstream sysfs trees (vendored in tests/fixtures/sysfs) judged end to end (issue 3).

Each expected finding is what the tree's own files show; docs/upstream-findings.md
explains per tree why these are right and why nothing else should fire.
"""

from __future__ import annotations

import pytest

from agentd.collection.collector import collect_once
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot
from agentd.judging.judge import judge
from tests.support.fixtures import SYSFS_TREES, flattened_copy

GPUD_PORTS = ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9", "mlx5_bond_0"]

EXPECTED = {
    # hfi1_0, mlx4_0 (2 ports), mlx5_0: every port ACTIVE, no counter at a PMA maximum.
    "procfs-fixtures": ("ok", set()),
    # mlx4_0 port 1 port_xmit_wait = 4294967295: the 32-bit PMA maximum.
    "node-exporter-fixtures": ("degraded", {("ib.counter.saturated", "warning", "mlx4_0:1")}),
    # every port has excessive_buffer_overrun_errors = 15 (4-bit maximum), mlx5_1 also
    # link_downed = 255 (8-bit); the tree has no sys/class/net at all.
    "gpud-h100-ndr": (
        "degraded",
        {("ib.counter.saturated", "warning", f"{h}:1") for h in GPUD_PORTS}
        | {("probe.failed", "warning", "netdev:sys/class/net")},
    ),
}


@pytest.mark.parametrize("tree", sorted(EXPECTED))
def test_real_tree_findings_match_its_files(tree):
    root = SYSFS_TREES / tree
    cfg = AgentConfig(host_root=root)
    snap = collect_once(HostRoot.at(root), cfg)
    j = judge(snap, (), cfg, None)
    status, expected = EXPECTED[tree]
    got = {(f.code, f.severity, f.subject) for f in j.findings if f.severity != "ok"}
    assert got == expected
    assert j.status == status
    if tree == "gpud-h100-ndr":
        sat = {f.subject: f.message for f in j.findings if f.code == "ib.counter.saturated"}
        assert "link_downed=255" in sat["mlx5_1:1"] and "link_downed" not in sat["mlx5_0:1"]
        assert j.roles.compute == tuple(GPUD_PORTS[:-1])  # the BlueField bond is not compute


@pytest.mark.parametrize("tree", sorted(EXPECTED))
def test_real_tree_flattened_reads_without_exception(tree, tmp_path):
    # Copies that do not keep symlinks turn them into files holding the target: still no crash.
    root = flattened_copy(SYSFS_TREES / tree, tmp_path / tree)
    snap = collect_once(HostRoot.at(root), AgentConfig(host_root=root))
    assert snap.hcas


def test_real_tree_versions_and_expectations():
    """The fingerprint's HCA firmware from a real tree's fw_ver files (issue 17): gpud's
    H100 node has eight ConnectX-7 at 28.41.1000 and a BlueField-3 bond at 32.38.3056,
    which is not compute and so not part of the field. [expect] versions judges it."""
    from agentd.judging.fingerprint import versions

    root = SYSFS_TREES / "gpud-h100-ndr"
    cfg = AgentConfig(host_root=root)
    snap = collect_once(HostRoot.at(root), cfg)
    j = judge(snap, (), cfg, None)
    assert versions(snap, j.roles)["hca_fw"] == "28.41.1000"

    def version_findings(spec: str) -> set[tuple[str, str, str]]:
        c = AgentConfig.model_validate({"host_root": root, "expect": {"versions": {"hca_fw": spec}}})
        return {(f.code, f.severity, f.subject) for f in judge(snap, (), c, None).findings if f.code.startswith("version.")}

    assert version_findings(">=28.39.1002") == set()
    assert version_findings("28.41.1000") == set()
    assert version_findings(">=28.41.2000") == {("version.below_minimum", "warning", "node")}
    assert version_findings("28.39.1002") == {("version.mismatch", "warning", "node")}
