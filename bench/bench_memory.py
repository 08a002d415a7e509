#!/usr/bin/env python3
"""Benchmark the daemon's memory on a simulated node. Prints one JSON line per figure
(schema in bench/common.py); asserts nothing.

    .venv/bin/python bench/bench_memory.py [--profile h100-ib] [--clients 50] [--load-s 5]
        [--entries 720] [--busy-interval-s 0.25] [--skip-busy]

What RSS is made of, then what it grows to:
- ``rss_interpreter``, ``rss_import_cli``, ``rss_import_daemon``: a fresh interpreter, after
  ``import agentd.cli`` and after ``import agentd.daemon.daemon`` (what ``agentd run`` needs
  before it reads a file), both as the ``agentd`` command imports them with no web config:
  without OpenSSL (agentd.base.openssl_gate), with the number of modules loaded and the heaviest imports by
  ``python -X importtime`` (cumulative);
- ``rss_start``: ``agentd run`` on the tree with default intervals, once ready plus a few
  seconds; ``rss_after_load``: after /metrics (gzip, identity) and /health under
  sequential and concurrent load; ``rss_heap_after_load``: that minus
  ``rss_import_daemon`` (caches, State, history, the HTTP server's buffers);
- a busy node: a full history (``--entries``, default 720 = thresholds.history_size) while
  every IB counter, hw_counter, ethtool statistic and NVLink error counter changes every
  cycle (this script rewrites them in the tree between cycles). Intervals are shortened to
  ``--busy-interval-s`` and thresholds.rate_window_s raised to its maximum so every medium
  collection is kept (the default thinning keeps fewer entries for longer: the cap is the
  same). Entries are counted from the medium probes' last-success timestamps.
  ``busy_rss_full``: RSS at the full history; ``busy_bytes_per_entry``: RSS growth from
  the first entries to the full history, per entry; ``history_heap_bytes_per_entry``:
  the same kind of history built in this process (collector + History, --heap-entries),
  what dropping it frees per entry as tracemalloc counts it (the newest entry, kept whole,
  is included: ~1/N of a whole snapshot); ``history_heap_default_windows_bytes_per_entry``:
  a full history at the default windows on that busy node, entries beyond the rate window
  aged.

The full busy run (720 entries at 0.5 s) takes ~7 minutes; run_all runs ``--entries 180``
(~2 min) and ``--skip-busy`` with ``--quick``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import (
    ENCODINGS,
    ROOT,
    Agentd,
    build_root,
    concurrent,
    emit,
    fetch,
    note,
    rss_bytes,
    run_main,
    sequential,
    wait_http,
)

B = "memory"
MIB = 1024 * 1024

_PROBE = """
import sys, importlib
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) * 1024
out = {'interpreter': rss()}
names = sys.argv[1:]
if names[:1] == ['--as-agentd']:  # what the agentd command does first, and agentd run with no web config
    names = names[1:]
    from agentd.base.openssl_gate import lean_process, without_tls
    lean_process()
    without_tls()
for name in names:
    importlib.import_module(name)
    out[name] = rss()
