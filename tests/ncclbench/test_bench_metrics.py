"""Benchmark metrics: valid exposition (prometheus_client parser, promtool) and values."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentd.ncclbench.bench_metrics import env_fingerprint, exposition_text
from agentd.ncclbench.expect import Expectation
from agentd.ncclbench.results import BenchRun, OpResult

MiB = 1 << 20


def sample_run(status: str = "ok") -> BenchRun:
    return BenchRun(
        started_at=1700000000.0, finished_at=1700000042.5, runner="nccl-tests", status=status, n_ranks=8, fabric="nvswitch-nvlink4+ib-ndr",
        nccl_version="2.21.5", env={"NCCL_IB_HCA": "=mlx5_0:1"},
        results=(OpResult(op="all_reduce", size_bytes=256 * MiB, time_us=1000.0, algbw_gbps=268.4, busbw_gbps=469.7),
                 OpResult(op="all_gather", size_bytes=256 * MiB, time_us=900.0, algbw_gbps=298.3, busbw_gbps=261.0)),
    )  # fmt: skip


EXP = [Expectation(op="all_reduce", size_bytes=256 * MiB, expected_gbps=451.8, min_gbps=338.8),
       Expectation(op="all_gather", size_bytes=256 * MiB, expected_gbps=348.2, min_gbps=None)]  # fmt: skip


def _values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_values_in_base_units():
    v = _values(exposition_text(sample_run(), EXP))
    key = (("op", "all_reduce"), ("size_bytes", str(256 * MiB)))
    assert v[("agentd_bench_nccl_bus_bandwidth_bytes_per_second", key)] == pytest.approx(469.7e9)
    assert v[("agentd_bench_nccl_expected_bus_bandwidth_bytes_per_second", key)] == pytest.approx(451.8e9)
    assert v[("agentd_bench_nccl_min_bus_bandwidth_bytes_per_second", key)] == pytest.approx(338.8e9)
    assert v[("agentd_bench_nccl_operation_duration_seconds", key)] == pytest.approx(0.001)
    assert ("agentd_bench_nccl_min_bus_bandwidth_bytes_per_second", (("op", "all_gather"), ("size_bytes", str(256 * MiB)))) not in v
    assert v[("agentd_bench_nccl_last_run_timestamp_seconds", ())] == 1700000042.5
    assert v[("agentd_bench_nccl_last_run_duration_seconds", ())] == pytest.approx(42.5)
    assert v[("agentd_bench_nccl_result", (("status", "ok"),))] == 1.0
    assert v[("agentd_bench_nccl_result", (("status", "below_min"),))] == 0.0
    info = [k for k in v if k[0] == "agentd_bench_nccl_run_info"]
    assert dict(info[0][1])["env_sha256"] == env_fingerprint({"NCCL_IB_HCA": "=mlx5_0:1"}) and dict(info[0][1])["ranks"] == "8"


def test_no_run_yet_exports_only_the_result_family():
    fams = list(text_string_to_metric_families(exposition_text(None)))
    assert [f.name for f in fams] == ["agentd_bench_nccl_result"]
    assert fams[0].samples and all(s.value == 0.0 for s in fams[0].samples)


@pytest.mark.proc
@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_check_metrics():
    for text in (exposition_text(sample_run(), EXP), exposition_text(None)):
        p = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
        assert p.returncode == 0, (p.stdout + p.stderr).decode()
