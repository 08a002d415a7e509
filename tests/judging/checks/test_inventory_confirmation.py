"""A baseline device is missing only when two collections in a row miss it, and a GPU is
found by its UUID as well as its bus id (issue 42, items 5 and 6).

- One transient miss (a 1 ms rename race, an HCA renamed at runtime before the slow tier
  read its bus id) made the node critical for a cycle: it is now a warning, critical when
  the next collection misses the device too (as ``ib.port.unreadable`` waits); with no
  earlier collection it is critical at once.
- A GPU that came back at a new bus id (BIOS or firmware renumbering) was
  ``inventory.gpu.missing`` while all 8 were present: the baseline keeps its UUID.

Through `agentd check` on a simulated node judged against its recorded baseline (check
collects twice, ``intervals.check_rate_window_s`` apart), and the check itself for the
confirmation rules.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentd import cli, sim
from agentd.judging.baseline import baseline_from
from agentd.judging.checks.inventory import check_inventory
from agentd.judging.roles import hca_roles
from tests.support.check_runs import between_collections
from tests.support.check_snapshots import cfg, inp, later, layout, node, problems, with_gpu, with_hca, without_gpu, without_hca
from tests.support.recorded_baseline import baseline_of, record_baseline


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = sim.build_tree("h100-ib", tmp_path / "root")
    record_baseline(r, baseline_of(r))
    return r


def check(root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, set[tuple[str, str, str]]]:
    conf = tmp_path / "agentd.toml"
    conf.write_text("[intervals]\ncheck_rate_window_s = 0.1\n[timeouts]\nnvml_s = 2\n")
    rc = cli.main(["check", "--host-root", str(root), "--config", str(conf), "--format", "json"])
    found = json.loads(capsys.readouterr().out)["findings"]
    return rc, {(f["severity"], f["code"], f["subject"]) for f in found if f["code"].startswith("inventory.")}


@pytest.mark.tree
def test_a_device_gone_between_two_collections_is_a_warning_not_critical(root, tmp_path, capsys, monkeypatch):
    between_collections(monkeypatch, lambda: sim.apply_fault(root, "nic_removed@mlx5_5"))
    rc, found = check(root, tmp_path, capsys)
    assert found == {("warning", "inventory.hca.missing", "mlx5_5")}
    assert rc == 1  # degraded: seen once; the next collection confirms or clears it


def _rename_hca(root: Path, old: str, new: str) -> None:
    """RDMA device ``old`` renamed ``new`` at runtime (`rdma dev set old name new`): its
    class entry and its directory under the PCI function."""
    link = root / "sys/class/infiniband" / old
    target = os.readlink(link)
    (link.parent / target).resolve().rename((link.parent / target).resolve().with_name(new))
    link.unlink()
    (link.parent / new).symlink_to(target[: -len(old)] + new)


@pytest.mark.tree
def test_an_hca_renamed_between_two_collections_is_not_missing(root, tmp_path, capsys, monkeypatch):
    """The fast tier knows the renamed device's bus id from its class entry's path, before
    the slow tier reads its inventory: it is the baseline's HCA under another name."""
    between_collections(monkeypatch, lambda: _rename_hca(root, "mlx5_5", "mlx5_15"))
    rc, found = check(root, tmp_path, capsys)
    assert found == set()


@pytest.mark.tree
def test_a_device_gone_in_both_collections_is_critical(root, tmp_path, capsys):
    sim.apply_fault(root, "nic_removed@mlx5_5")
    rc, found = check(root, tmp_path, capsys)
    assert ("critical", "inventory.hca.missing", "mlx5_5") in found and rc == 2


def _move_gpu(root: Path, old: str, new: str) -> None:
    """GPU ``old`` re-enumerated at bus id ``new`` (same card, same UUID), as after a BIOS
    or firmware change: its device directory, the bus and driver links, NVML's answer."""
    link = root / "sys/bus/pci/devices" / old
    target = os.readlink(link)
    real = (link.parent / target).resolve()
    real.rename(real.with_name(new))
    link.unlink()
    (link.parent / new).symlink_to(target[: -len(old)] + new)
    drv = root / "sys/bus/pci/drivers/nvidia"
    dtarget = os.readlink(drv / old)
    (drv / old).unlink()
    (drv / new).symlink_to(dtarget[: -len(old)] + new)
    nvml = root / ".agentd/nvml.json"
    doc = json.loads(nvml.read_text())
    for g in doc["gpus"]:
        if g["pci_bus_id"] == old:
            g["pci_bus_id"] = new
    nvml.write_text(json.dumps(doc))


@pytest.mark.tree
def test_a_gpu_at_a_new_bus_id_is_found_by_its_uuid(root, tmp_path, capsys):
    _move_gpu(root, "0000:18:00.0", "0000:19:00.0")
    rc, found = check(root, tmp_path, capsys)
    assert found == set() and rc == 0


# -- the check itself -----------------------------------------------------------------


def base_of(s):
    return baseline_from(s, hca_roles(s, cfg().hca))


def test_missing_after_a_collection_that_saw_it_is_a_warning_then_critical():
    healthy = node()
    base = base_of(healthy)
    gone = later(without_hca(healthy, "mlx5_6"), 10)
    first = check_inventory(inp(gone, [healthy], baseline=base))
    assert problems(first) == [("warning", "inventory.hca.missing", "mlx5_6")]
    assert "critical if the next one misses it too" in first[0].message
    second = check_inventory(inp(later(gone, 10), [healthy, gone], baseline=base))
    assert problems(second) == [("critical", "inventory.hca.missing", "mlx5_6")]
    assert check_inventory(inp(later(healthy, 30), [healthy, gone], baseline=base)) == []  # back: nothing


def test_gpus_ports_and_the_gpu_count_wait_for_a_second_collection_too():
    healthy = node()
    base = base_of(healthy)
    config = cfg(expect={"gpus": 8})
    bus = layout(3)["gpu"]
    for gone, code, subject in ((without_gpu(healthy, 3), "inventory.gpu.missing", bus),
                                (without_gpu(healthy, 3), "inventory.gpu.count", "node"),
                                (with_hca(healthy, "mlx5_2", ports=()), "inventory.port.missing", "mlx5_2:1")):
        now = later(gone, 10)
        assert ("warning", code, subject) in problems(check_inventory(inp(now, [healthy], config=config, baseline=base)))
        assert ("critical", code, subject) in problems(check_inventory(inp(later(now, 10), [healthy, now], config=config, baseline=base)))


def test_with_no_earlier_collection_missing_is_critical_at_once():
    healthy = node()
    assert problems(check_inventory(inp(without_hca(healthy, "mlx5_6"), baseline=base_of(healthy)))) == [
        ("critical", "inventory.hca.missing", "mlx5_6")]


def test_a_gpu_is_found_by_uuid_and_a_uuid_does_not_stand_in_for_another_gpu():
    healthy = node()
    base = base_of(healthy)
    g3 = next(g for g in healthy.gpus if g.index == 3)
    moved = with_gpu(healthy, 3, pci_bus_id="0000:43:00.0")  # same UUID, new bus id
    assert check_inventory(inp(moved, baseline=base)) == []
    other = with_gpu(moved, 3, uuid="GPU-00000000-0000-0000-0000-000000000000")  # another card at another bus id
    assert problems(check_inventory(inp(other, baseline=base))) == [("critical", "inventory.gpu.missing", g3.pci_bus_id)]
