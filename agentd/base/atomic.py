"""Atomic file writes for everything agentd leaves on disk for others.

A reader of a managed file always sees either the previous complete version or the new
complete version: write a temp file in the same directory, fsync it, rename it over the
target, fsync the directory. A failure at any step removes the temp file and leaves the
old file untouched; the caller gets a ``WriteResult`` saying what happened.

Only regular files are read or replaced: every open uses ``O_NONBLOCK`` and checks the
file type, so a FIFO (or a device) at a managed path is an error at once, never a read or
write that waits forever for a peer.

The temp file (``.NAME.XXXXXXXX.tmp`` beside the target) is ``flock``ed by its writer
until it is renamed, so ``sweep_temps`` can tell a temp file left by a killed writer (no
lock: the kernel drops it with the process) from one a live writer is still filling,
without guessing from file times.
"""

from __future__ import annotations

import fcntl
import glob
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class WriteResult:
    path: Path
    changed: bool  # content differed and was written
    error: str | None = None  # why the write failed (old file kept)

    @property
    def ok(self) -> bool:
        return self.error is None


class NotRegularFile(OSError):
    """The path holds something other than a regular file (FIFO, socket, device, directory)."""


_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFDIR: "a directory"}


def _not_regular(path: Path | str, mode: int) -> NotRegularFile:
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    return NotRegularFile(f"{path} is {kind}, not a regular file")


def read_fd(fd: int, max_bytes: int, chunk: int = 1 << 20) -> bytes:
    """At most ``max_bytes`` from an open file descriptor, until end of file."""
    if max_bytes <= 0:
        return b""
    first = os.read(fd, min(max_bytes, chunk))  # most files (sysfs attributes): all of it, then b""
    if not first or len(first) >= max_bytes:
        return first
    chunks = [first]
    left = max_bytes - len(first)
    while left > 0:
        b = os.read(fd, min(left, chunk))
        if not b:
            break
        chunks.append(b)
        left -= len(b)
    return first if len(chunks) == 1 else b"".join(chunks)


def read_fd_tail(fd: int, max_bytes: int) -> bytes:
    """The last ``max_bytes`` of a regular file (a log that only grows keeps its newest
    records at the end); from its start when it cannot seek (a FIFO, a device)."""
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_size > max_bytes:
            os.lseek(fd, st.st_size - max_bytes, os.SEEK_SET)
    except OSError:
        pass
    return read_fd(fd, max_bytes)


def read_regular(path: Path | str, max_bytes: int = 4 << 20, *, tail: bool = False) -> bytes:
    """The first ``max_bytes`` of the regular file at ``path`` (the last ones with
    ``tail``). Opens with ``O_NONBLOCK`` and checks the type before reading, so a FIFO
    raises ``NotRegularFile`` at once instead of blocking; other failures raise ``OSError``
    (``FileNotFoundError`` when absent)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(path, st.st_mode)
        return read_fd_tail(fd, max_bytes) if tail else read_fd(fd, max_bytes)
    finally:
        os.close(fd)


def read_current(path: Path, max_bytes: int = 4 << 20) -> bytes | None:
    """The file's bytes, or None when it cannot be read (absent, not a regular file, ...)."""
    try:
        return read_regular(path, max_bytes)
    except OSError:
        return None


def _check_target(path: Path) -> None:
    """Refuse to replace anything but a regular file or a symlink (which rename replaces,
    never follows): a FIFO or device at a managed path is someone else's, and an error."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
        raise _not_regular(path, st.st_mode)


def atomic_write(path: Path | str, data: bytes | str, *, mode: int = 0o644, only_if_changed: bool = True) -> WriteResult:
    """Write ``data`` to ``path`` atomically. Never raises for I/O errors."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if only_if_changed and read_current(path) == payload:
        return WriteResult(path, changed=False)
    directory = path.parent
    tmp_name: str | None = None
    try:
        _check_target(path)
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held until renamed: sweep_temps leaves it alone
            view = memoryview(payload)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fchmod(fd, mode)
            os.fsync(fd)
            os.replace(tmp_name, path)
            tmp_name = None
        finally:
            os.close(fd)
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except NotRegularFile as e:
        return WriteResult(path, changed=False, error=str(e))
    except OSError as e:
        return WriteResult(path, changed=False, error=f"{e.strerror or e} ({e.filename or path})")
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass
    return WriteResult(path, changed=True)


def temp_files(path: Path | str) -> list[Path]:
    """The temp files ``atomic_write`` makes for ``path`` (``.NAME.*.tmp`` beside it)."""
    path = Path(path)
    try:
        return sorted(path.parent.glob(f".{glob.escape(path.name)}.*.tmp"))
    except OSError:
        return []


def claim_abandoned(path: Path | str, kind: Callable[[os.stat_result], bool]) -> tuple[int, os.stat_result] | None:
    """Open ``path`` (never following a symlink, never waiting) and take its ``flock`` when
    nobody holds it: (fd, stat) of a file or directory whose owner is gone, for the caller
    to remove and then close. None when it is absent, not of the ``kind`` wanted, or held
    by an owner that lives (the kernel drops a lock with its process)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if kind(st):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd, st
    except OSError:
        pass  # a live owner holds it
    os.close(fd)
    return None


def sweep_temps(path: Path | str) -> int:
    """Remove the temp files of ``path`` that killed writers left behind; returns how many.
    A temp file whose writer is alive holds its ``flock`` and is kept; anything that is not
    a regular file is not ours and is kept too. Never raises for I/O errors."""
    removed = 0
    for tmp in temp_files(path):
        claimed = claim_abandoned(tmp, lambda st: stat.S_ISREG(st.st_mode))
        if claimed is None:
            continue
        fd, st = claimed
        try:
            now = os.lstat(tmp)  # still this file under this name (not renamed meanwhile)?
            if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                os.unlink(tmp)
                removed += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed
