#!/usr/bin/env python3
"""Benchmark the daemon on a simulated node. Prints one JSON line per figure (schema in
bench/common.py); asserts nothing.

    .venv/bin/python bench/bench_daemon.py [--profile h100-ib] [--idle-s 20] [--clients 50] [--cycle-only]

Builds the simulated tree, starts ``agentd run --host-root`` on it as a subprocess with
default intervals and timeouts, then:
- startup to ready (first full collection published; tree building not included);
- daemon cycle cost: CPU ms and wall ms of one collection of every probe *including*
  checks, NCCL render, metrics render and file writes (SIGHUP reloads the config and
  triggers one "event" collection; read back from agentd_collection_{cpu,duration}_seconds);
- ``/metrics`` size (bytes plain and gzip, series) and, unless --cycle-only:
- ``/metrics`` gzip and identity, ``/health``: latency p50/p99 and req/s, sequentially
  (one keep-alive connection) and with --clients concurrent keep-alive clients (the
  clients run in this process, on the same machine, and share its CPUs);
- ``/health`` while a probe hangs: the ``nvml_hang`` fault on the live tree plus a SIGHUP,
  so the NVML probe blocks (default 5 s timeout) while /health is loaded; then whether
  the probe was marked failed;
- idle CPU % of one core and RSS of the daemon over --idle-s seconds, no clients, beside
  its plain-read floor measured in the same window: bench/floor_reader.py, a plain Python
  process reading the very files and listings each tier's probes read (recorded through
  agentd's ReadRecorder hooks) on the daemon's schedule (2/10/30 s, lined up with the
  daemon's tier loops), and the ratio ``idle_cpu_vs_floor`` (target <= 1.5x);
- cycle CPU per device (GPUs + HCAs + netdevs) and series per device;
- the latest fast/medium/slow tier cycle as the daemon reports it;
- SIGTERM to exit.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import (
    DEFAULT_INTERVALS,
    ENCODINGS,
    GZIP,
    TARGETS,
    TIERS,
    Agentd,
    apply_fault,
    build_root,
    clear_fault,
    concurrent,
    cpu_ns,
    cpu_seconds,
    device_count,
    emit,
    fetch,
    latency_figures,
    metric,
    pct,
    ratio,
    record_reads,
    rss_bytes,
    run_main,
    sequential,
    series_count,
    stop_process,
    wait_http,
    write_floor_plan,
)

from agentd.collection.collector import PROBE_TIERS

B = "daemon"


async def metrics_text(d: Agentd) -> str:
    _, body = await fetch(d.base + "/metrics")
    return body.decode()


async def wait_event_cycle(d: Agentd, last_ts: float | None, limit_s: float = 20) -> tuple[float | None, str]:
    """Wait until the "event" tier publishes a new collection; (its timestamp, metrics)."""
    await asyncio.sleep(0.3)
    deadline = time.monotonic() + limit_s
    text = ""
    while time.monotonic() < deadline:
        text = await metrics_text(d)
        ts = metric(text, "agentd_last_collection_timestamp_seconds", tier="event")
        if ts is not None and ts != last_ts:
            return ts, text
        await asyncio.sleep(0.1)
    return last_ts, text


async def cycles(d: Agentd, n: int, tag: dict) -> tuple[float | None, float]:
    cpu_ms, wall_ms, last_ts = [], [], None
    for _ in range(n):
        d.hup()
        ts, text = await wait_event_cycle(d, last_ts)
        if ts != last_ts:
            last_ts = ts
            cpu_ms.append(1000 * (metric(text, "agentd_collection_cpu_seconds", tier="event") or 0))
            wall_ms.append(1000 * (metric(text, "agentd_collection_duration_seconds", tier="event") or 0))
        await asyncio.sleep(0.3)
    emit(B, "daemon_cycle_cpu", pct(cpu_ms, 0.5), "ms", **tag, p50_of=len(cpu_ms), samples=[round(x, 1) for x in cpu_ms],
         scope="every probe + checks + render + metrics + writes")
    emit(B, "daemon_cycle_wall", pct(wall_ms, 0.5), "ms", **tag, p50_of=len(wall_ms))
    text = await metrics_text(d)
    files = sum(v for p in PROBE_TIERS
                if (v := metric(text, "agentd_probe_files_read", probe=p)) is not None)
    emit(B, "daemon_cycle_files_read", int(files), "files", **tag)
    return last_ts, pct(cpu_ms, 0.5)


async def sizes(d: Agentd, tag: dict, cycle_cpu_ms: float) -> None:
    _, body = await fetch(d.base + "/metrics")
    emit(B, "metrics_bytes", len(body), "bytes", **tag, series=series_count(body))
    n = await asyncio.to_thread(device_count, d.root)
    series = series_count(body)
    emit(B, "metrics_series", series, "series", **tag, **n)
    _, gz = await fetch(d.base + "/metrics", GZIP)
    emit(B, "metrics_bytes_gzip", len(gz), "bytes", **tag)
    per = n["devices"] or float("nan")
    emit(B, "series_per_device", series / per, "series", **tag, **n)
    emit(B, "daemon_cycle_cpu_per_device", cycle_cpu_ms / per, "ms", **tag, cycle_cpu_ms=round(cycle_cpu_ms, 2), **n,
         note="daemon cycle CPU / (GPUs + HCAs + netdevs): flat when cost grows with the devices")


async def load(d: Agentd, args: argparse.Namespace, tag: dict) -> None:
    runs = [("/metrics", "gzip"), ("/metrics", "identity"), ("/health", "identity")]
    for path, enc in runs:
        lat, rps = await sequential(d.base + path, args.requests, ENCODINGS[enc])
        latency_figures(B, f"{path[1:]}_{enc}_sequential" if path == "/metrics" else "health_sequential", lat, rps, **tag)
    for path, enc in runs:
        lat, rps, errors = await concurrent(d.base + path, args.clients, args.load_s, ENCODINGS[enc], error_status=500 if path == "/metrics" else 600)
        name = f"{path[1:]}_{enc}_concurrent" if path == "/metrics" else "health_concurrent"
        latency_figures(B, name, lat, rps, **tag, clients=args.clients, errors=errors)


async def hang(d: Agentd, args: argparse.Namespace, tag: dict, last_ts: float | None) -> None:
    """/health under load while the NVML probe is blocked inside its timeout."""
    hang_s = args.hang_load_s * 2 + 8
    apply_fault(d.root, f"nvml_hang={hang_s:g}")
    try:
        d.hup()  # an event collection: NVML is called now and blocks
        await asyncio.sleep(0.5)
        t0 = time.monotonic()
        lat, rps, errors = await concurrent(d.base + "/health", args.clients, args.hang_load_s, error_status=600)
        latency_figures(B, "health_concurrent_nvml_hung", lat, rps, **tag, clients=args.clients, errors=errors, fault=f"nvml_hang={hang_s:g}")
        seq, seq_rps = await sequential(d.base + "/health", 100_000, limit_s=args.hang_load_s)
        latency_figures(B, "health_sequential_nvml_hung", seq, seq_rps, p99_target_ms=TARGETS["health_sequential_nvml_hung_p99_ms"],
                        **tag, fault=f"nvml_hang={hang_s:g}")
        during_s = time.monotonic() - t0
        ts, text = await wait_event_cycle(d, last_ts, limit_s=15)
        emit(B, "nvml_hung_cycle_wall", 1000 * (metric(text, "agentd_collection_duration_seconds", tier="event") or float("nan")), "ms",
             **tag, nvml_probe_success=metric(text, "agentd_probe_success", probe="nvml"), load_window_s=round(during_s, 1),
             health_status=metric(text, "agentd_health_status"), note="the event cycle waits the NVML timeout (5 s default); other tiers keep publishing")
    finally:
        clear_fault(d.root, "nvml_hang")


def tier_phases(d: Agentd, text: str) -> dict[str, float]:
    """When each tier loop of the daemon next starts (Unix time): start to start every
    interval from its latest cycle's start, or from the latest SIGHUP (which restarts
    every tier's schedule) when the tier has not run since."""
    now, out = time.time(), {}
    for tier in TIERS:
        every = DEFAULT_INTERVALS[tier]
        ts = metric(text, "agentd_last_collection_timestamp_seconds", tier=tier)
        dur = metric(text, "agentd_collection_duration_seconds", tier=tier) or 0.0
        start = ts - dur if ts is not None else None
        anchor = d.last_hup if d.last_hup is not None and (start is None or start < d.last_hup) else start
        first = (anchor if anchor is not None else now) + every
        while first < now:
            first += every
        out[tier] = first
    return out


