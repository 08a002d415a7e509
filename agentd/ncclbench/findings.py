"""Judge a benchmark run: pure (run, expectations, the node's current findings) -> findings.

- ``bench.nccl.below_min`` (warning), one per (op, size) whose bus bandwidth is under the
  minimum. The remediation names the likely causes to look at first, taken from the
  node's current (non-ok) findings: GPUDirect RDMA (``gdr.*``), PCIe links and GPU-NIC
  paths (``pcie.*``), HCA port rate and width (``ib.port.*``), RoCE flow control
  (``roce.*``, ``mtu.*``), NVLink (``nvlink.*``) and missing devices (``inventory.*``).
  On the NVLink path NVLink, PCIe and inventory come first; on the net path GDR, HCA ports,
  RoCE and PCIe come first.
- ``bench.nccl.wrong_results`` (critical): nccl-tests found wrong values (``#wrong`` or an
  out-of-bounds FAILED footer). Bad data on the wire is worse than slow data.
- ``bench.nccl.failed`` (warning): the run did not finish (error, timeout). A refused or
  unavailable run is not a finding: nothing was measured.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from agentd.judging.findings import bench_subject, finding
from agentd.model import SEVERITY_RANK, Finding
from agentd.ncclbench.expect import Expectation
from agentd.ncclbench.results import BenchRun

BELOW_MIN = "bench.nccl.below_min"
WRONG = "bench.nccl.wrong_results"
FAILED = "bench.nccl.failed"

_CAUSE_ORDER = {
    "nvlink": ("nvlink.", "inventory.gpu", "pcie.", "gdr.", "ib.port.", "roce.", "mtu."),
    "net": ("gdr.", "ib.port.rate_degraded", "ib.port.width_degraded", "ib.port.", "roce.", "mtu.", "pcie.", "inventory.", "nvlink."),
}
_CAUSE_PREFIXES = ("gdr.", "pcie.", "ib.port.", "roce.", "mtu.", "nvlink.", "inventory.")
MAX_CAUSES = 8


def size_label(size_bytes: int) -> str:
    """268435456 -> "256MiB", 104857 -> "102.4KiB" (stable subject text)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size_bytes >= scale:
            v = size_bytes / scale
            return f"{v:g}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{size_bytes}B"


def likely_causes(current: Iterable[Finding], transport: str = "nvlink") -> list[Finding]:
    """The node's current problem findings that can lower collective bandwidth, most
    relevant to the transport first."""
    order = _CAUSE_ORDER.get(transport, _CAUSE_ORDER["nvlink"])

    def rank(f: Finding) -> tuple[int, int, str, str]:
        idx = next((i for i, p in enumerate(order) if f.code.startswith(p)), len(order))
        return (idx, -{"critical": 2, "warning": 1}.get(f.severity, 0), f.code, f.subject)

    picked = [f for f in current if SEVERITY_RANK[f.severity] > 0 and f.code.startswith(_CAUSE_PREFIXES)]
    return sorted(picked, key=rank)


def _remediation(causes: Sequence[Finding], transport: str) -> str:
    if causes:
        shown = "; ".join(f"{f.code} ({f.subject})" for f in causes[:MAX_CAUSES])
        more = f" and {len(causes) - MAX_CAUSES} more" if len(causes) > MAX_CAUSES else ""
        return f"Likely causes, from this node's current findings: {shown}{more}. Fix those, then re-run `agentd bench nccl --compare`."
    if transport == "net":
        return "No current finding explains it: check GPUDirect RDMA (nvidia_peermem/dmabuf), GPU-NIC PCIe paths and NIC affinity, HCA port rate and width, PFC/ECN on the RoCE priority, then re-run `agentd bench nccl --transport net --compare`."
    return "No current finding explains it: check NVLink state and errors (nvidia-smi nvlink -s/-e), fabric manager, GPU PCIe links, other GPU load and clocks, then re-run `agentd bench nccl --compare`."


def judge_run(run: BenchRun, expected: Sequence[Expectation], current: Iterable[Finding] = ()) -> list[Finding]:
    current = list(current)
    out: list[Finding] = []
    if run.status in ("failed", "timeout"):
        out.append(
            finding(
                FAILED,
                "warning",
                bench_subject(run.runner or "bench"),
                f"NCCL benchmark did not complete ({run.status}): {run.reason or 'no reason given'}",
                "Run `agentd bench nccl` by hand to see the full output; check GPU health (nvidia-smi), NCCL env file and that no job holds the GPUs.",
            )
        )
    if run.status == "wrong_results":
        out.append(
            finding(
                WRONG,
                "critical",
                bench_subject(run.runner or "bench"),
                f"NCCL benchmark found wrong results: {run.reason}",
                "Data was corrupted in a collective: drain the node; check NVLink/PCIe error counters, GPU ECC (XID) and NIC errors before returning it to service.",
            )
        )
    by_key = {(e.op, e.size_bytes): e for e in expected}
    causes = likely_causes(current, run.transport)
    for r in run.results:
        e = by_key.get((r.op, r.size_bytes))
        if e is None or e.min_gbps is None or r.busbw_gbps >= e.min_gbps:
            continue
        exp = f", expected {e.expected_gbps:.1f}" if e.expected_gbps is not None else ""
        out.append(
            finding(
                BELOW_MIN,
                "warning",
                bench_subject(f"{r.op}/{size_label(r.size_bytes)}"),
                (
                    f"{r.op} {size_label(r.size_bytes)} on {run.n_ranks or '?'} ranks ({run.transport}, {run.runner or '?'}): bus bandwidth "
                    f"{r.busbw_gbps:.1f} GB/s below the minimum {e.min_gbps:.1f} GB/s{exp} ({run.fabric or 'unknown fabric'})"
                ),
                _remediation(causes, run.transport),
                measured=round(r.busbw_gbps, 3),
                expected=round(e.min_gbps, 3),
            )
        )
    return out


def status_after_judging(run: BenchRun, findings: Sequence[Finding]) -> str:
    """An ``ok`` run with a below-minimum finding becomes ``below_min``."""
    if run.status == "ok" and any(f.code == BELOW_MIN for f in findings):
        return "below_min"
    return run.status
