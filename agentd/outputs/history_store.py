"""The snapshot history (and finding lifecycles) persisted across restarts of agentd.

``<paths.state_dir>/history.json``, beside the baseline and the kernel cursor::

    {"format": "agentd-history", "version": 1, "written_at": <unix s>,
     "node": {"machine_id", "hostname", "host_root"}, "boot_id": "...",
     "snapshots": [<agentd.collection.history_json.export_entries entries>, oldest first],
     "lifecycle": [<JSON objects, kept as given>]}

What rates and flap detection need (agentd.collection.history_json: per-port states,
``link_downed``, counters at the edges of the rate window) so a restart (an upgrade, an
OOM kill) neither forgets a port that flapped nor counts its flaps again. Written
atomically; at most ``MAX_BYTES`` (the oldest snapshots go first, then the oldest lifecycle
items). Read bounded, a regular file only (a FIFO is an error at once, a symlink is not
followed). A file that cannot be used never stops a start: a corrupt one (not JSON, another
format or version, wrong types, too big, not a regular file) or another node's (machine-id,
else hostname differ: agentd.judging.baseline.foreign_reason's rule) is
renamed aside to ``history.json.corrupt-<unix>`` / ``history.json.foreign-<unix>`` (the
newest ``KEEP_ASIDE`` of each kind are kept) and reported. Another boot's file is not
loaded: see ``load_history``.
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Sequence

from agentd.base.atomic import WriteResult, atomic_write, read_fd
from agentd.base.jsontypes import JsonObject
from agentd.collection.history_json import drop_oldest
from agentd.host.fs import BOOT_ID, HostRoot, ReadContext
from agentd.host.system import read_identity
from agentd.judging.baseline import Baseline, NodeIdentity, foreign_reason

HISTORY_FILE = "history.json"
FORMAT = "agentd-history"
VERSION = 1
MAX_BYTES = 2 << 20  # far above a steady node's file (docs/node-state.md); the cap keeps a busy one small
KEEP_ASIDE = 3

LoadStatus = Literal["absent", "loaded", "new_boot", "set_aside"]


def history_path(state_dir: Path | str) -> Path:
    return Path(state_dir) / HISTORY_FILE


@dataclass
class LoadedHistory:
    snapshots: list[JsonObject] = field(default_factory=list)
    lifecycle: list[JsonObject] = field(default_factory=list)
    status: LoadStatus = "absent"
    note: str | None = None  # why it was not loaded (set aside, new boot, unreadable)
    set_aside_to: Path | None = None


class _Unusable(Exception):
    def __init__(self, kind: Literal["corrupt", "foreign"], why: str):
        super().__init__(why)
        self.kind, self.why = kind, why


def node_now(host: HostRoot, host_root: str) -> tuple[NodeIdentity, str | None]:
    """(the node's identity, its boot id) read as the collection reads them (hostname and
    machine-id as agentd.host.system, the boot id as the kernel log reader), for loading
    the file before the first collection. Blocking reads: in a lane."""
    with ReadContext(host, "history") as ctx:
        hostname, machine_id = read_identity(ctx)
        boot_id = (ctx.text(BOOT_ID) or "").strip() or None
    return NodeIdentity(machine_id=machine_id, hostname=hostname, host_root=host_root), boot_id


def _node_json(node: NodeIdentity) -> JsonObject:
    return {"machine_id": node.machine_id, "hostname": node.hostname, "host_root": node.host_root}


def render_history(*, node: NodeIdentity, boot_id: str | None, snapshots: Sequence[JsonObject],
                   lifecycle: Sequence[JsonObject], now: float | None = None, max_bytes: int = MAX_BYTES) -> str:
    """The file's text, at most ``max_bytes``: the oldest snapshots, then the oldest
    lifecycle items, are left out until it fits."""
    snaps, life = list(snapshots), [x for x in lifecycle if isinstance(x, dict)]
    doc: JsonObject = {"format": FORMAT, "version": VERSION, "written_at": time.time() if now is None else now,
                           "node": _node_json(node), "boot_id": boot_id, "snapshots": snaps, "lifecycle": life}
    while True:
        text = json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n"
        if len(text.encode("utf-8")) <= max_bytes or not (doc["snapshots"] or doc["lifecycle"]):
            return text
        if doc["snapshots"]:  # a quarter at a time: a few passes at most
            doc["snapshots"] = drop_oldest(doc["snapshots"], max(1, len(doc["snapshots"]) // 4))
        else:
            doc["lifecycle"] = doc["lifecycle"][max(1, len(doc["lifecycle"]) // 4):]


def save_history(path: Path, *, node: NodeIdentity, boot_id: str | None, snapshots: Sequence[JsonObject],
                 lifecycle: Sequence[JsonObject] = ()) -> WriteResult:
    """Write the file atomically. Never raises for I/O errors (WriteResult.error); blocking
    file I/O: the daemon calls it in a lane."""
    try:
        text = render_history(node=node, boot_id=boot_id, snapshots=snapshots, lifecycle=lifecycle)
    except (TypeError, ValueError) as e:  # not JSON data (a lifecycle item the lead made)
        return WriteResult(path, changed=False, error=f"not written: {e}")
    return atomic_write(path, text, mode=0o644, only_if_changed=False)


def _read(path: Path) -> bytes | None:
    """The file's bytes; None when absent. A symlink is not followed, a FIFO not waited on;
    _Unusable when it is not a regular file or larger than MAX_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:
        if os.path.islink(path):
            raise _Unusable("corrupt", "a symlink, not a regular file") from None
        if os.path.isdir(path):
            raise _Unusable("corrupt", "a directory, not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise _Unusable("corrupt", f"{kind}, not a regular file")
        data = read_fd(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise _Unusable("corrupt", f"larger than {MAX_BYTES} bytes")
    return data


def _parse(data: bytes, node: NodeIdentity) -> JsonObject:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _Unusable("corrupt", f"not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _Unusable("corrupt", f"not an agentd history (format {doc.get('format')!r})" if isinstance(doc, dict) else "not a JSON object")
    if doc.get("version") != VERSION:
        raise _Unusable("corrupt", f"version {doc.get('version')!r}, this agentd reads {VERSION}")
    who, snaps, life, boot = doc.get("node"), doc.get("snapshots"), doc.get("lifecycle", []), doc.get("boot_id")
    if not isinstance(who, dict) or not isinstance(snaps, list) or not isinstance(life, list) or not (boot is None or isinstance(boot, str)):
        raise _Unusable("corrupt", "node, snapshots, lifecycle or boot_id of the wrong type")
    ids = {k: who.get(k) for k in ("machine_id", "hostname", "host_root")}
    if not all(v is None or isinstance(v, str) for v in ids.values()):
        raise _Unusable("corrupt", "node identity of the wrong type")
    theirs = Baseline(taken_at=0.0, machine_id=ids["machine_id"], hostname=ids["hostname"], host_root=ids["host_root"])
    # the baseline's rule: one node read through ``/`` or a container's ``/host`` is one
    # node (a root that is not the node has a state dir of its own, beside it)
    why = foreign_reason(theirs, node)
    if why is not None:
        raise _Unusable("foreign", f"another node's: {why}")
    return doc


def _aside_order(p: Path) -> tuple[int, int]:
    """``history.json.corrupt-1700000000.2`` -> (1700000000, 2): when it was set aside."""
    stamp = p.name.rsplit("-", 1)[-1].split(".")
    try:
        return int(stamp[0]), int(stamp[1]) if len(stamp) > 1 else 0
    except ValueError:
        return 0, 0


def _set_aside(path: Path, kind: str) -> Path | None:
    """Rename the file to ``<name>.<kind>-<unix>``; keep the newest KEEP_ASIDE of that kind."""
    stamp = int(time.time())
    target, n = path.with_name(f"{path.name}.{kind}-{stamp}"), 0
    while os.path.lexists(target):
        n += 1
        target = path.with_name(f"{path.name}.{kind}-{stamp}.{n}")
    try:
        os.rename(path, target)  # a symlink is renamed, never followed
    except OSError:
        return None
    try:
        old = sorted((p for p in path.parent.glob(f"{path.name}.{kind}-*") if p != target), key=_aside_order)
        for p in old[: max(0, len(old) - (KEEP_ASIDE - 1))]:
            if p.is_symlink() or p.is_file():
                p.unlink()
    except OSError:
        pass
    return target


def load_history(path: Path, *, node: NodeIdentity, boot_id: str | None) -> LoadedHistory:
    """The file's snapshots and lifecycle for this node and boot. Never raises: a file that
    cannot be used is set aside (status "set_aside", ``note`` says why and where it went),
    or, when even that fails, ignored (status "absent", ``note`` says why)."""
    try:
        data = _read(path)
        if data is None:
            return LoadedHistory()
        doc = _parse(data, node)
    except _Unusable as e:
        moved = _set_aside(path, e.kind)
        note = f"{path}: {e.why}; " + (f"moved to {moved.name}" if moved is not None else "could not be moved aside: ignored")
        return LoadedHistory(status="set_aside" if moved is not None else "absent", note=note, set_aside_to=moved)
    except OSError as e:
        return LoadedHistory(note=f"{path}: cannot be read: {e.strerror or e}")
    if boot_id is None or doc.get("boot_id") != boot_id:
        # The node rebooted since it was written (or the boot is unknown): every counter
        # started again from zero and every port went down and up, so neither the old
        # readings (rates against them would see resets) nor the old states (a flap that
        # is the reboot) mean anything now. The file is overwritten by the next save.
        return LoadedHistory(status="new_boot", note=f"{path}: written on boot {doc.get('boot_id')}, this is {boot_id}: not loaded")
    snaps = [s for s in doc["snapshots"] if isinstance(s, dict)]
    life = [x for x in doc.get("lifecycle", []) if isinstance(x, dict)]
    return LoadedHistory(snapshots=snaps, lifecycle=life, status="loaded")
