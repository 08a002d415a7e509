"""``agentd capture``: one file holding everything agentd reads from a node.

One collection runs with a ``ReadRecorder`` on the host root: every file the readers read
(with the bytes they read), every directory they listed (with its entries), every path
they tested or followed. Those become a tar.gz laid out like the node (sysfs symlinks kept
as symlinks, relative to the root), plus the recorded answers of the live interfaces in
the layout of ``agentd.base.recorded`` (NVML, ethtool statistics, DCB/PFC, uname, the
kernel log tail, the node's baseline) and a manifest. ``--host-root`` of every command
accepts the file (``agentd.capture.replay``) and judges it as it judged the node.

Blocking I/O throughout: a command, never the daemon's event loop.
"""

from __future__ import annotations

import errno
import io
import json
import os
import stat
import tarfile
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentd import __version__
from agentd.base import recorded
from agentd.base.atomic import atomic_write, read_regular
from agentd.collection.collector import Collector
from agentd.config import AgentConfig
from agentd.host.fs import BOOT_ID, HostRoot, ReadContext
from agentd.model import NodeSnapshot

# Read explicitly besides what the collection reads: what says which node and kernel this is.
IDENTITY_FILES = (BOOT_ID, "etc/machine-id", "proc/sys/kernel/hostname", "proc/sys/kernel/osrelease", "proc/sys/kernel/arch")
KMSG_MAX_BYTES = 1 << 20  # the tail of the kernel log kept (the ring buffer is usually 256 KiB - 16 MiB)
KMSG_MAX_RECORDS = 1 << 16


@dataclass
class _Recorder:
    """Collects the touched paths (absolute, lexical) of one collection."""

    files: dict[str, bytes] = field(default_factory=dict)
    listings: dict[str, list[str]] = field(default_factory=dict)
    paths: set[str] = field(default_factory=set)

    def file(self, path: str, data: bytes) -> None:
        self.files[path] = data

    def listing(self, path: str, names: list[str]) -> None:
        self.listings[path] = list(names)

    def touched(self, path: str) -> None:
        self.paths.add(path)


@dataclass
class CaptureResult:
    out: Path
    snapshot: NodeSnapshot
    files: int
    answers: tuple[str, ...]
    problems: tuple[str, ...]
    redacted: bool
    bytes_written: int


class _Tree:
    """The members of the capture, keyed by root-relative path (deduplicated, ordered on
    write). Paths are walked component by component on the real tree so that every
    symlink on the way is kept as a symlink and its target is kept too."""

    def __init__(self, root: Path):
        self.root = str(root).rstrip("/") or "/"
        self.members: dict[str, tuple[str, Any]] = {}  # rel -> ("dir"|"file"|"link", data/target)
        self.problems: list[str] = []

    def _rel(self, absolute: str) -> str | None:
        r = self.root
        if r == "/":
            return absolute.lstrip("/") or None
        if absolute == r:
            return None
        if absolute.startswith(r + "/"):
            return absolute[len(r) + 1 :]
        return None

    def _abs(self, rel: str) -> str:
        return (self.root.rstrip("/") + "/" + rel) if rel else self.root

    def add(self, absolute: str, data: bytes | None = None, *, listing: list[str] | None = None) -> None:
        rel = self._rel(absolute)
        if rel is None:
            return
        real = self._walk(rel.split("/"), depth=0)
        if real is None:
            return
        if data is not None:
            self.members[real] = ("file", data)
        elif listing is not None:
            self.members.setdefault(real, ("dir", None))
            for name in listing:
                self._entry(f"{real}/{name}" if real else name)

    def _entry(self, rel: str) -> None:
        """A listed entry: a symlink as itself, a directory as an (empty) directory; a
        file only when something read it (its bytes come with the read)."""
        if rel in self.members:
            return
        try:
            st = os.lstat(self._abs(rel))
        except OSError:
            return
        if stat.S_ISLNK(st.st_mode):
            try:
                self.members[rel] = ("link", os.readlink(self._abs(rel)))
            except OSError:
                pass
        elif stat.S_ISDIR(st.st_mode):
            self.members[rel] = ("dir", None)

    def _walk(self, parts: list[str], depth: int) -> str | None:
        """Record every component of ``parts``; return the real root-relative path they
        name (symlinks followed inside the root), None when it leaves the root or is gone."""
        if depth > 40:
            return None  # a symlink loop
        cur = ""
        for i, part in enumerate(parts):
            if part in ("", "."):
                continue
            if part == "..":
                cur = cur.rpartition("/")[0]
                continue
            nxt = f"{cur}/{part}" if cur else part
            try:
                st = os.lstat(self._abs(nxt))
            except OSError:
                return None
            if stat.S_ISLNK(st.st_mode):
                try:
                    target = os.readlink(self._abs(nxt))
                except OSError:
                    return None
                self.members.setdefault(nxt, ("link", target))
                if target.startswith("/"):
                    return None  # the readers refuse absolute links out of the root too
                base = cur.split("/") if cur else []
                resolved = self._walk(base + target.split("/"), depth + 1)
                if resolved is None:
                    return None
                cur = resolved
            else:
                if i < len(parts) - 1 or stat.S_ISDIR(st.st_mode):
                    self.members.setdefault(nxt, ("dir", None)) if stat.S_ISDIR(st.st_mode) else None
                cur = nxt
        return cur

    def put(self, rel: str, data: bytes) -> None:
        """A member that is not on the node's tree (recorded answers, manifest)."""
        parts = rel.split("/")
        for i in range(1, len(parts)):
            self.members.setdefault("/".join(parts[:i]), ("dir", None))
        self.members[rel] = ("file", data)


