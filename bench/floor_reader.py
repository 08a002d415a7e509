#!/usr/bin/env python3
"""The plain-read floor: read the files agentd reads, on agentd's schedule, and nothing else.

    .venv/bin/python bench/floor_reader.py PLAN.json LOG

PLAN.json (written by ``common.write_floor_plan``): per tier, the interval, the first
due time (Unix time, so the passes line up with the daemon's tier loops) and the paths
one collection of that tier read (``files``, with repeats) and listed (``listings``), as
agentd's own readers reported them through a ``ReadRecorder``. Each pass does
``open(p, "rb").read()`` per file and ``os.listdir`` per listing: no parsing, no models,
no checks, no rendering. Passes are start-to-start like the daemon's tier loops. One
line per pass goes to LOG: ``tier start_unix cpu_ms``. Runs until SIGTERM/SIGINT.

Standard library only, so the process is as small as a Python process gets.
``plain_read`` is also the in-process floor of bench_snapshot.py.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Iterable


def plain_read(files: Iterable[str], listings: Iterable[str]) -> int:
    """Read every file whole and list every directory; returns the bytes read."""
    n = 0
    for p in files:
        try:
            with open(p, "rb") as f:
                n += len(f.read())
        except OSError:
            pass
    for d in listings:
        try:
            os.listdir(d)
        except OSError:
            pass
    return n


def main(argv: list[str]) -> int:
    plan = json.loads(open(argv[0]).read())
    log = open(argv[1], "a", buffering=1)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    tiers = plan["tiers"]
    due = {t: float(v["first"]) for t, v in tiers.items()}
    try:
        while True:
            tier = min(due, key=lambda t: due[t])
            delay = due[tier] - time.time()
            if delay > 0:
                time.sleep(delay)
            start, c0 = time.time(), time.process_time()
            plain_read(tiers[tier]["files"], tiers[tier]["listings"])
            log.write(f"{tier} {start:.3f} {(time.process_time() - c0) * 1000:.3f}\n")
            # start to start; when behind, at once (as the daemon's tier loops do)
            due[tier] = max(due[tier] + tiers[tier]["interval"], time.time())
    except KeyboardInterrupt:
        pass
    finally:
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
