"""Bounded, host-root-relative file access shared by every reader.

A reader gets a ``ReadContext`` for its source. Every read goes through it, so that:
- paths are taken under the host root (``/`` on a node, a directory in tests, the
  simulator and containers), and symlinks are resolved without leaving it: under a root
  other than ``/``, every path is walked from the root's directory fd one component at a
  time (``openat`` with ``O_NOFOLLOW``), a symlink's target walked the same way, ``..``
  never above the root; one that leads outside is refused (``escape``) wherever the
  symlink sits on the path. The file is opened relative to the walked directory's fd,
  so the path that was checked is the path that is read, even if the tree changes
  between the two. Each directory is walked once per context (its fd kept, bounded);
- reads are size-capped and never follow a symlink in the last component;
- failures become typed ``ReadError`` records instead of exceptions;
- the number of files read is counted (the benchmark prints it);
- optionally (``journal``), every access is logged with its outcome, and ``replay``
  tells cheaply whether a probe would read anything different.

Sysfs quirks handled here: missing trailing newline, trailing spaces, ``N/A`` values, and
EINVAL on empty GID table entries (reported to the caller as "empty", not an error).
"""

from __future__ import annotations

import errno
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, cast

from agentd.base import recorded
from agentd.base.atomic import read_fd
from agentd.base.jsontypes import JsonValue
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
    manifest: Mapping[str, JsonValue] | None = field(default=None, compare=False)
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
        """The path ``rel`` names under the root, symlinks followed as the readers follow
        them (``ReadContext``: never out of the root). Raises ReadFailure('escape') when
        it leaves the root or loops, OSError when it does not exist."""
        with ReadContext(self, "resolve") as ctx:
            real, _ = ctx._resolve_path(ctx._abs(rel))
        return Path(real or "/")


def _read_small(path: Path, max_bytes: int) -> bytes | None:
    try:
        return read_bounded(path, max_bytes)
    except OSError:
        return None


def _read_under(root: Path, rel: str, max_bytes: int) -> bytes | None:
    """A file under ``root``, read confined to it (as the readers will); None if unreadable."""
    with ReadContext(HostRoot(root, "offline", "probe"), "host") as ctx:
        return ctx.raw(rel, max_bytes=max_bytes)


def _boot_id(root: Path) -> str | None:
    """The boot id under ``root``, read with its directories confined to the root."""
    data = _read_under(root, BOOT_ID, 4096)
    text = data.decode("utf-8", "replace").strip() if data is not None else None
    return text or None


def _recorded_dir(root: Path) -> tuple[str | None, Mapping[str, JsonValue] | None, str | None]:
    """(answers dir, manifest, problem) of a root: ``.agentd/`` with a manifest this agentd
    reads. A ``.agentd`` that is a symlink is not followed here: the root is offline, and
    the readers, which confine every path, report where it leads."""
    if os.path.islink(root / recorded.DIR):
        return recorded.DIR, None, f"{recorded.DIR} is a symlink: its manifest is not read"
    data = _read_under(root, recorded.MANIFEST, recorded.MANIFEST_MAX_BYTES)
    if data is not None:
        try:
            return recorded.DIR, recorded.parse_manifest(data), None
        except recorded.ManifestError as e:
            return None, None, f"{recorded.MANIFEST}: {e}; its recorded answers are not read"
    return None, None, None


def detect_mode(root: Path, wanted: str = "auto") -> tuple[HostMode, str, str | None, Mapping[str, JsonValue] | None]:
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


# -- confinement: directories walked with openat, one component at a time ----------------

_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ROOT_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
MAX_SYMLINK_HOPS = 40  # as the kernel's ELOOP limit
MAX_OPEN_DIRS = 32  # directory fds one context keeps open (least recently used closed first)
LOOP_DETAIL = "too many levels of symbolic links"


class _AtPath(str):
    """A file to open relative to a directory fd. Its text is the path as walked (the
    directory's resolved path and the name): what messages and test seams see."""

    dir_fd: int
    name: str


def _at(path: str, dir_fd: int, name: str) -> _AtPath:
    p = _AtPath(path)
    p.dir_fd, p.name = dir_fd, name
    return p


