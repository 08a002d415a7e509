"""`agentd topology --slurm-merge --yaml`: nodes' --slurm-yaml lines (stdin and files) into
one topology.yaml, in-process; --yaml only with the merge."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from agentd.cli import main

PDSH = """\
gpu02: - {block: "nvl-a-1", nodes: "gpu02"}
gpu01: - {block: "nvl-a-1", nodes: "gpu01"}
hgx1: # hgx1: no multi-node NVLink domain; a block of its own
hgx1: - {block: "node-hgx1", nodes: "hgx1"}
"""


def test_merge_writes_topology_yaml_from_stdin_and_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(PDSH))
    assert main(["topology", "--slurm-merge", "--yaml"]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out)[0]["block"]["blocks"] == [{"block": "nvl-a-1", "nodes": "gpu[01-02]"}, {"block": "node-hgx1", "nodes": "hgx1"}]
    merged = tmp_path / "topology.yaml"
    merged.write_text(out)
    more = tmp_path / "more"
    more.write_text("gpu03: BlockName=nvl-a-1 Nodes=gpu03\n")
    assert main(["topology", "--slurm-merge", str(merged), str(more), "--yaml"]) == 0
    assert '      - {block: "nvl-a-1", nodes: "gpu[01-03]"}' in capsys.readouterr().out.splitlines()


def test_yaml_goes_with_the_merge_and_a_bad_merge_writes_nothing(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["topology", "--yaml"]) == 3
    assert "--yaml goes with --slurm-merge" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.StringIO('- {block: "a", nodes: "n[1-3]"}\n- {block: "b", nodes: "n2"}\n'))
    assert main(["topology", "--slurm-merge", "--yaml"]) == 3
    captured = capsys.readouterr()
    assert captured.out == "" and "node n2 is in block a and in block b" in captured.err
