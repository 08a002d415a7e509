#!/usr/bin/env python3
"""agentd's /metrics against node_exporter's on the same simulated tree, same load.

Prints one JSON line per figure (schema in bench/common.py); asserts nothing.

    .venv/bin/python bench/bench_node_exporter.py [--profile h100-ib] [--requests 300] [--clients 50] [--load-s 5]

When ``prometheus-node-exporter`` (or ``node_exporter``, or --node-exporter PATH) is not
installed this prints one ``skipped`` figure and a note, and exits 0.

node_exporter runs with ``--path.sysfs=<root>/sys --path.procfs=<root>/proc
--collector.disable-defaults --collector.infiniband --collector.netclass`` on loopback;
agentd runs ``--host-root <root>`` with default intervals. For each: series and bytes
(plain and gzip), then the same load, gzip as Prometheus asks: --requests sequential
requests on one keep-alive connection (p50/p99, req/s, server CPU ms per scrape) and
--clients concurrent keep-alive clients for --load-s seconds (p50/p99, req/s), then RSS.
Ratios are agentd / node_exporter. node_exporter reads sysfs on every scrape; agentd
serves bytes rendered once per collection, so its scrape cost does not grow with the
tree (its collection cost is in bench_snapshot / bench_daemon).

Against issue 19's targets: ``rss_vs_node_exporter`` (agentd RSS / node_exporter RSS,
target <= 1.6x) and ``metrics_p99_vs_node_exporter`` (sequential gzip /metrics p99,
target <= 0.25x), each with both values and the target; without node_exporter both are
printed with a null value and ``unavailable`` saying why.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import tempfile
from pathlib import Path

from common import (
    GZIP,
    TARGETS,
    Agentd,
    build_root,
    concurrent,
    cpu_seconds,
    emit,
    fetch,
    free_port,
    note,
    pct,
    ratio,
    rss_bytes,
    run_main,
    sequential,
    series_count,
    stop_process,
    wait_http,
)

B = "node_exporter"
RUNTIME_PREFIXES = (b"go_", b"process_", b"promhttp_", b"python_")


def find_node_exporter(explicit: str | None) -> str | None:
    if explicit:
        return explicit if Path(explicit).exists() else None
    for name in ("prometheus-node-exporter", "node_exporter"):
        if path := shutil.which(name):
            return path
    return "/usr/bin/prometheus-node-exporter" if Path("/usr/bin/prometheus-node-exporter").exists() else None


def version(exe: str) -> str:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10)
        return (out.stdout or out.stderr).splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


async def measure(name: str, url: str, pid: int, args: argparse.Namespace, tag: dict) -> dict[str, float]:
    _, body = await fetch(url)
    _, gz = await fetch(url, GZIP)
    domain = sum(1 for line in body.splitlines() if line and not line.startswith(b"#") and not line.startswith(RUNTIME_PREFIXES))
    r: dict[str, float] = {"series": series_count(body), "bytes": len(body), "bytes_gzip": len(gz)}
    emit(B, f"{name}_series", r["series"], "series", **tag, without_runtime=domain)
    emit(B, f"{name}_bytes", r["bytes"], "bytes", **tag)
    emit(B, f"{name}_bytes_gzip", r["bytes_gzip"], "bytes", **tag)
    await sequential(url, 10)  # warm-up
    c0 = cpu_seconds(pid)
    lat, rps = await sequential(url, args.requests)
    r["cpu_ms_per_scrape"] = 1000 * (cpu_seconds(pid) - c0) / max(1, len(lat))
    r["seq_p50"], r["seq_p99"], r["seq_rps"] = pct(lat, 0.5) * 1000, pct(lat, 0.99) * 1000, rps
    emit(B, f"{name}_sequential_p50", r["seq_p50"], "ms", **tag, n=len(lat))
    emit(B, f"{name}_sequential_p99", r["seq_p99"], "ms", **tag, n=len(lat))
    emit(B, f"{name}_sequential_rps", rps, "req/s", **tag)
    emit(B, f"{name}_cpu_per_scrape", r["cpu_ms_per_scrape"], "ms", **tag, note=f"server process CPU over {len(lat)} sequential scrapes (10 ms clock ticks)")
    lat, rps, errors = await concurrent(url, args.clients, args.load_s)
    ctag = dict(tag, clients=args.clients, errors=errors)
    if name == "node_exporter" and errors:
        ctag["errors_are"] = "503 above --web.max-requests=40 in flight (node_exporter's default); not in p50/p99/rps"
    r["conc_p50"], r["conc_p99"], r["conc_rps"] = pct(lat, 0.5) * 1000, pct(lat, 0.99) * 1000, rps
    emit(B, f"{name}_concurrent_p50", r["conc_p50"], "ms", **ctag, n=len(lat))
    emit(B, f"{name}_concurrent_p99", r["conc_p99"], "ms", **ctag, n=len(lat))
    emit(B, f"{name}_concurrent_rps", rps, "req/s", **ctag)
    r["rss"] = rss_bytes(pid) / 2**20
    emit(B, f"{name}_rss", r["rss"], "MiB", **tag, note="after the load")
    return r


async def run(args: argparse.Namespace) -> None:
    exe = find_node_exporter(args.node_exporter)
    if exe is None:
        emit(B, "skipped", None, "", note="prometheus-node-exporter not installed; comparison skipped")
        why = "node_exporter unavailable (prometheus-node-exporter not installed)"
        ratio(B, "rss_vs_node_exporter", None, None, TARGETS["rss_vs_node_exporter"], profile=args.profile, unavailable=why)
        ratio(B, "metrics_p99_vs_node_exporter", None, None, TARGETS["metrics_p99_vs_node_exporter"], profile=args.profile, unavailable=why)
        note("node_exporter comparison skipped: prometheus-node-exporter is not installed (apt-get install prometheus-node-exporter)")
        return
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-"))
    tag = {"profile": args.profile, "encoding": "gzip"}
    d, ne = None, None
    ne_log = None
    try:
        root = build_root(args.profile, tmp / "root")
        d = Agentd(tmp, root).start()
        port = free_port()
        ne_log = open(tmp / "node_exporter.log", "wb")
        ne = subprocess.Popen(
            [exe, f"--path.sysfs={root}/sys", f"--path.procfs={root}/proc", "--collector.disable-defaults",
             "--collector.infiniband", "--collector.netclass", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=ne_log, stderr=ne_log,
        )
        await wait_http(d.base + "/readyz", d.proc)
        await wait_http(f"http://127.0.0.1:{port}/metrics", ne)
        emit(B, "node_exporter_version", None, "", version=version(exe), collectors="infiniband,netclass",
             note="node_exporter reads sysfs on every scrape; agentd serves bytes rendered once per collection")
        a = await measure("agentd", d.base + "/metrics", d.pid, args, tag)
        n = await measure("node_exporter", f"http://127.0.0.1:{port}/metrics", ne.pid, args, tag)
        for key, unit in (("seq_p50", "ms"), ("seq_p99", "ms"), ("seq_rps", "req/s"), ("conc_p50", "ms"), ("conc_p99", "ms"),
                          ("conc_rps", "req/s"), ("cpu_ms_per_scrape", "ms"), ("rss", "MiB"), ("series", "series"),
                          ("bytes", "bytes"), ("bytes_gzip", "bytes")):
            r = a[key] / n[key] if n[key] else float("nan")
            emit(B, f"ratio_{key}", r, "agentd/node_exporter", **tag, agentd=round(a[key], 3), node_exporter=round(n[key], 3), unit_of_both=unit)
        ratio(B, "rss_vs_node_exporter", a["rss"], n["rss"], TARGETS["rss_vs_node_exporter"], **tag, unit_of_both="MiB",
              note="cost = agentd, floor = node_exporter, same tree, after the same load")
        ratio(B, "metrics_p99_vs_node_exporter", a["seq_p99"], n["seq_p99"], TARGETS["metrics_p99_vs_node_exporter"], **tag,
              unit_of_both="ms", requests=args.requests, note="sequential, one keep-alive connection, gzip")
    finally:
        if ne is not None:
            stop_process(ne)
        if ne_log is not None:
            ne_log.close()
        if d is not None:
            d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="h100-ib")
    ap.add_argument("--requests", type=int, default=300, help="sequential requests per server (at most 30 s)")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--load-s", type=float, default=5.0)
    ap.add_argument("--node-exporter", help="path of the node_exporter binary (default: found on PATH)")
    return ap.parse_args(argv)


if __name__ == "__main__":
    args = parse()
    run_main(lambda: asyncio.run(run(args)))
