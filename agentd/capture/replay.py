"""Opening a capture file as a host root: ``--host-root node.tar.gz`` on any command.

The file is unpacked into a new private temporary directory, removed when the process
exits. A capture is data from elsewhere (a bug report, a fixture): only directories,
regular files and symlinks are taken, each through tarfile's ``data`` filter (no absolute
paths, nothing outside the directory, no links out of it, no device nodes, no setuid
bits), within limits on size and member count; anything else refuses the whole file.
The unpacked root's manifest makes it ``offline`` (agentd.host.fs.detect_mode).
"""

from __future__ import annotations

import atexit
import shutil
import tarfile
import tempfile
from pathlib import Path

MAX_MEMBERS = 500_000
MAX_TOTAL_BYTES = 2 << 30  # unpacked; a large node's capture is a few MiB


class CaptureError(ValueError):
    pass


def unpack(path: Path, into: Path) -> None:
    """Unpack capture ``path`` into the empty directory ``into``; CaptureError if it is
    not a capture this agentd takes."""
    try:
        tar = tarfile.open(path, mode="r:*", encoding="utf-8", errors="surrogateescape")  # noqa: SIM115 - the with below closes it
    except (tarfile.TarError, OSError) as e:
        raise CaptureError(f"{path}: not a capture (tar.gz): {e}") from None
    with tar:
        total = count = 0
        try:
            for member in tar:
                count += 1
                if count > MAX_MEMBERS:
                    raise CaptureError(f"{path}: more than {MAX_MEMBERS} members")
                if not (member.isdir() or member.isreg() or member.issym()):
                    raise CaptureError(f"{path}: {member.name!r} is not a file, directory or symlink")
                total += member.size
                if total > MAX_TOTAL_BYTES:
                    raise CaptureError(f"{path}: more than {MAX_TOTAL_BYTES >> 20} MiB unpacked")
                try:
                    tar.extract(member, into, filter="data")
                except tarfile.FilterError as e:
                    raise CaptureError(f"{path}: refused: {e}") from None
        except (tarfile.TarError, EOFError, OSError) as e:
            raise CaptureError(f"{path}: damaged: {e}") from None


def open_capture(path: Path) -> Path:
    """The directory the capture at ``path`` unpacks to (removed at exit)."""
    tmp = Path(tempfile.mkdtemp(prefix="agentd-capture-"))
    atexit.register(shutil.rmtree, tmp, True)
    try:
        unpack(path, tmp)
    except CaptureError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp
