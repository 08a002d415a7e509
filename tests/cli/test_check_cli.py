"""`agentd check`: the CLI contract Slurm, cron and humans rely on (issue 3).

On simulated nodes: exit 0 ok, 1 degraded, 2 critical, 3 could not run (reason on
stderr); JSON sorted by severity; one text line a finding; the inventory baseline survives
between runs. The contract as Slurm sees it (a process with a bare environment, a hung
NVML, a baseline that only the file remembers) runs the real command in a subprocess;
what is about the output runs the command in this process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentd import sim
from tests.support.cli import run_cli

pytestmark = pytest.mark.tree

HANG_GUARD_S = 120  # a guard against a wedged test, not a timing assertion


def run_check(root: Path, cfg: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The real command, as Slurm's HealthCheckProgram starts it."""
    return subprocess.run(
        [sys.executable, "-m", "agentd", "check", "--host-root", str(root), "--config", str(cfg), *extra],
        capture_output=True, text=True, timeout=HANG_GUARD_S, env={"PATH": "/usr/bin:/bin"},
    )


def check_here(root: Path, cfg: Path, *extra: str):
    return run_cli("check", "--host-root", str(root), "--config", str(cfg), *extra)


@pytest.fixture
def node(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(f"""
[intervals]
check_rate_window_s = 0.2
[timeouts]
nvml_s = 1
[paths]
baseline = "{tmp_path / 'state' / 'baseline.json'}"
state_dir = "{tmp_path / 'state'}"
""")
    return root, cfg, tmp_path / "state" / "baseline.json"


@pytest.mark.proc
def test_healthy_node_exits_0(node):
    root, cfg, baseline = node
    p = run_check(root, cfg, "--format", "json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["status"] == "ok"
    assert all(f["severity"] == "ok" for f in doc["findings"])
    assert set(doc["findings"][0]) >= {"code", "severity", "subject", "message", "remediation"}
    assert not baseline.exists()  # a simulated root is not the node: the node's baseline is not made from it


def test_critical_fault_exits_2_json_and_text(node):
    root, cfg, _ = node
    sim.apply_fault(root, "port_down@mlx5_3")
    sim.apply_fault(root, "pcie_downtrained")
    p = check_here(root, cfg, "--format", "json")
    assert p.returncode == 2
    doc = json.loads(p.stdout)
    assert doc["status"] == "critical"
    sev = [f["severity"] for f in doc["findings"]]
    assert sev == sorted(sev, key=["critical", "warning", "ok"].index)
    assert (doc["findings"][0]["code"], doc["findings"][0]["subject"]) == ("ib.port.down", "mlx5_3:1")
    t = check_here(root, cfg)
    lines = t.stdout.splitlines()
    assert t.returncode == 2 and lines[0] == "critical"
    assert lines[1].startswith("critical ib.port.down mlx5_3:1: ")
    assert any(line.startswith("warning pcie.link.downtrained 0000:18:00.0: ") for line in lines)
    assert not any(line.startswith("ok ") for line in lines)


def test_warning_only_exits_1(node):
    root, cfg, _ = node
    sim.apply_fault(root, "pcie_downtrained")
    p = check_here(root, cfg)
    assert p.returncode == 1 and p.stdout.splitlines()[0] == "degraded"


@pytest.mark.proc
def test_hung_nvml_is_a_probe_finding_not_a_hang(node):
    root, cfg, _ = node
    sim.apply_fault(root, "nvml_hang=3600")
    p = run_check(root, cfg, "--format", "json")
    assert p.returncode == 1, p.stderr
    codes = {(f["code"], f["subject"]) for f in json.loads(p.stdout)["findings"]}
    assert ("probe.failed", "nvml") in codes


def test_invalid_config_exits_3_naming_the_key(node, tmp_path):
    root, _, _ = node
    bad = tmp_path / "bad.toml"
    bad.write_text("[expect]\ngpus = 'eight'\nbogus = 1\n")
    p = check_here(root, bad)
    assert p.returncode == 3 and p.stdout == ""
    assert "expect.gpus" in p.stderr and "expect.bogus: unknown key" in p.stderr


@pytest.mark.parametrize("what", ["missing", "no-sys"])
def test_unusable_host_root_exits_3(node, tmp_path, what):
    _, cfg, _ = node
    root = tmp_path / "nowhere"
    if what == "no-sys":
        root.mkdir()
    p = check_here(root, cfg)
    assert p.returncode == 3 and "host root" in p.stderr


@pytest.mark.proc
def test_baseline_survives_restarts_and_catches_removed_devices(node):
    """On a root that is not the node the baseline is the one recorded with it (as
    `agentd capture` keeps the node's), read-only (docs/node-state.md)."""
    from tests.support.recorded_baseline import baseline_of, record_baseline

    root, cfg, node_baseline = node
    baseline = record_baseline(root, baseline_of(root))
    assert run_check(root, cfg).returncode == 0
    recorded = json.loads(baseline.read_text())
    sim.apply_fault(root, "gpu_removed@gpu3")
    sim.apply_fault(root, "nic_removed@mlx5_5")
    p = run_check(root, cfg, "--format", "json")  # a new process: only the file remembers
    assert p.returncode == 2
    found = {(f["code"], f["subject"]) for f in json.loads(p.stdout)["findings"] if f["severity"] == "critical"}
    assert ("inventory.hca.missing", "mlx5_5") in found
    assert any(code == "inventory.gpu.missing" for code, _ in found)
    assert json.loads(baseline.read_text()) == recorded  # an unhealthy run never rewrites it
    sim.clear_fault(root, "gpu_removed@gpu3")
    sim.clear_fault(root, "nic_removed@mlx5_5")
    assert run_check(root, cfg).returncode == 0
    assert json.loads(baseline.read_text()) == recorded and not node_baseline.exists()
    node_baseline.parent.mkdir(parents=True)
    node_baseline.write_text("{}")
    reset = subprocess.run([sys.executable, "-m", "agentd", "baseline", "reset", "--config", str(cfg)], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert reset.returncode == 0 and not node_baseline.exists()  # the node's own (host root /)
