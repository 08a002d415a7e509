"""`agentd check` shows info findings (issue 37): an application's XID is listed in the
text and the JSON, and the status and exit code stay what they were without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd import sim
from agentd.cli import main

pytestmark = pytest.mark.tree


def _run(capsys: pytest.CaptureFixture[str], tmp: Path, root: Path, fmt: str) -> tuple[int, str]:
    cfg = tmp / "agentd.toml"
    cfg.write_text(f'[intervals]\ncheck_rate_window_s = 0\n[paths]\nbaseline = "{tmp / "baseline.json"}"\nstate_dir = "{tmp / "state"}"\n')
    code = main(["check", "--config", str(cfg), "--host-root", str(root), "--format", fmt])
    return code, capsys.readouterr().out


def test_an_application_xid_is_shown_and_never_judged(tmp_path, capsys):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    sim.apply_fault(root, "xid@gpu0=13")
    code, text = _run(capsys, tmp_path, root, "text")
    lines = text.splitlines()
    assert code == 0 and lines[0] == "ok"
    assert [line for line in lines if line.startswith("info ")] == [next(line for line in lines if line.startswith("info gpu.xid gpu0: XID 13"))]
    code, out = _run(capsys, tmp_path, root, "json")
    doc = json.loads(out)
    assert code == 0 and doc["status"] == "ok"
    assert [(f["code"], f["severity"], f["subject"]) for f in doc["findings"] if f["severity"] == "info"] == [("gpu.xid", "info", "gpu0")]
