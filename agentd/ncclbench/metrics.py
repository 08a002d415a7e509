"""The last benchmark run as Prometheus metrics. Pure: (run, expectations) -> families.

Two forms of the same data, so the daemon can use either exposition path:

- ``metric_families(run, expectations, now)`` -> ``list[prometheus_client.metrics_core.Metric]``
  (for a prometheus_client ``Collector`` or ``generate_latest``);
- ``FAMILIES`` + ``render_into(x, run, expectations)`` for agentd's own
  ``agentd.metrics.registry.Exposition`` (the ``metrics_*`` area modules' shape).

Names follow DESIGN.md section 4: base units (bytes per second, seconds), expected values
beside measured ones, one-hot ``..._result{status}``. Bandwidths are busbw (nccl-tests'
bus bandwidth) converted from GB/s (1e9) to bytes per second. ``size_bytes`` is the size
as nccl-tests reports it. No run yet: only ``agentd_bench_nccl_result`` (all 0) and
nothing else, so dashboards show "no data" rather than zeros.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from agentd.ncclbench.expect import Expectation
from agentd.ncclbench.results import RUN_STATUSES, BenchRun
from agentd.metrics.registry import Exposition, Family

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


def metric_families(run: BenchRun | None, expected: Sequence[Expectation] = ()) -> list[Metric]:
    fams: list[Metric] = []
    samples = _samples(run, expected)
    for f in FAMILIES:
        rows = samples[f.name]
        if not rows:
            continue
        g = GaugeMetricFamily(f.name, f.help, labels=list(f.labels))
        for labels, value in rows:
            g.add_metric(list(labels), value)
        fams.append(g)
    return fams


def render_into(x: Exposition, run: BenchRun | None, expected: Sequence[Expectation] = ()) -> None:
    """Add the samples to an ``Exposition`` built with ``FAMILIES`` among its families."""
    for name, rows in _samples(run, expected).items():
        for labels, value in rows:
            x.add(name, labels, value)


def exposition_text(run: BenchRun | None, expected: Sequence[Expectation] = ()) -> str:
    """Prometheus text format of ``metric_families`` (for tests, docs and ``--format prom``)."""
    from prometheus_client import CollectorRegistry, generate_latest  # noqa: PLC0415

    class _C:
        def collect(self):  # noqa: ANN202 - prometheus_client collector protocol
            return metric_families(run, expected)

    reg = CollectorRegistry(auto_describe=False)
    reg.register(_C())  # type: ignore[arg-type]
    return generate_latest(reg).decode("utf-8")