def _kernel_log_tail(path: str = "/dev/kmsg") -> tuple[bytes | None, str | None]:
    """The kernel log records still in the ring buffer (``/dev/kmsg``: one record per
    read), the newest ``KMSG_MAX_BYTES``. (None, why) when it cannot be read (no
    CAP_SYSLOG with ``kernel.dmesg_restrict = 1``, a container without /dev/kmsg)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        return None, f"{path}: {e.strerror or e}"
    records: list[bytes] = []
    size = 0
    try:
        for _ in range(KMSG_MAX_RECORDS * 16):
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:  # overwritten while we read: continue with the next
                    continue
                if e.errno == errno.EINVAL and not records:
                    return None, f"{path}: {e.strerror}"
                break
            if not rec:
                break
            records.append(rec if rec.endswith(b"\n") else rec + b"\n")
            size += len(records[-1])
            while size > KMSG_MAX_BYTES or len(records) > KMSG_MAX_RECORDS:
                size -= len(records.pop(0))
    finally:
        os.close(fd)
    return b"".join(records), None


def _nvml_answer(snap: NodeSnapshot) -> dict[str, Any]:
    nv = snap.nvml
    if not nv.available:
        return {"init_error": nv.error or "NVML unavailable", "gpus": []}
    return nv.model_dump(mode="json", exclude={"available", "error", "asked"})


def _answers(tree: _Tree, host: HostRoot, config: AgentConfig, snap: NodeSnapshot, problems: list[str]) -> list[str]:
    base = recorded.DIR
    written: list[str] = []

    def put(name: str, data: bytes) -> None:
        tree.put(f"{base}/{name}", data)
        written.append(name)

    if snap.nvml.available or host.is_live or host.recorded(recorded.NVML) is not None:
        put(recorded.NVML, (json.dumps(_nvml_answer(snap), indent=2) + "\n").encode())
    for n in snap.netdevs:
        if n.ethtool is not None:
            put(f"{recorded.ETHTOOL}/{n.name}", recorded.format_ethtool_s(n.ethtool).encode())
        if n.pfc is not None:
            put(f"{recorded.DCB}/{n.name}", recorded.format_mlnx_qos(n.pfc.enabled, n.pfc.trust).encode())
    if host.is_live:
        u = os.uname()
        uname = {"sysname": u.sysname, "nodename": u.nodename, "release": u.release, "version": u.version, "machine": u.machine}
        put(recorded.UNAME, (json.dumps(uname, indent=2) + "\n").encode())
        kmsg, why = _kernel_log_tail()
        if kmsg is not None:
            tree.put(recorded.KMSG, kmsg)
            written.append(recorded.KMSG)
        else:
            problems.append(f"kernel log not recorded: {why}")
        try:
            put(recorded.BASELINE, read_regular(config.paths.baseline, 4 << 20))
        except FileNotFoundError:
            pass
        except OSError as e:
            problems.append(f"baseline not recorded: {config.paths.baseline}: {e.strerror or e}")
    else:  # a recording of a recording: carry what it recorded
        for name, limit in ((recorded.UNAME, 1 << 16), (recorded.BASELINE, 4 << 20)):
            rel = host.recorded(name)
            if rel is None:
                continue
            try:
                put(name, read_regular(host.root / rel, limit))
            except OSError:
                pass
        kmsg_path = host.root / recorded.KMSG
        if kmsg_path.is_file() and not kmsg_path.is_symlink():
            try:
                tree.put(recorded.KMSG, read_regular(kmsg_path, KMSG_MAX_BYTES))
                written.append(recorded.KMSG)
            except OSError:
                pass
    return written


def capture(host: HostRoot, config: AgentConfig, out: Path, *, redact: bool = False, redact_key: bytes | None = None) -> CaptureResult:
    """Record the node at ``host`` into ``out`` (a tar.gz, written atomically)."""
    rec = _Recorder()
    recording = replace(host, recorder=rec)
    collector = Collector(recording, config)
    collector.run_sync()
    snap = collector.snapshot()
    ctx = ReadContext(recording, "capture")
    for rel in IDENTITY_FILES:
        ctx.raw(rel)

    tree = _Tree(host.root)
    # the source's own recorded answers are recorded again below, in this format
    skip = f"{str(host.root).rstrip('/')}/{host.answers}/" if host.answers else None
    for path, names in rec.listings.items():
        if skip is None or not path.startswith(skip):
            tree.add(path, listing=names)
    for path in sorted(rec.paths):
        if skip is None or not path.startswith(skip):
            tree.add(path)
    for path, data in rec.files.items():
        if skip is None or not path.startswith(skip):
            tree.add(path, data)
    problems = [f"{e.source}: {e.path}: {e.kind} {e.detail}".rstrip() for e in snap.read_errors]
    answers = _answers(tree, host, config, snap, problems)

    hostname = snap.system.hostname
    summary: dict[str, Any] = {}
    said = {"host_root": str(host.root), "mode_reason": host.mode_reason}
    if redact:
        from agentd.capture.redact import Redactor

        names = [h for h in (hostname, os.uname().nodename if host.is_live else None) if h]
        redactor = Redactor(redact_key, hostnames=names)
        for rel, (kind, data) in list(tree.members.items()):
            if kind == "file":
                tree.members[rel] = (kind, redactor.redact(rel, data))
        said = {k: redactor.redact_text(v) for k, v in said.items()}  # a boot id, a path with a hostname
        summary = redactor.summary()
    created = datetime.now(UTC).isoformat(timespec="seconds")
    source = {
        "host_root": said["host_root"],
        "mode": host.mode,
        "mode_reason": said["mode_reason"],
        "hostname": None if redact else hostname,
        "kernel_release": snap.gdr.kernel_release,
        "arch": snap.system.arch,
    }
    files = sum(1 for k, _ in tree.members.values() if k == "file")
    extra = {"source": source, "redacted": redact, "redactions": summary, "files": files, "answers": answers, "problems": problems}
    doc = recorded.manifest("capture", agentd_version=__version__, created=created, extra=extra)
    tree.put(recorded.MANIFEST, (json.dumps(doc, indent=2) + "\n").encode())

    blob = _tar(tree, time.time())
    res = atomic_write(out, blob, mode=0o600 if not redact else 0o644, only_if_changed=False)
    if not res.ok:
        raise OSError(f"capture not written: {res.error}")
    return CaptureResult(out=out, snapshot=snap, files=files, answers=tuple(answers), problems=tuple(problems), redacted=redact, bytes_written=len(blob))


def _tar(tree: _Tree, mtime: float) -> bytes:
    buf = io.BytesIO()
    # GNU format with the filesystem encoding: a netdev name that is not UTF-8 keeps its bytes
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.GNU_FORMAT, encoding="utf-8", errors="surrogateescape", compresslevel=6) as tar:
        for rel in sorted(tree.members):
            kind, data = tree.members[rel]
            info = tarfile.TarInfo(rel)
            info.mtime = int(mtime)
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif kind == "link":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, data, 0o777
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
