"""Slurm 25.05 topology.yaml from the placement (agentd.outputs.slurm_topology): one node's
block entry, many nodes merged into one block topology, checked against the schema of
Slurm's own parser (tests/fixtures/slurm), and the merge's hostlist and name checks."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from agentd.cli import main
from agentd.config import FabricSettings
from agentd.judging.placement import Placement, placement
from agentd.outputs.slurm_hostlist import expand
from agentd.outputs.slurm_topology import MergeError, merge_block_lines, read_topology, slurm_yaml_lines
from agentd.sim.build import build_tree
from tests.support.paths import FIXTURES
from tests.support.placement_snapshots import CLIQUE_ID, CLUSTER_UUID, COMPUTE, gb200_tray

SLURM = FIXTURES / "slurm"
SCHEMA = json.loads((SLURM / "topology.yaml.schema.json").read_text())
TRAY_BLOCK = f"nvl-{CLUSTER_UUID}-{CLIQUE_ID}"
MAX_BLOCK_LEVELS = 16  # src/plugins/topology/block/block_record.h


def slurm_checks(doc: object) -> None:
    """What Slurm 25.05 checks when it reads topology.yaml: the data parser's schema, then
    topology/block's own checks (block_record.c block_record_validate): a named block once,
    BlockSizes multiples of the first by powers of two; and ours: a node in one block."""
    jsonschema.validate(doc, SCHEMA)
    assert isinstance(doc, list)
    for topo in doc:
        assert next(iter(topo)) == "topology"  # "Must be the first attribute" (topology.yaml(5))
        if "block" not in topo:
            continue
        blocks = topo["block"].get("blocks", [])
        names = [b["block"] for b in blocks]
        assert len(names) == len(set(names))
        nodes = [n for b in blocks for n in expand(b["nodes"])]
        assert len(nodes) == len(set(nodes))
        sizes = topo["block"].get("block_sizes", [])
        for size in sizes:
            ratio, rest = divmod(size, sizes[0])
            assert rest == 0 and ratio & (ratio - 1) == 0 and ratio < 1 << MAX_BLOCK_LEVELS


def test_the_schema_takes_slurms_own_example_and_refuses_what_slurm_refuses() -> None:
    slurm_checks(yaml.safe_load((SLURM / "topology.yaml.5-example.yaml").read_text()))
    for bad in ([{"topology": "t", "block": {"blocks": [{"nodes": "n1"}]}}],  # a block without a name
                [{"topology": "t", "block": {"blocks": []}, "flat": True}],  # two types
                [{"topology": "t", "block": {"blocks": [{"block": "b", "node": "n1"}]}}],  # misspelt key
                [{"topology": "t"}]):  # no type
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, SCHEMA)


def test_one_nodes_entry_is_one_yaml_line() -> None:
    p = placement(gb200_tray(), COMPUTE, [], FabricSettings())
    (line,) = slurm_yaml_lines(p, "gb200-01")
    assert line == f'- {{block: "{TRAY_BLOCK}", nodes: "gb200-01"}}'
    assert yaml.safe_load(line) == [{"block": TRAY_BLOCK, "nodes": "gb200-01"}]
    comment, entry = slurm_yaml_lines(Placement(), "hgx-07")
    assert comment == "# hgx-07: no multi-node NVLink domain; a block of its own"
    assert yaml.safe_load(entry) == [{"block": "node-hgx-07", "nodes": "hgx-07"}]
    with pytest.raises(ValueError):
        slurm_yaml_lines(Placement(), "gpu[1-2]")


def _pdsh(host: str, lines: list[str]) -> list[str]:
    return [f"{host}: {line}" for line in lines]


def _fleet() -> list[str]:
    """Two racks of three trays and an HGX node, as pdsh prints their --slurm-yaml."""
    out = []
    for rack, clique in (("a", 1), ("b", 2)):
        for i in (3, 1, 2):
            host = f"gpu{rack}{i:02d}"
            out += _pdsh(host, slurm_yaml_lines(placement(gb200_tray(clique=clique), COMPUTE, [], FabricSettings()), host))
    return out + _pdsh("hgx01", slurm_yaml_lines(Placement(), "hgx01"))


def test_merged_nodes_make_one_block_topology_slurm_reads() -> None:
    text = merge_block_lines(_fleet(), yaml_out=True)
    doc = yaml.safe_load(text)
    slurm_checks(doc)
    (topo,) = doc
    assert topo["topology"] == "nvlink" and topo["cluster_default"] is True
    assert topo["block"] == {"blocks": [
        {"block": f"nvl-{CLUSTER_UUID}-1", "nodes": "gpua[01-03]"},
        {"block": f"nvl-{CLUSTER_UUID}-2", "nodes": "gpub[01-03]"},
        {"block": "node-hgx01", "nodes": "hgx01"},
    ]}
    assert text.splitlines()[-1] == "# blocks by size: 3 nodes x 2, 1 node x 1 (BlockSizes: each block must hold at least the smallest size)"


def test_yaml_and_conf_merge_into_each_other_and_merging_again_changes_nothing() -> None:
    yaml_text = merge_block_lines([*_fleet(), "BlockSizes=3,6"], yaml_out=True)
    assert "    block_sizes: [3, 6]" in yaml_text.splitlines()
    slurm_checks(yaml.safe_load(yaml_text))
    assert merge_block_lines(yaml_text.splitlines(), yaml_out=True) == yaml_text
    conf_text = merge_block_lines(yaml_text.splitlines())
    assert f"BlockName=nvl-{CLUSTER_UUID}-1 Nodes=gpua[01-03]" in conf_text and "BlockSizes=3,6" in conf_text
    assert merge_block_lines(conf_text.splitlines(), yaml_out=True) == yaml_text
    # --slurm lines and --slurm-yaml lines mix
    mixed = merge_block_lines([*conf_text.splitlines()[:3], *yaml_text.splitlines()[3:]], yaml_out=True)
    assert mixed == yaml_text


def test_a_renamed_topology_keeps_its_name_and_blocks_below_the_base_size_are_named() -> None:
    text = merge_block_lines(["- topology: gb200", "  block:", "    block_sizes: [4]", "    blocks:",
                              '      - {block: "r1", nodes: "n[1-4]"}', '- {block: "r2", nodes: "m[1-3]"}'], yaml_out=True)
    assert yaml.safe_load(text)[0]["topology"] == "gb200"
    assert "# 1 block(s) below the base size 4: r2 (3)" in text


@pytest.mark.parametrize("lines, problem", [
    # the red-team case: a hostlist hid a node in two blocks
    (["BlockName=nvl-a-1 Nodes=n[1-3]", "BlockName=nvl-b-1 Nodes=n2"], "node n2 is in block nvl-a-1 and in block nvl-b-1"),
    (['- {block: "a", nodes: "gpu[001-004]"}', '- {block: "b", nodes: "gpu003"}'], "node gpu003 is in block a and in block b"),
    ([f"BlockName={'b' * 300} Nodes=n1"], "is not a plain Slurm name of at most 64"),
    (["BlockName=x#y Nodes=n1"], "block name 'x#y' is not a plain"),
    (["BlockName=a Nodes=n3["], "block a: 'n3[': '[' without ']'"),
    (["BlockName=a Nodes=n[1-2]x#"], "is not a plain Slurm node name"),
    (["BlockName=a Nodes=gpu[0-999999999]"], "more than 65536 names"),
    (["BlockName=a Nodes=n1", "BlockSizes=18,36,54"], "54 is not 18 times a power of two"),
    (["BlockName=a Nodes=n1", "BlockSizes=36,18"], "larger than the one before"),
    (["BlockName=a Nodes=n1", "BlockSizes=0"], "must be positive"),
    (["BlockName=a Nodes=n1", "    block_sizes: [4]", "BlockSizes=8"], "BlockSizes lines differ"),
    (["- topology: a", "- topology: b", "BlockName=x Nodes=n1"], "more than one topology: a, b"),
    (["- block: b1", "  nodes: node[01-04]"], "line 1: not a topology/block line"),  # block style: not what agentd writes
    (['- {block: b1, nodes: 0123}'], "line 1: not a topology/block line"),  # an unquoted number is not a node name
])
def test_merge_refuses_what_would_make_a_wrong_file(lines: list[str], problem: str) -> None:
    with pytest.raises(MergeError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        read_topology(lines)


@pytest.mark.tree
def test_a_recorded_cluster_uuid_that_is_not_a_uuid_never_reaches_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The red-team case: a recording whose fabric_cluster_uuid carries a line break and a
    second BlockName. The recording does not match the schema (a read error), so the node
    has no domain and prints its own block, one BlockName line."""
    root = build_tree("gb200-nvl", tmp_path / "root")
    nvml = root / ".agentd" / "nvml.json"
    data = json.loads(nvml.read_text())
    assert main(["topology", "--host-root", str(root), "--slurm", "--node-name", "gb1"]) == 0
    good = capsys.readouterr().out.splitlines()
    assert good[-1].startswith(f"BlockName=nvl-{data['gpus'][0]['fabric_cluster_uuid']}-")
    for g in data["gpus"]:
        g["fabric_cluster_uuid"] = "x Nodes=gpu[001-999]\nBlockName=evil"
    nvml.write_text(json.dumps(data))
    for flag in ("--slurm", "--slurm-yaml"):
        assert main(["topology", "--host-root", str(root), flag, "--node-name", "gb1"]) == 0
        out = capsys.readouterr().out
        assert "evil" not in out and "gpu[" not in out
        assert [line for line in out.splitlines() if not line.startswith("#")] in (
            ["BlockName=node-gb1 Nodes=gb1"], ['- {block: "node-gb1", nodes: "gb1"}'])
