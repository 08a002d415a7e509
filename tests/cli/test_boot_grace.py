"""Boot grace is taken from the judged node's boot time, on every kind of root: a simulated
tree and a capture replayed on another machine use the btime they hold, never the boot of
the machine agentd runs on (issue 15). Through `agentd check`, as Slurm's fallback runs it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agentd import sim
from agentd.cli import main


def _config(tmp: Path, grace_s: float) -> Path:
    cfg = tmp / "agentd.toml"
    cfg.write_text(f"[intervals]\ncheck_rate_window_s = 0\n[timeouts]\nnvml_s = 1\n[lifecycle]\nboot_grace_s = {grace_s}\n")
    return cfg


def _check(capsys: pytest.CaptureFixture[str], cfg: Path, root: Path) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["check", "--config", str(cfg), "--host-root", str(root), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def _port_down(doc: dict) -> dict:
    [f] = [f for f in doc["findings"] if f["code"] == "ib.port.down" and f["subject"] == "mlx5_0:1"]
    return f


@pytest.mark.tree
def test_a_node_that_just_booted_is_in_grace_and_one_up_for_an_hour_is_not(tmp_path, capsys):
    root = sim.build_tree("h100-ib", tmp_path / "root", faults=["port_down@mlx5_0"], booted_ago_s=30)
    cfg = _config(tmp_path, 600)
    code, doc = _check(capsys, cfg, root)
    assert code == 0 and doc["status"] == "ok"
    assert _port_down(doc)["withheld"] == "boot_grace" and _port_down(doc)["severity"] == "critical"

    sim.set_boot_time(root, time.time() - 3600)
    code, doc = _check(capsys, cfg, root)
    assert code == 2 and _port_down(doc)["withheld"] is None


@pytest.mark.tree
def test_a_capture_replays_with_its_own_boot_time(tmp_path, capsys):
    root = sim.build_tree("h100-ib", tmp_path / "root", faults=["port_down@mlx5_0"], booted_ago_s=30)
    cfg = _config(tmp_path, 600)
    out = tmp_path / "node.agentd-capture.tar.gz"
    assert main(["capture", "--config", str(cfg), "--host-root", str(root), "--out", str(out)]) == 0
    code, doc = _check(capsys, cfg, out)
    assert code == 0 and _port_down(doc)["withheld"] == "boot_grace"
    # the same capture judged with a shorter grace than its node's uptime: counted
    code, doc = _check(capsys, _config(tmp_path, 5), out)
    assert code == 2 and _port_down(doc)["withheld"] is None


def test_flaps_while_the_node_comes_up_are_not_counted(tmp_path, capsys):
    """Links train and retrain at bring-up: link_downed rising within the grace window is
    no flapping port once the window is over."""
    from agentd.config import AgentConfig
    from agentd.judging.checks.common import CheckInput
    from agentd.judging.checks.ib import check_flapping
    from tests.support.service_snapshots import snapshot

    base = snapshot()
    booted = base.taken_at - 100

    def at(t: float, downed: int):
        hcas = []
        for h in base.hcas:
            ports = tuple(p.model_copy(update={"counters": {**p.counters, "link_downed": downed}}) if h.name == "mlx5_0" else p for p in h.ports)
            hcas.append(h.model_copy(update={"ports": ports}))
        system = base.system.model_copy(update={"booted_at": booted})
        return base.model_copy(update={"taken_at": t, "hcas": tuple(hcas), "system": system})

    history = (at(booted + 10, 0), at(booted + 20, 2), at(booted + 40, 5))
    now = at(booted + 100, 5)
    graced = AgentConfig.model_validate({"lifecycle": {"boot_grace_s": 60}})
    assert check_flapping(CheckInput(now, history, graced)) == []
    assert [f.code for f in check_flapping(CheckInput(now, history, AgentConfig()))] == ["ib.port.flapping"]
