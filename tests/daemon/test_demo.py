"""`make demo` (issue 43): the commands it prints run as printed, and an injected kernel log
fault clears after `--clear-fault` (on main an XID stayed 503 for the 24 h of kernel.hold_s
with no hint why)."""

from __future__ import annotations

import re
import shlex
import time

import pytest

from agentd import sim
from agentd.collection.collector import Collector
from agentd.config import load_config
from agentd.daemon.app import DEMO_FAULT, demo_commands
from agentd.host.fs import HostRoot
from agentd.judging.judge import judge
from agentd.sim.fault_scope import held_note
from tests.support.cli import run_cli
from tests.support.paths import REPO

DEMO_CONFIG = REPO / "demo" / "agentd.toml"


def test_make_demo_runs_the_simulated_node_with_the_demo_config():
    make = (REPO / "Makefile").read_text()
    config = re.search(r"^DEMO_CONFIG := (\S+)$", make, re.M)
    assert config is not None and REPO / config.group(1) == DEMO_CONFIG
    assert "agentd run --simulate $(PROFILE) --config $(DEMO_CONFIG)" in make
    cfg = load_config(DEMO_CONFIG, environ={})
    # every window a fault leaves its finding behind for is short; the clear note says so
    assert cfg.kernel.hold_s <= 60 and cfg.kernel.window_s <= 60 and cfg.thresholds.flap_window_s <= 60
    assert 0 < cfg.kernel.reset_hold_s <= 60  # 0: an XID 79 would hold until a reboot the demo never does
    assert cfg.thresholds.rate_window_s <= 60 and cfg.thresholds.pcie_retrain_window_s <= 60
    assert f"holds for {cfg.kernel.hold_s:g} s" in held_note("xid")


def test_the_printed_commands_use_the_command_that_runs_and_parse(tmp_path):
    text = demo_commands(tmp_path / "sim root", tmp_path / "sim root-out" / "nccl.env", "/repo/.venv/bin/agentd")("http://127.0.0.1:9478")
    lines = [line.strip() for line in text.splitlines()]
    assert "curl -s http://127.0.0.1:9478/health?format=text" in lines
    assert "curl -s http://127.0.0.1:9478/metrics | grep agentd_ib_port_rate" in lines
    inject = [shlex.split(line) for line in lines if line.startswith("/repo/.venv/bin/agentd simulate")]
    assert [w[1:] for w in inject] == [
        ["simulate", "--out", str(tmp_path / "sim root"), "--fault", DEMO_FAULT],
        ["simulate", "--out", str(tmp_path / "sim root"), "--clear-fault", DEMO_FAULT],
        ["simulate", "--list"],
    ]
    for words in inject:  # what the real parser accepts (exit 3 on a usage error)
        assert run_cli(*words[1:], "--help").returncode == 0


@pytest.mark.tree
def test_with_the_demo_config_a_cleared_xid_recovers_where_the_defaults_hold_it(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    sim.apply_fault(root, "xid@gpu3")
    r = run_cli("simulate", "--out", str(root), "--clear-fault", "xid@gpu3")
    assert r.returncode == 0 and "kernel.hold_s" in r.stderr  # the clear says why it does not go at once
    for path, held in ((DEMO_CONFIG, False), (None, True)):
        cfg = load_config(path, overrides={"host_root": str(root)}, environ={})
        c = Collector(HostRoot.at(root), cfg)
        c.run_sync()
        now = time.time()
        assert ("gpu.xid", "gpu3") in {(f.code, f.subject) for f in judge(c.snapshot(taken_at=now), (), cfg, None).findings}
        later = judge(c.snapshot(taken_at=now + 2 * 60), (), cfg, None)  # two minutes after
        assert (("gpu.xid", "gpu3") in {(f.code, f.subject) for f in later.findings}) is held, path


@pytest.mark.tree
def test_agentd_check_on_the_demo_node_ages_a_cleared_xid_as_the_daemon_does(tmp_path, monkeypatch):
    """A simulated node's clock runs: `agentd check` dates an injected XID when it was
    logged, so once the node's clock has run past the demo's hold the XID is gone, as it is
    from the daemon (on main every check read it as logged just now: critical forever)."""
    import json

    root = sim.build_tree("h100-ib", tmp_path / "root")
    sim.apply_fault(root, "xid@gpu3")
    assert run_cli("simulate", "--out", str(root), "--clear-fault", "xid@gpu3").returncode == 0

    def xid_severities() -> list[str]:
        r = run_cli("check", "--host-root", str(root), "--config", str(DEMO_CONFIG), "--format", "json")
        return [f["severity"] for f in json.loads(r.stdout)["findings"] if f["code"] == "gpu.xid"]

    assert xid_severities() == ["critical"]
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 120)  # two minutes later (the tree's files stay as they are)
    assert xid_severities() == []


@pytest.mark.tree
def test_a_fault_that_shows_nothing_and_a_clear_of_nothing_say_so(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    r = run_cli("simulate", "--out", str(root), "--fault", "pfc_off")
    assert r.returncode == 0
    assert "pfc_off changed the tree, but agentd judges nothing it changed on h100-ib: it shows on RoCE compute ports" in r.stderr
    assert "(h100-roce)" in r.stderr
    r = run_cli("simulate", "--out", str(root), "--clear-fault", "port_down")
    assert r.returncode == 0 and "port_down was not applied: nothing to clear" in r.stderr