async def idle(d: Agentd, args: argparse.Namespace, tag: dict, tmp: Path) -> None:
    reads = await asyncio.to_thread(record_reads, d.root)  # in this process, before the window
    plan = write_floor_plan(tmp / "floor-plan.json", reads, tier_phases(d, await metrics_text(d)), DEFAULT_INTERVALS)
    log = tmp / "floor.log"
    floor = subprocess.Popen([sys.executable, str(Path(__file__).with_name("floor_reader.py")), str(plan), str(log)])
    try:
        await asyncio.sleep(2.0)
        c0, f0, t0, w0 = cpu_seconds(d.pid), cpu_ns(floor.pid), time.monotonic(), time.time()
        await asyncio.sleep(args.idle_s)
        c1, f1, t1, w1 = cpu_seconds(d.pid), cpu_ns(floor.pid), time.monotonic(), time.time()
    finally:
        stop_process(floor)
    # The daemon: its process CPU-time clock (every thread, exited ones too, in ns; a
    # schedstat sum over live threads would lose the lane threads that exit). The floor is
    # one thread: its schedstat ns (a fast pass is ~2 ms, ticks would round it away).
    idle_pct, floor_pct = 100 * (c1 - c0) / (t1 - t0), (f1 - f0) / 1e7 / (t1 - t0)
    emit(B, "idle_cpu", idle_pct, "percent_of_one_core", **tag, seconds=round(t1 - t0, 1), intervals="default (2/10/30 s)")
    passes: dict[str, list[float]] = {t: [] for t in TIERS}
    for line in log.read_text().splitlines() if log.exists() else []:
        tier, start, ms = line.split()
        if w0 <= float(start) <= w1:
            passes[tier].append(float(ms))
    emit(B, "idle_cpu_floor", floor_pct, "percent_of_one_core", **tag, seconds=round(t1 - t0, 1),
         passes={t: len(v) for t, v in passes.items()}, ms_per_pass={t: round(pct(v, 0.5), 2) for t, v in passes.items() if v},
         files={t: len(reads[t]["files"]) for t in TIERS}, listings={t: len(reads[t]["listings"]) for t in TIERS},
         what="bench/floor_reader.py: open/read + listdir of the same paths on the same schedule, same window")
    ratio(B, "idle_cpu_vs_floor", idle_pct, floor_pct, TARGETS["idle_cpu"], **tag, seconds=round(t1 - t0, 1),
          note="over a short window (--quick) the slow tier may run in neither")
    emit(B, "rss", rss_bytes(d.pid) / 2**20, "MiB", **tag)
    hwm = next((int(x.split()[1]) for x in Path(f"/proc/{d.pid}/status").read_text().splitlines() if x.startswith("VmHWM:")), 0)
    emit(B, "rss_peak", hwm / 1024, "MiB", **tag, note="VmHWM, after the load runs")
    text = await metrics_text(d)
    now = time.time()
    for tier in ("fast", "medium", "slow"):
        cpu = metric(text, "agentd_collection_cpu_seconds", tier=tier)
        wall = metric(text, "agentd_collection_duration_seconds", tier=tier)
        ts = metric(text, "agentd_last_collection_timestamp_seconds", tier=tier)
        if cpu is not None and wall is not None:
            emit(B, f"daemon_tier_{tier}_cpu", cpu * 1000, "ms", **tag, wall_ms=round(wall * 1000, 2), age_s=round(now - (ts or now), 1), note="latest cycle only")


