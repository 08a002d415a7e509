"""Bounded, host-root-relative file access shared by every reader.

A reader gets a ``ReadContext`` for its source. Every read goes through it, so that:
- paths are taken under the host root (``/`` on a node, a directory in tests, the
  simulator and containers), and symlinks are resolved without leaving it: under a root
  other than ``/``, the directory of every file read (and every directory listed) is
  resolved first, and one that leads outside the root is refused (``escape``) wherever
  the symlink sits on the path. Each distinct directory is resolved once per context
  (one ``lstat`` when its parent is already known), and the file is then opened through
  the resolved directory, so the path that was checked is the path that is read;
- reads are size-capped and never follow a symlink in the last component;
- failures become typed ``ReadError`` records instead of exceptions;
- the number of files read is counted (the benchmark prints it).

Sysfs quirks handled here: missing trailing newline, trailing spaces, ``N/A`` values, and
EINVAL on empty GID table entries (reported to the caller as "empty", not an error).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, cast

from agentd.base import recorded
from agentd.base.atomic import read_fd
from agentd.model import ReadError, ReadErrorKind

MAX_ATTR_BYTES = 64 * 1024  # sysfs attributes are at most a page; procfs files we read are small
ESCAPE_DETAIL = "a directory on the path resolves outside the host root"


class ReadFailure(Exception):
    def __init__(self, kind: ReadErrorKind, detail: str, err: int | None = None):
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.errno = err


HostMode = Literal["live", "offline", "simulated"]


class ReadRecorder(Protocol):
    """What ``agentd capture`` learns from one collection: every path (absolute, as the
    reader spelled it under the root) the readers touched, and the bytes they read."""

    def file(self, path: str, data: bytes) -> None: ...
    def listing(self, path: str, names: list[str]) -> None: ...
    def touched(self, path: str) -> None: ...  # tested, followed or resolved
HOST_MODES: tuple[str, ...] = ("auto", "live", "offline", "simulated")
BOOT_ID = "proc/sys/kernel/random/boot_id"


@dataclass(frozen=True)
class HostRoot:
    """The root a node image lives under. ``rel`` paths are relative to it ("sys/class/net").

    ``mode`` says which kernel answers, apart from where the files are (DESIGN.md 3):
    ``live`` (the root's kernel is the running one: NVML, ioctls, netlink, uname),
    ``offline`` (a capture or a copied tree: only recorded answers) or ``simulated``.
    ``mode_reason`` says why, for ``agentd inspect``. ``answers`` is the directory of
    recorded answers (agentd.base.recorded) relative to the root, or None. Built by
    ``HostRoot.at``; ``HostRoot(path)`` alone detects the mode the same way.
    """

    root: Path
    mode: HostMode | None = None  # None: detect (``detect_mode``)
    mode_reason: str = ""
    answers: str | None = None
    manifest: Mapping[str, Any] | None = field(default=None, compare=False)
    # Told of every path read, listed, tested or followed (``agentd capture``); None: off.
    recorder: ReadRecorder | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.mode is None:
            mode, reason, answers, manifest = detect_mode(self.root)
            for k, v in (("mode", mode), ("mode_reason", reason), ("answers", answers), ("manifest", manifest)):
                object.__setattr__(self, k, v)

    @classmethod
    def at(cls, root: str | os.PathLike[str], mode: str = "auto") -> "HostRoot":
        """The host root at ``root`` (symlinks resolved), its mode detected (``auto``) or
        as configured (``live``, ``offline``, ``simulated``)."""
        real = Path(os.path.realpath(root))
        return cls(real, *detect_mode(real, mode))

    @property
    def is_live(self) -> bool:
        """True when the running kernel answers for this root (real NVML, ioctls, netlink)."""
        return self.mode == "live"

    @property
    def is_simulated(self) -> bool:
        return self.mode == "simulated"

    def recorded(self, name: str) -> str | None:
        """Root-relative path of a recorded answer (``nvml.json``, ``ethtool/eth0``), or
        None when this root has none (live roots ask the kernel instead)."""
        if self.answers is None or self.mode == "live":
            return None
        return f"{self.answers}/{name}"

    def abs(self, rel: str | os.PathLike[str]) -> Path:
        return self.root / str(rel).lstrip("/")

    def rel(self, absolute: str | os.PathLike[str]) -> str:
        p = str(absolute)
        r = str(self.root)
        if r == "/":
            return p.lstrip("/")
        return p[len(r) :].lstrip("/") if p.startswith(r) else p

    def contains(self, absolute: str) -> bool:
        r = str(self.root)
        return r == "/" or absolute == r or absolute.startswith(r + os.sep)

    def resolve(self, rel: str | os.PathLike[str]) -> Path:
        """realpath of rel under the root; raises ReadFailure('escape') if it leaves the root."""
        real = os.path.realpath(self.abs(rel))
        if not self.contains(real):
            raise ReadFailure("escape", f"{rel} resolves outside the host root to {real}")
        return Path(real)


def _read_small(path: Path, max_bytes: int) -> bytes | None:
    try:
        return read_bounded(path, max_bytes)
    except OSError:
        return None


def _boot_id(root: Path) -> str | None:
    """The boot id under ``root``, read with its directories confined to the root."""
    ctx = ReadContext(HostRoot(root, "offline", "probe"), "host")
    text = ctx.text(BOOT_ID)
    return text.strip() or None if text else None


def _recorded_dir(root: Path) -> tuple[str | None, Mapping[str, Any] | None, str | None]:
    """(answers dir, manifest, problem) of a root: ``.agentd/`` with a manifest this agentd
    reads, else the older simulator layout ``.agentd-sim/``. A ``.agentd`` that is a
    symlink is not followed here: the root is offline, and the readers, which confine
    every path, report where it leads."""
    if os.path.islink(root / recorded.DIR):
        return recorded.DIR, None, f"{recorded.DIR} is a symlink: its manifest is not read"
    data = _read_small(root / recorded.MANIFEST, recorded.MANIFEST_MAX_BYTES)
    if data is not None:
        try:
            return recorded.DIR, recorded.parse_manifest(data), None
        except recorded.ManifestError as e:
            return None, None, f"{recorded.MANIFEST}: {e}; its recorded answers are not read"
    if os.path.isdir(root / recorded.LEGACY_DIR) and not os.path.islink(root / recorded.LEGACY_DIR):
        return recorded.LEGACY_DIR, None, None
    return None, None, None


def detect_mode(root: Path, wanted: str = "auto") -> tuple[HostMode, str, str | None, Mapping[str, Any] | None]:
    """(mode, why, answers dir, manifest) for a resolved root. Unreadable or odd files
    never raise (they make the root offline, and the reason says why); only an unknown
    ``wanted`` is a ValueError (config validation stops it before).

    ``auto``: a root that holds a recording is what the recording says (a simulation is
    ``simulated``, a capture ``offline``, even on the node it was taken on); otherwise
    ``/`` is ``live``, and so is any root whose ``proc/sys/kernel/random/boot_id`` is the
    running kernel's (a container's bind-mounted ``/host``); anything else is ``offline``.
    """
    answers, manifest, problem = _recorded_dir(root)
    note = f" ({problem})" if problem else ""
    if wanted not in HOST_MODES:
        raise ValueError(f"host mode {wanted!r}: expected one of {', '.join(HOST_MODES)}")
    if wanted != "auto":
        mode = cast(HostMode, wanted)
        return mode, f"host_mode = {wanted!r} in the configuration{note}", answers, manifest
    if manifest is not None and manifest.get("kind") == "simulation":
        what = f" (profile {manifest['profile']})" if isinstance(manifest.get("profile"), str) else ""
        return "simulated", f"{answers}/manifest.json: a simulated node{what}", answers, manifest
    if manifest is None and answers == recorded.LEGACY_DIR:
        return "simulated", f"{answers}/: a simulated node (the older layout)", answers, None
    if manifest is None and answers is not None:
        return "offline", f"recorded answers without a manifest{note}", answers, None
    if manifest is not None:
        when = manifest.get("created")
        by = manifest.get("agentd_version")
        return "offline", f"{answers}/manifest.json: a capture{f' taken {when}' if isinstance(when, str) else ''}{f' by agentd {by}' if isinstance(by, str) else ''}; recorded answers only", answers, manifest
    if str(root) == "/":
        return "live", "the host root is /" + note, None, None
    theirs = _boot_id(root)
    ours = _read_small(Path("/", BOOT_ID), 4096)
    running = ours.decode("ascii", "replace").strip() if ours else None
    if theirs is None:
        return "offline", f"no {BOOT_ID} under the root: it cannot be the running kernel's{note}", None, None
    if running is not None and theirs == running:
        return "live", f"{BOOT_ID} under the root is the running kernel's ({running}){note}", None, None
    return "offline", f"{BOOT_ID} under the root ({theirs[:36]}) is not the running kernel's: a copy or another node{note}", None, None


def read_bounded(path: Path | str, max_bytes: int = MAX_ATTR_BYTES) -> bytes:
    """Read at most max_bytes, refusing a symlink as the last component."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        return read_fd(fd, max_bytes, 65536)
    finally:
        os.close(fd)


