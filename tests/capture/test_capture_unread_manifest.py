"""A capture whose recording this agentd cannot read is refused, never judged healthy
(issue 42, item 8).

A newer agentd's capture (manifest version 2), or one whose manifest was damaged, has its
recorded answers (NVML, ethtool, DCB) dropped: judged without them, a node with a lost
GPU and a down NVLink replayed as ``ok``, exit 0. The commands that judge a root (check,
check --npd, topology, render, capture, run) now refuse it with exit 3 and the reason;
``agentd inspect`` still shows the files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd import sim
from agentd.base import recorded
from agentd.capture.replay import unpack
from agentd.cli import main

pytestmark = pytest.mark.tree


@pytest.fixture
def sick_capture(tmp_path: Path) -> Path:
    """A capture of a node with a lost GPU and a down NVLink, unpacked."""
    root = sim.build_tree("h100-ib", tmp_path / "sim", faults=["nvlink_down@gpu3", "gpu_lost@gpu5"])
    archive = tmp_path / "c.tar.gz"
    assert main(["capture", "--host-root", str(root), "--out", str(archive)]) == 0
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    unpack(archive, unpacked)
    return unpacked


def _manifest(root: Path, **changes: object) -> None:
    path = root / recorded.MANIFEST
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


def test_a_capture_this_agentd_reads_is_judged_sick(sick_capture, capsys):
    assert main(["check", "--host-root", str(sick_capture), "--format", "json"]) == 2
    found = {(f["code"], f["subject"]) for f in json.loads(capsys.readouterr().out)["findings"] if f["severity"] == "critical"}
    assert ("gpu.lost", "gpu5") in found and any(code == "nvlink.link.down" for code, _ in found)


@pytest.mark.parametrize("damage", [{"version": recorded.VERSION + 1}, {"format": "something-else"}])
def test_a_capture_whose_manifest_is_not_read_is_refused_not_judged_ok(sick_capture, capsys, damage):
    _manifest(sick_capture, **damage)
    assert main(["check", "--host-root", str(sick_capture)]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert "cannot read" in err and "recorded answers" in err and recorded.MANIFEST in err
    for argv in (["topology"], ["render", "--out-dir", str(sick_capture.parent / "nccl")]):
        assert main([*argv, "--host-root", str(sick_capture)]) == 3, argv
        assert "recorded answers" in capsys.readouterr().err
    # NPD's plugin protocol: anything but 0 and 1 is Unknown, with the reason on stdout
    assert main(["check", "--npd", "nvlink", "--host-root", str(sick_capture)]) == 2
    assert capsys.readouterr().out.startswith("unknown: ")
    # inspect only shows what is there: it still runs
    assert main(["inspect", "--host-root", str(sick_capture)]) == 0


@pytest.mark.proc
def test_the_daemon_refuses_it_too(sick_capture, tmp_path):
    import subprocess

    from tests.support.daemon_harness import agentd_cmd, free_port

    _manifest(sick_capture, version=recorded.VERSION + 1)
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(f'[paths]\nstate_dir = "{tmp_path / "state"}"\n')
    p = subprocess.run([*agentd_cmd(), "run", "--config", str(cfg), "--host-root", str(sick_capture), "--listen", f"127.0.0.1:{free_port()}"],
                       capture_output=True, text=True, timeout=60)  # a guard: it exits at once
    assert p.returncode == 3, p.stdout + p.stderr
    assert "recorded answers" in p.stderr
