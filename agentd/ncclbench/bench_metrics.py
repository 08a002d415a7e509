"""The last benchmark run as Prometheus metrics. Pure: (run, expectations) -> families.

``render_into(x, run, expectations)`` adds the samples to an exposition; ``AREA`` is the
metrics-registry record the daemon composes into ``/metrics`` (from its State's ``bench``,
the last scheduled run's ``BenchOutcome``).

Names follow DESIGN.md section 4: base units (bytes per second, seconds), expected values
beside measured ones, one-hot ``..._result{status}``. Bandwidths are busbw (nccl-tests'
bus bandwidth) converted from GB/s (1e9) to bytes per second. ``size_bytes`` is the size
as nccl-tests reports it. No run yet: only ``agentd_bench_nccl_result`` (all 0) and
nothing else, so dashboards show "no data" rather than zeros.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

from agentd.base.expo import Exposition, Family
from agentd.metrics.registry import Area
from agentd.metrics.source import MetricsSource
from agentd.ncclbench.expect import Expectation
from agentd.ncclbench.job import BenchOutcome
from agentd.ncclbench.results import RUN_STATUSES, BenchRun

GB = 1e9
P = "agentd_bench_nccl_"

FAMILIES: tuple[Family, ...] = (
    Family(P + "bus_bandwidth_bytes_per_second", "gauge", "Bus bandwidth (nccl-tests busbw) measured by the last NCCL benchmark run, the better of out-of-place and in-place.", ("op", "size_bytes")),
    Family(P + "algorithm_bandwidth_bytes_per_second", "gauge", "Algorithm bandwidth (size / time) of the last NCCL benchmark run.", ("op", "size_bytes")),
    Family(P + "operation_duration_seconds", "gauge", "Average time of one collective operation in the last NCCL benchmark run.", ("op", "size_bytes")),
    Family(P + "expected_bus_bandwidth_bytes_per_second", "gauge", "Bus bandwidth expected for this fabric, collective and size (agentd defaults from published figures, or config).", ("op", "size_bytes")),
    Family(P + "min_bus_bandwidth_bytes_per_second", "gauge", "Minimum acceptable bus bandwidth; below it agentd raises bench.nccl.below_min.", ("op", "size_bytes")),
    Family(P + "last_run_timestamp_seconds", "gauge", "Unix time the last NCCL benchmark run finished (refused runs included).", ()),
    Family(P + "last_run_duration_seconds", "gauge", "Wall time of the last NCCL benchmark run.", ()),
    Family(P + "result", "gauge", "Outcome of the last NCCL benchmark run: 1 for its status, 0 for the others.", ("status",)),
    Family(P + "run_info", "gauge", "The last NCCL benchmark run (value 1): runner, transport, fabric, NCCL version and a hash of the NCCL_* variables it ran with.", ("runner", "transport", "fabric", "nccl_version", "ranks", "env_sha256")),
)


def env_fingerprint(env: dict[str, str]) -> str:
    """First 12 hex digits of the sha256 of the sorted NCCL_* assignments."""
    text = "\n".join(f"{k}={v}" for k, v in sorted(env.items()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _samples(run: BenchRun | None, expected: Sequence[Expectation]) -> dict[str, list[tuple[tuple[str, ...], float]]]:
    out: dict[str, list[tuple[tuple[str, ...], float]]] = {f.name: [] for f in FAMILIES}
    status = run.status if run is not None else None
    for s in RUN_STATUSES:
        out[P + "result"].append(((s,), 1.0 if s == status else 0.0))
    if run is None:
        return out
    for r in sorted(run.results, key=lambda r: (r.op, r.size_bytes)):
        labels = (r.op, str(r.size_bytes))
        out[P + "bus_bandwidth_bytes_per_second"].append((labels, r.busbw_gbps * GB))
        out[P + "algorithm_bandwidth_bytes_per_second"].append((labels, r.algbw_gbps * GB))
        out[P + "operation_duration_seconds"].append((labels, r.time_us * 1e-6))
    for e in sorted(expected, key=lambda e: (e.op, e.size_bytes)):
        labels = (e.op, str(e.size_bytes))
        if e.expected_gbps is not None:
            out[P + "expected_bus_bandwidth_bytes_per_second"].append((labels, e.expected_gbps * GB))
        if e.min_gbps is not None:
            out[P + "min_bus_bandwidth_bytes_per_second"].append((labels, e.min_gbps * GB))
    out[P + "last_run_timestamp_seconds"].append(((), run.finished_at))
    out[P + "last_run_duration_seconds"].append(((), run.duration_s))
    info = (run.runner or "none", run.transport, run.fabric or "unknown", run.nccl_version or "", str(run.n_ranks or ""), env_fingerprint(run.env))
    out[P + "run_info"].append((info, 1.0))
    return out


def render_into(x: Exposition, run: BenchRun | None, expected: Sequence[Expectation] = ()) -> None:
    """Add the samples to an ``Exposition`` built with ``FAMILIES`` among its families."""
    for name, rows in _samples(run, expected).items():
        for labels, value in rows:
            x.add(name, labels, value)


def exposition_text(run: BenchRun | None, expected: Sequence[Expectation] = ()) -> str:
    """The families of one run alone, as exposition text (tests, docs)."""
    x = Exposition(FAMILIES)
    render_into(x, run, expected)
    return x.render().decode("utf-8")


def render(x: Exposition, s: MetricsSource) -> None:
    out = s.bench if isinstance(s.bench, BenchOutcome) else None
    render_into(x, out.run if out is not None else None, out.expectations if out is not None else ())


def cache_key(s: MetricsSource) -> tuple[object, ...]:
    return (s.bench,)


AREA = Area("bench", FAMILIES, render, cache_key)
