"""The maintenance file: an operator (or automation) says the node is being worked on.

``<state_dir>/maintenance.json`` exists: the node is in maintenance, whatever the file
holds. ``agentd maintenance on`` writes ``{"reason": ..., "since": ..., "by": ...}``, but
automation may just ``touch`` it or ``echo "swapping cables" >`` it, so anything it holds is
read as well as it can be: a JSON object's fields, else the first line of text as the
reason; ``since`` defaults to the file's mtime. Nothing in the file can make a read fail:
the reason is one printable line of at most ``REASON_MAX`` characters.

Parsing is pure (``parse_maintenance``); the small I/O functions read only a regular file
(``O_NOFOLLOW | O_NONBLOCK``, bounded), so a FIFO, directory or symlink at the path neither
hangs nor raises: it is maintenance ON with an "unreadable maintenance file" reason, since
something is there. What maintenance changes (``/health``, ``agentd check``, the Slurm
wrapper) is decided by their callers, not here.
"""

from __future__ import annotations

import json
import math
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from agentd.base.atomic import WriteResult, atomic_write, read_fd
from agentd.base.escape import printable
from agentd.base.jsontypes import JsonObject, JsonValue
from agentd.judging.findings import utc_text

FILE_NAME = "maintenance.json"
MAX_BYTES = 64 << 10  # a reason is one line; more is not read
REASON_MAX = 200
BY_MAX = 64
_SINCE_MAX = 253402300800.0  # 10000-01-01: later than that is not a time

_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFDIR: "a directory", stat.S_IFLNK: "a symlink"}


@dataclass(frozen=True)
class Maintenance:
    reason: str  # one printable line, at most REASON_MAX characters ("" when none given)
    since: float  # unix time: the file's "since", else its mtime
    by: str | None  # who set it, when the file says


def maintenance_path(state_dir: Path | str) -> Path:
    return Path(state_dir) / FILE_NAME


def one_line(text: str, limit: int = REASON_MAX) -> str:
    """``text`` as one printable line: undecodable bytes as ``\\xNN``, control and other
    unprintable characters as blanks, runs of blanks as one, cut to ``limit``."""
    text = printable(text)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else " " for c in text)
    return " ".join(text.split())[:limit].rstrip()


def _time_or(value: JsonValue, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    try:
        t = float(value)
    except OverflowError:  # an integer too large for a float
        return default
    return t if math.isfinite(t) and 0 <= t < _SINCE_MAX else default


def parse_maintenance(data: bytes, mtime: float) -> Maintenance:
    """What a maintenance file says. Never raises: its presence alone means maintenance."""
    since = _time_or(mtime, 0.0)
    text = data.decode("utf-8", "surrogateescape")
    if text.lstrip().startswith(("{", '"')):
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            doc = None
        if isinstance(doc, dict):
            reason = doc.get("reason")
            by = doc.get("by")
            by_line = one_line(by, BY_MAX) if isinstance(by, str) else ""
            return Maintenance(
                reason=one_line(reason) if isinstance(reason, str) else "",
                since=_time_or(doc.get("since"), since),
                by=by_line or None,
            )
        if isinstance(doc, str):  # echo '"cable swap"' >
            return Maintenance(reason=one_line(doc), since=since, by=None)
    first = next((line for line in text.splitlines() if line.strip()), "")
    return Maintenance(reason=one_line(first), since=since, by=None)


def _unreadable(path: Path, why: str, mtime: float) -> Maintenance:
    return Maintenance(reason=one_line(f"unreadable maintenance file: {path} {why}"), since=_time_or(mtime, 0.0), by=None)


def read_maintenance(path: Path | str) -> Maintenance | None:
    """The maintenance the file at ``path`` declares, or None when there is no file (or
    this user cannot even look into its directory: then nothing says there is one).
    Something that is there but cannot be read as a regular file (a FIFO, a directory, a
    symlink, a file this user may not read) is maintenance with a reason saying so.
    Blocking file I/O: the daemon calls it in a lane, never on the event loop."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except OSError:  # absent, or its directory cannot be searched
        return None
    if not stat.S_ISREG(st.st_mode):
        return _unreadable(path, f"is {_KINDS.get(stat.S_IFMT(st.st_mode), 'not a regular file')}", st.st_mtime)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:  # removed meanwhile
        return None
    except OSError as e:
        return _unreadable(path, f"({e.strerror or e})", st.st_mtime)
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode):  # replaced between lstat and open
            return _unreadable(path, f"is {_KINDS.get(stat.S_IFMT(fst.st_mode), 'not a regular file')}", fst.st_mtime)
        data = read_fd(fd, MAX_BYTES)
    except OSError as e:
        return _unreadable(path, f"({e.strerror or e})", st.st_mtime)
    finally:
        os.close(fd)
    return parse_maintenance(data, fst.st_mtime)


def maintenance_json(reason: str, by: str | None, since: float) -> str:
    """The file ``set_maintenance`` writes."""
    return json.dumps({"reason": one_line(reason), "since": since, "by": one_line(by, BY_MAX) if by else None}) + "\n"


def set_maintenance(path: Path | str, reason: str, by: str | None, *, now: float | None = None) -> WriteResult:
    """Put the node in maintenance (atomically; a FIFO or directory at ``path`` is an error
    in the result, never a hang)."""
    since = time.time() if now is None else now
    return atomic_write(Path(path), maintenance_json(reason, by, since), mode=0o644, only_if_changed=False)


def clear_maintenance(path: Path | str) -> bool:
    """End maintenance: True when a file was removed, False when there was none. OSError
    when something at ``path`` cannot be removed (a directory, a read-only state dir)."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def rfc3339(unix_time: float) -> str:
    """``since`` for people: UTC, seconds (``2024-05-01T10:00:00Z``)."""
    return utc_text(unix_time)


def maintenance_doc(m: Maintenance) -> JsonObject:
    """The ``maintenance`` object of JSON outputs (``agentd check``, ``agentd maintenance status``)."""
    return {"reason": m.reason, "since": m.since, "by": m.by}


def maintenance_line(m: Maintenance) -> str:
    """The line that follows the status ``maintenance`` in text outputs (``agentd check``,
    ``/health?format=text``): like a finding's, but not one."""
    return f"maintenance agentd.maintenance node: {m.reason or 'no reason given'} (since {rfc3339(m.since)})"
