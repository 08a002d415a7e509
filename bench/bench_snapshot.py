"""Time one full NodeSnapshot collection on a simulated node and count the files read.

Prints one JSON line per figure. No assertions: benchmarks report, tests judge.

    .venv/bin/python bench/bench_snapshot.py [--profile h100-ib] [--rounds 20]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.config import AgentConfig  # noqa: E402
from agentd.host.collect import Collector, probes_in  # noqa: E402
from agentd.host.fs import HostRoot  # noqa: E402
from agentd.sim import build_tree  # noqa: E402


def emit(**kv: object) -> None:
    print(json.dumps(kv), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="h100-ib")
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        root = build_tree(args.profile, Path(d) / "root")
        host = HostRoot.at(root)
        config = AgentConfig(host_root=root)
        for label, names in (("full", None), ("fast_tier", probes_in(("fast",))), ("medium_tier", probes_in(("medium",)))):
            wall, cpu, files = [], [], 0
            for _ in range(args.rounds):
                c = Collector(host, config)
                if names is not None:
                    c.run_sync()  # warm: tiers need the others' data
                t0, c0 = time.perf_counter(), time.process_time()
                c.run_sync(names)
                snap = c.snapshot()
                wall.append((time.perf_counter() - t0) * 1000)
                cpu.append((time.process_time() - c0) * 1000)
                files = sum(p.files_read for p in snap.probes if names is None or p.name in names)
            emit(bench="snapshot", profile=args.profile, scope=label, wall_ms_p50=round(statistics.median(wall), 2),
                 cpu_ms_p50=round(statistics.median(cpu), 2), files_read=files, rounds=args.rounds)
        emit(bench="snapshot", profile=args.profile, gpus=len(snap.gpus), hcas=len(snap.hcas), netdevs=len(snap.netdevs),
             pci_devices=len(snap.pci), read_errors=len(snap.read_errors),
             max_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
