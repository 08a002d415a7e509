#!/usr/bin/env python3
"""What ``[enforce]`` costs an idle daemon (issue 35). Prints one JSON line per figure
(schema in bench/common.py); asserts nothing.

    .venv/bin/python bench/bench_enforce.py [--profile h100-roce] [--idle-s 40] [--rounds 3]

Two daemons, each on its own tree of the same simulated node, default intervals: one with agentd's defaults
(no knob named), one with ``enforce.mode = "plan"`` and every knob named (a plan per
evaluation, config.drift findings, agentd_enforce_* series). Each round measures both
over the same --idle-s window, side by side (process CPU-time clock), after both are
ready and past their first minute. Figures: idle CPU % of one core of each, their ratio,
and the series each exports.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_daemon import metrics_text
from common import Agentd, build_root, cpu_seconds, emit, wait_http

from agentd.config import KNOBS

B = "enforce"
ENFORCE_ALL = '[enforce]\nmode = "plan"\nknobs = [' + ", ".join(f'"{k}"' for k in KNOBS) + "]\n"


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="h100-roce")
    ap.add_argument("--idle-s", type=float, default=40.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settle-s", type=float, default=35.0, help="after ready, before measuring (the slow tier has run)")
    ap.add_argument("--fault", action="append", default=[], help="simulator fault on the node both daemons read (drift to report)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentd-bench-enforce-") as t:
        tmp = Path(t)
        daemons = {}
        # two trees of the same node: each daemon writes its node's files (NCCL files,
        # history) beside its own root
        for name, extra in (("default", ""), ("enforce_plan_all_knobs", ENFORCE_ALL)):
            (tmp / name).mkdir()
            root = build_root(args.profile, tmp / name / "root")
            for spec in args.fault:
                from agentd import sim

                sim.apply_fault(root, spec)
            daemons[name] = Agentd(tmp / name, root, extra=extra).start()
        try:
            for d in daemons.values():
                await wait_http(d.base + "/readyz", d.proc)
            time.sleep(args.settle_s)
            tag = {"profile": args.profile, "faults": ",".join(args.fault) or "none"}
            for name, d in daemons.items():
                text = await metrics_text(d)
                emit(B, "series", sum(1 for line in text.splitlines() if line and not line.startswith("#")), "series", **tag, daemon=name)
                emit(B, "drift_findings", text.count('code="config.drift"'), "findings", **tag, daemon=name)
            for r in range(args.rounds):
                c0 = {n: cpu_seconds(d.pid) for n, d in daemons.items()}
                t0 = time.monotonic()
                time.sleep(args.idle_s)
                c1 = {n: cpu_seconds(d.pid) for n, d in daemons.items()}
                dt = time.monotonic() - t0
                pct = {n: 100 * (c1[n] - c0[n]) / dt for n in daemons}
                for n, v in pct.items():
                    emit(B, "idle_cpu", round(v, 3), "percent_of_one_core", **tag, daemon=n, round=r, seconds=round(dt, 1))
                emit(B, "idle_cpu_enforce_vs_default", round(pct["enforce_plan_all_knobs"] / pct["default"], 3) if pct["default"] else None,
                     "ratio", **tag, round=r, seconds=round(dt, 1))
        finally:
            for d in daemons.values():
                d.stop()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
