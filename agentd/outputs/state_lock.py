"""Locks on files in agentd's state directory: one holder at a time, and who it is.

A lock is an exclusive ``flock`` on a file in the state directory, held on one open file
description: the kernel drops it when its holder exits, however (SIGKILL included), so a
crashed holder never leaves it held, and nothing has to be cleaned up. The file itself is
never removed; while held it says who holds it (one JSON object: pid, start time and what
the holder adds, e.g. its config path), for the message of whoever is refused.

- ``acquire(path, *, wait_s=0, info=None) -> StateLock``: take the lock, waiting at most
  ``wait_s`` (0: try once); ``LockHeld`` (with the ``Holder``) when someone else holds it
  that long, ``OSError`` when the file cannot be opened (no state directory, read-only).
  ``StateLock.release()`` (or ``with``) gives it back; the daemon holds its lock for its
  whole life.
- ``held(path, *, wait_s, info=None)``: the same as a context manager that yields True once
  held and False when someone else holds it (for short critical sections).
- ``holder(path) -> Holder | None``: who the file says holds it (None: nobody wrote one).

Uses: ``DAEMON_LOCK`` (``<state_dir>/agentd.lock``) is held by `agentd run` for its life, so a
second daemon on the same state directory (another config, a test run beside the packaged
unit) exits 3 naming the first instead of fighting over the NCCL files. Other locks (a lock
that serialises the daemon and a command around one change of the node) are other files in
the same directory, taken with the same helpers.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Iterator, Mapping

DAEMON_LOCK = "agentd.lock"
POLL_S = 0.05
_READ_MAX = 4096
# a holder writes who it is just after it took the lock: a reader refused in between waits
# this long for the words
_HOLDER_SETTLE_S = 0.5


@dataclass(frozen=True)
class Holder:
    """Who a lock file says holds it: its pid and start time (unix) and what it added."""

    pid: int | None = None
    started: float | None = None
    info: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """``pid 4242, started 2026-11-27T05:11:13Z, config /etc/agentd/agentd.toml``."""
        parts = [f"pid {self.pid}" if self.pid is not None else "pid unknown"]
        if self.started is not None:
            parts.append("started " + datetime.fromtimestamp(self.started, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        parts += [f"{k.replace('_', ' ')} {v}" for k, v in self.info.items()]
        return ", ".join(parts)


class LockHeld(Exception):
    """Someone else holds the lock (``holder``: who, as its file says)."""

    def __init__(self, path: Path, holder: Holder | None):
        self.path, self.holder = path, holder
        who = holder.describe() if holder is not None else "a holder that has not said who it is"
        super().__init__(f"{path} is locked by {who}")


class StateLock:
    """A held lock: ``release()`` (or leaving ``with``) gives it back."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> StateLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(path: Path | str, *, wait_s: float = 0.0, info: Mapping[str, str] | None = None) -> StateLock:
    """Take the lock on ``path`` (created 0644, its directory too), waiting at most
    ``wait_s``; then write who holds it (this pid, now, ``info``). LockHeld when another
    holds it that long; OSError when the file cannot be opened or is not a regular file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The lock is held on a read-only descriptor (flock needs no write access): a file open
    # for writing for the daemon's whole life would keep its filesystem from being remounted
    # read-only. Who holds it is written through a descriptor of its own, closed at once.
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    try:
        if not _is_regular(fd):
            raise OSError(f"{path} is not a regular file")
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockHeld(path, holder(path, settle_s=_HOLDER_SETTLE_S)) from None
                time.sleep(POLL_S)
        said = {"pid": os.getpid(), "started": time.time(), **dict(info or {})}
        _write_holder(path, (json.dumps(said, sort_keys=False) + "\n").encode())
    except BaseException:
        os.close(fd)
        raise
    return StateLock(path, fd)


@contextlib.contextmanager
def held(path: Path | str, *, wait_s: float, info: Mapping[str, str] | None = None) -> Iterator[bool]:
    """Hold the lock for a ``with`` block: yields True once held, False when someone else
    holds it for ``wait_s``. OSError when the file cannot be opened."""
    try:
        lock = acquire(path, wait_s=wait_s, info=info)
    except LockHeld:
        yield False
        return
    with lock:
        yield True


def holder(path: Path | str, *, settle_s: float = 0.0) -> Holder | None:
    """Who the lock file says holds (or last held) it; None when it says nothing readable
    (absent, empty, not agentd's words). ``settle_s``: wait up to that long for a holder
    that has just taken the lock to write its words."""
    deadline = time.monotonic() + settle_s
    while True:
        found = _read_holder(Path(path))
        if found is not None or time.monotonic() >= deadline:
            return found
        time.sleep(POLL_S)


def _read_holder(path: Path) -> Holder | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not _is_regular(fd):
            return None
        raw = os.read(fd, _READ_MAX)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        doc = json.loads(raw.decode("utf-8", "replace"))
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    pid, started = doc.pop("pid", None), doc.pop("started", None)
    return Holder(
        pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        started=float(started) if isinstance(started, (int, float)) and not isinstance(started, bool) else None,
        info={str(k): str(v) for k, v in doc.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool)},
    )


def _write_holder(path: Path, data: bytes) -> None:
    """Who holds the lock, into its file (the holder's only writer while it holds it)."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not _is_regular(fd):
            raise OSError(f"{path} is not a regular file")
        os.write(fd, data)
    finally:
        os.close(fd)


def _is_regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)
