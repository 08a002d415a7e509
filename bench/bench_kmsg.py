#!/usr/bin/env python3
"""The cost of reading the kernel log: parsing /dev/kmsg records and recognising them.

A daemon's first poll on a live node reads the whole ring buffer (up to its size; 16 MiB
holds ~150,000 records), every later poll only the records that are new. This prints the
cost per record of the record parser (agentd.host.kmsg) and of the catalogue
(agentd.host.kernel_catalog) over real published lines (tests/fixtures/kmsg, repeated),
and the whole first poll of a KernelLogSource over such a log, with how many events it
kept. Prints JSON lines (bench/common.py); asserts nothing.

    .venv/bin/python bench/bench_kmsg.py [--records 200000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from common import emit

from agentd.host.fs import HostRoot, ReadContext
from agentd.host.kernel_catalog import Extractor
from agentd.host.kernel_log import KernelLogSource
from agentd.host.kmsg import iter_records

B = "kmsg"
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "kmsg"


def log_of(n: int) -> bytes:
    """n records: real lines (mostly boot messages, some driver events), renumbered."""
    lines = [ln.split(b";", 1)[1] for name in ("boot-kmsg.txt", "boot.txt", "boot-kmsg.txt", "mlx5.txt", "xid.txt", "aer.txt")
             for ln in (FIXTURES / name).read_bytes().splitlines() if b";" in ln and not ln.startswith(b" ")]
    return b"".join(b"6,%d,%d,-;%s\n" % (i + 1, (i + 1) * 1000, lines[i % len(lines)]) for i in range(n))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    args = ap.parse_args()
    data = log_of(args.records)
    t0 = time.perf_counter()
    recs = list(iter_records(data))
    t1 = time.perf_counter()
    ex = Extractor()
    found = sum(1 for r in recs if ex.feed(r.message, r.fields) is not None)
    t2 = time.perf_counter()
    emit(B, "parse_per_record", (t1 - t0) / len(recs) * 1e6, "us", records=len(recs))
    emit(B, "recognise_per_record", (t2 - t1) / len(recs) * 1e6, "us", records=len(recs), events=found)
    tmp = Path(tempfile.mkdtemp(prefix="agentd-bench-kmsg-"))
    try:
        (tmp / "dev").mkdir()
        (tmp / "dev/kmsg").write_bytes(data)
        src = KernelLogSource(HostRoot(tmp, "offline", "bench"))
        with ReadContext(src.host, "kernel") as ctx:
            c0, w0 = time.process_time(), time.perf_counter()
            log = src.poll(ctx, keep_s=86400.0, max_events=2048)
            c1, w1 = time.process_time(), time.perf_counter()
            again = src.poll(ctx, keep_s=86400.0, max_events=2048)
            c2 = time.process_time()
        emit(B, "first_poll_cpu", (c1 - c0) * 1e3, "ms", wall_ms=round((w1 - w0) * 1e3, 1), records=log.records, events_kept=len(log.events),
             bytes=len(data), note="a recorded file is read from its last 4 MiB (captures hold a 1 MiB tail); a poll reads for at most 2 s (the first) or 0.5 s, then goes on at the next")
        emit(B, "steady_poll_cpu", (c2 - c1) * 1e3, "ms", same_object=again is log)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
