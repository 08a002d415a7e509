"""Time one NodeSnapshot collection (in-process, no daemon) on a simulated node.

Prints one JSON line per figure (schema in bench/common.py). No assertions.

    .venv/bin/python bench/bench_snapshot.py [--profile h100-ib|large-16gpu-18nic] [--rounds 10] [--cprofile 25]

Also ``evaluate_refresh_cpu``: one evaluation refresh of the steady node with 2 and with 60
history entries (the daemon re-judges every medium interval for rates over a window).

Scopes: ``full`` (every probe, a fresh Collector each round: what ``agentd check`` pays
per collection) and each tier on its own (``fast``, ``medium``, ``slow``: what the
daemon's tier loops pay for probes every interval; the other tiers ran first because
tiers read each other's data). Figures per scope: CPU ms (process time, so probe lane
threads count) and wall ms as the median over rounds, and files read. Assembling the
NodeSnapshot is included; checks, NCCL render, metrics and file writes are not (the
daemon's cycle figures in bench_daemon.py include them).

Beside each scope's CPU, its plain-read floor: the same process reading every file and
listing every directory that scope's probes read (recorded through agentd's
``ReadRecorder`` hooks, repeats kept) with ``open(p, "rb").read()`` and ``os.listdir``
(bench/floor_reader.py), median over rounds; ``collect_{scope}_cpu_vs_floor`` is the
ratio (target <= 1.5x). ``collect_full_cpu_per_device`` divides the full collection CPU
by GPUs + HCAs + netdevs.

``--cprofile N`` also profiles full collections with cProfile and prints the top N
functions by own time to stderr (not JSON).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import TARGETS, build_root, emit, ratio, record_reads, run_main
from floor_reader import plain_read

from agentd.collection.collector import Collector, probes_in
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot
from agentd.model import NodeSnapshot

SCOPES = (("full", None), ("fast", ("fast",)), ("medium", ("medium",)), ("slow", ("slow",)))


def measure(host: HostRoot, config: AgentConfig, names: list[str] | None, rounds: int) -> tuple[list[float], list[float], int, object]:
    wall, cpu, files, snap = [], [], 0, None
    for _ in range(rounds):
        c = Collector(host, config)
        if names is not None:
            c.run_sync()  # warm: tiers need the others' data
        t0, c0 = time.perf_counter(), time.process_time()
        c.run_sync(names)
        snap = c.snapshot()
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        files = sum(p.files_read for p in snap.probes if names is None or p.name in names)
    return wall, cpu, files, snap


def floor_cpu(reads: dict, rounds: int) -> list[float]:
    """CPU ms of a plain read of ``reads`` (files and listings), once per round."""
    plain_read(reads["files"], reads["listings"])  # warm, as the collections are
    out = []
    for _ in range(rounds):
        c0 = time.process_time()
        plain_read(reads["files"], reads["listings"])
        out.append((time.process_time() - c0) * 1000)
    return out


def cprofile(host: HostRoot, config: AgentConfig, rounds: int, top: int) -> None:
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(rounds):
        c = Collector(host, config)
        c.run_sync()
        c.snapshot()
    prof.disable()
    # Probe bodies run in lane threads, which cProfile does not see; profile them inline too.
    from agentd.collection.collector import PROBES
    from agentd.host.fs import ReadContext

    prof2 = cProfile.Profile()
    outputs: dict = {}
    c = Collector(host, config)
    c.run_sync()
    outputs = dict(c.outputs)
    prof2.enable()
    for _ in range(rounds):
        for spec in PROBES:
            if spec.nvml:
                continue
            spec.fn(ReadContext(host, spec.name), outputs)
    prof2.disable()
    print(f"# cProfile: {rounds} full collections (main thread: assembly, waiting)", file=sys.stderr)
    pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(top)
    print(f"# cProfile: {rounds} x every non-NVML probe body, run inline", file=sys.stderr)
    pstats.Stats(prof2, stream=sys.stderr).sort_stats("tottime").print_stats(top)
    pstats.Stats(prof2, stream=sys.stderr).sort_stats("cumulative").print_stats(top)


def refresh_cpu(snap: object, config: AgentConfig, entries: int, rounds: int) -> list[float]:
    """CPU ms of one evaluation refresh (checks, lifecycle, expected values; the NCCL render
    is reused as in the daemon) of a steady node whose history holds ``entries`` readings
    10 s apart: the daemon's medium-interval refresh, young (a few entries) and settled
    (the rate window full)."""
    from agentd.collection.history import History
    from agentd.outputs.evaluate import Evaluator

    assert isinstance(snap, NodeSnapshot)
    h = History(config.thresholds.history_size, config.intervals.medium_s)
    t0 = snap.taken_at - 10.0 * entries
    for i in range(entries):
        h.append(snap.model_copy(update={"taken_at": t0 + 10.0 * i}))
    hist = h.snapshots()
    ev = Evaluator()
    ev(snap, hist, config, None, refresh_s=0)
    out = []
    for _ in range(rounds):
        c0 = time.process_time()
        ev(snap, hist, config, None, refresh_s=0)
        out.append((time.process_time() - c0) * 1000)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="h100-ib")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--cprofile", type=int, default=0, metavar="N", help="also print the top N functions (cProfile) to stderr")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as d:
        root = build_root(args.profile, Path(d) / "root")
        host = HostRoot.at(root)
        config = AgentConfig(host_root=root)
        tag = {"profile": args.profile}
        snap = None
        reads = record_reads(root)
        full_cpu = float("nan")
        for scope, tiers in SCOPES:
            names = probes_in(tiers) if tiers else None
            wall, cpu, files, snap_ = measure(host, config, names, args.rounds)
            snap = snap if scope != "full" else snap_
            if scope == "full":
                full_cpu = statistics.median(cpu)
            extra = {**tag, "scope": scope, "rounds": args.rounds}
            emit("snapshot", f"collect_{scope}_cpu", statistics.median(cpu), "ms", **extra, min=round(min(cpu), 2), max=round(max(cpu), 2))
            emit("snapshot", f"collect_{scope}_wall", statistics.median(wall), "ms", **extra)
            emit("snapshot", f"collect_{scope}_files_read", files, "files", **extra)
            r = reads[scope]
            fl = floor_cpu(r, args.rounds)
            emit("snapshot", f"collect_{scope}_cpu_floor", statistics.median(fl), "ms", **extra, files=len(r["files"]),
                 listings=len(r["listings"]), touched_not_read=r["touched"], what="open/read + listdir of the same paths, same process")
            ratio("snapshot", f"collect_{scope}_cpu_vs_floor", statistics.median(cpu), statistics.median(fl), TARGETS["collect_cpu"], **extra)
        assert snap is not None
        emit("snapshot", "read_errors", len(snap.read_errors), "errors", **tag, gpus=len(snap.gpus), hcas=len(snap.hcas),
             netdevs=len(snap.netdevs), pci_devices=len(snap.pci))
        devices = len(snap.gpus) + len(snap.hcas) + len(snap.netdevs)
        emit("snapshot", "collect_full_cpu_per_device", full_cpu / devices if devices else None, "ms", **tag, devices=devices,
             gpus=len(snap.gpus), hcas=len(snap.hcas), netdevs=len(snap.netdevs))
        for entries in (2, 60):
            cpu = refresh_cpu(snap, config, entries, args.rounds)
            emit("snapshot", "evaluate_refresh_cpu", statistics.median(cpu), "ms", **tag, history_entries=entries, rounds=args.rounds,
                 note="checks + lifecycle + expected values of a steady node (the daemon's medium-interval refresh); flat when it does not grow with the history")
        emit("snapshot", "bench_process_max_rss", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "MiB", **tag)
        if args.cprofile:
            cprofile(host, config, max(3, args.rounds // 2), args.cprofile)
    return 0


if __name__ == "__main__":
    run_main(main)
