"""The kernel log as a source of events: XIDs, GPUs off the bus, mlx5 firmware, PCIe AER.

Unlike the other readers this one has state (``KernelLogSource``, one per host root, kept
by the collector): the kernel log is a stream, and each record must be read, recognised
and counted once.

- **live** root: ``/dev/kmsg`` held open non-blocking. The first poll reads the records
  the ring buffer still holds (so a fault from before agentd started is seen), every
  later poll only the new ones, up to EAGAIN. EPIPE (records overwritten before they
  were read) and gaps in the sequence numbers are counted as lost.
- any other root: the file ``ROOT/dev/kmsg`` in the same record format (``agentd
  capture`` writes it, the simulator appends to it). Records with a sequence number
  above the last one read are new; a file whose numbers go back, or a new boot id,
  starts over.

Restart-safe: ``resume(cursor)`` before the first poll hands over what the previous
agentd process on this boot persisted (agentd.outputs.kernel_cursor): records up to its
sequence number are not recognised or counted again, and its recent events come back,
so a restart neither counts old records twice nor forgets an XID the ring buffer has
since overwritten. A cursor of another boot is ignored: a new boot inherits nothing.

Each event gets a unix time: on a live node from the record's timestamp (microseconds
since boot on the monotonic clock), in a file from ``proc/uptime`` recorded beside it
(records seen at the first read), else the time agentd first read it. Recognising is
``agentd.host.kernel_catalog.Extractor``'s; judging them is agentd.judging's.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Protocol

from agentd.base.jsontypes import JsonObject, JsonValue
from agentd.host.fs import BOOT_ID, HostRoot, ReadContext
from agentd.host.kernel_catalog import Extracted, Extractor
from agentd.host.kmsg import KMSG_MAX_BYTES, KMSG_READ_BYTES, KmsgRecord, iter_records, parse_record
from agentd.model import KernelCount, KernelEvent, KernelLog

KMSG_REL = "dev/kmsg"
MAX_RECORDS_PER_POLL = 1 << 19  # a poll stops here (the largest ring buffer holds fewer); the next goes on
# A recorded log is read whole each poll (its hash says whether it changed): captures
# hold a 1 MiB tail; a larger file is read up to here (its first records).
FILE_MAX_BYTES = 4 * KMSG_MAX_BYTES
MAX_COUNT_KEYS = 512  # distinct (kind, code, device); more fold into (kind, "other", None)
CURSOR_VERSION = 1


class ExtractorLike(Protocol):
    def feed(self, message: str, fields: Mapping[str, str] | None = None) -> Extracted | None: ...


def default_extractor() -> ExtractorLike:
    return Extractor()


class KernelLogSource:
    def __init__(self, host: HostRoot, extractor: Callable[[], ExtractorLike] = default_extractor):
        self.host = host
        self._new_extractor = extractor
        self._fd: int | None = None
        self._resume: Mapping[str, JsonValue] | None = None
        self._reset(None)
        self._last: KernelLog | None = None
        self._file_sig: tuple[int, int] | None = None

    def _reset(self, boot_id: str | None) -> None:
        self.boot_id = boot_id
        self.last_seq: int | None = None
        self.resume_seq = -1
        self.records = 0
        self.lost = 0
        self.events: deque[KernelEvent] = deque()
        self.counts: dict[tuple[str, str, str | None], int] = {}
        self._extractor: ExtractorLike | None = None  # made at the first record
        self._changed = True

    # -- restart ---------------------------------------------------------------------
    def resume(self, cursor: Mapping[str, JsonValue] | None) -> None:
        """What a previous agentd on this node persisted (``cursor()``); used at the first
        poll if its boot id is this boot's."""
        self._resume = cursor

    def _apply_resume(self, boot_id: str | None) -> None:
        cur, self._resume = self._resume, None
        if not cur or boot_id is None or cur.get("boot_id") != boot_id or cur.get("version") != CURSOR_VERSION:
            return
        seq = cur.get("seq")
        if isinstance(seq, int) and seq >= 0:
            self.resume_seq = seq
        for raw in cur.get("events") or ():
            try:
                self.events.append(KernelEvent.model_validate(raw))
            except Exception:  # a damaged cursor costs its events, never the source
                continue

    # -- polling -----------------------------------------------------------------------
    def poll(self, ctx: ReadContext, *, keep_s: float, max_events: int) -> KernelLog:
        """The log with what is new since the last poll (the previous object when nothing is)."""
        now = time.time()
        # A live root's boot id cannot change under a running agentd: read it once.
        boot_id = self.boot_id if self.host.is_live and self.boot_id is not None else ctx.text(BOOT_ID)
        if boot_id != self.boot_id or self._last is None:
            if boot_id != self.boot_id:
                self._close()
                self._reset(boot_id)
            self._apply_resume(boot_id)
        if self.host.is_live:
            result = self._poll_live(ctx, now)
        else:
            result = self._poll_file(ctx, now)
        if result is not None:  # the source is unreadable: say so, keep nothing stale
            if result != self._last:  # the same answer keeps its object (memoised downstream)
                self._last = result
            return self._last
        self._expire(now - keep_s, max_events)
        if self._changed or self._last is None or not self._last.available:
            self._changed = False
            self._last = KernelLog(
                available=True, source=self._source_name(), boot_id=self.boot_id, last_seq=self.last_seq,
                records=self.records, lost=self.lost, events=tuple(self.events),
                counts=tuple(KernelCount(kind=k, code=c, device=d, count=n) for (k, c, d), n in sorted(self.counts.items(), key=_count_key)),
            )
        return self._last

    def _source_name(self) -> str:
        return "/dev/kmsg" if self.host.is_live else KMSG_REL

    def _poll_live(self, ctx: ReadContext, now: float) -> KernelLog | None:
        if self._fd is None:
            path = _live_path(self.host)
            try:
                self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as e:
                return KernelLog(available=False, source=path, error=f"{path}: {e.strerror or e}", boot_id=self.boot_id)
        mono = time.clock_gettime(time.CLOCK_MONOTONIC)
        fd = self._fd
        refused = False  # the previous read was EINVAL
        for _ in range(MAX_RECORDS_PER_POLL):
            try:
                rec = os.read(fd, KMSG_READ_BYTES)
            except BlockingIOError:
                break
            except OSError as e:
                # EPIPE: overwritten before we read it; EINVAL: larger than the buffer (the
                # kernel skips it). The next read goes on; the gap in the sequence numbers
                # counts what was lost. Twice EINVAL in a row is not /dev/kmsg answering.
                if e.errno == errno.EPIPE or (e.errno == errno.EINVAL and not refused):
                    refused = e.errno == errno.EINVAL
                    continue
                self._close()
                return KernelLog(available=False, source="/dev/kmsg", error=f"/dev/kmsg: {e.strerror or e}", boot_id=self.boot_id)
            refused = False
            if not rec:
                break
            r = parse_record(rec)
            if r is not None:
                self._take(r, now - max(0.0, mono - r.usec / 1e6))
        return None

    def _poll_file(self, ctx: ReadContext, now: float) -> KernelLog | None:
        data = ctx.raw(KMSG_REL, max_bytes=FILE_MAX_BYTES)
        if data is None:
            self._file_sig = None
            return KernelLog(available=False, asked=False, source=KMSG_REL, error=f"no {KMSG_REL} under the host root", boot_id=self.boot_id)
        sig = (len(data), hash(data))
        if sig == self._file_sig:
            return None
        self._file_sig = sig
        records = list(iter_records(data))
        if records and self.last_seq is not None and max(r.seq for r in records) < self.last_seq:
            self._reset(self.boot_id)  # the file was replaced by an older or another boot's log
        first = self.last_seq is None and self.records == 0
        uptime = _uptime(ctx) if first else None
        for r in records:
            at = now if uptime is None else now - max(0.0, uptime - r.usec / 1e6)
            self._take(r, min(at, now))
        return None

    def _take(self, r: KmsgRecord, at: float) -> None:
        if self.last_seq is not None and r.seq <= self.last_seq:
            return
        if self.last_seq is not None and r.seq > self.last_seq + 1 and self.host.is_live:
            self.lost += r.seq - self.last_seq - 1
        self.last_seq = r.seq
        self._changed = True
        if r.seq <= self.resume_seq:  # a previous agentd read it (its events came with the cursor)
            return
        self.records += 1
        if self._extractor is None:
            self._extractor = self._new_extractor()
        try:
            ex = self._extractor.feed(r.message, r.fields)
        except Exception:  # a catalogue bug costs the line, never the source
            ex = None
        if ex is None:
            return
        device = ex.device
        self.events.append(KernelEvent(seq=r.seq, at=at, kind=ex.kind, code=ex.code, device=device, detail=ex.detail[:200]))
        key = (ex.kind, ex.code, device)
        if key not in self.counts and len(self.counts) >= MAX_COUNT_KEYS:
            key = (ex.kind, "other", None)
        self.counts[key] = self.counts.get(key, 0) + 1

    def _expire(self, oldest: float, max_events: int) -> None:
        ev = self.events
        while ev and (len(ev) > max_events or ev[0].at < oldest):
            ev.popleft()
            self._changed = True

    def _close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def close(self) -> None:
        self._close()

    def __del__(self) -> None:
        self._close()


