#!/usr/bin/env python3
"""Carrier loss on a RoCE port -> ``/health`` 503 and ``NCCL_IB_HCA`` without the port:
rtnetlink link events (``events.rtnetlink = "on"``) against the fast-tier poll alone.

Prints one JSON line per figure (schema in bench/common.py); asserts nothing. Needs root
and iproute2 (it creates veth pairs); without them it prints why and exits 0.

    .venv/bin/python bench/bench_link_event.py [--trials 16] [--fast-s 2.0] [--poll-ms 5]

What stands for what. No RDMA device can be made to sit on a virtual link here (no
rdma_rxe), so the node is the simulator's ``h100-roce`` tree and the kernel's part is
played by a real veth pair:

- the simulated tree stands for sysfs: ``port_down@mlx5_N`` (agentd/sim) writes the port's
  state DOWN and its netdev's operstate/carrier down, as the kernel updates its state
  before it notifies anyone, so the fault's files are written first;
- the veth pair stands for the kernel's notification: one end is named exactly like the
  simulated port's netdev (``ens{N+1}np0``, mlx5_N's), its peer is a private name; taking
  the peer down (``ip link set <peer> down``) makes the named end lose carrier, and the
  running kernel announces it on rtnetlink (RTM_NEWLINK, operstate lowerlayerdown,
  carrier 0) exactly as it would for the ConnectX netdev. agentd's watcher sees a watched
  netdev (an RDMA port's) change and collects the fast tier, which reads the tree.

Per mode (``events``: rtnetlink on; ``poll``: rtnetlink off, the fast-tier schedule
only), a fresh tree and a fresh ``agentd run --host-root <tree>`` at fast_s, then per
trial: wait a random fraction of fast_s (the fault lands at a random phase of the
schedule), apply the fault and take the peer down, and time from the start of that until
``/health`` answers 503 and ``nccl.env`` no longer lists ``mlx5_N:1`` (polled every
--poll-ms); then, after another random wait, clear the fault, bring the peer up and time
the way back (200, listed again). Trials take the eight ports in turn, at most two downs
per port per daemon (a third within 12 h is ib.port.flapping, critical, by design).
Figures: p50 (the value) and p99 in ms per mode, with fast_s and, for the events mode,
issue 14's targets (p50 <= 100 ms, p99 <= 300 ms). The veth pairs are deleted whatever
happens (finally; SIGTERM and Ctrl-C run it too).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_reaction import until
from common import Agentd, apply_fault, build_root, clear_fault, emit, note, pct, run_main, wait_http

B = "link_event"
PROFILE = "h100-roce"
PORTS = 8  # mlx5_0..7, netdevs ens1np0..ens8np0 (agentd/sim/profiles.py)
TARGET_P50_MS, TARGET_P99_MS = 100.0, 300.0
IFNAMSIZ = 16  # including the NUL: a netdev name has at most 15 characters


def netdev_of(i: int) -> str:
    return f"ens{i + 1}np0"


def peer_of(i: int) -> str:
    return f"agtlevp{os.getpid() % 10000}x{i}"


def ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)


def why_not() -> str | None:
    """Why veth pairs cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "not root: creating veth pairs needs CAP_NET_ADMIN"
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed"
    for i in range(PORTS):
        if len(netdev_of(i)) >= IFNAMSIZ or len(peer_of(i)) >= IFNAMSIZ:
            return f"netdev name {netdev_of(i)!r} or {peer_of(i)!r} is longer than 15 characters"
        if ip("link", "show", "dev", netdev_of(i)).returncode == 0:
            return f"this host already has a netdev named {netdev_of(i)}: not touching it"
    return None


