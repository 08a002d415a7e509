"""What agentd writes for others shows in /health when it goes wrong."""

from __future__ import annotations

from agentd.judging.outputs import output_findings
from agentd.records import FileStatus


def test_healthy_outputs_raise_nothing():
    assert output_findings([FileStatus(name="nccl.env", path="/etc/nccl/nccl.env", ok=True)]) == []


def test_failed_write_drift_and_bad_render_are_warnings():
    files = [
        FileStatus(name="nccl.env", path="/etc/nccl/nccl.env", ok=False, failures_total=3, error="Read-only file system"),
        FileStatus(name="topo.xml", path="/etc/nccl/topo.xml", ok=True, drift=True),
    ]
    got = {(f.code, f.severity, f.subject): f for f in output_findings(files, nccl_problems=("NCCL_IB_TC: 300 is outside 0-255",))}
    assert set(got) == {
        ("nccl.file.write_failed", "warning", "nccl.env"),
        ("nccl.file.drift", "warning", "topo.xml"),
        ("nccl.render.invalid", "warning", "nccl"),
    }
    assert "Read-only file system" in got[("nccl.file.write_failed", "warning", "nccl.env")].message
    assert "300 is outside" in got[("nccl.render.invalid", "warning", "nccl")].message
