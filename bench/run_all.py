#!/usr/bin/env python3
"""Run every benchmark; one JSON line per figure on stdout (``make bench``).

    .venv/bin/python bench/run_all.py [--quick] [--only snapshot daemon reaction link_event xid_event kmsg node_exporter]

About 4-5 minutes (``--quick``: about 1.5 minutes, fewer rounds and shorter windows). Each
benchmark script runs as a child process in its own process group with a time budget;
one that overruns is stopped (SIGTERM, then SIGKILL to the whole group) and reported as
a ``step_timeout`` figure, and the next one runs. Figures follow the schema in
bench/common.py: ``{"bench", "figure", "value", "unit", ...}``; notes go to stderr.
The first line describes the machine (CPUs, load average), the last the total time.
Before the total, a summary on stderr puts every cost that has a target beside its
floor (ratio, target) and the per-node series and CPU per device.
What each figure means: bench/README.md. Benchmarks never assert.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import HCA64, LARGE, emit, run_main

HERE = Path(__file__).resolve().parent


GROUPS = ("snapshot", "daemon", "reaction", "link_event", "xid_event", "kmsg", "node_exporter", "memory")


def steps(quick: bool) -> list[tuple[str, list[str], float]]:
    """(group, script + args, budget in s)."""
    q = quick
    out = [
        ("snapshot", ["bench_snapshot.py", "--profile", "h100-ib", "--rounds", "3" if q else "10"], 60),
        ("snapshot", ["bench_snapshot.py", "--profile", LARGE, "--rounds", "3" if q else "10"], 90),
        ("snapshot", ["bench_snapshot.py", "--profile", HCA64, "--rounds", "2" if q else "5"], 90),
        ("daemon", ["bench_daemon.py", "--profile", "h100-ib", "--idle-s", "8" if q else "25", "--requests", "100" if q else "500",
                    "--load-s", "2" if q else "5", "--hang-load-s", "1.5" if q else "2", "--full-cycles", "3" if q else "5"], 120 if q else 180),
        ("daemon", ["bench_daemon.py", "--profile", LARGE, "--cycle-only", "--full-cycles", "2" if q else "5"], 90),
        ("daemon", ["bench_daemon.py", "--profile", HCA64, "--cycle-only", "--full-cycles", "2" if q else "3"], 90),
        ("reaction", ["bench_reaction.py", "--profile", "h100-ib", "--trials", "2" if q else "5"], 90 if q else 150),
        # root + iproute2 for veth pairs; elsewhere it prints a "skipped" figure and why
        ("link_event", ["bench_link_event.py", "--trials", "4" if q else "16"], 60 if q else 150),
        ("xid_event", ["bench_xid_event.py", "--trials", "4" if q else "16"], 90 if q else 240),
        ("kmsg", ["bench_kmsg.py", "--records", "50000" if q else "200000"], 60),
        ("node_exporter", ["bench_node_exporter.py", "--profile", "h100-ib", "--requests", "100" if q else "300",
                           "--load-s", "2" if q else "5"], 90 if q else 120),
    ]
    if (HERE / "bench_memory.py").exists():  # written separately; run when present
        # --quick: no busy node; full: 180 history entries, not the 720 of a full history (minutes)
        args = ["--skip-busy", "--load-s", "2", "--settle-s", "2"] if q else ["--entries", "180"]
        out.append(("memory", ["bench_memory.py", "--profile", "h100-ib", *args], 60 if q else 150))
    return out


def machine() -> dict[str, object]:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    mem = next((int(line.split()[1]) // 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal:")), 0)
    return {"cpus": os.cpu_count(), "cpu_model": model, "mem_mib": mem, "kernel": platform.release(),
            "python": platform.python_version(), "loadavg": [round(x, 2) for x in os.getloadavg()]}


FIGURES: list[dict] = []  # every figure relayed, for the summary


def relay(stream, out) -> None:
    for line in iter(stream.readline, ""):
        out.write(line)
        out.flush()
        try:
            FIGURES.append(json.loads(line))
        except ValueError:
            pass


def _fmt(v: object) -> str:
    return "-" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)


def summary() -> None:
    """To stderr: every figure with a target (cost, floor, ratio, target) and the
    per-node scale figures, so one run shows each cost beside its floor."""
    rows = [f for f in FIGURES if "target" in f or "target_ms" in f]
    if rows:
        note_lines = ["", "cost vs floor (ratio = cost / floor; target: at most)"]
        for f in rows:
            where = f.get("profile", "")
            if "target_ms" in f:
                note_lines.append(f"  {f['figure']:<40} {where:<18} {_fmt(f['value'])} ms   target {f['target_ms']} ms"
                                  f"{'' if f.get('within_target') else '  (over)'}")
                continue
            if f["value"] is None:
                note_lines.append(f"  {f['figure']:<40} {where:<18} n/a: {f.get('unavailable', 'not measured')}")
                continue
            note_lines.append(f"  {f['figure']:<40} {where:<18} {_fmt(f['value'])}x  (cost {_fmt(f['cost'])} / floor {_fmt(f['floor'])})"
                              f"   target {f['target']}x{'' if f.get('within_target') else '  (over)'}")
        print("\n# ".join(note_lines), file=sys.stderr, flush=True)
    scale = [f for f in FIGURES if f.get("figure") in ("metrics_series", "daemon_cycle_cpu_per_device", "collect_full_cpu_per_device")]
    if scale:
        lines = ["", "per node: series, CPU per device (GPUs + HCAs + netdevs)"]
        for f in scale:
            dev = f"{f.get('devices', '-')} devices ({f.get('gpus', '-')} GPU, {f.get('hcas', '-')} HCA, {f.get('netdevs', '-')} netdev)"
            lines.append(f"  {f['figure']:<40} {f.get('profile', ''):<18} {_fmt(f['value'])} {f['unit']:<7} {dev}")
        print("\n# ".join(lines), file=sys.stderr, flush=True)


def run_step(group: str, argv: list[str], budget_s: float) -> None:
    cmd = [sys.executable, str(HERE / argv[0]), *argv[1:]]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=HERE.parent, start_new_session=True)
    reader = threading.Thread(target=relay, args=(proc.stdout, sys.stdout), daemon=True)
    reader.start()
    status: str | int
    try:
        status = proc.wait(budget_s)
    except subprocess.TimeoutExpired:
        status = "timeout"
        _stop_group(proc)
    except BaseException:
        _stop_group(proc)
        raise
    finally:
        reader.join(5)
    wall = time.monotonic() - t0
    if status == "timeout":
        emit("run_all", "step_timeout", wall, "s", step=" ".join(argv), budget_s=budget_s)
    elif status != 0:
        emit("run_all", "step_failed", wall, "s", step=" ".join(argv), rc=status)
    else:
        print(f"# {group}: {' '.join(argv)} done in {wall:.1f} s", file=sys.stderr, flush=True)


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the step's process group (its finally blocks stop agentd/node_exporter),
    then SIGKILL whatever is left of the group."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="about 1.5 minutes: fewer rounds, shorter windows")
    ap.add_argument("--only", nargs="+", choices=GROUPS, help="run only these groups")
    args = ap.parse_args()
    print(json.dumps({"bench": "run_all", "figure": "machine", "value": None, "unit": "", "mode": "quick" if args.quick else "full", **machine()}), flush=True)
    t0 = time.monotonic()
    for group, argv, budget in steps(args.quick):
        if args.only and group not in args.only:
            continue
        run_step(group, argv, budget)
    summary()
    emit("run_all", "total_wall", time.monotonic() - t0, "s", mode="quick" if args.quick else "full", loadavg_end=[round(x, 2) for x in os.getloadavg()])
    return 0


if __name__ == "__main__":
    run_main(main)
