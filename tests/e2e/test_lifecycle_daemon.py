"""Health lifecycle with the running daemon (issue 15): observe mode, maintenance on and
off across a restart, boot grace from the node's boot time.

``agentd run --host-root`` on a simulated tree; its state directory is ``<root>-out``
(agentd.outputs.node_state), where ``agentd maintenance`` writes too.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from agentd import sim
from agentd.outputs.node_state import state_dir_for
from tests.e2e.test_kernel_restart import Run as KernelRun
from tests.support.daemon_harness import REACT_S, agentd_cmd, poll, sample

pytestmark = pytest.mark.e2e


class Run(KernelRun):
    def health(self) -> tuple[int, dict]:
        code, body = self.get("/health")
        return (code, json.loads(body)) if code in (200, 503) else (code, {})

    def metric(self, name: str, **labels: str) -> float | None:
        code, body = self.get("/metrics")
        return sample(body.decode(), name, **labels) if code == 200 else None


def codes(body: dict, key: str = "findings") -> set[str]:
    return {f["code"] for f in body.get(key, [])}


def maintenance(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*agentd_cmd(), "maintenance", *args, "--host-root", str(root)], capture_output=True, text=True, timeout=60)


def test_a_finding_in_observe_mode_is_shown_and_leaves_health_200(tmp_path):
    root = tmp_path / "root"
    sim.build_tree("h100-ib", root, faults=["port_down@mlx5_0"])
    run = Run(tmp_path, root, 1, extra='[lifecycle]\nobserve = ["ib.port.*"]\n')
    try:
        got = poll(lambda: (h := run.health())[0] == 200 and "ib.port.down" in codes(h[1], "withheld") and h, REACT_S)
        assert got, run.health()
        body = got[1]
        assert body["status"] == "ok" and "ib.port.down" not in codes(body)
        [w] = [f for f in body["withheld"] if f["code"] == "ib.port.down"]
        assert w["withheld"] == "observe" and w["severity"] == "critical" and w["since"] > 0
        assert run.metric("agentd_finding_withheld", code="ib.port.down", reason="observe", subject="mlx5_0:1") == 1
        assert run.metric("agentd_finding", code="ib.port.down", subject="mlx5_0:1") is None
        code, text = run.get("/health?format=text")
        assert code == 200 and text.decode().splitlines()[0] == "ok" and "ib.port.down" not in text.decode()
        checks = json.loads(run.get("/checks")[1])
        assert any(f["code"] == "ib.port.down" and f["withheld"] == "observe" for f in checks["findings"])
    finally:
        run.stop()
    # control: the same node without observe mode is critical
    run = Run(tmp_path, root, 2)
    try:
        assert poll(lambda: critical(run), REACT_S)
        assert "ib.port.down" in codes(run.health()[1])
    finally:
        run.stop()


def critical(run: Run) -> bool:
    code, body = run.health()
    return code == 503 and body.get("status") == "critical"


def test_maintenance_answers_200_keeps_nccl_files_and_survives_a_restart(tmp_path):
    root = tmp_path / "root"
    sim.build_tree("h100-ib", root, faults=["port_down@mlx5_0"])
    env = state_dir_for(root) / "nccl.env"  # a root that is not the node: its state beside it
    run = Run(tmp_path, root, 1)
    try:
        assert poll(lambda: critical(run) and env.is_file(), REACT_S)
        assert "mlx5_0:1" not in env.read_text().split("NCCL_IB_HCA=", 1)[1].splitlines()[0]
        res = maintenance(root, "on", "--reason", "swap the HCA of port 1")
        assert res.returncode == 0, res.stderr
        got = poll(lambda: (h := run.health())[0] == 200 and h[1].get("status") == "maintenance" and h, REACT_S)
        assert got, run.health()
        body = got[1]
        assert body["maintenance"]["reason"] == "swap the HCA of port 1"
        assert body["measured_status"] == "critical" and "ib.port.down" in codes(body)  # everything else still reported
        code, text = run.get("/health?format=text")
        lines = text.decode().splitlines()
        assert code == 200 and lines[0] == "maintenance" and "swap the HCA of port 1" in lines[1]
        assert run.metric("agentd_maintenance") == 1 and run.metric("agentd_healthy") == 1
        written = env.read_bytes()
        sim.clear_fault(root, "port_down@mlx5_0")  # the repair: the port comes back
        repaired = poll(lambda: (h := run.health()[1]) and "ib.port.down" not in codes(h) and h["generated_at"], REACT_S)
        assert repaired  # a publish judged the healthy port: its write came first
        assert poll(lambda: run.health()[1].get("generated_at", 0) > repaired, REACT_S)  # and one more after it
        assert env.read_bytes() == written  # NCCL files are kept as they are in maintenance
        sim.apply_fault(root, "port_down@mlx5_0")
    finally:
        run.stop()

    run = Run(tmp_path, root, 2)  # a restart keeps maintenance (the file is the state)
    try:
        assert poll(lambda: run.health()[1].get("ready"), REACT_S)
        code, body = run.health()
        assert code == 200 and body["status"] == "maintenance", body
        assert "maintenance.on" in run.logfile.read_text()
        res = maintenance(root, "off")
        assert res.returncode == 0, res.stderr
        assert poll(lambda: critical(run), REACT_S)  # judged again: the port is down
        log = run.logfile.read_text()
        assert "maintenance.off" in log and "maintenance.ended" in log
        assert log.index("maintenance.off") < log.index("maintenance.ended")
    finally:
        run.stop()


def test_a_file_written_by_automation_is_maintenance(tmp_path):
    root = tmp_path / "root"
    sim.build_tree("h100-ib", root, faults=["port_down@mlx5_0"])
    run = Run(tmp_path, root, 1)
    try:
        assert poll(lambda: critical(run), REACT_S)
        marker = state_dir_for(root) / "maintenance.json"
        marker.write_text("reimage by ansible\n")
        got = poll(lambda: (h := run.health())[0] == 200 and h, REACT_S)
        assert got and got[1]["maintenance"]["reason"] == "reimage by ansible"
        marker.unlink()
        assert poll(lambda: critical(run), REACT_S)
    finally:
        run.stop()


def test_boot_grace_is_taken_from_the_nodes_boot_time(tmp_path):
    root = tmp_path / "root"
    sim.build_tree("h100-ib", root, faults=["port_down@mlx5_0"])
    sim.set_boot_time(root, time.time() - 30)  # the node booted 30 s ago
    run = Run(tmp_path, root, 1, extra="[lifecycle]\nboot_grace_s = 600\n")
    try:
        got = poll(lambda: (h := run.health())[0] == 200 and "ib.port.down" in codes(h[1], "withheld") and h, REACT_S)
        assert got, run.health()
        [w] = [f for f in got[1]["withheld"] if f["code"] == "ib.port.down"]
        assert w["withheld"] == "boot_grace"
        sim.set_boot_time(root, time.time() - 3600)  # the node as it is an hour later: out of grace
        assert poll(lambda: critical(run), REACT_S)
        assert "ib.port.down" in codes(run.health()[1])
    finally:
        run.stop()
