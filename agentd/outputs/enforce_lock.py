"""The lock that serialises changes to the node: ``<state_dir>/enforce.lock``.

Whoever changes the node's settings (`agentd enforce apply|rollback|status --reset`, the
daemon's enforcer) holds an exclusive ``flock`` on this file for the whole of its work:
two applies never interleave, and the journal (agentd.outputs.enforce_journal) is
read-modify-written by one at a time. The kernel drops the lock when its holder dies
(SIGKILL included), so a crashed apply never leaves it held. The file holds the pid of
the last holder, for the message of whoever waits.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Iterator

FILE_NAME = "enforce.lock"
POLL_S = 0.05


def lock_path(state_dir: Path | str) -> Path:
    return Path(state_dir) / FILE_NAME


def holder(state_dir: Path | str) -> str:
    """The pid the lock file names (the last holder), for messages; "" when unknown."""
    try:
        with open(lock_path(state_dir), "rb") as f:
            return f.read(32).decode("ascii", "replace").strip()
    except OSError:
        return ""


@contextlib.contextmanager
def enforce_lock(state_dir: Path | str, *, wait_s: float) -> Iterator[bool]:
    """Hold the lock: yields True once held (waiting at most ``wait_s``; 0: try once),
    False when someone else holds it that long. OSError when the state directory cannot
    hold the file."""
    path = lock_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(POLL_S)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
