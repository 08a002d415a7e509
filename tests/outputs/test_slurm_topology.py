"""Slurm topology/block lines from the placement, and their merge (agentd.outputs.slurm_topology)."""

from __future__ import annotations

import pytest

from agentd.config import FabricSettings
from agentd.judging.placement import Placement, placement
from agentd.outputs.slurm_topology import (
    BLOCK_NAME_MAX,
    MergeError,
    block_name,
    merge_block_lines,
    short_hostname,
    slurm_block_lines,
)
from tests.support.placement_snapshots import CLIQUE_ID, CLUSTER_UUID, COMPUTE, gb200_tray

AUTO = FabricSettings()


def _blocks(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


def test_a_tray_in_a_domain_prints_its_domain_block() -> None:
    p = placement(gb200_tray(), COMPUTE, [], AUTO)
    assert slurm_block_lines(p, "gb200-01") == [f"BlockName=nvl-{CLUSTER_UUID}-{CLIQUE_ID} Nodes=gb200-01"]
    assert len(block_name(p, "x")) <= BLOCK_NAME_MAX


def test_a_node_without_a_domain_is_a_block_of_its_own_with_a_comment() -> None:
    lines = slurm_block_lines(Placement(), "hgx-07")
    assert lines == ["# hgx-07: no multi-node NVLink domain; a block of its own", "BlockName=node-hgx-07 Nodes=hgx-07"]
    unassigned = placement(gb200_tray(**{f"gpu{i}": {"fabric_clique_id": 0} for i in range(4)}), COMPUTE, [], AUTO)
    assert unassigned.multi_node and unassigned.domain is None
    comment, line = slurm_block_lines(unassigned, "gb200-02")
    assert comment.startswith("# gb200-02: a multi-node NVLink domain is expected") and line == "BlockName=node-gb200-02 Nodes=gb200-02"


def test_long_node_names_keep_block_names_within_slurms_limit() -> None:
    node = "n" + "x" * 80
    (_, line) = slurm_block_lines(Placement(), node)
    name = line.split()[0].removeprefix("BlockName=")
    assert len(name) <= BLOCK_NAME_MAX and name.startswith("node-")
    assert block_name(Placement(), node) != block_name(Placement(), node + "y")


@pytest.mark.parametrize("node", ["", "a b", "n[1-2]", "a,b", "x=y", "ib\udcff", "-lead"])
def test_node_names_slurm_would_misread_are_refused(node: str) -> None:
    with pytest.raises(ValueError):
        slurm_block_lines(Placement(), node)


def test_short_hostname() -> None:
    assert short_hostname("gpu001.cluster.example.com") == "gpu001"
    assert short_hostname("gpu001") == "gpu001"
    assert short_hostname(None) is None and short_hostname("") is None


def test_merge_groups_nodes_by_block_from_pdsh_output() -> None:
    pdsh = [
        "gpu10: BlockName=nvl-a-1 Nodes=gpu10",
        "gpu2: BlockName=nvl-a-1 Nodes=gpu2",
        "login1: # login1: no multi-node NVLink domain; a block of its own",
        "login1: BlockName=node-login1 Nodes=login1",
        "gpu1.example.com: BlockName=nvl-b-2 Nodes=gpu1",
        "",
        "BlockName=nvl-a-1 Nodes=gpu3",  # not through pdsh
    ]
    text = merge_block_lines(pdsh)
    # blocks of more than one node first: Slurm takes the first block's size as the base
    assert _blocks(text) == ["BlockName=nvl-a-1 Nodes=gpu[2-3,10]", "BlockName=nvl-b-2 Nodes=gpu1",
                             "BlockName=node-login1 Nodes=login1"]
    assert text.splitlines()[-1].startswith("# blocks by size: 3 nodes x 1, 1 node x 2")


def test_merge_is_idempotent_and_compresses_hostlists_and_keeps_blocksizes() -> None:
    first = merge_block_lines(["blockname=b1 nodes=tux[0-3,12],tux20", "BlockName=b1 Nodes=tux21", "BlockSizes=1,4"])
    assert _blocks(first) == ["BlockName=b1 Nodes=tux[0-3,12,20-21]", "BlockSizes=1,4"]
    assert merge_block_lines(first.splitlines()) == first
    assert merge_block_lines([*first.splitlines(), "BlockName=b1 Nodes=tux20"]) == first


@pytest.mark.parametrize("lines, problem", [
    (["BlockName=a Nodes=n1", "BlockName=b Nodes=n1"], "node n1 is in block a and in block b"),
    (["SwitchName=s0 Nodes=n1"], "line 1: not a topology/block line"),
    (["BlockName=a"], "line 1: not a topology/block line"),
    (["BlockName=a Nodes=n1 Nodes=n2"], "line 1: not a topology/block line"),
    (["BlockName=a Nodes="], "line 1: not a topology/block line"),
    (["BlockSizes=1", "BlockSizes=2"], "BlockSizes lines differ"),
])
def test_merge_refuses_what_would_make_a_wrong_file(lines: list[str], problem: str) -> None:
    with pytest.raises(MergeError, match=problem):
        merge_block_lines(lines)


def test_merge_of_nothing_is_refused() -> None:
    # topology/block refuses a file without a block ("No blocks configured")
    with pytest.raises(MergeError, match="no blocks"):
        merge_block_lines(["# only a comment", ""])
