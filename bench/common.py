"""Shared helpers for the benchmarks: JSON figures, processes, trees, HTTP load.

Every figure is one JSON line: ``{"bench", "figure", "value", "unit", ...extra}``.
Benchmarks report and never assert. Processes a benchmark starts (agentd,
node_exporter) are stopped in ``finally`` blocks; ``run_main`` makes SIGTERM act like
Ctrl-C so those blocks run (``run_all.py`` stops overrunning scripts that way).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CLK_TCK = os.sysconf("SC_CLK_TCK")
GZIP = {"Accept-Encoding": "gzip"}  # what Prometheus sends
IDENTITY = {"Accept-Encoding": "identity"}
ENCODINGS = {"gzip": GZIP, "identity": IDENTITY}
LARGE = "large-16gpu-18nic"
HCA64 = "hca64-16gpu"
TIERS = ("fast", "medium", "slow")
DEFAULT_INTERVALS = {"fast": 2.0, "medium": 10.0, "slow": 30.0}  # agentd's defaults (config.md)
# What each cost is held to (issue 19): cost / floor at most this; "ratio" figures carry it.
TARGETS = {"idle_cpu": 1.5, "collect_cpu": 1.5, "rss_vs_node_exporter": 1.6, "metrics_p99_vs_node_exporter": 0.25,
           "health_sequential_nvml_hung_p99_ms": 5.0}


# -- output -------------------------------------------------------------------------


def emit(bench: str, figure: str, value: float | int | None, unit: str, **extra: Any) -> None:
    if isinstance(value, float):
        value = None if math.isnan(value) else round(value, 3)
    print(json.dumps({"bench": bench, "figure": figure, "value": value, "unit": unit, **extra}), flush=True)


def note(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


def ratio(bench: str, figure: str, cost: float | None, floor: float | None, target: float | None, **extra: Any) -> None:
    """``figure`` = cost / floor, with both and the target beside it (None when either is missing)."""
    r = cost / floor if cost is not None and floor else None
    emit(bench, figure, r, "x", cost=None if cost is None else round(cost, 3), floor=None if floor is None else round(floor, 3),
         target=target, within_target=None if r is None or target is None else r <= target, **extra)


def pct(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def latency_figures(bench: str, prefix: str, lat_s: Sequence[float], rps: float, p99_target_ms: float | None = None, **extra: Any) -> None:
    """p50/p99 in ms and requests per second for one load run (the p99 with its target, if any)."""
    emit(bench, f"{prefix}_p50", pct(lat_s, 0.5) * 1000, "ms", n=len(lat_s), **extra)
    p99 = pct(lat_s, 0.99) * 1000
    target: dict[str, Any] = {} if p99_target_ms is None else {"target_ms": p99_target_ms, "within_target": p99 <= p99_target_ms}
    emit(bench, f"{prefix}_p99", p99, "ms", n=len(lat_s), **target, **extra)
    emit(bench, f"{prefix}_rps", rps, "req/s", **extra)


# -- processes ----------------------------------------------------------------------


def _interrupt(*_: object) -> None:
    os.kill(os.getpid(), signal.SIGINT)  # asyncio.run cancels its main task on SIGINT


def exit_on_sigterm() -> None:
    """Treat SIGTERM like Ctrl-C, so ``finally`` blocks stop what the script started.
    SIGINT gets Python's default handler back: a shell starts background jobs with SIGINT
    ignored, and asyncio.run only cancels its main task when the default is in place."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)


def run_main(fn: Callable[[], object]) -> None:
    """Run a script's main; SIGTERM or Ctrl-C stop it (cleanly) with exit status 130."""
    exit_on_sigterm()
    try:
        fn()
    except KeyboardInterrupt:
        note("interrupted: stopped what this script had started")
        sys.exit(130)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid``, those that exited included: the process's
    CPU-time clock (the id ``clock_getcpuclockid(3)`` makes: ``~pid << 3 | 2``), exact to
    the nanosecond. Where the kernel refuses it, utime + stime from ``/proc/PID/stat``,
    in 10 ms ticks (over a 25 s idle window that was +-0.08 % of a core, a third of the
    floor)."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2) / 1e9
    except OSError:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def cpu_ns(pid: int) -> int:
    """CPU time of every live thread of ``pid`` in ns (schedstat: not rounded to 10 ms ticks;
    threads that exited are not counted, so use it for single-threaded processes)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def stop_process(proc: subprocess.Popen, grace_s: float = 10.0) -> tuple[int | str, float]:
    """SIGTERM, wait, SIGKILL. Returns (exit code or 'killed', ms from SIGTERM to exit)."""
    if proc.poll() is not None:
        return proc.returncode, 0.0
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        rc: int | str = proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = "killed"
    return rc, (time.monotonic() - t0) * 1000


def agentd_cmd() -> list[str]:
    exe = ROOT / ".venv" / "bin" / "agentd"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "agentd"]


def clean_env() -> dict[str, str]:
    """The environment agentd runs with here: no AGENTD_* settings or systemd sockets, and
    the unit's and container's MALLOC_ARENA_MAX=2 (systemd/agentd.service), so RSS is
    measured as shipped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_") and k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    env.setdefault("MALLOC_ARENA_MAX", "2")
    return env


