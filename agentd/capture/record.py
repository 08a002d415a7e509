"""``agentd capture``: one file holding everything agentd reads from a node.

One collection runs with a ``ReadRecorder`` on the host root: every file the readers read
(with the bytes they read), every directory they listed (with its entries), every path
they tested or followed. Those become a tar.gz laid out like the node (sysfs symlinks kept
as symlinks, relative to the root), plus the recorded answers of the live interfaces in
the layout of ``agentd.base.recorded`` (NVML, ethtool statistics, DCB/PFC, ethtool netlink
link state, FEC and module EEPROM pages, the link tool's output, uname, the kernel log
tail, the node's baseline) and a manifest. ``--host-root`` of every command
accepts the file (``agentd.capture.replay``) and judges it as it judged the node.

Blocking I/O throughout: a command, never the daemon's event loop.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentd import __version__
from agentd.base import recorded
from agentd.base.atomic import atomic_write, read_regular
from agentd.base.jsontypes import JsonObject
from agentd.collection.collector import Collector
from agentd.config import AgentConfig
from agentd.host import ethtool_nl, module_eeprom, mstlink
from agentd.host.daemons import daemon_name
from agentd.host.fs import BOOT_ID, HostRoot, ReadContext
from agentd.host.kmsg import KMSG_MAX_BYTES, read_kmsg_tail, whole_tail
from agentd.host.recording import PathRecorder, RecordedTree
from agentd.host.system import PROC_STAT, STAT_MAX_BYTES, uname
from agentd.model import NodeSnapshot

# Read explicitly besides what the collection reads: what says which node and kernel this is.
UPTIME = "proc/uptime"  # dates the kernel log records (seconds since boot)
# proc/stat: its btime says when the node booted (agentd.host.system.boot_time), so a replay
# knows it without this machine's clock. The system probe reads it; read again here so a
# capture holds it whatever the probes read. The whole file as read (as every other file):
# counters only, nothing to redact, a few KiB to a few hundred on the largest nodes.
# Said in a redacted capture's manifest: what --redact cannot promise (docs/capture.md).
REDACTION_NOTE = ("free text (the kernel log, etc/nccl.conf) is redacted by pattern: a short name of another host, "
                  "a serial number without a 'serial' keyword or an unusual domain can remain; read it before publishing")
IDENTITY_FILES = (BOOT_ID, "etc/machine-id", "proc/sys/kernel/hostname", "proc/sys/kernel/osrelease", "proc/sys/kernel/arch")


@dataclass
class CaptureResult:
    out: Path
    snapshot: NodeSnapshot
    files: int
    answers: tuple[str, ...]
    problems: tuple[str, ...]
    redacted: bool
    bytes_written: int


def _trim_process_table(rec: PathRecorder, root: Path) -> None:
    """Of the process table the daemons probe read, keep PID 2's name (kthreadd there says
    the table is the node's whole one) and the processes that are fabric daemons: the replay sees the
    same FabricDaemons, and the capture holds no list of what else the node runs."""
    proc = str(root).rstrip("/") + "/proc"
    kept: set[str] = set()
    for path in [p for p in rec.files if p.startswith(proc + "/")]:
        pid, _, rest = path[len(proc) + 1 :].partition("/")
        if rest != "comm" or not (pid.isascii() and pid.isdigit()):
            continue
        if pid == "2" or daemon_name(rec.files[path]) is not None:
            kept.add(pid)
        else:
            del rec.files[path]
    if proc in rec.listings:
        rec.listings[proc] = [n for n in rec.listings[proc] if n in kept]


def _nvml_answer(snap: NodeSnapshot) -> JsonObject:
    nv = snap.nvml
    if not nv.available:
        return {"init_error": nv.error or "NVML unavailable", "gpus": []}
    return nv.model_dump(mode="json", exclude={"available", "error", "asked"})


def _answers(tree: RecordedTree, host: HostRoot, config: AgentConfig, snap: NodeSnapshot, problems: list[str]) -> list[str]:
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
            put(f"{recorded.DCB}/{n.name}", recorded.format_mlnx_qos(n.pfc.enabled, n.pfc.trust, n.pfc.dscp2prio).encode())
        if n.pause is not None:
            put(f"{recorded.PAUSE}/{n.name}", recorded.format_ethtool_a(n.name, n.pause.autoneg, n.pause.rx, n.pause.tx).encode())
        if n.phy is not None or n.module is not None:
            doc = {**ethtool_nl.answers_of(n.phy), "module-eeprom": module_eeprom.answer_of(n.module)}
            put(f"{recorded.ETHTOOL_NETLINK}/{n.name}.json", (json.dumps(doc, indent=1) + "\n").encode())
    for h in snap.hcas:
        for p in h.ports:
            if p.link_diag is not None:
                put(f"{recorded.LINK_TOOL}/{h.name}_{p.port}", mstlink.format_output(p.link_diag).encode())
    if host.is_live:
        put(recorded.UNAME, (json.dumps(uname(), indent=2) + "\n").encode())
        kmsg, why = read_kmsg_tail()
        if kmsg is not None:
            tree.put(recorded.KMSG, kmsg)
            written.append(recorded.KMSG)
            try:  # the records' timestamps are seconds since boot: the uptime dates them
                tree.put(UPTIME, read_regular(Path("/", UPTIME), 4096))
            except OSError:
                pass
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
                # the newest records (the head of a longer log is its oldest)
                tree.put(recorded.KMSG, whole_tail(read_regular(kmsg_path, KMSG_MAX_BYTES + 1, tail=True), KMSG_MAX_BYTES))
                written.append(recorded.KMSG)
                if (host.root / UPTIME).is_file():
                    tree.put(UPTIME, read_regular(host.root / UPTIME, 4096))
            except OSError:
                pass
    return written


class CaptureWriteError(OSError):
    """The capture file could not be written (an unwritable or missing directory, a full
    disk): nothing was written, the command could not do what it was asked."""


def capture(host: HostRoot, config: AgentConfig, out: Path, *, redact: bool = False, redact_key: bytes | None = None) -> CaptureResult:
    """Record the node at ``host`` into ``out`` (a tar.gz, written atomically)."""
    rec = PathRecorder()
    recording = replace(host, recorder=rec)
    collector = Collector(recording, config)
    collector.run_sync()
    snap = collector.snapshot()
    _trim_process_table(rec, host.root)
    ctx = ReadContext(recording, "capture")
    for rel in IDENTITY_FILES:
        ctx.raw(rel)
    ctx.raw(PROC_STAT, max_bytes=STAT_MAX_BYTES)

    tree = RecordedTree(host.root)
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
    summary: JsonObject = {}
    said = {"host_root": str(host.root), "mode_reason": host.mode_reason}
    if redact:
        from agentd.capture.redact import Redactor

        names = [h for h in (hostname, uname()["nodename"] if host.is_live else None) if h]
        redactor = Redactor(redact_key, hostnames=names)
        members: dict[str, tuple[str, Any]] = {}  # Any: as Recording.members (bytes, a str or None by kind)
        for rel, (kind, data) in tree.members.items():
            # a netdev named from its MAC (enx...) is in paths and link targets as well as in content
            if kind == "file":
                members[redactor.redact_path(rel)] = (kind, redactor.redact(rel, data))
            else:  # a link's target, or a directory's None
                members[redactor.redact_path(rel)] = (kind, redactor.redact_path(data) if kind == "link" else data)
        tree.members = members
        said = {k: redactor.redact_text(v) for k, v in said.items()}  # a boot id, a path with a hostname
        answers = [redactor.redact_path(a) for a in answers]  # ethtool/<netdev>
        problems = [redactor.redact_text(p) for p in problems]  # read errors name paths
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
    if redact:
        extra["redaction_note"] = REDACTION_NOTE
    doc = recorded.manifest("capture", agentd_version=__version__, created=created, extra=extra)
    tree.put(recorded.MANIFEST, (json.dumps(doc, indent=2) + "\n").encode())

    blob = _tar(tree, time.time())
    res = atomic_write(out, blob, mode=0o600 if not redact else 0o644, only_if_changed=False)
    if not res.ok:
        raise CaptureWriteError(f"capture not written to {out}: {res.error}")
    return CaptureResult(out=out, snapshot=snap, files=files, answers=tuple(answers), problems=tuple(problems), redacted=redact, bytes_written=len(blob))


def _tar(tree: RecordedTree, mtime: float) -> bytes:
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
