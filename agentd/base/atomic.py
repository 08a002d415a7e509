"""Atomic file writes for everything agentd leaves on disk for others.

A reader of a managed file always sees either the previous complete version or the new
complete version: write a temp file in the same directory, fsync it, rename it over the
target, fsync the directory. A failure at any step removes the temp file and leaves the
old file untouched; the caller gets a ``WriteResult`` saying what happened.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WriteResult:
    path: Path
    changed: bool  # content differed and was written
    error: str | None = None  # why the write failed (old file kept)

    @property
    def ok(self) -> bool:
        return self.error is None


def read_current(path: Path, max_bytes: int = 4 << 20) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(max_bytes)
    except OSError:
        return None


def atomic_write(path: Path | str, data: bytes | str, *, mode: int = 0o644, only_if_changed: bool = True) -> WriteResult:
    """Write ``data`` to ``path`` atomically. Never raises for I/O errors."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if only_if_changed and read_current(path) == payload:
        return WriteResult(path, changed=False)
    directory = path.parent
    tmp_name: str | None = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        try:
            view = memoryview(payload)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp_name, path)
        tmp_name = None
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as e:
        return WriteResult(path, changed=False, error=f"{e.strerror or e} ({e.filename or path})")
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass
    return WriteResult(path, changed=True)