def read_bounded(path: Path | str, max_bytes: int = MAX_ATTR_BYTES) -> bytes:
    """Read at most max_bytes, refusing a symlink as the last component. A path from a
    ``ReadContext`` under a confined root is opened relative to its walked directory."""
    if isinstance(path, _AtPath):
        fd = os.open(path.name, _FILE_FLAGS, dir_fd=path.dir_fd)
    else:
        fd = os.open(path, _FILE_FLAGS)
    try:
        return read_fd(fd, max_bytes, 65536)
    finally:
        os.close(fd)


class _DirFds:
    """The directory fds of one context: the root's and an LRU of resolved directories
    (keyed by their resolved absolute path). Closed by ``ReadContext.close`` or, for the
    callers that never close, when the context is garbage collected. ``lock`` is held
    for the whole of each access (the walk and the read through its fd), so another
    context may close these fds between accesses (``_sweep``) and never during one."""

    __slots__ = ("root", "dirs", "lock", "__weakref__")

    def __init__(self) -> None:
        self.root = -1
        self.dirs: OrderedDict[str, int] = OrderedDict()
        self.lock = threading.Lock()

    def trim(self, keep: int) -> None:
        dirs = self.dirs
        while len(dirs) > keep:
            os.close(dirs.popitem(last=False)[1])

    def close(self) -> None:
        self.trim(0)
        if self.root >= 0:
            os.close(self.root)
            self.root = -1


# Contexts whose owners keep them after their run (a finished future holds its result)
# would keep their fds until collected: when those held by all contexts pass SWEEP_AT,
# a context that starts holding fds closes the idle ones' (they reopen if used again).
SWEEP_AT = 128
_holding: weakref.WeakSet[_DirFds] = weakref.WeakSet()
_holding_lock = threading.Lock()


def _close_idle(fds: _DirFds) -> None:
    """Close ``fds`` unless their lock is held: by ``_sweep``, which is closing them (a
    finalizer runs when the context is gone, so no access of it holds the lock)."""
    if fds.lock.acquire(blocking=False):
        try:
            fds.close()
        finally:
            fds.lock.release()


def _sweep(new: _DirFds) -> None:
    with _holding_lock:
        others = list(_holding)
        _holding.add(new)
    if sum(len(o.dirs) for o in others) <= SWEEP_AT:
        return
    for o in others:
        if o is not new and o.lock.acquire(blocking=False):  # idle: between two accesses
            try:
                o.close()
            finally:
                o.lock.release()


@dataclass(frozen=True, slots=True)
class Escaped:
    """Journal outcome of an access refused because its path leaves the root (or loops)."""

    detail: str


# One access: (op, path as the reader spelled it, args..., outcome). Outcomes: the bytes
# read, a listing's names (tuple), a bool (exists), a link target (str), a resolved
# (path, is_dir); an int errno when the access failed; ``Escaped`` when it was refused.
JournalEntry = tuple[Hashable, ...]


def _classify_oserror(e: OSError) -> ReadErrorKind:
    if e.errno in (errno.ENOENT, errno.ENOTDIR):
        return "missing"
    if e.errno == errno.ELOOP:
        return "escape"
    if e.errno in (errno.ETIMEDOUT,):
        return "timeout"
    return "unreadable"


@dataclass(eq=False)
class ReadContext:
    """Per-probe accumulator of read errors and file counts, and the confinement of its reads.

    Under a root other than ``/``, a path is walked from the root's directory fd one
    component at a time (``openat`` with ``O_NOFOLLOW``); a symlink on the way is read
    and its target walked the same way, ``..`` never above the root, an absolute target
    only when it names a path inside the root. The file is then opened relative to the
    walked directory's fd, so the path that was checked is the path that is read.

    A context lives for one probe run: the directories it walked stay open (at most
    ``MAX_OPEN_DIRS``, least recently used closed first) and are not walked again within
    it; a fresh context walks them again. ``close()`` (or ``with``) closes them; garbage
    collection does too.

    ``journal`` (a list; None: off) gets one entry per access, in call order (see
    ``JournalEntry``); ``replay`` repeats them and tells whether anything changed.
    """

    host: HostRoot
    source: str
    errors: list[ReadError] = field(default_factory=list)
    files_read: int = 0
    journal: list[JournalEntry] | None = None
    _root_str: str = field(init=False, repr=False)
    _base: str = field(init=False, repr=False)
    _confined: bool = field(init=False, repr=False)
    _real_root: str | None = field(init=False, repr=False)
    _alias: dict[str, str] = field(init=False, repr=False)
    _escaped: dict[str, str] = field(init=False, repr=False)
    _fds: _DirFds = field(init=False, repr=False)
    _fin: "weakref.finalize[[_DirFds], ReadContext]" | None = field(init=False, repr=False)
    _rec: ReadRecorder | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rec = self.host.recorder
        self._root_str = str(self.host.root)
        # Under "/" every path is inside the root: reads are plain absolute opens, and
        # only ``resolve`` walks (it is the cheaper way to follow sysfs links).
        self._confined = self._root_str != "/"
        self._base = self._root_str if self._confined else ""  # resolved paths are _base + "/rel"
        self._real_root = None  # computed when first needed
        self._alias = {}  # directory as spelled -> its resolved path (str, under the root)
        self._escaped = {}  # directory as spelled -> why it leaves the root
        self._fds = _DirFds()
        self._fin = None

    def close(self) -> None:
        """Close the directory fds this context holds (it stays usable: they reopen)."""
        if self._fin is not None:
            self._fin.detach()
            self._fin = None
        with self._fds.lock:
            self._fds.close()

    def __enter__(self) -> "ReadContext":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- errors -------------------------------------------------------------
    def error(self, path: str | os.PathLike[str], kind: ReadErrorKind, detail: str = "") -> None:
        p = str(path)
        if os.path.isabs(p):
            p = self.host.rel(p)
        self.errors.append(ReadError(source=self.source, path=p, kind=kind, detail=detail))

    # -- the walk -------------------------------------------------------------
    def _root_fd(self) -> int:
        fds = self._fds
        if fds.root < 0:
            fds.root = os.open(self._root_str, _ROOT_FLAGS)
            if self._fin is None:
                self._fin = weakref.finalize(self, _close_idle, fds)
            _sweep(fds)
        return fds.root

    def _dir_fd(self, real: str) -> int:
        """The fd of a resolved directory: cached, else opened from its parent's (never
        following a symlink: a resolved path has none, and one that appeared since fails)."""
        dirs = self._fds.dirs
        fd = dirs.get(real)
        if fd is not None:
            dirs.move_to_end(real)
            return fd
        if real == self._base:
            return self._root_fd()
        parent, _, name = real.rpartition("/")
        pfd = self._dir_fd(parent)
        fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
        dirs[real] = fd
        self._alias[real] = real
        return fd

    def _inside(self, target: str) -> str | None:
        """An absolute link target as a path relative to the root, or None when it names
        a place outside it (the root also as its realpath: a root given through a link)."""
        if not self._confined:
            return target.lstrip("/")
        r = self._root_str
        for _ in range(2):
            if target == r:
                return ""
            if target.startswith(r + "/"):
                return target[len(r) + 1 :]
            if self._real_root is None:
                self._real_root = os.path.realpath(self._root_str)
            r = self._real_root
        return None

    def _walk(self, real: str, todo: list[str], want_dir: bool = True) -> tuple[str, bool]:
        """Walk the components ``todo`` (reversed: the next one last) from the resolved
        directory ``real``. (resolved path, is a directory). Raises ReadFailure
        ('escape') when the walk would leave the root or loops, OSError when a component
        is missing or not a directory (the last one may be a file unless ``want_dir``)."""
        base, dirs, hops = self._base, self._fds.dirs, 0
        while todo:
            name = todo.pop()
            if name == "" or name == ".":
                continue
            if name == "..":
                if real == base:
                    if self._confined:
                        raise ReadFailure("escape", ESCAPE_DETAIL)
                    continue  # "/.." is "/"
                real = real.rpartition("/")[0]
                continue
            child = real + "/" + name
            if child in dirs:
                real = child
                continue
            pfd = self._dir_fd(real)
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
            except OSError as e:
                if e.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise
                try:
                    target = os.readlink(name, dir_fd=pfd)
                except OSError:
                    if not want_dir and not any(t not in ("", ".") for t in todo):
                        return child, False  # the last component, a file
                    raise e from None
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise ReadFailure("escape", LOOP_DETAIL) from None
                if target.startswith("/"):
                    inner = self._inside(target)
                    if inner is None:
                        raise ReadFailure("escape", ESCAPE_DETAIL) from None
                    real, target = base, inner
                todo.extend(reversed(target.split("/")))
                continue
            dirs[child] = fd
            self._alias[child] = child
            real = child
        return real, True

    def _real_dir(self, d: str) -> str:
        """The resolved path of directory ``d`` (absolute, under the root as spelled).
        Cached per spelling; a directory whose parent is known costs one ``openat``."""
        real = self._alias.get(d)
        if real is not None:
            return real
        if d == self._base:
            return d
        why = self._escaped.get(d)
        if why is not None:
            raise ReadFailure("escape", why)
        parent, _, name = d.rpartition("/")
        try:
            if name in ("", ".", ".."):  # an odd spelling: walk it whole
                todo = d[len(self._base) + 1 :].split("/")
                todo.reverse()
                real, _ = self._walk(self._base, todo)
            else:
                real, _ = self._walk(self._real_dir(parent), [name])
        except ReadFailure as e:
            self._escaped[d] = e.detail
            raise
        self._alias[d] = real
        return real

    def _locate(self, p: str) -> tuple[int, str, str]:
        """(directory fd, its resolved path, name) of the file ``p`` names. Called with
        the lock held, before anything of this access is open: the time to trim."""
        if len(self._fds.dirs) > MAX_OPEN_DIRS:
            self._fds.trim(MAX_OPEN_DIRS)
        d, _, name = p.rpartition("/")
        if name in ("", ".", ".."):
            d, name = p, "."
        real = self._alias.get(d)
        if real is None:
            real = self._real_dir(d)
        dirs = self._fds.dirs
        fd = dirs.get(real)
        if fd is None:
            return self._dir_fd(real), real, name
        dirs.move_to_end(real)
        return fd, real, name

    # Each access holds the lock for its walk and its read (``_DirFds``); the ``_held``
    # forms are for a caller that holds it already (``replay``, for the whole journal).
    def _resolve_path(self, p: str) -> tuple[str, bool]:
        with self._fds.lock:
            return self._resolve_held(p)

    def _resolve_held(self, p: str) -> tuple[str, bool]:
        if len(self._fds.dirs) > MAX_OPEN_DIRS:
            self._fds.trim(MAX_OPEN_DIRS)
        try:
            real = self._real_dir(p)
            self._dir_fd(real)  # it exists (a resolved path from the cache need not)
            return real, True
        except OSError as e:
            if e.errno != errno.ENOTDIR:
                raise
        d, _, name = p.rpartition("/")
        return self._walk(self._real_dir(d), [name], want_dir=False)

    # -- accesses, as the journal and replay see them ----------------------------
    def _read(self, p: str, max_bytes: int, read: Callable[[str, int], bytes] | None = None) -> bytes:
        if read is None:
            read = read_bounded
        if not self._confined:
            return read(p, max_bytes)
        with self._fds.lock:
            fd, real, name = self._locate(p)
            return read(_at(real + "/" + name if name != "." else real, fd, name), max_bytes)

    def _list(self, p: str) -> list[str]:
        if not self._confined:
            names = os.listdir(p)
            names.sort()
            return names
        with self._fds.lock:
            return self._list_held(p)

    def _list_held(self, p: str) -> list[str]:
        if len(self._fds.dirs) > MAX_OPEN_DIRS:
            self._fds.trim(MAX_OPEN_DIRS)
        d = p.rstrip("/")
        real = self._alias.get(d)
        if real is None:
            real = self._real_dir(d)
        fd = os.open(".", _LIST_FLAGS, dir_fd=self._dir_fd(real))
        try:
            names = os.listdir(fd)
        finally:
            os.close(fd)
        names.sort()
        return names

    def _lexists(self, p: str) -> bool:
        if not self._confined:
            return os.path.lexists(p)
        with self._fds.lock:
            return self._lexists_held(p)

    def _lexists_held(self, p: str) -> bool:
        try:
            fd, _, name = self._locate(p)
            os.lstat(name, dir_fd=fd)
        except OSError:
            return False
        return True

    def _readlink(self, p: str) -> str:
        if not self._confined:
            return os.readlink(p)
        with self._fds.lock:
            return self._readlink_held(p)

    def _readlink_held(self, p: str) -> str:
        fd, _, name = self._locate(p)
        return os.readlink(name, dir_fd=fd)

    def _log(self, entry: JournalEntry) -> None:
        if self.journal is not None:
            self.journal.append(entry)

    # -- paths --------------------------------------------------------------
    def resolve(self, rel: str | os.PathLike[str], *, required: bool = False) -> Path | None:
        """The directory ``rel`` names, symlinks followed without leaving the root (a
        Path under it); None when it does not exist (an error when ``required``) or
        leaves the root (an ``escape`` error)."""
        p = self._abs(rel)
        try:
            real, is_dir = self._resolve_path(p)
        except ReadFailure as e:
            self._log(("resolve", p, Escaped(e.detail)))
            self.error(rel, e.kind, f"{os.fspath(rel)}: {e.detail}")
            return None
        except OSError as e:
            self._log(("resolve", p, e.errno))
            if required:
                self.error(rel, "missing", "does not exist")
            return None
        if self.journal is not None:
            self.journal.append(("resolve", p, (real, is_dir)))
        if self._rec is not None:
            self._rec.touched(p)
        return Path(real or "/")

    def readlink_name(self, path: str | os.PathLike[str]) -> str | None:
        """basename of a symlink's target (e.g. the driver name of .../driver); None if no link."""
        p = self._abs(path)
        try:
            target = self._readlink(p)
        except ReadFailure as e:
            self._log(("readlink", p, Escaped(e.detail)))
            self.error(p, "escape", e.detail)
            return None
        except OSError as e:
            self._log(("readlink", p, e.errno))
            return None
        if self.journal is not None:
            self.journal.append(("readlink", p, target))
        if self._rec is not None:
            self._rec.touched(p)
        return os.path.basename(target.rstrip("/")) or None

    def exists(self, path: str | os.PathLike[str]) -> bool:
        """Whether the path exists, the last component not followed (``os.path.lexists``).
        False, with an ``escape`` error, when a directory on the way leaves the root."""
        p = self._abs(path)
        try:
            found = self._lexists(p)
        except ReadFailure as e:
            self._log(("exists", p, Escaped(e.detail)))
            self.error(p, "escape", e.detail)
            return False
        if self.journal is not None:
            self.journal.append(("exists", p, found))
        if found and self._rec is not None:
            self._rec.touched(p)
        return found

    def listdir(self, path: str | os.PathLike[str], *, required: bool = False) -> list[str]:
        p = self._abs(path)
        try:
            names = self._list(p)
        except ReadFailure as e:
            self._log(("listdir", p, Escaped(e.detail)))
            self.error(p, "escape", e.detail)
            return []
        except OSError as e:
            self._log(("listdir", p, e.errno))
            kind = _classify_oserror(e)
            if required or kind != "missing":
                self.error(p, kind, e.strerror or str(e))
            return []
        if self.journal is not None:
            self.journal.append(("listdir", p, tuple(names)))
        if self._rec is not None:
            self._rec.listing(p, names)
        return names

    def _abs(self, path: str | os.PathLike[str]) -> str:
        """Absolute paths already under the root (from ``resolve``) are kept; anything
        else, "/sys/..." included, is taken relative to the host root. Plain strings:
        this runs for every file read (docs/performance.md, "Reading files")."""
        p = os.fspath(path)
        root = self._root_str
        if p.startswith("/"):
            if root == "/" or p == root or p.startswith(root + "/"):
                return p
            p = p.lstrip("/")
        return root + p if root == "/" else root + "/" + p

    def read_done(self, path: str, data: bytes) -> None:
        """Count (and record) a read a reader made itself, on a path this context
        already confined."""
        self.files_read += 1
        if self._rec is not None:
            self._rec.file(path, data)

    def config_bytes(self, path: str | os.PathLike[str], size: int, read: Callable[[str, int], bytes] | None = None) -> bytes | None:
        """The first ``size`` bytes of a PCI ``config`` file (its size depends on the
        device), confined as every read: None when there is none, ``b""`` when it is
        refused (EACCES from a security module, EIO, a path that leaves the root: judged
        as cut). Never an error. ``read``: the function that reads (default ``read_bounded``)."""
        p = self._abs(path)
        try:
            data = self._read(p, size, read)
        except ReadFailure as e:
            self._log(("config", p, size, Escaped(e.detail)))
            return b""
        except OSError as e:
            self._log(("config", p, size, e.errno))
            return None if e.errno in (errno.ENOENT, errno.ENOTDIR) else b""
        self._log(("config", p, size, data))
        self.read_done(p, data)
        return data

    # -- values -------------------------------------------------------------
    def raw(self, path: str | os.PathLike[str], *, required: bool = False, max_bytes: int = MAX_ATTR_BYTES) -> bytes | None:
        p = self._abs(path)
        try:
            data = self._read(p, max_bytes)
        except ReadFailure as e:
            self._log(("raw", p, max_bytes, Escaped(e.detail)))
            self.error(p, "escape", e.detail)
            return None
        except OSError as e:
            if self.journal is not None:
                self.journal.append(("raw", p, max_bytes, e.errno))
            if e.errno == errno.EINVAL:
                # sysfs answers EINVAL for empty GID slots: an empty value, not an error.
                return None
            kind = _classify_oserror(e)
            if required or kind != "missing":
                self.error(p, kind, e.strerror or str(e))
            return None
        if self.journal is not None:
            self.journal.append(("raw", p, max_bytes, data))
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


def replay(host: HostRoot, journal: Sequence[JournalEntry]) -> tuple[bool, int]:
    """Repeat the accesses of ``journal`` (``ReadContext.journal``) in order, confined as
    they were, with a fresh context; stop at the first whose outcome differs. (True when
    every outcome is the one recorded, files read). Nothing is parsed, recorded or
    reported: a probe whose journal replays equal would produce what it produced.

    Under a confined root the context's lock is held for the whole journal, and reads one
    after another in the same directory (most of a journal: a port's or a device's
    attributes) share its fd: it is located once, and nothing between them can close it
    (only locating another directory trims the cache; the lock keeps other contexts'
    sweeps out). Under ``/`` accesses are plain."""
    ctx = ReadContext(host, "replay")
    ctx._rec = None
    try:
        if not ctx._confined:
            return _replay(ctx, journal, {"listdir": ctx._list, "resolve": ctx._resolve_path, "exists": ctx._lexists, "readlink": ctx._readlink})
        with ctx._fds.lock:  # once for the whole journal, not once per access
            return _replay(ctx, journal, {"listdir": ctx._list_held, "resolve": ctx._resolve_held, "exists": ctx._lexists_held,
                                          "readlink": ctx._readlink_held})
    finally:
        ctx.close()


def _replay(ctx: ReadContext, journal: Sequence[JournalEntry], access: Mapping[str, Callable[[str], Hashable | list[str]]]) -> tuple[bool, int]:
    """``replay``'s loop: reads here, every other access through ``access`` (by op)."""
    confined = ctx._confined
    files, last_dir, dir_fd, real = 0, "", -1, ""
    for entry in journal:
        op, p = entry[0], cast(str, entry[1])
        out: Hashable
        try:
            if op == "raw" or op == "config":
                if not confined:
                    out = read_bounded(p, cast(int, entry[2]))
                else:
                    d, _, name = p.rpartition("/")
                    if d != last_dir or not last_dir:
                        last_dir = ""
                        dir_fd, real, name = ctx._locate(p)
                        if name != ".":
                            last_dir = d
                    out = read_bounded(_at(real + "/" + name if name != "." else real, dir_fd, name), cast(int, entry[2]))
                files += 1
            else:
                last_dir = ""  # the accesses below may trim the directory cache
                fn = access.get(cast(str, op))
                if fn is None:
                    return False, files
                got = fn(p)
                out = tuple(got) if isinstance(got, list) else got  # a listing, as the journal holds it
        except ReadFailure as e:
            out, last_dir = Escaped(e.detail), ""
        except OSError as e:
            out, last_dir = e.errno, ""
        if out != entry[-1]:
            return False, files
    return True, files


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