out['modules'] = len(sys.modules)
print(__import__('json').dumps(out))
"""


def import_figures(tag: dict[str, Any]) -> float:
    """RSS of fresh interpreters after the imports ``agentd run`` needs; returns the
    daemon-import RSS in bytes."""
    py = sys.executable
    # As installed, with byte-code: pip compiles it, the deb's postinst and the rpm's build
    # too. A tree without it (a fresh clone, PYTHONDONTWRITEBYTECODE) compiles agentd's
    # modules at every start and would count the compiler's memory in every figure below.
    subprocess.run([py, "-m", "compileall", "-q", str(ROOT / "agentd")], capture_output=True, check=False)
    base = json.loads(subprocess.run([py, "-c", _PROBE], capture_output=True, text=True, check=True).stdout)
    cli = json.loads(subprocess.run([py, "-c", _PROBE, "--as-agentd", "agentd.cli"], capture_output=True, text=True, check=True).stdout)
    app = json.loads(subprocess.run([py, "-c", _PROBE, "--as-agentd", "agentd.cli", "agentd.daemon.daemon"], capture_output=True, text=True, check=True).stdout)
    emit(B, "rss_interpreter", base["interpreter"] / MIB, "MiB", **tag, modules=base["modules"])
    emit(B, "rss_import_cli", cli["agentd.cli"] / MIB, "MiB", **tag, modules=cli["modules"])
    emit(B, "rss_import_daemon", app["agentd.daemon.daemon"] / MIB, "MiB", **tag, modules=app["modules"],
         note="without OpenSSL, as agentd run with no web config (agentd.base.openssl_gate)")
    lean = "from agentd.base.openssl_gate import lean_process, without_tls; lean_process(); without_tls(); "
    r = subprocess.run([py, "-X", "importtime", "-c", lean + "import agentd.cli, agentd.daemon.daemon"], capture_output=True, text=True, check=True)
    total, top = 0, []
    for line in r.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m is None:
            continue
        depth = (len(m.group(3)) - 1) // 2
        if depth == 0:
            total += int(m.group(2))
        if not m.group(4).startswith("agentd"):  # third-party and stdlib packages, by cumulative time
            top.append((int(m.group(2)), m.group(4)))
    top.sort(reverse=True)
    emit(B, "import_time_daemon", total / 1000, "ms", **tag, note="cumulative, python -X importtime",
         heaviest_non_agentd_ms={name: round(us / 1000, 1) for us, name in top[:12]})
    return float(app["agentd.daemon.daemon"])


async def http_load(d: Agentd, args: argparse.Namespace) -> None:
    for path, enc in (("/metrics", "gzip"), ("/metrics", "identity"), ("/health", "identity")):
        await sequential(d.base + path, args.requests, ENCODINGS[enc])
        await concurrent(d.base + path, args.clients, args.load_s, ENCODINGS[enc], error_status=600)


async def idle_load(d: Agentd, args: argparse.Namespace, tag: dict[str, Any], imports: float) -> None:
    assert d.proc is not None
    ready = await wait_http(d.base + "/readyz", d.proc, ok=(200,))
    await asyncio.sleep(args.settle_s)
    emit(B, "rss_start", rss_bytes(d.pid) / MIB, "MiB", **tag, ready_s=round(ready, 2), settle_s=args.settle_s)
    _, body = await fetch(d.base + "/metrics")
    await http_load(d, args)
    await asyncio.sleep(1)
    rss = rss_bytes(d.pid)
    emit(B, "rss_after_load", rss / MIB, "MiB", **tag, clients=args.clients, load_s=args.load_s, requests=args.requests)
    emit(B, "rss_heap_after_load", (rss - imports) / MIB, "MiB", **tag, note="rss_after_load - rss_import_daemon")
    emit(B, "metrics_bytes", len(body), "bytes", **tag, note="one /metrics body, identity")
    emit(B, "metrics_gzip_bytes", len(gzip.compress(body, compresslevel=6, mtime=0)), "bytes", **tag,
         note="its gzip form; State caches both, the metrics Registry keeps each area's text besides")


# -- busy node ------------------------------------------------------------------------


class CounterDriver:
    """Rewrites every counter in the tree with a new value each tick (atomically)."""

    def __init__(self, root: Path, period_s: float):
        self.root, self.period_s = root, period_s
        self.stop = threading.Event()
        self.ticks = 0
        self.files: dict[str, int] = {}
        for d in (root / "sys" / "class" / "infiniband").glob("*/ports/*/*counters*"):
            for f in d.iterdir():
                try:
                    self.files[str(f)] = int(f.read_text().split()[0])
                except (ValueError, IndexError, OSError):
                    pass
        self.ethtool = {str(f): f.read_text() for f in (root / ".agentd" / "ethtool").glob("*")}
        nvml = root / ".agentd" / "nvml.json"
        self.nvml = (str(nvml), json.loads(nvml.read_text())) if nvml.exists() else None
        self.thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _write(path: str, text: str) -> None:
        tmp = path + ".bench-tmp"  # str paths: pathlib would intern every name it parses
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def _tick(self, k: int) -> None:
        bump = 300 + k  # above 256 (CPython caches small ints: they would cost nothing)
        for f, v in self.files.items():
            self._write(f, f"{v + bump}\n")
        for f, text in self.ethtool.items():
            self._write(f, re.sub(r"(:\s+)(\d+)$", lambda m: f"{m.group(1)}{int(m.group(2)) + bump}", text, flags=re.M))
        if self.nvml is not None:
            path, data = self.nvml
            for g in data.get("gpus", []):
                for link in g.get("nvlinks", []):
                    link["errors"] = {n: bump for n in link.get("errors", {})}
            self._write(path, json.dumps(data))

    def _run(self) -> None:
        while not self.stop.is_set():
            self.ticks += 1
            self._tick(self.ticks)
            self.stop.wait(self.period_s)

    def counters(self) -> int:
        nv = sum(len(link.get("errors", {})) for g in (self.nvml[1].get("gpus", []) if self.nvml else []) for link in g.get("nvlinks", []))
        eth = sum(len(re.findall(r":\s+\d+$", t, flags=re.M)) for t in self.ethtool.values())
        return len(self.files) + eth + nv


def _medium_stamp(text: str) -> str:
    """The ib_counters probe's last-success timestamp: changes once per medium collection."""
    return "".join(line for line in text.splitlines()
                   if line.startswith("agentd_probe_last_success_timestamp_seconds{") and '"ib_counters"' in line)


