"""`agentd topology`: the placement, the Slurm block line and the merge, on a simulated node
(the command in this process; the merge reading stdin and files)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from agentd import sim
from tests.support.cli import Ran, run_cli


def run(*args: str, stdin: str | None = None) -> Ran:
    return run_cli("topology", *args, stdin=stdin)


@pytest.fixture(scope="module")
def h100(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("topo")
    root = sim.build_tree("h100-ib", tmp / "root")
    cfg = tmp / "agentd.toml"
    cfg.write_text("[timeouts]\nnvml_s = 1\n")
    return root, cfg


@pytest.mark.tree
def test_json_has_the_rails_and_the_hash(h100) -> None:
    root, cfg = h100
    p = run("--host-root", str(root), "--config", str(cfg), "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["node"] == "sim-h100-ib-01"
    assert doc["domain"] is None and doc["multi_node"] is False
    assert [(r["gpu"], r["nic"], r["port"], r["netdev"], r["path"]) for r in doc["rails"]] == [
        (i, f"mlx5_{i}", 1, f"ib{i}", "PIX") for i in range(8)]
    assert all(r["gpu_pcie_root"] == r["nic_pcie_root"] and r["gpu_pcie_root"].startswith("pci0000:") for r in doc["rails"])
    # the documented recipe (docs/topology.md) over the rails the command printed
    lines = sorted(f"{r['gpu']}:{r['nic']}:{r['port']}\n" for r in doc["rails"])
    assert doc["rail_hash"] == hashlib.sha256("".join(lines).encode()).hexdigest()[:12]


def test_text_lists_one_line_a_rail(h100) -> None:
    root, cfg = h100
    p = run("--host-root", str(root), "--config", str(cfg))
    assert p.returncode == 0, p.stderr
    assert "nvlink domain  none (no multi-node domain)" in p.stdout
    rails = [line.split() for line in p.stdout.splitlines() if line[:1].isdigit()]
    assert [(r[0], r[2], r[4]) for r in rails] == [(str(i), f"mlx5_{i}", f"ib{i}") for i in range(8)]


def test_slurm_line_of_a_node_without_a_multi_node_domain(h100) -> None:
    root, cfg = h100
    p = run("--host-root", str(root), "--config", str(cfg), "--slurm")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["# sim-h100-ib-01: no multi-node NVLink domain; a block of its own",
                                     "BlockName=node-sim-h100-ib-01 Nodes=sim-h100-ib-01"]
    p = run("--host-root", str(root), "--config", str(cfg), "--slurm", "--node-name", "gpu017")
    assert p.stdout.splitlines()[-1] == "BlockName=node-gpu017 Nodes=gpu017"
    bad = run("--host-root", str(root), "--config", str(cfg), "--slurm", "--node-name", "gpu[1-2]")
    assert bad.returncode == 3 and bad.stdout == "" and "--node-name" in bad.stderr


def test_nodes_lines_through_pdsh_and_merge(h100, tmp_path) -> None:
    root, cfg = h100
    outputs = []
    for node in ("gpu2", "gpu10"):
        p = run("--host-root", str(root), "--config", str(cfg), "--slurm", "--node-name", node)
        outputs += [f"{node}: {line}" for line in p.stdout.splitlines()]  # as pdsh prints them
    tray = [f"tray{i}: BlockName=nvl-3f1c9a52-7d4e-4b8a-9c21-5e6f7a8b9c0d-32766 Nodes=tray{i}" for i in (3, 1, 2)]
    merged = run("--slurm-merge", stdin="\n".join(outputs + tray) + "\n")
    assert merged.returncode == 0, merged.stderr
    assert [line for line in merged.stdout.splitlines() if not line.startswith("#")] == [
        "BlockName=nvl-3f1c9a52-7d4e-4b8a-9c21-5e6f7a8b9c0d-32766 Nodes=tray[1-3]",
        "BlockName=node-gpu2 Nodes=gpu2",
        "BlockName=node-gpu10 Nodes=gpu10",
    ]
    # files, and a merged file merged again, give the same topology.conf
    (tmp_path / "a").write_text("\n".join(outputs) + "\n")
    (tmp_path / "b").write_text(merged.stdout)
    again = run("--slurm-merge", str(tmp_path / "a"), str(tmp_path / "b"))
    assert again.returncode == 0 and again.stdout == merged.stdout


def test_merge_refuses_a_node_in_two_blocks_and_writes_nothing(tmp_path) -> None:
    p = run("--slurm-merge", stdin="n1: BlockName=nvl-a-1 Nodes=n1\nn1: BlockName=node-n1 Nodes=n1\n")
    assert p.returncode == 3 and p.stdout == ""
    assert "node n1 is in block nvl-a-1 and in block node-n1" in p.stderr
    missing = run("--slurm-merge", str(tmp_path / "nope"))
    assert missing.returncode == 3 and "cannot read" in missing.stderr
