"""The kernel log as ``/dev/kmsg`` gives it: one record per read(2), oldest first.

Opened non-blocking, read until EAGAIN (the end of the ring buffer), EPIPE (records
overwritten while reading) skipped to the next. Blocking I/O: a command's or a lane's.
"""

from __future__ import annotations

import errno
import os
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

KMSG_MAX_BYTES = 1 << 20  # the tail kept (the ring buffer is usually 256 KiB - 16 MiB)
KMSG_MAX_RECORDS = 1 << 16
# One read(2) returns one record; a buffer smaller than the record gets EINVAL and the
# kernel moves on past it. Records (text and dictionary) stay below the kernel's 8 KiB
# CONSOLE_EXT_LOG_MAX, so twice that never cuts one.
KMSG_READ_BYTES = 16384


def read_kmsg_tail(path: str = "/dev/kmsg", max_bytes: int = KMSG_MAX_BYTES, max_records: int = KMSG_MAX_RECORDS,
                   max_s: float = 2.0) -> tuple[bytes | None, str | None]:
    """The kernel log records still in the ring buffer (``/dev/kmsg``: one record per
    read), the newest ``max_bytes``, read for at most ``max_s`` (a flood never ends: the
    records read by then). (None, why) when it cannot be read (no CAP_SYSLOG with
    ``kernel.dmesg_restrict = 1``, a container without /dev/kmsg)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        return None, f"{path}: {e.strerror or e}"
    records: deque[bytes] = deque()
    size = 0
    deadline = time.monotonic() + max_s
    try:
        for n in range(max_records * 16):  # bounded even if the kernel never says EAGAIN
            if n % 256 == 255 and time.monotonic() > deadline:
                break
            try:
                rec = os.read(fd, KMSG_READ_BYTES)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:  # overwritten while we read: continue with the next
                    continue
                if e.errno == errno.EINVAL and not records:
                    return None, f"{path}: {e.strerror}"
                break
            if not rec:
                break
            records.append(rec if rec.endswith(b"\n") else rec + b"\n")
            size += len(records[-1])
            while size > max_bytes or len(records) > max_records:
                size -= len(records.popleft())
    finally:
        os.close(fd)
    return b"".join(records), None


# ---------------------------------------------------------------------------
# records (Documentation/ABI/testing/dev-kmsg)
#
# One record: "PRIO,SEQ,TIMESTAMP_USEC,FLAGS[,...];MESSAGE\n" and then continuation
# lines " KEY=VALUE\n" (SUBSYSTEM=pci, DEVICE=+pci:0000:5a:00.0). PRIO is facility << 3 |
# level. The kernel escapes bytes below 0x20 and above 0x7e in MESSAGE as \xNN, so a
# record is one line of ASCII; a file of records (a capture, the simulator) is those
# lines one after another.

MAX_MESSAGE_CHARS = 4096  # the kernel's own limit is about 1 KiB per record


@dataclass(frozen=True)
class KmsgRecord:
    level: int  # syslog level: 0 emerg .. 7 debug
    facility: int  # 0 kernel
    seq: int
    usec: int  # microseconds since boot (the kernel's local clock)
    message: str
    fields: Mapping[str, str]  # the continuation lines, KEY -> VALUE


MAX_HEAD_BYTES = 4096  # "PRIO,SEQ,USEC,FLAGS[,...];": a record with no ';' this far is not one


def parse_head(record: bytes) -> tuple[int, int, int] | None:
    """(PRIO, SEQ, TIMESTAMP_USEC) of a record without its message: what a record the
    catalogue has no use for costs (``parse_record`` decodes the rest)."""
    end = record.find(b";", 0, MAX_HEAD_BYTES)
    if end < 0:
        return None
    parts = record[:end].split(b",", 3)
    if len(parts) < 3:
        return None
    try:
        prio, seq, usec = int(parts[0]), int(parts[1]), int(parts[2])
    except ValueError:
        return None
    if prio < 0 or seq < 0 or usec < 0:
        return None
    return prio, seq, usec


def parse_body(record: bytes) -> tuple[str, Mapping[str, str]]:
    """The message and the continuation lines (KEY -> VALUE) of a record whose head
    ``parse_head`` read."""
    lines = record[record.find(b";") + 1 :].split(b"\n")
    message = lines[0][:MAX_MESSAGE_CHARS].decode("utf-8", "replace").rstrip("\r")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if line.startswith(b" ") and b"=" in line and len(fields) < 16:
            k, _, v = line[1:].partition(b"=")
            fields[k.decode("utf-8", "replace")] = v[:256].decode("utf-8", "replace")
    return message, MappingProxyType(fields)


def parse_record(record: bytes) -> KmsgRecord | None:
    """One record as one read(2) of /dev/kmsg returns it; None when it is not one."""
    head = parse_head(record)
    if head is None:
        return None
    prio, seq, usec = head
    message, fields = parse_body(record)
    return KmsgRecord(prio & 7, prio >> 3, seq, usec, message, fields)


def iter_raw(data: bytes) -> Iterator[bytes]:
    """The records of a file in /dev/kmsg's format, as bytes (a record and its
    continuation lines): a line that does not start with a space starts a record, the
    lines after it that do are its continuation lines. A file read from its middle (its
    tail) starts with the rest of a cut record: ``whole_tail`` drops it."""
    start = 0
    n = len(data)
    while start < n:
        end = data.find(b"\n", start)
        while end != -1 and end + 1 < n and data[end + 1 : end + 2] == b" ":
            end = data.find(b"\n", end + 1)
        stop = n if end == -1 else end
        if stop > start and data[start : start + 1] != b" ":
            yield data[start:stop]
        start = stop + 1


def whole_tail(data: bytes, limit: int) -> bytes:
    """The whole records of a file's last ``limit`` bytes, given its last ``limit + 1``
    (``data``; all of it when the file is no longer): a cut inside a record drops that
    record's rest (and its continuation lines), a cut just after a newline nothing."""
    if len(data) <= limit:
        return data
    at = 0
    while True:
        nl = data.find(b"\n", at)
        if nl < 0:
            return b""
        if data[nl + 1 : nl + 2] != b" ":
            return data[nl + 1 :]
        at = nl + 1


def iter_records(data: bytes) -> Iterator[KmsgRecord]:
    """The records of a file in /dev/kmsg's format (``iter_raw``); lines that are not
    records are skipped."""
    for raw in iter_raw(data):
        rec = parse_record(raw)
        if rec is not None:
            yield rec