async def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-"))
    tag = {"profile": args.profile}
    d = None
    try:
        root = args.host_root or build_root(args.profile, tmp / "root")
        d = Agentd(tmp, root).start()
        ready_s = await wait_http(d.base + "/readyz", d.proc)
        emit(B, "startup_to_ready", ready_s * 1000, "ms", **tag, note="process start to the first full collection (tree already built)")
        last_ts, cycle_cpu = await cycles(d, args.full_cycles, tag)
        await sizes(d, tag, cycle_cpu)
        if args.cycle_only:
            return
        await load(d, args, tag)
        if args.host_root is None:
            await hang(d, args, tag, last_ts)
        await idle(d, args, tag, tmp)
    finally:
        if d is not None:
            rc, ms = d.stop()
            emit(B, "sigterm_to_exit", ms, "ms", **tag, rc=rc)
        shutil.rmtree(tmp, ignore_errors=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="h100-ib")
    ap.add_argument("--idle-s", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--requests", type=int, default=500, help="sequential requests per endpoint (at most 30 s each)")
    ap.add_argument("--load-s", type=float, default=5.0, help="seconds of concurrent load per endpoint")
    ap.add_argument("--hang-load-s", type=float, default=2.0, help="seconds of concurrent, then sequential, /health load while NVML hangs")
    ap.add_argument("--full-cycles", type=int, default=5)
    ap.add_argument("--cycle-only", action="store_true", help="startup, cycle cost and /metrics size only")
    ap.add_argument("--host-root", type=Path, help="run on this existing host root (no fault injection)")
    return ap.parse_args(argv)


if __name__ == "__main__":
    args = parse()
    run_main(lambda: asyncio.run(run(args)))
