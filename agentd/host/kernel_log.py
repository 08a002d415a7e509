"""The kernel log as a source of events: XIDs, GPUs off the bus, mlx5 firmware, PCIe errors.

Unlike the other readers this one has state (``KernelLogSource``, one per host root, kept
by the collector): the kernel log is a stream, and each record must be read, recognised
and counted once.

- **live** root: ``/dev/kmsg`` held open non-blocking. The first poll reads the records
  the ring buffer still holds (so a fault from before agentd started is seen), every
  later poll only the new ones, up to EAGAIN. EPIPE (records overwritten before they
  were read) and gaps in the sequence numbers are counted as lost.
- any other root: the file ``ROOT/dev/kmsg`` in the same record format (``agentd
  capture`` writes it, the simulator appends to it). Its newest records are at its end:
  the last ``FILE_MAX_BYTES`` are read. Records are new by their place in the file (after
  the last one read), never by their sequence number: a record with a huge number hides
  nothing after it. A number and message seen among the recent records is the same record
  recorded twice, counted once; a file whose last-read record is gone and whose numbers go back, or a new boot
  id, starts over.

Bounded work (a flood of ordinary lines, an ACCESS_REG storm, iptables LOG without a
limit, must cost the other probes nothing): a poll stops when its time is up, and the
next goes on from there. The first poll of a source (the retained ring buffer, or a
one-shot ``agentd check``) may take ``FIRST_POLL_S``, a later one ``POLL_SHARE`` of the
time since the previous one, at most ``POLL_MAX_S``; both within the caller's
``limit_s``. A poll that stopped with records waiting says so (``behind``); records the
kernel overwrote meanwhile are counted as lost, and a one-shot read counts those it
passed over. Records no catalogue line could match (``ExtractorLike.wants``) cost only
their header.

Restart-safe: ``resume(cursor)`` before the first poll hands over what the previous
agentd process on this boot persisted (agentd.outputs.kernel_cursor): records up to its
sequence number are not recognised or counted again, and its recent events come back,
so a restart neither counts old records twice nor forgets an XID the ring buffer has
since overwritten. A cursor of another boot is ignored: a new boot inherits nothing. So
is a cursor whose sequence number is beyond the newest record of the log (not this
log's: it would hide every record up to it).

Each event gets a unix time: on a live node from the record's timestamp (microseconds
since boot on the monotonic clock), in a file from ``proc/uptime`` recorded beside it
(records seen at the first read), else the time agentd first read it. Recognising is
``agentd.host.kernel_catalog.Extractor``'s; judging them is agentd.judging's.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from agentd.base.jsontypes import JsonObject, JsonValue
from agentd.host.fs import BOOT_ID, HostRoot, ReadContext, read_tail
from agentd.host.kernel_catalog import Extracted, Extractor
from agentd.host.kmsg import KMSG_MAX_BYTES, KMSG_READ_BYTES, iter_raw, parse_body, parse_head, whole_tail
from agentd.host.system import boot_time
from agentd.model import KernelCount, KernelEvent, KernelLog

KMSG_REL = "dev/kmsg"
MAX_RECORDS_PER_POLL = 1 << 19  # a poll stops here whatever its time (the largest ring buffer holds fewer)
# A recorded log is read whole each poll it changed (its hash says whether it did): its
# last FILE_MAX_BYTES (captures hold a 1 MiB tail).
FILE_MAX_BYTES = 4 * KMSG_MAX_BYTES
MAX_COUNT_KEYS = 512  # distinct (kind, code, device); more fold into (kind, "other", None)
CURSOR_VERSION = 1
# How long one poll may read (seconds of wall time): the first (the retained ring buffer,
# `agentd check`), and later ones: a share of the time since the previous poll, capped.
FIRST_POLL_S = 2.0
POLL_SHARE = 0.25
POLL_MAX_S = 0.5
POLL_MIN_S = 0.005
CLOCK_EVERY = 64  # records between two looks at the clock
RECENT_RECORDS = 4096  # (sequence number, message) of a file's records remembered: a record recorded twice is read once

Key = tuple[str, str, str | None]


class ExtractorLike(Protocol):
    def feed(self, message: str, fields: Mapping[str, str] | None = None) -> Extracted | None: ...

    def wants(self, record: bytes) -> bool:
        """False when no line the catalogue recognises can be in this raw record (it is
        then counted, not parsed or fed)."""
        ...


def default_extractor() -> ExtractorLike:
    return Extractor()


class KernelLogSource:
    def __init__(self, host: HostRoot, extractor: Callable[[], ExtractorLike] = default_extractor):
        self.host = host
        self._new_extractor = extractor
        self._fd: int | None = None
        self._resume: Mapping[str, JsonValue] | None = None
        self._lock = threading.Lock()
        self._reset(None)
        self._last: KernelLog | None = None
        self._file_sig: tuple[int, int] | None = None
        self._polled_at: float | None = None  # time.monotonic() at the end of the last poll

    def _reset(self, boot_id: str | None) -> None:
        self.boot_id = boot_id
        self.last_seq: int | None = None
        self.resume_seq = -1
        self._resume_checked = True  # whether the cursor's seq was checked against the log
        self.records = 0
        self.lost = 0
        self.lost_at: float | None = None
        self.behind = False
        self.events: deque[KernelEvent] = deque()
        self.latest: dict[Key, KernelEvent] = {}
        self.counts: dict[Key, int] = {}
        self._extractor: ExtractorLike | None = None  # made at the first record
        self._anchor: bytes | None = None  # the raw bytes of the last record read from a file
        self._recent: deque[tuple[int, int]] = deque()
        self._recent_set: set[tuple[int, int]] = set()
        self._changed = True

    @property
    def last(self) -> KernelLog | None:
        """The latest answer (None before the first poll)."""
        return self._last

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
        if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0:
            self.resume_seq = seq
            self._resume_checked = False
        for raw in cur.get("events") or ():
            try:
                e = KernelEvent.model_validate(raw)
            except Exception:  # a damaged cursor costs its events, never the source
                continue
            self.events.append(e)
            key = (e.kind, e.code, e.device)
            if key in self.latest or len(self.latest) < MAX_COUNT_KEYS:
                self.latest[key] = e

    def _cursor_beyond_log(self) -> bool:
        """After a poll that read to the end: whether the cursor's sequence number is
        beyond every record of the log (then it is not this log's, and is dropped)."""
        if self._resume_checked or self.behind:
            return False
        self._resume_checked = True
        return self.last_seq is None or self.last_seq < self.resume_seq

    # -- polling -----------------------------------------------------------------------
    def poll(self, ctx: ReadContext, *, keep_s: float, max_events: int, limit_s: float = FIRST_POLL_S) -> KernelLog:
        """The log with what is new since the last poll (the previous object when nothing
        is). ``limit_s``: the most one poll may read. A poll that finds another one
        running (two collections at once) answers what that one answered last."""
        if not self._lock.acquire(blocking=self._last is None):
            return self._last  # type: ignore[return-value]  # not None: the acquire blocks until there is one
        try:
            return self._poll(ctx, keep_s, max_events, limit_s)
        finally:
            self._polled_at = time.monotonic()
            self._lock.release()

    def _budget(self, limit_s: float) -> float:
        if self._polled_at is None or self.last_seq is None:
            return min(FIRST_POLL_S, limit_s)
        since = time.monotonic() - self._polled_at
        return min(limit_s, POLL_MAX_S, max(POLL_MIN_S, POLL_SHARE * since))

    def _poll(self, ctx: ReadContext, keep_s: float, max_events: int, limit_s: float) -> KernelLog:
        now = time.time()
        deadline = time.perf_counter() + self._budget(limit_s)
        # A live root's boot id cannot change under a running agentd: read it once.
        boot_id = self.boot_id if self.host.is_live and self.boot_id is not None else ctx.text(BOOT_ID)
        if boot_id != self.boot_id or self._last is None:
            if boot_id != self.boot_id:
                self._close()
                self._reset(boot_id)
                self._file_sig = None
            self._apply_resume(boot_id)
        result = self._poll_live(now, deadline) if self.host.is_live else self._poll_file(ctx, now, deadline)
        if result is None and self._cursor_beyond_log():
            # not this log's cursor: forget what it brought and read the log from its start
            self._close()
            self._reset(boot_id)
            self._file_sig = None
            result = self._poll_live(now, deadline + POLL_MAX_S) if self.host.is_live else self._poll_file(ctx, now, deadline + POLL_MAX_S)
        if result is not None:  # the source is unreadable: say so, keep nothing stale
            if result != self._last:  # the same answer keeps its object (memoised downstream)
                self._last = result
            return self._last
        self._expire(now - keep_s, max_events)
        if self._changed or self._last is None or not self._last.available:
            self._changed = False
            self._last = KernelLog(
                available=True, source=self._source_name(), boot_id=self.boot_id, last_seq=self.last_seq,
                records=self.records, lost=self.lost, lost_at=self.lost_at, behind=self.behind, events=self._events_out(),
                counts=tuple(KernelCount(kind=k, code=c, device=d, count=n) for (k, c, d), n in sorted(self.counts.items(), key=_count_key)),
            )
        return self._last

    def _events_out(self) -> tuple[KernelEvent, ...]:
        """The recent events, and the latest of each key the recent ones no longer hold,
        oldest first."""
        recent = {id(e) for e in self.events}
        older = [e for e in self.latest.values() if id(e) not in recent]
        if not older:
            return tuple(self.events)
        return tuple(sorted([*older, *self.events], key=lambda e: e.at))

    def _source_name(self) -> str:
        return "/dev/kmsg" if self.host.is_live else KMSG_REL

    def _lose(self, n: int, at: float) -> None:
        if n > 0:
            self.lost += n
            self.lost_at = at
            self._changed = True

    def _poll_live(self, now: float, deadline: float) -> KernelLog | None:
        if self._fd is None:
            path = live_path(self.host)
            try:
                self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as e:
                return KernelLog(available=False, source=path, error=f"{path}: {e.strerror or e}", boot_id=self.boot_id)
        mono = time.clock_gettime(time.CLOCK_MONOTONIC)
        fd = self._fd
        refused = False  # the previous read was EINVAL
        behind = False
        for n in range(MAX_RECORDS_PER_POLL):
            if n % CLOCK_EVERY == CLOCK_EVERY - 1 and time.perf_counter() > deadline:
                behind = True
                break
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
            head = parse_head(rec)
            if head is None:
                continue
            seq, usec = head[1], head[2]
            last = self.last_seq
            if last is not None and seq <= last:
                continue
            if last is not None and seq > last + 1:
                self._lose(seq - last - 1, now)
            self.last_seq = seq
            self._changed = True
            self._take(rec, seq, now - max(0.0, mono - usec / 1e6))
        else:
            behind = True
        if behind != self.behind:
            self.behind = behind
            self._changed = True
        return None

    def pass_over(self) -> None:
        """A one-shot reader whose time was up with records still waiting (``behind``):
        count the records between the last one read and the newest as lost (passed over).
        The newest is the next the kernel logs: under a flood, at once."""
        fd = self._fd
        if fd is None or not self.behind or self.last_seq is None:
            return
        try:
            os.lseek(fd, 0, os.SEEK_END)
            rec = os.read(fd, KMSG_READ_BYTES)
        except OSError:
            return
        head = parse_head(rec)
        if head is not None and head[1] > self.last_seq + 1:
            self._lose(head[1] - self.last_seq - 1, time.time())
            self._last = self._last.model_copy(update={"lost": self.lost, "lost_at": self.lost_at}) if self._last is not None else None

    def _poll_file(self, ctx: ReadContext, now: float, deadline: float) -> KernelLog | None:
        data = ctx.raw(KMSG_REL, max_bytes=FILE_MAX_BYTES + 1, read=read_tail)
        if data is None:
            self._file_sig = None
            return KernelLog(available=False, asked=False, source=KMSG_REL, error=f"no {KMSG_REL} under the host root", boot_id=self.boot_id)
        sig = (len(data), hash(data))
        if sig == self._file_sig and not self.behind:
            return None
        self._file_sig = sig
        data = whole_tail(data, FILE_MAX_BYTES)
        records = list(iter_raw(data))
        start = self._after_anchor(data)
        if start is None:
            newest = max((h[1] for h in map(parse_head, records) if h is not None), default=None)
            if newest is not None and self.last_seq is not None and newest < self.last_seq:
                self._reset(self.boot_id)  # the file was replaced by an older or another boot's log
            elif not self._resume_checked and (newest is None or newest < self.resume_seq):
                self._reset(self.boot_id)  # the cursor is not this log's (beyond its newest record)
            self._resume_checked = True
            recs: Iterator[bytes] = iter(records)
        else:
            recs = iter_raw(data[start:])
        first = self._anchor is None and self.records == 0
        uptime = _uptime(ctx, now) if first else None
        behind = False
        for n, rec in enumerate(recs):
            if n % CLOCK_EVERY == CLOCK_EVERY - 1 and time.perf_counter() > deadline:
                behind = True
                break
            head = parse_head(rec)
            self._anchor = rec
            if head is None:
                continue
            seq, usec = head[1], head[2]
            if not self._first_time(seq, rec):
                continue
            self.last_seq = seq
            self._changed = True
            at = now if uptime is None else now - max(0.0, uptime - usec / 1e6)
            self._take(rec, seq, min(at, now))
        if behind != self.behind:
            self.behind = behind
            self._changed = True
        return None

    def _after_anchor(self, data: bytes) -> int | None:
        """Where the records after the last one read start in ``data`` (None: it is not
        there: the first read, a file replaced, or more appended than is read)."""
        if self._anchor is None:
            return None
        at = data.rfind(self._anchor)
        while at > 0 and data[at - 1 : at] != b"\n":  # the same bytes inside a longer line
            at = data.rfind(self._anchor, 0, at)
        if at < 0:
            return None
        end = at + len(self._anchor)
        return end if end >= len(data) or data[end : end + 1] == b"\n" else None

    def _first_time(self, seq: int, rec: bytes) -> bool:
        """Whether no recent record of the file had this sequence number and message (the
        kernel never gives a number twice in a boot: the same record, recorded twice; a
        file rewritten from its start numbers its new records again, with other text)."""
        mark = (seq, hash(rec[rec.find(b";") + 1 :]))
        if mark in self._recent_set:
            return False
        self._recent.append(mark)
        self._recent_set.add(mark)
        if len(self._recent) > RECENT_RECORDS:
            self._recent_set.discard(self._recent.popleft())
        return True

    def _take(self, rec: bytes, seq: int, at: float) -> None:
        if seq <= self.resume_seq:  # a previous agentd read it (its events came with the cursor)
            return
        self.records += 1
        if self._extractor is None:
            self._extractor = self._new_extractor()
        try:
            if not self._extractor.wants(rec):
                return
            ex = self._extractor.feed(*parse_body(rec))
        except Exception:  # a catalogue bug costs the line, never the source
            ex = None
        if ex is None:
            return
        key: Key = (ex.kind, ex.code, ex.device)
        if key not in self.counts and len(self.counts) >= MAX_COUNT_KEYS:
            key = (ex.kind, "other", None)
        event = KernelEvent(seq=seq, at=at, kind=ex.kind, code=ex.code, device=ex.device, detail=ex.detail[:200], fatal=ex.fatal, action=ex.action)
        self.events.append(event)
        self.latest[key] = event
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


def _count_key(item: tuple[Key, int]) -> tuple[str, str, str]:
    (k, c, d), _ = item
    return (k, c, d or "")


def live_path(host: HostRoot) -> str:
    """The root's /dev/kmsg when it is the character device (a container that mounts the
    host's /dev), else this process's /dev/kmsg: a live root's kernel is the running one."""
    candidate = os.path.join(str(host.root), KMSG_REL)
    try:
        if stat.S_ISCHR(os.stat(candidate).st_mode):
            return candidate
    except OSError:
        pass
    return "/dev/kmsg"


def _uptime(ctx: ReadContext, now: float) -> float | None:
    """How long the root's node has been up, to date a recorded log's records by. A
    simulated node's clock runs: its uptime is ``now`` minus its boot time (``proc/stat``
    btime), not the ``proc/uptime`` written when its tree was built, which stays as it was
    (every record injected since would read as just logged, on every ``agentd check``,
    and a held event would never age). A capture is the node as it was: its recorded
    uptime."""
    if ctx.host.is_simulated:
        booted_at, _ = boot_time(ctx)
        if booted_at is not None:
            return max(0.0, now - booted_at)
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


def read_kernel_log(ctx: ReadContext, source: KernelLogSource | None, *, keep_s: float, max_events: int, limit_s: float = FIRST_POLL_S) -> KernelLog:
    """One poll of ``source`` (a one-shot source when None: ``agentd check``, capture:
    what it had no time for is counted as passed over)."""
    src = source if source is not None else KernelLogSource(ctx.host)
    try:
        log = src.poll(ctx, keep_s=keep_s, max_events=max_events, limit_s=limit_s)
        if source is None and log.behind:
            src.pass_over()
            log = src.last or log
        return log
    finally:
        if source is None:
            src.close()
