"""bench.nccl.* findings and the likely causes drawn from the node's current findings."""

from __future__ import annotations

from agentd.model import Finding
from agentd.ncclbench.expect import Expectation
from agentd.ncclbench.findings import BELOW_MIN, FAILED, WRONG, judge_run, likely_causes, size_label, status_after_judging
from agentd.ncclbench.results import BenchRun, OpResult

MiB = 1 << 20


def result(op: str, size: int, busbw: float) -> OpResult:
    return OpResult(op=op, size_bytes=size, time_us=1000.0, algbw_gbps=busbw / 1.75, busbw_gbps=busbw)


def run(*results: OpResult, status: str = "ok", transport: str = "nvlink", reason: str = "") -> BenchRun:
    return BenchRun(started_at=1.0, finished_at=2.0, runner="nccl-tests", status=status, transport=transport, n_ranks=8,
                    fabric="nvswitch-nvlink4+ib-ndr", results=results, reason=reason)  # fmt: skip


EXP = [
    Expectation(op="all_reduce", size_bytes=256 * MiB, expected_gbps=451.8, min_gbps=338.8),
    Expectation(op="all_reduce", size_bytes=16 * MiB, expected_gbps=240.0, min_gbps=None),
    Expectation(op="all_gather", size_bytes=256 * MiB, expected_gbps=348.2, min_gbps=261.2),
]
NODE = [
    Finding(code="ib.port.rate_degraded", severity="warning", subject="mlx5_3:1", message="rate 200 Gb/s, expected 400"),
    Finding(code="gdr.unavailable", severity="critical", subject="node", message="nvidia_peermem not loaded"),
    Finding(code="nvlink.link.down", severity="critical", subject="gpu2", message="link 5 down"),
    Finding(code="pcie.link.downtrained", severity="warning", subject="0000:1b:00.0", message="x8, expected x16"),
    Finding(code="roce.ecn.disabled", severity="warning", subject="eth2", message="ECN off on priority 3"),
    Finding(code="mtu.mismatch", severity="ok", subject="eth2", message="fine"),
    Finding(code="probe.failed", severity="warning", subject="ethtool", message="unrelated"),
]


def test_below_min_names_the_result_and_the_likely_causes():
    found = judge_run(run(result("all_reduce", 256 * MiB, 210.3), result("all_reduce", 16 * MiB, 10.0), result("all_gather", 256 * MiB, 300.0)), EXP, NODE)
    assert [f.code for f in found] == [BELOW_MIN]  # 16 MiB is not judged, all_gather is fine
    f = found[0]
    assert f.severity == "warning" and f.subject == "all_reduce/256MiB"
    assert f.measured == 210.3 and f.expected == 338.8
    assert "210.3 GB/s below the minimum 338.8 GB/s, expected 451.8" in f.message and "nvswitch-nvlink4+ib-ndr" in f.message
    # NVLink path: nvlink first, then PCIe, GDR, ports, RoCE; ok and unrelated findings left out
    assert f.remediation.index("nvlink.link.down (gpu2)") < f.remediation.index("pcie.link.downtrained") < f.remediation.index("gdr.unavailable")
    assert "probe.failed" not in f.remediation and "mtu.mismatch" not in f.remediation


def test_net_transport_puts_gdr_and_port_rate_first():
    causes = likely_causes(NODE, "net")
    assert [c.code for c in causes] == ["gdr.unavailable", "ib.port.rate_degraded", "roce.ecn.disabled", "pcie.link.downtrained", "nvlink.link.down"]


def test_no_causes_gives_a_checklist():
    (f,) = judge_run(run(result("all_reduce", 256 * MiB, 1.0), transport="net"), EXP, [])
    assert "GPUDirect RDMA" in f.remediation and "PFC/ECN" in f.remediation


def test_wrong_results_and_failures():
    (w,) = judge_run(run(status="wrong_results", reason="all_gather: 4 out-of-bounds values"), EXP, NODE)
    assert w.code == WRONG and w.severity == "critical" and "out-of-bounds" in w.message
    (t,) = judge_run(run(status="timeout", reason="killed at the time limit"), EXP)
    assert t.code == FAILED and t.severity == "warning"
    assert judge_run(run(status="refused", reason="GPUs in use"), EXP) == []
    assert judge_run(run(status="unavailable"), EXP) == []


def test_status_after_judging_and_labels():
    r = run(result("all_reduce", 256 * MiB, 100.0))
    assert status_after_judging(r, judge_run(r, EXP)) == "below_min"
    ok = run(result("all_reduce", 256 * MiB, 400.0))
    assert status_after_judging(ok, judge_run(ok, EXP)) == "ok"
    assert [size_label(s) for s in (104857, MiB, 256 * MiB, 1 << 30, 100)] == ["102.4KiB", "1MiB", "256MiB", "1GiB", "100B"]
