"""agentd.host.kmsg: the kernel log tail, bounded, never blocking."""

from __future__ import annotations

import os

from agentd.host.kmsg import read_kmsg_tail

# /dev/kmsg record format (Documentation/ABI/testing/dev-kmsg): "prio,seq,usec,flags;text"
RECORDS = [f"6,{n},{n * 1000},-;line {n}\n".encode() for n in range(50)]


def test_missing_or_refused_says_why(tmp_path):
    data, why = read_kmsg_tail(str(tmp_path / "nope"))
    assert data is None and "No such file" in (why or "")


def test_a_fifo_without_a_writer_does_not_block(tmp_path):
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    data, why = read_kmsg_tail(str(fifo))
    assert (data, why) == (b"", None)


def test_the_newest_records_are_kept_within_the_bounds(tmp_path):
    f = tmp_path / "kmsg"
    f.write_bytes(b"".join(RECORDS))
    size = len(b"".join(RECORDS[-5:]))
    # a regular file answers in chunks, not records: bound by records of one chunk each
    data, why = read_kmsg_tail(str(f), max_bytes=1 << 20, max_records=1)
    assert why is None and data == b"".join(RECORDS)
    data, _ = read_kmsg_tail(str(f), max_bytes=size - 1, max_records=10)
    assert data == b""  # the one chunk is larger than the bound: nothing half kept
