"""The files the daemon keeps beside its state, and follows: the history with the findings'
lifecycles (agentd.outputs.history_store), the kernel log's cursor
(agentd.outputs.kernel_cursor), the maintenance file (agentd.outputs.maintenance), and,
in the publisher, the baseline.

Each goes through one ``Keeper``: read in its own lane with a timeout (a FIFO or a hung
filesystem never stops the event loop, /health or SIGTERM; a read that still hangs is not
started again), written fire and forget in the same lane and throttled (at once when what
must not be lost changed, else at most every so often), and a failure said once when it
starts and once when it ends (``Outage``). The shape is Home Assistant's
DataUpdateCoordinator (one owner per source, failures logged when they start and end,
blocking work off the loop), made for files.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Callable, Generic, Hashable, Protocol, TypeVar

from agentd.base.atomic import WriteResult
from agentd.base.jsontypes import JsonObject
from agentd.collection.history import History
from agentd.config import AgentConfig
from agentd.daemon.logging import Log
from agentd.host.fs import HostRoot
from agentd.host.kernel_log import KernelLogSource
from agentd.host.runner import Lane, await_future
from agentd.judging.judge import node_identity
from agentd.model import KernelLog, NodeSnapshot
from agentd.outputs.history_store import LoadedHistory, history_path, load_history, node_now, save_history
from agentd.outputs.kernel_cursor import cursor_path, load_cursor, save_cursor
from agentd.outputs.maintenance import Maintenance, maintenance_path, read_maintenance

T = TypeVar("T")


class StillReading(TimeoutError):
    """The keeper's previous read has not finished: nothing new was started."""


class Outage:
    """Say once when something starts failing (or fails another way), and once when it
    works again: ``failed`` (an error, with ``error`` and ``effect``) and ``recovered``
    (info; None: recovery is not news)."""

    def __init__(self, log: Log, failed: str, recovered: str | None, effect: str):
        self.log, self.failed, self.recovered, self.effect = log, failed, recovered, effect
        self.error: str | None = None

    def report(self, error: str | None, path: Path) -> None:
        if error == self.error:
            return
        if error is not None:
            self.log.error(self.failed, path=str(path), error=error, effect=self.effect)
        elif self.recovered is not None:
            self.log.info(self.recovered, path=str(path))
        self.error = error


def _nothing() -> None:
    return None


class Keeper(Generic[T]):
    """One file's reads (``load``, giving a ``T``) and writes (``save``), in one lane."""

    def __init__(self, name: str, written: Outage | None = None):
        self.lane = Lane(name)
        self.written = written  # said about the writes' results
        self._reading: tuple[Hashable, Future[T]] | None = None  # a read that outlived its timeout, and its key
        self._saved: tuple[Hashable, float] | None = None  # the last save's mark, when (monotonic)

    @property
    def busy(self) -> bool:
        return self.lane.busy

    async def load(self, read: Callable[[], T], timeout_s: float, key: Hashable = None) -> T:
        """``read()`` in the lane, waited for at most ``timeout_s`` (TimeoutError; what it
        raises, it raises). A read that outlived its timeout is neither waited on nor
        started again while it hangs (StillReading, at once); once it finished, the next
        load with the same ``key`` (the path) returns its answer."""
        pending = self._reading
        if pending is not None:
            pkey, fut = pending
            if not fut.done():
                raise StillReading(f"the previous read of {pkey} has not finished")
            self._reading = None
            if pkey == key:
                return fut.result()
        fut, started = self.lane.submit(read)
        if not started:  # a write hangs in the lane
            raise StillReading("the previous write has not finished")
        try:
            return await await_future(fut, timeout_s)
        except TimeoutError:
            self._reading = (key, fut)
            raise

    def due(self, mark: Hashable, every_s: float) -> bool:
        """Whether a save is due: at once when ``mark`` (what must not be lost) differs from
        the last save's, else once ``every_s`` passed since it."""
        last = self._saved
        return last is None or mark != last[0] or time.monotonic() - last[1] >= every_s

    def save(self, write: Callable[[], WriteResult | None], mark: Hashable, path: Path) -> Future[WriteResult | None] | None:
        """Start ``write()`` in the lane, fire and forget (its result goes to ``written``);
        None when the previous write still runs (a hung filesystem: the next save tries
        again)."""
        fut, started = self.lane.submit(write)
        if not started:
            return None
        self._saved = (mark, time.monotonic())
        fut.add_done_callback(lambda f: self._written(f, path))
        return fut

    def _written(self, fut: Future[WriteResult | None], path: Path) -> None:
        try:
            result = fut.result()
            error = result.error if result is not None else None
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        if self.written is not None:
            self.written.report(error, path)

    async def idle(self, timeout_s: float) -> None:
        """Wait at most ``timeout_s`` for what runs in the lane (TimeoutError)."""
        fut, _ = self.lane.submit(_nothing)
        await await_future(fut, timeout_s)


