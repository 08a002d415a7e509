#!/usr/bin/env python3
"""Time from an injected port-down to ``/health`` 503 and to the rewritten ``nccl.env``.

Prints one JSON line per figure (schema in bench/common.py); asserts nothing.

    .venv/bin/python bench/bench_reaction.py [--profile h100-ib] [--fast-s 2.0 0.25] [--trials 5] [--poll-ms 10]

For each fast-tier interval in --fast-s (2.0 is the default agentd ships with; medium
and slow stay at their defaults), a fresh ``agentd run --host-root`` on the simulated
tree, then per trial: wait a random fraction of the interval (so the fault lands at a
random phase of the schedule), apply ``port_down@mlx5_3`` to the live tree, and poll
``/health`` and ``nccl.env`` every --poll-ms until ``/health`` answers 503 and
``NCCL_IB_HCA`` no longer lists ``mlx5_3:1``; then, after another random wait, clear
the fault and time the way back (200 and ``mlx5_3:1`` listed again). Later trials take
the other compute ports in turn (at most two downs per port: the third within 12 h is
ib.port.flapping, critical, by design). The port state is a fast-tier probe and udev
events do not fire on a simulated tree, so the expected time is about U(0, fast_s) plus
one fast cycle; the figures carry fast_s so they can be read that way. Times start when
the fault's files are written (fault_write_ms is how long writing them took).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from common import Agentd, apply_fault, build_root, clear_fault, emit, run_main, wait_http

B = "reaction"
# mlx5_3 first, then the other compute ports in turn: a port that goes down three times
# within 12 h is (rightly) ib.port.flapping critical, so no port goes down more than twice.
HCAS = ("mlx5_3", "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7")
MAX_TRIALS = 2 * len(HCAS)


def hca_listed(env_file: Path, port: str) -> bool | None:
    """Whether NCCL_IB_HCA in the file lists the port (None: no such line / no file)."""
    try:
        text = env_file.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if "NCCL_IB_HCA=" in line and not line.lstrip().startswith("#"):
            value = line.split("=", 1)[1].strip("'\" ")
            return port in value.lstrip("=").split(",")
    return None


async def until(session, d: Agentd, port: str, want_status: int, want_listed: bool, limit_s: float, poll_s: float,
                t0: float | None = None) -> tuple[float | None, float | None]:
    """Seconds (from t0, default now) until /health answers want_status and until nccl.env's listing is want_listed."""
    t0 = time.monotonic() if t0 is None else t0
    t_health = t_env = None
    while time.monotonic() - t0 < limit_s and (t_health is None or t_env is None):
        if t_health is None:
            async with session.get(d.base + "/health") as r:
                await r.read()
                if r.status == want_status:
                    t_health = time.monotonic() - t0
        if t_env is None and hca_listed(d.nccl_env, port) is want_listed:
            t_env = time.monotonic() - t0
        await asyncio.sleep(poll_s)
    return t_health, t_env


def summary(name: str, samples: list[float | None], fast_s: float, **extra: object) -> None:
    got = [s * 1000 for s in samples if s is not None]
    emit(B, name, statistics.median(got) if got else float("nan"), "ms", fast_s=fast_s, trials=len(samples), missed=len(samples) - len(got),
         max=round(max(got), 1) if got else None, samples=[round(x, 1) for x in got], **extra)


async def one_interval(args: argparse.Namespace, root: Path, fast_s: float, trials: int, rng: random.Random) -> None:
    import aiohttp

    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-"))
    d = Agentd(tmp, root, intervals={"fast_s": fast_s})
    down_h, down_e, up_h, up_e, apply_ms = [], [], [], [], []
    applied: list[str] = []
    limit = 3 * fast_s + 10
    poll = args.poll_ms / 1000
    try:
        d.start()
        await wait_http(d.base + "/readyz", d.proc)
        async with aiohttp.ClientSession() as session:
            await until(session, d, f"{HCAS[0]}:1", 200, True, limit, poll)  # baseline written, node ok
            for i in range(min(trials, MAX_TRIALS)):
                hca = HCAS[i % len(HCAS)]
                await asyncio.sleep(rng.uniform(0, fast_s))
                t = time.monotonic()
                apply_fault(root, f"port_down@{hca}")
                applied.append(hca)
                apply_ms.append((time.monotonic() - t) * 1000)
                h, e = await until(session, d, f"{hca}:1", 503, False, limit, poll)
                down_h.append(h)
                down_e.append(e)
                await asyncio.sleep(rng.uniform(0, fast_s))  # the way back, at a random phase too
                clear_fault(root, f"port_down@{hca}")
                h, e = await until(session, d, f"{hca}:1", 200, True, limit, poll)
                up_h.append(h)
                up_e.append(e)
                if h is None or e is None:
                    break  # not back to ok: later trials would start from a critical node
    finally:
        for hca in set(applied):
            clear_fault(root, f"port_down@{hca}")
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    extra = {"profile": args.profile, "poll_ms": args.poll_ms, "fault": "port_down@" + ",".join(dict.fromkeys(applied))}
    summary("port_down_to_health_503", down_h, fast_s, **extra, fault_write_ms=round(statistics.median(apply_ms), 1))
    summary("port_down_to_nccl_env", down_e, fast_s, **extra)
    summary("port_up_to_health_200", up_h, fast_s, **extra)
    summary("port_up_to_nccl_env", up_e, fast_s, **extra)


async def run(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-root-"))
    rng = random.Random(7)
    try:
        root = build_root(args.profile, tmp / "root")
        from agentd.sim.build import pristine_root

        pristine_root(args.profile)  # faults read original bytes from it: build it before timing
        for i, fast_s in enumerate(args.fast_s):
            trials = args.trials if i == 0 else args.trials * 2
            await one_interval(args, root, fast_s, trials, rng)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="h100-ib")
    ap.add_argument("--fast-s", type=float, nargs="+", default=[2.0, 0.25], help="fast-tier intervals to run (first: default); later ones get 2x trials")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--poll-ms", type=float, default=10.0)
    return ap.parse_args(argv)


if __name__ == "__main__":
    args = parse()
    run_main(lambda: asyncio.run(run(args)))