# -- simulated trees and agentd -----------------------------------------------------


def build_root(profile: str, out: Path) -> Path:
    """Build a simulated host root (the benchmark-only profiles are registered first)."""
    from agentd import sim
    from agentd.sim import profile_hca64, profile_large

    profile_large.register()
    profile_hca64.register()
    return Path(sim.build_tree(profile, out))


class ReadLog:
    """A ``ReadRecorder`` (agentd.host.fs) that keeps every file read and directory listed,
    in order and with repeats: the plain-read floor reads exactly these."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self.listings: list[str] = []
        self.touched_n = 0

    def file(self, path: str, data: bytes) -> None:
        self.files.append(path)

    def listing(self, path: str, names: list[str]) -> None:
        self.listings.append(path)

    def touched(self, path: str) -> None:
        self.touched_n += 1

    def take(self) -> dict[str, Any]:
        out = {"files": self.files, "listings": self.listings, "touched": self.touched_n}
        self.files, self.listings, self.touched_n = [], [], 0
        return out


def record_reads(root: Path) -> dict[str, dict[str, Any]]:
    """What agentd's readers read, by scope: ``full`` (every probe, a fresh Collector, as
    ``agentd check``) and each tier (after a full collection, as in the daemon). Each is
    ``{"files": [...], "listings": [...], "touched": n}``, absolute paths as the readers
    spelled them; ``touched`` counts paths only tested, resolved or followed."""
    from dataclasses import replace

    from agentd.collection.collector import Collector, probes_in
    from agentd.config import AgentConfig
    from agentd.host.fs import HostRoot

    log = ReadLog()
    host = replace(HostRoot.at(root), recorder=log)
    collector = Collector(host, AgentConfig(host_root=root))
    collector.run_sync()
    out = {"full": log.take()}
    for tier in TIERS:
        collector.run_sync(probes_in([tier]))
        out[tier] = log.take()
    return out


def device_count(root: Path) -> dict[str, int]:
    """GPUs, HCAs and netdevs one collection of ``root`` finds, and their sum (``devices``)."""
    from agentd.collection.collector import Collector
    from agentd.config import AgentConfig
    from agentd.host.fs import HostRoot

    c = Collector(HostRoot.at(root), AgentConfig(host_root=root))
    c.run_sync()
    snap = c.snapshot()
    n = {"gpus": len(snap.gpus), "hcas": len(snap.hcas), "netdevs": len(snap.netdevs)}
    return {"devices": sum(n.values()), **n}


def write_floor_plan(path: Path, reads: dict[str, dict[str, Any]], first: dict[str, float], intervals: dict[str, float]) -> Path:
    """The plan bench/floor_reader.py follows: per tier its interval, first due time, reads."""
    tiers = {t: {"interval": intervals[t], "first": first[t], "files": reads[t]["files"], "listings": reads[t]["listings"]} for t in TIERS}
    path.write_text(json.dumps({"tiers": tiers}))
    return path


def apply_fault(root: Path, spec: str) -> None:
    from agentd import sim

    sim.apply_fault(root, spec)


def clear_fault(root: Path, spec: str) -> None:
    from agentd import sim

    sim.clear_fault(root, spec)


def write_config(tmp: Path, *, intervals: dict[str, float] | None = None, timeouts: dict[str, float] | None = None,
                 events: dict[str, str] | None = None, kernel: dict[str, float] | None = None, extra: str = "") -> Path:
    """An agentd.toml with default intervals unless given; files go under ``tmp/out``."""
    out = tmp / "out"
    text = (
        f'[paths]\nnccl_env = "{out}/nccl.env"\nnccl_conf = "{out}/nccl.conf"\nnccl_topo = "{out}/topo.xml"\n'
        f'baseline = "{out}/baseline.json"\nstate_dir = "{out}"\n'
    )
    for section, values in (("intervals", intervals), ("timeouts", timeouts), ("kernel", kernel)):
        if values:
            text += f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items())
    if events:
        text += "[events]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in events.items())
    text += extra  # further TOML sections, verbatim
    cfg = tmp / "agentd.toml"
    cfg.write_text(text)
    return cfg


def nccl_env_of(root: Path, tmp: Path) -> Path:
    """Where ``agentd run --host-root root`` writes nccl.env: for a root that is not the node
    (a simulated one), the node's paths move beside it (agentd.outputs.node_state)."""
    try:
        from agentd.outputs.node_state import state_dir_for

        return state_dir_for(root) / "nccl.env"
    except (ImportError, ValueError):  # before node state moved, or root "/": the configured path
        return tmp / "out" / "nccl.env"


