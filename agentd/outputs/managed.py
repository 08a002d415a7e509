"""Managed files: written only on change, sealed, watched for drift, failures kept.

Built on ``agentd.base.atomic.atomic_write`` (temp file, fsync, rename, directory fsync), so a failed
write always leaves the previous file byte-for-byte.

Seal: agentd appends one comment line ``# agentd-sha256: <hex>`` (``<!-- ... -->`` for
``.xml``) holding the SHA-256 of the file's *stable* text: everything except that line
and the ``generated:`` header line, which carries the time of the last change and is
ignored in every comparison. The seal lets a restarted agentd tell an edited file (the
body no longer matches its own seal) from a file that is merely out of date because the
node changed while agentd was down. All seal lines are comments in every format agentd
writes and contain no ``=`` (NCCL before 2.26 reads ``#`` lines of nccl.conf too).

Drift, checked before each write:
- ``edited``: the file's body does not match its seal (someone changed it);
- ``replaced``: sealed, but not what this agentd process last wrote;
- ``foreign``: no seal and no agentd header (someone else's file at our path);
- ``deleted``: this process wrote it and it is gone.
Drift is always reported (``drift_detected``, ``drift_total``); the file is restored
only when ``restore_drift`` is true (config ``nccl.restore_drift``). With restore off a
drifted file is left alone, including later content changes, until restore is turned on
or agentd restarts (a fresh process treats a missing file as new).

Steady files cost a stat. The daemon asks for the same content every publish (2 s) and
the file almost never changed, so a full check (seal the wanted text, read the file,
check its seal, compare digests: four SHA-256 over the stable text and a read) would be
spent on nothing. When a full check found the file holding exactly what this process
wants, the file keeps the wanted content and the file's stat signature (device, inode,
size, mtime, ctime, mode: the stat taken *before* that read, so a change racing the read
shows as a new signature). The next write of the equal content with an equal signature
is "unchanged" without a read; any difference (content, signature, a failed stat, drift
being held, ``restore_drift`` changed) takes the full path. What each drift kind does to
the signature: an in-place edit changes ctime (and usually size and mtime); a rename over
the file (``replaced``, ``foreign``) changes the inode; ``deleted`` fails the stat. ctime
is the field that makes this sound: ``os.utime`` (``touch -d``, ``cp -p``, rsync) sets
mtime back to anything, but the kernel sets ctime to now on every change and no user can
set it. After a write agentd does not take the signature (someone could replace the file
between the rename and the stat); the next publish checks in full and takes it then.
Belt and braces for filesystems with coarse timestamps (an edit in the same clock tick as
the stat, same size, leaves ctime as it was; kernels since 6.13 give a stat-observed
inode a fine-grained ctime on its next change), a full check runs at least every
``ManagedFile.FULL_CHECK_EVERY_S`` seconds anyway.

Not thread-safe: one writer (the daemon loop) per ManagedFiles.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentd.base.atomic import atomic_write, read_current, sweep_temps

Action = Literal["unchanged", "created", "written", "restored", "drift_kept", "failed"]
DriftKind = Literal["edited", "replaced", "foreign", "deleted"]

AGENTD_MARKER = "written by agentd"
VOLATILE_RE = re.compile(r"^(?:# |<!-- )generated: ")
SEAL_RE = re.compile(r"^(?:# |<!-- )agentd-sha256: ([0-9a-f]{64})(?: -->)?\r?\n?$")


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def stable_text(text: str) -> str:
    """The text compared for change and drift: without seal and ``generated:`` lines."""
    return "".join(line for line in _lines(text) if not VOLATILE_RE.match(line) and not SEAL_RE.match(line))


def digest(text: str) -> str:
    return hashlib.sha256(stable_text(text).encode("utf-8")).hexdigest()


def seal(text: str, *, xml: bool) -> str:
    """``text`` with its seal line appended (an existing seal is replaced)."""
    body = "".join(line for line in _lines(text) if not SEAL_RE.match(line))
    if body and not body.endswith("\n"):
        body += "\n"
    hexdigest = digest(body)
    line = f"<!-- agentd-sha256: {hexdigest} -->" if xml else f"# agentd-sha256: {hexdigest}"
    return body + line + "\n"


def unseal(text: str) -> str:
    return "".join(line for line in _lines(text) if not SEAL_RE.match(line))


def read_seal(text: str) -> str | None:
    found = [m.group(1) for line in _lines(text) if (m := SEAL_RE.match(line))]
    return found[-1] if found else None


@dataclass(frozen=True)
class ManagedResult:
    path: Path
    action: Action
    changed: bool  # the file on disk was replaced
    drift: DriftKind | None = None
    error: str | None = None
    sha256: str | None = None  # of the bytes on disk after this call (None: unknown)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class ManagedStatus:
    """Bookkeeping of one file for metrics, /health and findings."""

    name: str
    path: str
    ok: bool  # the last attempt succeeded (or nothing needed writing)
    last_write_at: float | None  # unix time agentd last replaced the file
    last_success_at: float | None  # unix time the file was last known to hold the desired content
    last_error: str | None
    last_error_at: float | None
    failures_total: int
    consecutive_failures: int
    writes_total: int
    drift_detected: bool
    drift_kind: DriftKind | None
    drift_total: int
    last_drift_at: float | None
    sha256: str | None
    changed: bool  # the last call replaced the file


StatSignature = tuple[int, int, int, int, int, int]


def stat_signature(path: Path) -> StatSignature | None:
    """What changes when anyone changes the file at ``path`` (None: it cannot be stat'ed)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


@dataclass(frozen=True)
class _Verified:
    """The last full check that found the file holding what this process wants."""

    content: str  # as passed to ``write``
    signature: StatSignature  # taken before that check read the file
    restore_drift: bool
    at: float  # time.monotonic() of the check


class ManagedFile:
    FULL_CHECK_EVERY_S = 60.0  # the longest a stat alone vouches for the file (module doc)

    def __init__(self, path: Path | str, *, name: str | None = None, mode: int = 0o644):
        self.path = Path(path)
        self.name = name or self.path.name
        self.mode = mode
        self.xml = self.path.suffix == ".xml"
        self.last_digest: str | None = None  # stable digest this process last wrote or adopted
        self.last_write_at: float | None = None
        self.last_success_at: float | None = None
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.failures_total = 0
        self.consecutive_failures = 0
        self.writes_total = 0
        self.drift_kind: DriftKind | None = None
        self.drift_total = 0
        self.last_drift_at: float | None = None
        self.sha256: str | None = None
        self.last_action: Action | None = None
        self._verified: _Verified | None = None

    @property
    def drift_detected(self) -> bool:
        return self.drift_kind is not None

    def check_drift(self, current: bytes | None) -> DriftKind | None:
        if current is None:
            return "deleted" if self.last_digest is not None else None
        try:
            text = current.decode("utf-8")
        except UnicodeDecodeError:
            return "foreign"
        sealed = read_seal(text)
        if sealed is None:
            return None if AGENTD_MARKER in text else "foreign"
        if sealed != digest(text):
            return "edited"
        if self.last_digest is not None and sealed != self.last_digest:
            return "replaced"
        return None

    def sweep_stale_temps(self) -> int:
        """Remove the ``.NAME.*.tmp`` files killed writers left beside the file
        (``agentd.base.atomic.sweep_temps``: a temp file whose writer is alive holds a lock
        and is kept, so ``agentd render`` run by hand is never pulled from under). The
        daemon's writer does it for every path it manages when it starts managing it
        (agentd.outputs.writer.Writer.sweep); a plain write leaves other temps alone."""
        return sweep_temps(self.path)

    def write(self, content: str, *, restore_drift: bool = True, now: float | None = None) -> ManagedResult:
        now = time.time() if now is None else now
        if self._still_verified(content, restore_drift):
            self.last_success_at = now
            self.last_error = None
            self.consecutive_failures = 0
            self.last_action = "unchanged"
            return self._result("unchanged", False, None, None)
        self._verified = None
        wanted = seal(content, xml=self.xml)
        wanted_digest = digest(wanted)
        signature = stat_signature(self.path)  # before the read: a change racing it changes the signature
        current = read_current(self.path)
        drift = self.check_drift(current)
        if drift is not None and self.drift_kind is None:
            self.drift_total += 1
            self.last_drift_at = now
        self.drift_kind = drift
        if drift is None and current is not None:
            text = current.decode("utf-8")
            if read_seal(text) is not None and digest(text) == wanted_digest:
                self.last_digest = wanted_digest
                self._success(now, current, changed=False)
                if signature is not None:
                    self._verified = _Verified(content, signature, restore_drift, time.monotonic())
                return self._result("unchanged", False, None, None)
        if drift is not None and not restore_drift:
            self.last_action = "drift_kept"
            return self._result("drift_kept", False, drift, None)
        res = atomic_write(self.path, wanted, mode=self.mode, only_if_changed=False)
        if not res.ok:
            self.failures_total += 1
            self.consecutive_failures += 1
            self.last_error = res.error
            self.last_error_at = now
            self.last_action = "failed"
            return self._result("failed", False, drift, res.error)
        self.last_digest = wanted_digest
        self.writes_total += 1
        self.last_write_at = now
        self._success(now, wanted.encode("utf-8"), changed=True)
        if drift is not None:
            self.drift_kind = None  # restored; the detection stays counted in drift_total
        action: Action = "restored" if drift is not None else ("created" if current is None else "written")
        self.last_action = action
        return self._result(action, True, drift, None)

    def _still_verified(self, content: str, restore_drift: bool) -> bool:
        """Whether the last full check still vouches for the file: same content wanted, same
        ``restore_drift``, younger than ``FULL_CHECK_EVERY_S``, same stat signature."""
        v = self._verified
        if v is None or self.drift_kind is not None or v.restore_drift != restore_drift:
            return False
        if not (content is v.content or content == v.content):
            return False
        if not 0 <= time.monotonic() - v.at < self.FULL_CHECK_EVERY_S:
            return False
        return stat_signature(self.path) == v.signature

    def _success(self, now: float, data: bytes, *, changed: bool) -> None:
        self.last_success_at = now
        self.last_error = None
        self.consecutive_failures = 0
        self.sha256 = hashlib.sha256(data).hexdigest()
        if not changed:
            self.last_action = "unchanged"

    def _result(self, action: Action, changed: bool, drift: DriftKind | None, error: str | None) -> ManagedResult:
        return ManagedResult(self.path, action, changed, drift, error, self.sha256 if error is None else None)

    def status(self) -> ManagedStatus:
        return ManagedStatus(
            name=self.name,
            path=str(self.path),
            ok=self.last_error is None,
            last_write_at=self.last_write_at,
            last_success_at=self.last_success_at,
            last_error=self.last_error,
            last_error_at=self.last_error_at,
            failures_total=self.failures_total,
            consecutive_failures=self.consecutive_failures,
            writes_total=self.writes_total,
            drift_detected=self.drift_detected,
            drift_kind=self.drift_kind,
            drift_total=self.drift_total,
            last_drift_at=self.last_drift_at,
            sha256=self.sha256,
            changed=self.last_action in ("created", "written", "restored"),
        )


class ManagedFiles:
    """All managed files of one daemon, keyed by path. ``restore_drift`` follows config
    (``nccl.restore_drift``) and may change on reload."""

    def __init__(self, *, restore_drift: bool = True):
        self.restore_drift = restore_drift
        self._files: dict[Path, ManagedFile] = {}

    def file(self, path: Path | str, *, name: str | None = None, mode: int = 0o644) -> ManagedFile:
        key = Path(os.path.abspath(path))
        mf = self._files.get(key)
        if mf is None:
            mf = self._files[key] = ManagedFile(key, name=name, mode=mode)
        return mf

    def statuses(self) -> tuple[ManagedStatus, ...]:
        return tuple(mf.status() for mf in self._files.values())


def write_managed(path: Path | str, content: str, *, state: ManagedFiles, name: str | None = None, now: float | None = None) -> ManagedResult:
    """Write ``content`` to ``path`` if it changed, with drift handling and bookkeeping."""
    return state.file(path, name=name).write(content, restore_drift=state.restore_drift, now=now)