# ---------------------------------------------------------------------------
# the maintenance file (agentd.outputs.maintenance)


class MaintenanceFollower:
    """The maintenance file, read at every publish. When it goes away, the node stays in
    maintenance until a full collection that began after that is published: nothing
    measured during the work is trusted."""

    def __init__(self, log: Log):
        self.log = log
        self.keeper: Keeper[Maintenance | None] = Keeper("maintenance")
        self.failed = Outage(log, "maintenance.read_failed", None, effect="the maintenance state last read stands")
        self.now: Maintenance | None = None
        self.ended_at: float | None = None  # unix time it went away, until the full collection after it

    @property
    def held(self) -> bool:
        return self.now is not None or self.ended_at is not None

    async def follow(self, config: AgentConfig, tier: str, began: float | None) -> None:
        """Read the file (a hung read keeps what was known) and say what changed."""
        path = maintenance_path(config.paths.state_dir)
        try:
            now = await self.keeper.load(lambda: read_maintenance(path), config.timeouts.probe_s, path)
            error = None
        except StillReading:
            now, error = self.now, self.failed.error
        except Exception as e:
            now, error = self.now, f"{type(e).__name__}: {e}"
        self.failed.report(error, path)
        was = self.now
        if now is not None and was is None:
            self.log.warning("maintenance.on", path=str(path), reason=now.reason, since=now.since, by=now.by,
                             effect="/health answers 200 maintenance; NCCL files are kept as they are")
            self.ended_at = None
        elif now is None and was is not None:
            self.ended_at = time.time()
            self.log.info("maintenance.off", path=str(path), effect="health is judged again after a full fresh collection")
        elif now is not None and was is not None and now != was:
            self.log.info("maintenance.changed", reason=now.reason, since=now.since, by=now.by)
        self.now = now
        ended = self.ended_at
        if ended is not None and now is None and tier in ("all", "event") and began is not None and began >= ended:
            self.ended_at = None
            self.log.info("maintenance.ended", tier=tier, effect="this full collection judges the node again")


# ---------------------------------------------------------------------------
# the kernel log's cursor (agentd.outputs.kernel_cursor)


def _newest(log: KernelLog) -> tuple[int, int | None]:
    """What tells whether a kernel log's events changed, without comparing them all."""
    return len(log.events), log.events[-1].seq if log.events else None


class CursorKeeper:
    """Where the kernel log reader is, so a restart on the same boot goes on from there."""

    EVERY_S = 60.0  # the cursor follows new records at most this often (new events at once)

    def __init__(self, log: Log, source: KernelLogSource | None):
        self.log, self.source = log, source
        self.keeper: Keeper[JsonObject | None] = Keeper("kernel-cursor", Outage(
            log, "kernel_cursor.write_failed", "kernel_cursor.written",
            effect="after a restart the kernel log records since the last good write are counted again"))
        self._saved_seq: int | None = None  # the last saved log's newest record

    async def load(self, config: AgentConfig) -> None:
        """Hand the previous run's cursor to the kernel log reader before its first poll."""
        if self.source is None:
            return
        path = cursor_path(config.paths.state_dir)
        try:
            cursor = await self.keeper.load(lambda: load_cursor(path), config.timeouts.probe_s, path)
        except Exception as e:
            self.log.warning("kernel_cursor.read_failed", path=str(path), error=f"{type(e).__name__}: {e}", effect="the kernel log is read from its start")
            return
        if cursor is not None:
            self.source.resume(cursor)
            self.log.info("kernel_cursor.loaded", path=str(path), seq=cursor.get("seq"))

    def save(self, config: AgentConfig, log: KernelLog) -> None:
        """At once when the log's events changed, else at most every EVERY_S, never when
        no record was read since the last save."""
        if not log.available or log.last_seq is None or self.source is None:
            return
        if self._saved_seq is not None and log.last_seq == self._saved_seq:
            return
        if not self.keeper.due(_newest(log), self.EVERY_S):
            return
        path = cursor_path(config.paths.state_dir)
        if self.keeper.save(lambda: save_cursor(path, log), _newest(log), path) is not None:
            self._saved_seq = log.last_seq


