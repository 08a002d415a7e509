"""Red-team reproductions: `agentd enforce` must not change a setting on a reading that
the kernel could not have produced, nor lose or misstate a prior value."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agentd import sim
from agentd.cli import main

pytestmark = pytest.mark.tree


def _cfg(tmp: Path, knobs: str) -> Path:
    p = tmp / "agentd.toml"
    p.write_text(f"[intervals]\ncheck_rate_window_s = 0\n[enforce]\nknobs = {knobs}\n")
    return p


def _apply(capsys: pytest.CaptureFixture[str], root: Path, cfg: Path) -> tuple[int, dict[str, Any]]:  # Any: the CLI's JSON
    rc = main(["enforce", "apply", "--yes", "--host-root", str(root), "--config", str(cfg), "--format", "json"])
    return rc, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("text", ["-5", "99999999999999999999999", "4294967296"])
def test_an_mtu_the_kernel_cannot_print_is_not_a_reading_to_act_on(text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The kernel prints a netdev's MTU as an unsigned int: a negative or larger number in
    the file is not the device's MTU. agentd must not change it (nor journal it as the
    prior value a rollback would try to put back)."""
    root = sim.build_tree("h100-roce", tmp_path / "node")
    mtu = Path(os.path.realpath(root / "sys/class/net/ens2np0/mtu"))
    mtu.write_text(text + "\n")
    rc, out = _apply(capsys, root, _cfg(tmp_path, '["mtu"]'))
    assert not [r for r in out["results"] if r["target"] == "ens2np0"], out["results"]
    assert mtu.read_text() == text + "\n"