class Agentd:
    """``agentd run`` on a host root, on a free loopback port, logging to ``tmp``."""

    def __init__(self, tmp: Path, root: Path, *, intervals: dict[str, float] | None = None, timeouts: dict[str, float] | None = None,
                 events: dict[str, str] | None = None, kernel: dict[str, float] | None = None, extra: str = ""):
        self.tmp, self.root = tmp, root
        self.config = write_config(tmp, intervals=intervals, timeouts=timeouts, events=events, kernel=kernel, extra=extra)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.nccl_env = nccl_env_of(root, tmp)
        self.proc: subprocess.Popen | None = None
        self._log: Any = None
        self.last_hup: float | None = None  # Unix time of the latest SIGHUP (restarts the tier schedules)

    def hup(self) -> None:
        """SIGHUP: reload, one "event" collection, and every tier loop restarts its schedule."""
        self.last_hup = time.time()
        os.kill(self.pid, signal.SIGHUP)

    def start(self) -> "Agentd":
        cmd = [*agentd_cmd(), "run", "--config", str(self.config), "--host-root", str(self.root), "--listen", f"127.0.0.1:{self.port}"]
        self._log = open(self.tmp / f"agentd-{self.port}.log", "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=self._log, env=clean_env())
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> tuple[int | str, float]:
        try:
            return stop_process(self.proc) if self.proc is not None else (0, 0.0)
        finally:
            if self._log is not None:
                self._log.close()


async def wait_http(url: str, proc: subprocess.Popen, limit_s: float = 90, ok: tuple[int, ...] = (200,)) -> float:
    """Poll ``url`` until it answers one of ``ok``; seconds waited. Exits if the process dies."""
    import aiohttp

    t0 = time.monotonic()
    async with aiohttp.ClientSession() as session:
        while time.monotonic() - t0 < limit_s:
            if proc.poll() is not None:
                raise SystemExit(f"{proc.args[0]} exited with {proc.returncode}")
            try:
                async with session.get(url) as r:
                    if r.status in ok:
                        return time.monotonic() - t0
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise SystemExit(f"{url} did not answer within {limit_s} s")


def metric(text: str, name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    prefix = f"{name}{{{want}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return None


def series_count(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


# -- HTTP load ----------------------------------------------------------------------


async def sequential(url: str, n: int, headers: dict[str, str] = GZIP, limit_s: float = 30.0) -> tuple[list[float], float]:
    """n requests one after another on one keep-alive connection (stops at limit_s).
    Returns (latencies in s, requests per second)."""
    import aiohttp

    out: list[float] = []
    stop = time.monotonic() + limit_s
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        t_start = time.perf_counter()
        for _ in range(n):
            if time.monotonic() > stop:
                break
            t0 = time.perf_counter()
            async with session.get(url, headers=headers) as r:
                await r.read()
            out.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - t_start
    return out, len(out) / elapsed if elapsed > 0 else float("nan")


async def concurrent(url: str, clients: int, duration_s: float, headers: dict[str, str] = GZIP, error_status: int = 500) -> tuple[list[float], float, int]:
    """``clients`` keep-alive clients requesting as fast as they can for ``duration_s``.
    Returns (latencies in s, successful requests per second, failed requests). Responses
    with a status >= error_status and transport errors are failures, counted apart (pass
    600 where 503 is a valid answer)."""
    import aiohttp

    lat: list[float] = []
    errors = 0
    stop = time.monotonic() + duration_s
    conn = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=max(10.0, duration_s * 2))
    async with aiohttp.ClientSession(connector=conn, auto_decompress=False, timeout=timeout) as session:

        async def worker() -> None:
            nonlocal errors
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                try:
                    async with session.get(url, headers=headers) as r:
                        await r.read()
                        failed = r.status >= error_status
                except (TimeoutError, aiohttp.ClientError):
                    failed = True
                if failed:  # neither in the latencies nor in req/s
                    errors += 1
                    continue
                lat.append(time.perf_counter() - t0)

        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.monotonic() - t0
    return lat, len(lat) / elapsed, errors


async def fetch(url: str, headers: dict[str, str] = IDENTITY) -> tuple[int, bytes]:
    """One request, body as sent (not decompressed)."""
    import aiohttp

    async with aiohttp.ClientSession(auto_decompress=False) as session, session.get(url, headers=headers) as r:
        return r.status, await r.read()
