"""tests/gpu/render_topo.py, the GPU check's fallback when `agentd render` writes nothing:
the XML it prints is the one `agentd render` writes for the same node."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.cli import run_cli
from tests.support.paths import REPO


def body(xml: str) -> list[str]:
    """The XML without its header comments (they date the measurement)."""
    return [line for line in xml.splitlines() if not line.startswith("<!--")]


@pytest.mark.proc
def test_the_raw_render_is_agentd_renders(shared_tree, tmp_path):
    root = shared_tree("h100-ib")
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(f'host_root = "{root}"\n')
    assert run_cli("render", "--config", str(cfg), "--out-dir", str(tmp_path / "render")).returncode == 0
    p = subprocess.run([sys.executable, str(REPO / "tests" / "gpu" / "render_topo.py"), "--config", str(cfg)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert body(p.stdout) == body((tmp_path / "render" / "nccl-topo.xml").read_text()) and len(body(p.stdout)) > 20


@pytest.mark.proc
def test_no_gpu_no_xml_and_the_reason(tmp_path):
    root = tmp_path / "root"
    (root / "sys").mkdir(parents=True)
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(f'host_root = "{root}"\nhost_mode = "offline"\n')
    p = subprocess.run([sys.executable, str(REPO / "tests" / "gpu" / "render_topo.py"), "--config", str(cfg)], capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout, p.stderr) == (1, "", "no topology XML: the node has no GPUs\n")