def _classify_oserror(e: OSError) -> ReadErrorKind:
    if e.errno in (errno.ENOENT, errno.ENOTDIR):
        return "missing"
    if e.errno == errno.ELOOP:
        return "escape"
    if e.errno in (errno.ETIMEDOUT,):
        return "timeout"
    return "unreadable"


@dataclass
class ReadContext:
    """Per-probe accumulator of read errors and file counts.

    A context lives for one probe run: the directories it resolved (``_dirs``) are not
    re-checked within it, and a fresh context checks them again.
    """

    host: HostRoot
    source: str
    errors: list[ReadError] = field(default_factory=list)
    files_read: int = 0
    _root_str: str = field(init=False, repr=False)
    _confined: bool = field(init=False, repr=False)
    _real_root: str | None = field(init=False, repr=False)
    _dirs: dict[str, str | None] = field(init=False, repr=False)
    _rec: ReadRecorder | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rec = self.host.recorder
        self._root_str = str(self.host.root)
        # Under "/" every path is inside the root: nothing to check.
        self._confined = self._root_str != "/"
        self._real_root = None  # computed when first needed
        self._dirs = {self._root_str: self._root_str}  # directory as given -> realpath, None: outside

    # -- errors -------------------------------------------------------------
    def error(self, path: str | os.PathLike[str], kind: ReadErrorKind, detail: str = "") -> None:
        p = str(path)
        if os.path.isabs(p):
            p = self.host.rel(p)
        self.errors.append(ReadError(source=self.source, path=p, kind=kind, detail=detail))

    # -- paths --------------------------------------------------------------
    def _real_dir(self, d: str) -> str | None:
        """realpath of directory ``d`` (absolute, under the root), or None when it leaves
        the root. Cached; a directory whose parent is known costs one lstat."""
        dirs, root = self._dirs, self._root_str
        todo = []  # walk up to the nearest known ancestor (iteratively), then back down
        cur = d
        while cur not in dirs:
            parent, _, base = cur.rpartition("/")
            if base in ("", ".", "..") or not (parent == root or parent.startswith(root + "/")):
                dirs[cur] = self._inside(os.path.realpath(cur))  # odd spelling: resolve it whole
                break
            todo.append((cur, parent, base))
            cur = parent
        for cur, parent, base in reversed(todo):
            real = dirs[parent]
            if real is not None:  # else below a directory outside the root
                real += "/" + base
                try:
                    if stat.S_ISLNK(os.lstat(real).st_mode):
                        real = self._inside(os.path.realpath(real))
                except OSError:
                    pass  # missing, or not a directory: the read itself reports it
            dirs[cur] = real
        return dirs[d]

    def _inside(self, real: str) -> str | None:
        r = self._root_str
        if real == r or real.startswith(r + "/"):
            return real
        if self._real_root is None:  # a root given through a symlink (HostRoot.at resolves it)
            self._real_root = os.path.realpath(r)
        r = self._real_root
        return real if real == r or real.startswith(r + "/") else None

    def _confine(self, p: str, *, is_dir: bool = False) -> str | None:
        """The path to open for ``p``: through its resolved directory (``p`` itself for a
        listing). None, with an ``escape`` error, when that leaves the root."""
        d, _, name = p.rpartition("/")
        if is_dir or name in ("", ".", ".."):
            d, name = p.rstrip("/"), ""
        dirs = self._dirs
        real = dirs[d] if d in dirs else self._real_dir(d)  # the common case: a directory already seen
        if real is None:
            self.error(p, "escape", ESCAPE_DETAIL)
            return None
        return real + "/" + name if name else real

    def resolve(self, rel: str | os.PathLike[str], *, required: bool = False) -> Path | None:
        """Follow symlinks of a directory path, staying inside the host root."""
        try:
            real = self.host.resolve(self.host.rel(self._abs(rel)))
        except ReadFailure as e:
            self.error(rel, e.kind, e.detail)
            return None
        if not real.exists():
            if required:
                self.error(rel, "missing", "does not exist")
            return None
        if self._rec is not None:
            self._rec.touched(self._abs(rel))
        if self._confined:  # reads below rel (or below real) need no second resolution
            r = str(real)
            self._dirs.setdefault(r, r)
            self._dirs.setdefault(self._abs(rel).rstrip("/"), r)
        return real

    def readlink_name(self, path: str | os.PathLike[str]) -> str | None:
        """basename of a symlink's target (e.g. the driver name of .../driver); None if no link."""
        p = self._abs(path)
        q = self._confine(p) if self._confined else p
        if q is None:
            return None
        try:
            target = os.readlink(q)
        except OSError:
            return None
        if self._rec is not None:
            self._rec.touched(p)
        return os.path.basename(target.rstrip("/")) or None

    def exists(self, path: str | os.PathLike[str]) -> bool:
        """Whether the path exists, the last component not followed (``os.path.lexists``).
        False, with an ``escape`` error, when a directory on the way leaves the root."""
        p = self._abs(path)
        q = self._confine(p) if self._confined else p
        found = q is not None and os.path.lexists(q)
        if found and self._rec is not None:
            self._rec.touched(p)
        return found

    def listdir(self, path: str | os.PathLike[str], *, required: bool = False) -> list[str]:
        p = self._abs(path)
        q = self._confine(p, is_dir=True) if self._confined else p
        if q is None:
            return []
        try:
            names = os.listdir(q)
        except OSError as e:
            kind = _classify_oserror(e)
            if required or kind != "missing":
                self.error(p, kind, e.strerror or str(e))
            return []
        names.sort()
        if self._rec is not None:
            self._rec.listing(p, names)
        return names

    def _abs(self, path: str | os.PathLike[str]) -> str:
        """Absolute paths already under the root (from ``resolve``) are kept; anything
        else, "/sys/..." included, is taken relative to the host root. Plain strings:
        this runs for every file read, and pathlib costs ~40% of a PCI scan."""
        p = os.fspath(path)
        root = self._root_str
        if p.startswith("/"):
            if root == "/" or p == root or p.startswith(root + "/"):
                return p
            p = p.lstrip("/")
        return root + p if root == "/" else root + "/" + p

    def read_done(self, path: str, data: bytes) -> None:
        """Count (and record) a read a reader made itself, on a path this context
        already confined (PCI ``config``: its size depends on the device)."""
        self.files_read += 1
        if self._rec is not None:
            self._rec.file(path, data)

    # -- values -------------------------------------------------------------
    def raw(self, path: str | os.PathLike[str], *, required: bool = False, max_bytes: int = MAX_ATTR_BYTES) -> bytes | None:
        p = self._abs(path)
        q = self._confine(p) if self._confined else p
        if q is None:
            return None
        try:
            data = read_bounded(q, max_bytes)
        except OSError as e:
            kind = _classify_oserror(e)
            if e.errno == errno.EINVAL:
                # sysfs answers EINVAL for empty GID slots: an empty value, not an error.
                return None
            if required or kind != "missing":
                self.error(p, kind, e.strerror or str(e))
            return None
        self.files_read += 1
        if self._rec is not None:
            self._rec.file(p, data)
        return data

    def text(self, path: str | os.PathLike[str], *, required: bool = False, max_bytes: int = MAX_ATTR_BYTES) -> str | None:
        """Attribute text with trailing whitespace/newline removed; None when absent/empty-slot."""
        data = self.raw(path, required=required, max_bytes=max_bytes)
        if data is None:
            return None
        try:
            return data.decode("utf-8").rstrip()
        except UnicodeDecodeError:
            self.error(self._abs(path), "unparsable", "not UTF-8 text")
            return None

    def name(self, path: str | os.PathLike[str], *, required: bool = False) -> str | None:
        """An attribute whose value is a device name (``gid_attrs/ndevs/<i>``): decoded as
        the kernel's names are everywhere else (``os.fsdecode``: a byte that is not UTF-8
        becomes a lone surrogate, losslessly), so it equals the ``listdir`` entry it names.
        Outputs escape such a name (``agentd.base.escape``). None when absent or empty."""
        data = self.raw(path, required=required)
        if data is None:
            return None
        return os.fsdecode(data.rstrip()) or None

    def integer(self, path: str | os.PathLike[str], *, required: bool = False, base: int = 10) -> int | None:
        """Integer attribute. 'N/A' (counters without a PMA) is None without an error."""
        s = self.text(path, required=required)
        if s is None:
            return None
        v = parse_int(s, base)
        if v is None and not s.startswith("N/A"):
            self.error(self._abs(path), "unparsable", f"expected an integer, got {s[:60]!r}")
        return v


def parse_int(s: str, base: int = 10) -> int | None:
    s = s.strip()
    if not s or s.startswith("N/A"):
        return None
    try:
        if base == 16 or s.lower().startswith("0x"):
            return int(s, 16)
        return int(s, base)
    except ValueError:
        return None


def parse_decimal(s: str, max_digits: int = 20) -> int | None:
    """A non-negative ASCII decimal integer of at most ``max_digits`` digits, else None.

    For parsers of text that prints unsigned numbers (counters, ids, port and priority
    numbers): no sign, no spaces, no ``_``. ``str.isdigit()`` is not enough: it admits
    characters ``int()`` refuses (``'²'``) and other scripts' digits, and ``int()`` of more
    than 4300 digits raises ValueError. 20 digits hold any u64.
    """
    if 0 < len(s) <= max_digits and s.isascii() and s.isdecimal():
        return int(s)
    return None