class VethPairs:
    """One veth pair per simulated port: ``ens{N+1}np0`` <-> a private peer, both up."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def create(self, n: int) -> None:
        for i in range(n):
            r = ip("link", "add", netdev_of(i), "type", "veth", "peer", "name", peer_of(i))
            if r.returncode != 0:
                raise RuntimeError(f"ip link add {netdev_of(i)} type veth: {r.stderr.strip()}")
            self.made.append(netdev_of(i))
            for name in (netdev_of(i), peer_of(i)):
                if ip("link", "set", name, "up").returncode != 0:
                    raise RuntimeError(f"ip link set {name} up failed")
        for i in range(n):
            wait_carrier(netdev_of(i), True)

    def delete(self) -> None:
        for name in self.made:  # deleting one end deletes the pair
            ip("link", "del", name)
        self.made = []


def wait_carrier(name: str, want: bool, limit_s: float = 5.0) -> None:
    path = Path("/sys/class/net") / name / "carrier"
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        try:
            if (path.read_text().strip() == "1") is want:
                return
        except OSError:
            pass
        time.sleep(0.01)


def link(i: int, up: bool) -> None:
    r = ip("link", "set", peer_of(i), "up" if up else "down")
    if r.returncode != 0:
        raise RuntimeError(f"ip link set {peer_of(i)}: {r.stderr.strip()}")


async def one_mode(args: argparse.Namespace, mode: str, tmp: Path, rng: random.Random) -> dict[str, list[float | None]]:
    import aiohttp

    from agentd.sim.build import pristine_root

    root = build_root(PROFILE, tmp / f"root-{mode}")
    pristine_root(PROFILE)  # faults read original bytes from it: build it before timing
    run_dir = tmp / f"run-{mode}"
    run_dir.mkdir()
    d = Agentd(run_dir, root, intervals={"fast_s": args.fast_s}, events={"rtnetlink": "on" if mode == "events" else "off"})
    out: dict[str, list[float | None]] = {"down_503": [], "down_env": [], "up_200": [], "up_env": [], "fault_ms": [], "notify_ms": []}
    applied: set[int] = set()
    limit = 3 * args.fast_s + 10
    poll = args.poll_ms / 1000
    try:
        d.start()
        await wait_http(d.base + "/readyz", d.proc)
        async with aiohttp.ClientSession() as session:
            await until(session, d, "mlx5_0:1", 200, True, limit, poll)  # baseline written, node ok
            for t in range(min(args.trials, 2 * PORTS)):
                i = t % PORTS
                hca = f"mlx5_{i}"
                await asyncio.sleep(rng.uniform(0, args.fast_s))
                t0 = time.monotonic()
                apply_fault(root, f"port_down@{hca}")  # sysfs first, as the kernel updates state before notifying
                applied.add(i)
                out["fault_ms"].append((time.monotonic() - t0) * 1000)
                link(i, False)  # then the notification: ens{i+1}np0 loses carrier
                out["notify_ms"].append((time.monotonic() - t0) * 1000)
                h, e = await until(session, d, f"{hca}:1", 503, False, limit, poll, t0=t0)
                out["down_503"].append(h)
                out["down_env"].append(e)
                await asyncio.sleep(rng.uniform(0, args.fast_s))  # the way back, at a random phase too
                t0 = time.monotonic()
                clear_fault(root, f"port_down@{hca}")
                applied.discard(i)
                link(i, True)
                h, e = await until(session, d, f"{hca}:1", 200, True, limit, poll, t0=t0)
                out["up_200"].append(h)
                out["up_env"].append(e)
                if h is None or e is None:
                    note(f"{mode}: {hca} did not come back within {limit:.0f} s; stopping this mode")
                    break
        log = (run_dir / f"agentd-{d.port}.log").read_text(errors="replace")
        if mode == "events" and '"rtnetlink.watching"' not in log:
            note("events mode: agentd did not report rtnetlink.watching (see its log)")
    finally:
        for i in applied:
            clear_fault(root, f"port_down@mlx5_{i}")
            link(i, True)
        d.stop()
    return out


FIGURES = {"down_503": "carrier_loss_to_health_503", "down_env": "carrier_loss_to_nccl_env", "up_200": "carrier_back_to_health_200", "up_env": "carrier_back_to_nccl_env"}


def median_of(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return round(statistics.median(got), 1) if got else None


def figures(results: dict[str, dict[str, list[float | None]]], args: argparse.Namespace) -> None:
    table = []
    for key, figure in FIGURES.items():
        row = [figure]
        for mode, res in results.items():
            got = [s * 1000 for s in res[key] if s is not None]
            p50 = statistics.median(got) if got else float("nan")
            p99 = pct(got, 0.99) if got else float("nan")
            extra: dict[str, object] = {}
            if mode == "events" and key.startswith("down"):
                extra = {"target_p50_ms": TARGET_P50_MS, "target_p99_ms": TARGET_P99_MS,
                         "within_target": bool(got) and p50 <= TARGET_P50_MS and p99 <= TARGET_P99_MS}
            if key.startswith("down"):  # how much of it was the stand-ins' own work (fault files; ip returning)
                extra.update(fault_write_ms=median_of(res["fault_ms"]), notified_ms=median_of(res["notify_ms"]))
            emit(B, figure, p50, "ms", mode=mode, p99=round(p99, 1), fast_s=args.fast_s, profile=PROFILE, trials=len(res[key]),
                 missed=len(res[key]) - len(got), poll_ms=args.poll_ms, samples=[round(x, 1) for x in got], **extra)
            row.append(f"{mode} p50 {p50:7.1f} p99 {p99:7.1f}")
        table.append("  ".join(row))
    note(f"fast_s {args.fast_s}; ms from the fault (tree written, then the peer's carrier dropped):")
    for line in table:
        note("  " + line)


async def run(args: argparse.Namespace) -> None:
    reason = why_not()
    if reason is not None:
        note(f"skipped: {reason}")
        emit(B, "skipped", None, "", reason=reason)
        return
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-link-"))
    veths = VethPairs()
    rng = random.Random(14)
    results: dict[str, dict[str, list[float | None]]] = {}
    try:
        try:
            veths.create(min(PORTS, max(1, args.trials)))
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            note(f"skipped: cannot create veth pairs here: {e}")
            emit(B, "skipped", None, "", reason=f"cannot create veth pairs: {e}")
            return
        for mode in args.modes:
            results[mode] = await one_mode(args, mode, tmp, rng)
    finally:
        veths.delete()
        shutil.rmtree(tmp, ignore_errors=True)
    figures(results, args)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--trials", type=int, default=16, help=f"per mode; at most {2 * PORTS} (two downs per port)")
    ap.add_argument("--fast-s", type=float, default=2.0, help="fast-tier interval (agentd's default: 2.0)")
    ap.add_argument("--poll-ms", type=float, default=5.0, help="how often /health and nccl.env are read")
    ap.add_argument("--modes", nargs="+", default=["events", "poll"], choices=["events", "poll"])
    return ap.parse_args(argv)


if __name__ == "__main__":
    args = parse()
    if sys.platform != "linux":
        note("skipped: veth pairs and rtnetlink are Linux-only")
        sys.exit(0)
    run_main(lambda: asyncio.run(run(args)))
