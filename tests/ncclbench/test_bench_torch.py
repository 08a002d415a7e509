"""Runner 2 for real: PyTorch torch.distributed NCCL on the local GPUs. Needs torch and a
GPU; CI has neither, so it is skipped there with a reason."""

from __future__ import annotations

import sys

import pytest

from agentd.ncclbench.formulas import bus_factor
from agentd.ncclbench.runners import BenchRequest, run_torch
from agentd.ncclbench.torchbench import layout

torch = pytest.importorskip("torch", reason="no GPU in CI (PyTorch, the agentd[bench] extra, is not installed)")
if not torch.cuda.is_available():
    pytest.skip("no GPU in CI", allow_module_level=True)

MiB = 1 << 20


def test_torch_runner_measures_and_checks_on_real_gpus():
    n = torch.cuda.device_count()
    ops = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall", "sendrecv")
    req = BenchRequest(ops=ops, sizes=(MiB, 16 * MiB, 256 * MiB), gpus=n, time_limit_s=300, iters=20, warmup=5)
    run = run_torch(req, python=sys.executable)
    for r in run.results:  # the figures, for the report
        print(f"{r.op:15s} {r.size_bytes:>10d} B  {r.time_us:10.1f} us  algbw {r.algbw_gbps:8.2f}  busbw {r.busbw_gbps:8.2f} GB/s  wrong {r.wrong}")
    assert run.status == "ok", (run.reason, run.errors)
    assert run.n_ranks == n and run.nccl_version
    assert sorted((r.op, r.size_bytes) for r in run.results) == sorted((op, layout(op, s, n)[2]) for op in ops for s in req.sizes)
    for r in run.results:
        assert r.wrong == 0.0 and r.time_us > 0 and r.algbw_gbps > 0
        assert r.busbw_gbps == pytest.approx(r.algbw_gbps * bus_factor(r.op, n))
