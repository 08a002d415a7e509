"""Opening a capture file as a host root: ``--host-root node.tar.gz`` on any command.

The file is unpacked into a new private temporary directory (``agentd-replay-*`` in the
temp dir), removed when the process exits: normally, on an exception, on SIGTERM, SIGHUP or
SIGINT (agentd.cli turns them into an exit), and before the ``--npd`` deadline's
``os._exit`` (``remove_unpacked``). The process holds an ``flock`` on its directory while it
lives, so one it could not remove (SIGKILL, an NPD timeout kill) is removed by the next
``open_capture`` anywhere on the node (``sweep_unpacked``): a capture unpacks to up to
2 GiB. A capture is data from elsewhere (a bug report, a fixture): only directories,
regular files and symlinks are taken, each through tarfile's ``data`` filter (no absolute
paths, nothing outside the directory, no links out of it, no device nodes, no setuid
bits), within limits on size and member count; anything else refuses the whole file.
The unpacked root's manifest makes it ``offline`` (agentd.host.fs.detect_mode).
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import stat
import tarfile
import tempfile
from pathlib import Path

from agentd.base.atomic import claim_abandoned

MAX_MEMBERS = 500_000
MAX_TOTAL_BYTES = 2 << 30  # unpacked; a large node's capture is a few MiB
MAX_DEPTH = 64  # directories in a member's path; sysfs's deepest device paths have about 20
PREFIX = "agentd-replay-"  # not the unlocked "agentd-capture-" dirs of agentd before the lock: never swept
_NEW_PREFIX = ".agentd-replay-new-"  # not yet locked: never swept
OUT_SUFFIX = "-out"  # agentd.outputs.node_state.state_dir_for

_unpacked: dict[Path, int] = {}  # this process's unpacked captures -> the fd holding the flock


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
                if member.name.strip("/").count("/") > MAX_DEPTH:
                    raise CaptureError(f"{path}: {member.name[:80]!r}... is more than {MAX_DEPTH} directories deep")
                total += member.size
                if total > MAX_TOTAL_BYTES:
                    raise CaptureError(f"{path}: more than {MAX_TOTAL_BYTES >> 20} MiB unpacked")
                try:
                    tar.extract(member, into, filter="data")
                except tarfile.FilterError as e:
                    raise CaptureError(f"{path}: refused: {e}") from None
        except (tarfile.TarError, EOFError, OSError) as e:
            raise CaptureError(f"{path}: damaged: {e}") from None
        except RecursionError:  # a path deeper than the check above reckons with
            raise CaptureError(f"{path}: damaged: a member is nested too deeply") from None


def open_capture(path: Path) -> Path:
    """The directory the capture at ``path`` unpacks to (removed at exit; see the module)."""
    sweep_unpacked()
    new = Path(tempfile.mkdtemp(prefix=_NEW_PREFIX))
    fd = os.open(new, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held until this process ends: sweep_unpacked leaves it alone
    tmp = new.with_name(PREFIX + new.name[len(_NEW_PREFIX):])
    os.rename(new, tmp)  # locked before it carries the name a sweep looks for
    if not _unpacked:
        atexit.register(remove_unpacked)
    _unpacked[tmp] = fd
    try:
        unpack(path, tmp)
    except CaptureError:
        remove_unpacked(tmp)
        raise
    return tmp


def remove_unpacked(only: Path | None = None) -> None:
    """Remove this process's unpacked captures (``only``: that one). Never raises."""
    for tmp in [only] if only is not None else list(_unpacked):
        fd = _unpacked.pop(tmp, None)
        shutil.rmtree(tmp, ignore_errors=True)
        if fd is not None:
            os.close(fd)


def sweep_unpacked(tmpdir: str | None = None) -> int:
    """Remove the unpacked captures that processes which have ended left in the temp dir
    (their flock went with them); returns how many. Only this user's directories; one
    whose process lives holds its lock and is kept. Never raises."""
    removed = 0
    try:
        # "<dir>-out" is where `agentd run` keeps a replayed root's state (agentd.outputs.
        # node_state.state_dir_for): it holds no lock of its own and goes with its root
        names = [n for n in os.listdir(tmpdir or tempfile.gettempdir()) if n.startswith(PREFIX) and not n.endswith(OUT_SUFFIX)]
    except OSError:
        return 0
    for name in names:
        d = Path(tmpdir or tempfile.gettempdir(), name)
        claimed = claim_abandoned(d, lambda st: stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid())
        if claimed is None:
            continue  # not a directory of this user's, or its process lives
        try:
            shutil.rmtree(d, ignore_errors=True)
            shutil.rmtree(f"{d}{OUT_SUFFIX}", ignore_errors=True)
            removed += 1
        finally:
            os.close(claimed[0])
    return removed
