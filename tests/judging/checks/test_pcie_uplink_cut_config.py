"""A down-trained PCIe switch uplink is reported under the shipped unit, whose reader gets
only 64 bytes of config space (issue 42, item 9).

Without CAP_SYS_ADMIN the kernel serves the first 64 bytes of config space, which hold no
capability, so no port says it is a switch's upstream port; the check judged switch
uplinks only by that type, and an x8-of-x16 uplink passed (`check` exit 0). Link widths
and speeds are sysfs files any reader sees: the uplink is now known by its place in the
PCI tree (root port, switch upstream port, downstream port, device).

Through `agentd check` on a simulated node whose config files are cut to 64 bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd import sim
from agentd.cli import main
from tests.host.test_pci_config_truncated import UNPRIVILEGED, _cut_config_space
from tests.support.check_snapshots import BRIDGE_CLASS, layout, pci

UPLINK = "sys/devices/pci0000:14/0000:14:01.0/0000:15:00.0"  # the switch above GPU 0 and mlx5_0 (h100-ib)


def check(root: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[tuple[str, str], dict]]:
    rc = main(["check", "--host-root", str(root), "--format", "json", "--all"])
    return rc, {(f["code"], f["subject"]): f for f in json.loads(capsys.readouterr().out)["findings"]}


@pytest.mark.tree
@pytest.mark.parametrize("cut", [False, True], ids=["whole", "64-bytes"])
def test_a_downtrained_switch_uplink_is_reported_with_or_without_config_space(tmp_path, capsys, cut):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    (root / UPLINK / "current_link_width").write_text("8\n")  # x8 of x16: half its bandwidth
    if cut:
        _cut_config_space(root, UNPRIVILEGED)
    rc, found = check(root, capsys)
    f = found.get(("pcie.link.downtrained", "0000:15:00.0"))
    assert f is not None, sorted(found)
    assert f["severity"] == "warning" and "switch upstream link" in f["message"] and "x8" in f["message"]
    assert ("place in the PCI tree" in f["message"]) == cut
    assert rc == 1
    if cut:  # the fact that config space was cut stays a fact (ok): the unit's choice, not a fault
        assert found[("pcie.config_space.truncated", "node")]["severity"] == "ok"


@pytest.mark.tree
def test_a_healthy_node_with_64_bytes_of_config_space_stays_ok(tmp_path, capsys):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    _cut_config_space(root, UNPRIVILEGED)
    rc, found = check(root, capsys)
    assert rc == 0 and not [k for k in found if k[0] == "pcie.link.downtrained"]


def _bridge(bdf: str, chain: tuple[str, ...] = (), *, port_type: str | None = None, config_bytes: int = UNPRIVILEGED):
    return pci(bdf, BRIDGE_CLASS, chain, port_type=port_type).model_copy(update={"config_bytes": config_bytes})


def test_port_types_follow_the_tree_only_where_config_space_was_cut():
    from agentd.judging.checks.pcie import port_types

    b = layout(0)
    rp, up, dn = _bridge(b["rp"]), _bridge(b["up"], (b["rp"],)), _bridge(b["dn_gpu"], (b["rp"], b["up"]))
    assert port_types([rp, up, dn]) == [("root_port", True), ("upstream", True), ("downstream", True)]
    assert port_types([rp, up, dn, up, dn])[3:] == [("upstream", True), ("downstream", True)]  # two switches deep
    whole = _bridge(b["up"], (b["rp"],), config_bytes=4096)  # read whole, no PCIe type: a PCI bridge
    assert port_types([rp, whole, dn]) == [("root_port", True), (None, False), (None, False)]
    assert port_types([rp, None, dn]) == [("root_port", True), (None, False), (None, False)]  # a gap stops it
    known = _bridge(b["up"], (b["rp"],), port_type="upstream", config_bytes=4096)
    assert port_types([rp, known, dn])[1:] == [("upstream", False), ("downstream", True)]