# ---------------------------------------------------------------------------
# the history and the findings' lifecycles (agentd.outputs.history_store)


class Lifecycles(Protocol):
    """Who holds the findings' lifecycles (agentd.daemon.publisher.Publisher)."""

    def lifecycle_json(self) -> list[JsonObject]: ...

    def restore_lifecycle(self, items: list[JsonObject]) -> None: ...

    def lifecycle_mark(self) -> Hashable: ...


class HistoryKeeper:
    """The history and the findings' lifecycles, so a restart neither forgets a flapping
    port nor counts its flaps again."""

    EVERY_S = 300.0  # the file follows counters at most this often (flaps and episodes at once)

    def __init__(self, log: Log, history: History, lifecycles: Lifecycles, host: HostRoot):
        self.log, self.history, self.lifecycles, self.host = log, history, lifecycles, host
        self.keeper: Keeper[LoadedHistory] = Keeper("history", Outage(
            log, "history.write_failed", "history.written",
            effect="after a restart, rates and flaps since the last good write are forgotten"))
        self.boot: str | None = None  # the boot id read at start (a snapshot without the kernel log has none)

    async def load(self, config: AgentConfig) -> None:
        """Seed the history with the previous run's, before the first collection."""
        path = history_path(config.paths.state_dir)
        host_root = str(config.host_root)

        def job() -> LoadedHistory:
            node, self.boot = node_now(self.host, host_root)
            return load_history(path, node=node, boot_id=self.boot)

        forgotten = "rates and flaps start from this run's collections"
        try:
            loaded = await self.keeper.load(job, config.timeouts.probe_s, path)
        except Exception as e:
            self.log.warning("history.read_failed", path=str(path), error=f"{type(e).__name__}: {e}", effect=forgotten)
            return
        if loaded.status == "loaded":
            n = await asyncio.to_thread(self.history.seed, loaded.snapshots)  # no collection runs yet
            self.lifecycles.restore_lifecycle(loaded.lifecycle)
            self.log.info("history.loaded", path=str(path), entries=n, lifecycle=len(loaded.lifecycle))
        elif loaded.status == "set_aside":
            self.log.warning("history.set_aside", path=str(path), note=loaded.note, moved_to=str(loaded.set_aside_to), effect=forgotten)
        elif loaded.status == "new_boot":
            self.log.info("history.new_boot", path=str(path), note=loaded.note)
        elif loaded.note:
            self.log.warning("history.read_failed", path=str(path), error=loaded.note, effect=forgotten)

    def save(self, config: AgentConfig, snap: NodeSnapshot, *, final: bool = False) -> Future[WriteResult | None] | None:
        """At once when a link changed state or a port's link_downed rose (a flap must not
        be lost to a crash) or an episode started, counted or ended, else at most every
        EVERY_S (the file is a few hundred KB: rewriting it every medium interval would cost
        more than the collections it serves); ``final``: at stop. None: not due, or the
        previous write still runs."""
        mark = (self.history.newest_mark(), self.lifecycles.lifecycle_mark())
        if not final and not self.keeper.due(mark, max(config.intervals.medium_s, self.EVERY_S)):
            return None
        path = history_path(config.paths.state_dir)
        node = node_identity(snap, config)
        boot = snap.kernel.boot_id or self.boot
        lifecycle, history, taken, th = self.lifecycles.lifecycle_json(), self.history, snap.taken_at, config.thresholds

        def job() -> WriteResult:
            entries = history.export(taken, flap_window_s=th.flap_window_s, rate_window_s=th.rate_window_s)
            return save_history(path, node=node, boot_id=boot, snapshots=entries, lifecycle=lifecycle)

        return self.keeper.save(job, mark, path)

    async def save_at_stop(self, config: AgentConfig, snap: NodeSnapshot | None) -> None:
        """One last save before exit, waited for at most ~1 s (a hung filesystem never
        holds SIGTERM up)."""
        if snap is None or not len(self.history):
            return
        deadline = time.monotonic() + 1.0
        fut = self.save(config, snap, final=True)
        if fut is None:  # a save is in flight: let it finish, then write the newest
            try:
                await self.keeper.idle(max(0.0, deadline - time.monotonic()))
            except Exception:
                return
            fut = self.save(config, snap, final=True)
        if fut is not None:
            try:
                await await_future(fut, max(0.0, deadline - time.monotonic()))
            except Exception:
                self.log.warning("history.stop_save_unfinished", path=str(history_path(config.paths.state_dir)))
