#!/usr/bin/env python3
"""Benchmark the daemon on a simulated 8-GPU InfiniBand node. Prints one JSON line per
figure; asserts nothing.

    .venv/bin/python bench/bench_daemon.py [--profile h100-ib] [--idle-s 20] [--clients 50]

Starts ``agentd run --simulate PROFILE`` as a subprocess with default intervals, then:
- cycle cost: CPU ms and wall ms of one collection of every probe (SIGHUP reloads the
  config and triggers one; read back from agentd_collection_{cpu,duration}_seconds), and
  of the fast/medium/slow tiers as the daemon reports them;
- ``/metrics`` (gzip, as Prometheus asks) and ``/health`` latency p50/p99 sequentially
  and with ``--clients`` concurrent keep-alive clients, and requests per second (the
  clients run on the same machine and share its CPUs);
- RSS and CPU % of the daemon process over ``--idle-s`` seconds at default intervals.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def emit(figure: str, value: float, unit: str, **extra: object) -> None:
    print(json.dumps({"figure": figure, "value": round(value, 3), "unit": unit, **extra}), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def agentd_cmd() -> list[str]:
    exe = ROOT / ".venv" / "bin" / "agentd"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "agentd.daemon"]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def metric(text: str, name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    prefix = f"{name}{{{want}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return None


async def wait_ready(session: aiohttp.ClientSession, base: str, proc: subprocess.Popen, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"agentd exited with {proc.returncode}")
        try:
            async with session.get(base + "/readyz") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise SystemExit("agentd did not become ready")


GZIP = {"Accept-Encoding": "gzip"}  # what Prometheus sends


async def sequential(session: aiohttp.ClientSession, url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        async with session.get(url, headers=GZIP) as r:
            await r.read()
        out.append(time.perf_counter() - t0)
    return out


async def concurrent(url: str, clients: int, duration_s: float) -> tuple[list[float], int, int]:
    lat: list[float] = []
    errors = 0
    stop = time.monotonic() + duration_s
    conn = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=conn) as session:

        async def worker() -> None:
            nonlocal errors
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                try:
                    async with session.get(url, headers=GZIP) as r:
                        await r.read()
                        if r.status >= 500 and "/health" not in url:
                            errors += 1
                except aiohttp.ClientError:
                    errors += 1
                    continue
                lat.append(time.perf_counter() - t0)

        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.monotonic() - t0
    return lat, int(len(lat) / elapsed), errors


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="h100-ib")
    ap.add_argument("--idle-s", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--requests", type=int, default=500, help="sequential requests per endpoint")
    ap.add_argument("--load-s", type=float, default=5.0, help="seconds of concurrent load per endpoint")
    ap.add_argument("--full-cycles", type=int, default=5)
    ap.add_argument("--host-root", type=Path, help="run on this existing host root instead of a fresh simulated one")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-"))
    cfg = tmp / "agentd.toml"
    out = tmp / "out"
    # Default intervals and timeouts (what a node runs with); files go to the temp dir.
    cfg.write_text(
        f'[paths]\nnccl_env = "{out}/nccl.env"\nnccl_conf = "{out}/nccl.conf"\nnccl_topo = "{out}/topo.xml"\n'
        f'baseline = "{out}/baseline.json"\nstate_dir = "{out}"\n'
    )
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_") and k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    where = ["--host-root", str(args.host_root)] if args.host_root else ["--simulate", args.profile, "--sim-dir", str(tmp / "root")]
    cmd = [*agentd_cmd(), "run", "--config", str(cfg), *where, "--listen", f"127.0.0.1:{port}"]
    log = open(tmp / "agentd.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env)
    try:
        async with aiohttp.ClientSession() as session:
            t0 = time.monotonic()
            await wait_ready(session, base, proc)
            emit("startup_to_ready", (time.monotonic() - t0) * 1000, "ms", profile=args.profile, note="includes building the simulated tree" if not args.host_root else "")

            # One full collection (every probe) per SIGHUP: reload, then an "event" collection.
            cpu_ms, wall_ms = [], []
            last_ts = None
            for _ in range(args.full_cycles):
                os.kill(proc.pid, signal.SIGHUP)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    async with session.get(base + "/metrics") as r:
                        text = await r.text()
                    ts = metric(text, "agentd_last_collection_timestamp_seconds", tier="event")
                    if ts is not None and ts != last_ts:
                        last_ts = ts
                        cpu_ms.append(1000 * (metric(text, "agentd_collection_cpu_seconds", tier="event") or 0))
                        wall_ms.append(1000 * (metric(text, "agentd_collection_duration_seconds", tier="event") or 0))
                        break
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.3)
            emit("full_collection_cpu", pct(cpu_ms, 0.5), "ms", p50_of=len(cpu_ms), samples=[round(x, 2) for x in cpu_ms])
            emit("full_collection_wall", pct(wall_ms, 0.5), "ms", p50_of=len(wall_ms))

            async with session.get(base + "/metrics", headers={"Accept-Encoding": "identity"}) as r:
                body = await r.read()
            series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
            emit("metrics_size", len(body), "bytes", series=series)
            async with aiohttp.ClientSession(auto_decompress=False) as raw:
                async with raw.get(base + "/metrics", headers={"Accept-Encoding": "gzip"}) as r:
                    emit("metrics_size_gzip", len(await r.read()), "bytes")

            for path in ("/metrics", "/health"):
                lat = await sequential(session, base + path, args.requests)
                emit(f"{path[1:]}_sequential_p50", pct(lat, 0.5) * 1000, "ms", n=len(lat))
                emit(f"{path[1:]}_sequential_p99", pct(lat, 0.99) * 1000, "ms", n=len(lat))
                emit(f"{path[1:]}_sequential_rps", len(lat) / sum(lat), "req/s")
            for path in ("/metrics", "/health"):
                lat, rps, errors = await concurrent(base + path, args.clients, args.load_s)
                emit(f"{path[1:]}_concurrent_p50", pct(lat, 0.5) * 1000, "ms", clients=args.clients, n=len(lat))
                emit(f"{path[1:]}_concurrent_p99", pct(lat, 0.99) * 1000, "ms", clients=args.clients, n=len(lat))
                emit(f"{path[1:]}_concurrent_rps", rps, "req/s", clients=args.clients, errors=errors)

        # Idle cost at default intervals: no clients, just the schedule.
        await asyncio.sleep(2.0)
        c0, t0 = cpu_seconds(proc.pid), time.monotonic()
        await asyncio.sleep(args.idle_s)
        c1, t1 = cpu_seconds(proc.pid), time.monotonic()
        emit("idle_cpu", 100 * (c1 - c0) / (t1 - t0), "percent_of_one_core", seconds=args.idle_s)
        emit("rss", rss_bytes(proc.pid) / 2**20, "MiB")
        async with aiohttp.ClientSession() as session:
            async with session.get(base + "/metrics") as r:
                text = await r.text()
        for tier in ("fast", "medium", "slow"):
            cpu = metric(text, "agentd_collection_cpu_seconds", tier=tier)
            wall = metric(text, "agentd_collection_duration_seconds", tier=tier)
            if cpu is not None and wall is not None:
                emit(f"tier_{tier}_cycle_cpu", cpu * 1000, "ms", wall_ms=round(wall * 1000, 2))
    finally:
        t_stop = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(10)
            emit("sigterm_to_exit", (time.monotonic() - t_stop) * 1000, "ms", rc=rc)
        except subprocess.TimeoutExpired:
            proc.kill()
            emit("sigterm_to_exit", float("nan"), "ms", rc="killed")
        log.close()


if __name__ == "__main__":
    asyncio.run(main())
