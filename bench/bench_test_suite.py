#!/usr/bin/env python3
"""How long the test suite takes: ``make test-fast`` and the whole suite as ``make test``
runs it (issue 41's targets: under 60 s and under 8 minutes on the project's 2-core
machine). Prints one JSON figure per run and never asserts.

    .venv/bin/python bench/bench_test_suite.py [--only fast|full] [--workers N]

The two runs are exactly the Makefile's pytest lines (read from it, so they cannot drift),
without ``make lint``. A run that fails still reports its time, with its exit status and
pytest's last line. Takes ~1 + ~8 minutes; run it on an otherwise idle machine: the
machine's load average is printed beside each figure.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time

from common import ROOT, emit, note, run_main

MAKEFILE = ROOT / "Makefile"


def make_variables() -> dict[str, str]:
    """The simple ``NAME ?= value`` / ``NAME := value`` assignments of the Makefile."""
    out: dict[str, str] = {}
    for line in MAKEFILE.read_text().splitlines():
        m = re.match(r"^([A-Z_]+)\s*(?:\?=|:=|=)\s*(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def recipe(target: str) -> str:
    """The pytest line of a Makefile target, with its make variables expanded."""
    lines = MAKEFILE.read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if re.match(rf"^{re.escape(target)}:", l))
    cmd = next(l.strip() for l in lines[start + 1:] if "pytest" in l)
    variables = {**make_variables(), "BIN": ".venv/bin"}
    for _ in range(3):
        cmd = re.sub(r"\$\((\w+)\)", lambda m: variables.get(m.group(1), m.group(0)), cmd)
    return cmd


def run(name: str, cmd: str, workers: str | None) -> None:
    argv = shlex.split(cmd)
    env = dict(os.environ)
    while argv and "=" in argv[0] and not argv[0].startswith("-"):  # VAR=value prefixes
        k, v = argv.pop(0).split("=", 1)
        env[k] = v
    if workers is not None and "-n" in argv:
        argv[argv.index("-n") + 1] = workers
    note(f"{name}: {' '.join(argv)}")
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    tail = [l for l in p.stdout.splitlines() if l.strip()][-1:] or [""]
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", tail[0])}
    emit("test_suite", f"{name}_wall_s", wall, "s", exit_status=p.returncode, load_avg_1m_before=round(load, 2), cpus=os.cpu_count(), **counts,
         summary=tail[0].strip("= "))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("fast", "full"))
    ap.add_argument("--workers", help="override the runs' -n")
    args = ap.parse_args()
    if args.only in (None, "fast"):
        run("test_fast", recipe("test-fast"), args.workers)
    if args.only in (None, "full"):
        run("test_full", recipe("test"), args.workers)


if __name__ == "__main__":
    sys.exit(run_main(main))