async def busy(args: argparse.Namespace, tmp: Path, tag: dict[str, Any]) -> None:
    root = build_root(args.profile, tmp / "busy-root")
    iv = args.busy_interval_s
    d = Agentd(tmp, root, intervals={"fast_s": iv, "medium_s": iv})
    with d.config.open("a") as f:
        f.write(f"[thresholds]\nhistory_size = {args.entries}\nrate_window_s = 86400\n")
    driver = CounterDriver(root, 0.0)  # as fast as it can: several ticks per daemon cycle
    emit(B, "busy_counters", driver.counters(), "counters", **tag, note="rewritten every tick: IB counters and hw_counters, ethtool, NVLink errors")
    driver.thread.start()
    d.start()
    try:
        assert d.proc is not None
        await wait_http(d.base + "/readyz", d.proc, ok=(200,))
        seen: list[str] = []
        first: tuple[int, int] | None = None
        t0 = time.monotonic()
        limit = t0 + args.busy_limit_s
        while len(seen) < args.entries + 2 and time.monotonic() < limit:
            _, body = await fetch(d.base + "/metrics")
            stamp = _medium_stamp(body.decode())
            if not seen or stamp != seen[-1]:
                seen.append(stamp)
            if first is None and len(seen) >= min(20, args.entries // 4):
                first = (len(seen), rss_bytes(d.pid))
            await asyncio.sleep(iv / 4)
        n = min(len(seen), args.entries)
        rss = rss_bytes(d.pid)
        emit(B, "busy_rss_full", rss / MIB, "MiB", **tag, entries=n, history_size=args.entries, interval_s=iv,
             fill_s=round(time.monotonic() - t0, 1), driver_ticks=driver.ticks, cycles_seen=len(seen))
        if first is not None and n > first[0]:
            emit(B, "busy_bytes_per_entry", (rss - first[1]) / (n - first[0]), "bytes", **tag,
                 note=f"RSS growth from entry {first[0]} to {n}")
    finally:
        driver.stop.set()
        driver.thread.join()
        rc, _ = d.stop()
        if rc not in (0, -15):
            note(f"agentd (busy) exited with {rc}; log: {d.tmp}")


def _history_bytes(hist: Any) -> int:
    """The heap the history alone holds, as tracemalloc counts it: what dropping it frees
    (its parts shared with the collector's current outputs stay, and are not its cost)."""
    import gc
    import tracemalloc

    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    hist._items.clear()
    gc.collect()
    return before - tracemalloc.get_traced_memory()[0]


def history_heap(args: argparse.Namespace, tmp: Path, tag: dict[str, Any]) -> None:
    """In this process: the collector on a busy tree (every counter rewritten between
    collections) feeding a History, traced with tracemalloc from before the collector
    starts. Each figure is what dropping the history frees, per entry:
    - ``history_heap_bytes_per_entry``: every entry within the rate windows (the busy
      daemon run's case: thresholds.rate_window_s at its maximum), ``--heap-entries``;
    - ``history_heap_default_windows_bytes_per_entry``: a full history (``--entries``) at
      the default windows, as a busy node holds it after ~2.5 days: one entry per 5 min
      beyond the 10 min rate window (aged: agentd.collection.compact), then the last
      10 min one per 10 s. The entries' times are set; the collector reads the tree each
      time."""
    import tracemalloc

    from agentd.collection.collector import Collector, probes_in
    from agentd.collection.history import RATE_WINDOW_S, History, is_aged, share
    from agentd.config import AgentConfig
    from agentd.host.fs import HostRoot

    root = build_root(args.profile, tmp / "heap-root")
    driver = CounterDriver(root, 0)
    tracemalloc.start()
    try:
        c = Collector(HostRoot(root), AgentConfig())
        c.run_sync()
        medium = probes_in(("fast", "medium"))

        def fill(hist: History, times: list[float]) -> None:
            prev = None
            for k, t in enumerate(times, 1):
                driver._tick(k)
                c.run_sync(medium)
                prev = hist.append(share(prev, c.snapshot(taken_at=t)))

        n = args.heap_entries
        worst = History(n, spacing_s=1.0, recent_s=1e9)
        fill(worst, [10.0 * k for k in range(n)])
        emit(B, "history_heap_bytes_per_entry", _history_bytes(worst) / n, "bytes", **tag, entries=n,
             note="every entry within the rate windows; tracemalloc, what dropping the history frees")
        full = args.entries
        recent = int(RATE_WINDOW_S // 10)
        old = [300.0 * k for k in range(full - recent)]
        times = old + [old[-1] + RATE_WINDOW_S + 10.0 * k for k in range(recent)]
        default = History(full, spacing_s=10.0, recent_s=RATE_WINDOW_S)
        fill(default, times)
        kept = len(default)
        aged = sum(1 for s in default.snapshots() if is_aged(s))
        emit(B, "history_heap_default_windows_bytes_per_entry", _history_bytes(default) / kept, "bytes", **tag, entries=kept, aged=aged,
             note="a full history at the default windows on a busy node (aged entries beyond the rate window); tracemalloc, what dropping it frees")
    finally:
        tracemalloc.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="h100-ib")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--load-s", type=float, default=5.0)
    ap.add_argument("--settle-s", type=float, default=5.0)
    ap.add_argument("--entries", type=int, default=720, help="history entries for the busy node (thresholds.history_size)")
    ap.add_argument("--busy-interval-s", type=float, default=0.5, help="fast and medium interval of the busy node")
    ap.add_argument("--busy-limit-s", type=float, default=600.0)
    ap.add_argument("--heap-entries", type=int, default=40, help="entries for the in-process tracemalloc figure")
    ap.add_argument("--skip-busy", action="store_true")
    args = ap.parse_args()
    tag = {"profile": args.profile}
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-memory-"))
    try:
        imports = import_figures(tag)
        root = build_root(args.profile, tmp / "root")
        d = Agentd(tmp, root).start()
        try:
            asyncio.run(idle_load(d, args, tag, imports))
        finally:
            d.stop()
        if not args.skip_busy:
            asyncio.run(busy(args, tmp, tag))
            history_heap(args, tmp, tag)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    run_main(main)
