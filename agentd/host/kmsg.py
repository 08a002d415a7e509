"""The kernel log as ``/dev/kmsg`` gives it: one record per read(2), oldest first.

Opened non-blocking, read until EAGAIN (the end of the ring buffer), EPIPE (records
overwritten while reading) skipped to the next. Blocking I/O: a command's or a lane's.
"""

from __future__ import annotations

import errno
import os
from collections import deque

KMSG_MAX_BYTES = 1 << 20  # the tail kept (the ring buffer is usually 256 KiB - 16 MiB)
KMSG_MAX_RECORDS = 1 << 16


def read_kmsg_tail(path: str = "/dev/kmsg", max_bytes: int = KMSG_MAX_BYTES, max_records: int = KMSG_MAX_RECORDS) -> tuple[bytes | None, str | None]:
    """The kernel log records still in the ring buffer (``/dev/kmsg``: one record per
    read), the newest ``max_bytes``. (None, why) when it cannot be read (no
    CAP_SYSLOG with ``kernel.dmesg_restrict = 1``, a container without /dev/kmsg)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        return None, f"{path}: {e.strerror or e}"
    records: deque[bytes] = deque()
    size = 0
    try:
        for _ in range(max_records * 16):  # bounded even if the kernel never says EAGAIN
            try:
                rec = os.read(fd, 8192)
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