def _count_key(item: tuple[tuple[str, str, str | None], int]) -> tuple[str, str, str]:
    (k, c, d), _ = item
    return (k, c, d or "")


def _live_path(host: HostRoot) -> str:
    """The root's /dev/kmsg when it is the character device (a container that mounts the
    host's /dev), else this process's /dev/kmsg: a live root's kernel is the running one."""
    candidate = os.path.join(str(host.root), KMSG_REL)
    try:
        if stat.S_ISCHR(os.stat(candidate).st_mode):
            return candidate
    except OSError:
        pass
    return "/dev/kmsg"


def _uptime(ctx: ReadContext) -> float | None:
    text = ctx.text("proc/uptime")
    try:
        return float(text.split()[0]) if text else None
    except (ValueError, IndexError):
        return None


def cursor_of(log: KernelLog, keep: Callable[[KernelEvent], bool] = lambda e: True) -> JsonObject | None:
    """What to persist so that the next agentd on this boot goes on from ``log``
    (``KernelLogSource.resume``); None when there is nothing to go on from."""
    if not log.available or log.boot_id is None or log.last_seq is None:
        return None
    return {"version": CURSOR_VERSION, "boot_id": log.boot_id, "seq": log.last_seq, "events": [e.model_dump() for e in log.events if keep(e)]}


def read_kernel_log(ctx: ReadContext, source: KernelLogSource | None, *, keep_s: float, max_events: int) -> KernelLog:
    """One poll of ``source`` (a one-shot source when None: ``agentd check``, capture)."""
    src = source if source is not None else KernelLogSource(ctx.host)
    try:
        return src.poll(ctx, keep_s=keep_s, max_events=max_events)
    finally:
        if source is None:
            src.close()
