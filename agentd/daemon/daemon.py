"""The daemon's asyncio core: tier schedules, reload, watchdog, serving, stop.

Three tier loops (fast, medium, slow at ``config.intervals``) each run their probes with
``Collector.run`` (lanes with timeouts: a hung probe is marked stale, never waited on past
its timeout) and then publish through the ``Publisher`` (agentd.daemon.publisher: judge,
write, build the State); the daemon swaps the State whole, then sends systemd STATUS and
logs the state changes. Publishes are serialised by a lock. A udev event (live host only) triggers one
collection of every probe, debounced; an rtnetlink carrier/operstate change of a watched
netdev (agentd.daemon.netlink; ``events.rtnetlink``) one collection of the fast tier,
coalesced over ``intervals.link_event_debounce_s``; a new kernel log record
(agentd.daemon.kmsg_events; ``events.kmsg``) one read of the kernel log, published when its
events changed. HTTP handlers only read ``Daemon.state``.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Protocol

from agentd.base.jsontypes import JsonValue
from agentd.base.memo import LazyMapping
from agentd.collection.collector import PROBE_TIERS, Collector
from agentd.collection.history import History
from agentd.config import AgentConfig, ConfigError, load_config
from agentd.daemon.bench_schedule import BenchScheduler
from agentd.daemon.connections import ServerLimits
from agentd.daemon.enforcer import Enforcer
from agentd.daemon.events import Coalescer, UdevMonitor, UdevWatcher
from agentd.daemon.health import status_line
from agentd.daemon.http import HttpServer, build_app, web_options
from agentd.daemon.keepers import CursorKeeper, HistoryKeeper, MaintenanceFollower
from agentd.daemon.kmsg_events import DeviceWatch, FileWatch, KmsgWatcher, Watch
from agentd.daemon.logging import Log, configure_logging, get_logger, log_state_changes
from agentd.daemon.netlink import LinkWatcher, NetlinkSocket
from agentd.daemon.publisher import Context, Publisher
from agentd.daemon.state import State
from agentd.daemon.systemd import Notifier, Watchdog
from agentd.host.fs import HostRoot
from agentd.host.kernel_log import KMSG_REL, KernelLogSource, live_path
from agentd.host.runner import Lane, await_future
from agentd.metrics.agent import process_stats
from agentd.model import KernelLog, NodeSnapshot
from agentd.outputs.evaluate import EvaluateFn, evaluate
from agentd.outputs.writer import Writer
from agentd.records import ReloadStatus, TierRun

if TYPE_CHECKING:  # types only: ssl is imported when a web config serves TLS (agentd.base.openssl_gate)
    import ssl

    from aiohttp.typedefs import Middleware

TIERS = ("fast", "medium", "slow")


class _FromEnv:
    """The watchdog's default: systemd's, from the environment (``Watchdog.from_env``)."""


FROM_ENV = _FromEnv()


class CollectorLike(Protocol):
    """What the daemon uses of a collector: agentd.collection.collector.Collector, or a fake in the tests."""

    async def run(self, names: Iterable[str], *, quick: bool = False) -> object: ...

    def snapshot_job(self) -> Callable[[], NodeSnapshot]:
        """A ``snapshot()`` safe to call in a worker thread while probes go on recording."""
        ...

    def steady_snapshot(self) -> NodeSnapshot | None:
        """The snapshot when its content is the last assembly's (cheap, on the loop), else None."""
        ...

    def with_config(self, config: AgentConfig) -> CollectorLike: ...

    @property
    def kernel_source(self) -> KernelLogSource | None:
        """The kernel log's reader, whose cursor the daemon keeps (None: no kernel log)."""
        ...


def _events_mark(log: KernelLog) -> tuple[bool, int, int | None]:
    """What tells whether a kernel log's events changed, without comparing them all."""
    return log.available, len(log.events), log.events[-1].seq if log.events else None


def _settle(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Daemon:
    def __init__(
        self,
        config: AgentConfig,
        *,
        host: HostRoot,
        config_path: Path | None = None,
        overrides: Mapping[str, JsonValue] | None = None,
        collector: CollectorLike | None = None,
        probe_tiers: Mapping[str, str] | None = None,
        evaluate: EvaluateFn = evaluate,
        writer: Writer | None = None,
        notifier: Notifier | None = None,
        watchdog: Watchdog | None | _FromEnv = FROM_ENV,
        udev_opener: Callable[[], UdevMonitor] | None = None,
        link_opener: Callable[[], NetlinkSocket] | None = None,
        kmsg_opener: Callable[[], Watch] | None = None,
        log: Log | None = None,
        persist_history: bool = False,
    ):
        """``persist_history``: keep the history and the findings' lifecycles in
        ``paths.state_dir`` across restarts (``agentd run``; a daemon fed by another
        collector, a test's, must not write the node's state directory)."""
        if collector is None:
            collector = Collector(host, config)
            probe_tiers = PROBE_TIERS
        self.config, self.host, self.config_path = config, host, config_path
        self.overrides = dict(overrides or {})
        self.collector = collector
        self.probe_tiers = dict(probe_tiers or {})
        self.log = log or get_logger()
        self.publisher = Publisher(evaluate=evaluate, writer=writer, log=self.log)
        self.notifier = notifier or Notifier()
        self.watchdog = Watchdog.from_env() if isinstance(watchdog, _FromEnv) else watchdog
        self.udev = UdevWatcher(debounce_s=config.intervals.event_debounce_s, trigger=self.trigger_full, log=self.log,
                                **({"opener": udev_opener} if udev_opener else {}))
        self.links = LinkWatcher(trigger=lambda: self.trigger_tier("fast"), snapshot=lambda: self._state.snapshot, log=self.log,
                                 **({"opener": link_opener} if link_opener else {}))
        self.kmsg = KmsgWatcher(trigger=self.trigger_kernel, log=self.log, opener=kmsg_opener or self._kmsg_watch)
        self._tier_triggers: dict[str, Coalescer] = {}
        th = config.thresholds
        self.history = History(th.history_size, spacing_s=config.intervals.medium_s, recent_s=th.rate_window_s, counters_s=th.short_rate_window_s)
        self.started_at = time.time()
        self._state = State(seq=0, generated_at=self.started_at, started_at=self.started_at, config=config, stale_limits=self.stale_limits(config))
        self.bench = BenchScheduler()
        self.enforcer = Enforcer()
        self._tier_runs: dict[str, TierRun] = {}
        self._start_mono = self._heartbeat_mono = time.monotonic()
        self._last_cycle_mono: float | None = None
        self._reload_status = ReloadStatus()
        self._last_status_line = ""
        self._watchdog_withheld = False
        self._last_pet = 0.0
        self._beat_handle: asyncio.TimerHandle | None = None
        self._publish_lock: asyncio.Lock | None = None
        self._stop: asyncio.Event | None = None
        self._wake: dict[str, asyncio.Event] = {}
        self._naps: dict[str, asyncio.Future[None]] = {}  # a tier loop's sleep, cut short by a reload
        self._event_task: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[object]] = []
        self.addresses: list[tuple[str, int]] = []
        self.server: HttpServer | None = None
        self.maintenance = MaintenanceFollower(self.log)
        self.cursor = CursorKeeper(self.log, collector.kernel_source)
        self.history_file = HistoryKeeper(self.log, self.history, self.publisher, host) if persist_history else None
        self._reload_lane = Lane("reload")
        self._reloading = asyncio.Lock()  # SIGHUPs a moment apart: one reload after the other
        self.start_error: str | None = None  # why run() could not serve (exit 3)

    # -- what the HTTP layer reads ---------------------------------------------------
    @property
    def state(self) -> State:
        return self._state

    def wedge_limit_s(self) -> float:
        c = self.config
        return max(10.0, 3 * (c.intervals.fast_s + max(c.timeouts.probe_s, c.timeouts.nvml_s)))

    def alive(self) -> tuple[bool, str]:
        """/livez: the event loop turns (heartbeat) and collections complete."""
        now = time.monotonic()
        if now - self._heartbeat_mono > 5.0:
            return False, f"event loop heartbeat {now - self._heartbeat_mono:.1f} s old"
        last = self._last_cycle_mono if self._last_cycle_mono is not None else self._start_mono
        if now - last > self.wedge_limit_s():
            return False, f"no collection completed for {now - last:.1f} s (limit {self.wedge_limit_s():.0f} s)"
        return True, "alive"

    # -- collecting and publishing -----------------------------------------------------
    def stale_limits(self, config: AgentConfig) -> dict[str, float]:
        iv = config.intervals
        return {name: iv.stale_after * getattr(iv, f"{tier}_s") for name, tier in self.probe_tiers.items()}

    def probes_for(self, tier: str) -> list[str]:
        if tier in TIERS:
            return [n for n, t in self.probe_tiers.items() if t == tier]
        return list(self.probe_tiers)

    async def collect(self, tier: str, *, quick: bool = False) -> None:
        """Run one tier's probes ("all"/"event": every probe) and publish a new State.
        ``quick``: a scheduled cycle, whose probes may check only their signals
        (agentd.collection.collector)."""
        t0, cpu0, began = time.monotonic(), time.process_time(), time.time()
        names = self.probes_for(tier)
        if "kernel" in names:
            self.kmsg.rearm()  # a record logged from now on wakes the watcher again
        await self.collector.run(names, quick=quick)
        await self._publish(tier, t0, cpu0, began)

    async def _publish(self, tier: str, t0: float, cpu0: float, began: float | None = None) -> None:
        assert self._publish_lock is not None
        async with self._publish_lock:
            cfg = self.config
            m = self.maintenance
            await m.follow(cfg, tier, began)
            snap, ev = await self.publisher.judge(self.collector.snapshot_job(), self.history, cfg, self.collector.steady_snapshot)
            limits = self.stale_limits(cfg)
            files = await self.publisher.write(ev, snap, cfg, limits, maintenance=m.held)
            self._tier_runs[tier] = TierRun(tier, time.monotonic() - t0, time.time(), time.process_time() - cpu0)
            ctx = Context(
                config=cfg, started_at=self.started_at, seq=self._state.seq + 1, stale_limits=limits,
                tiers=tuple(self._tier_runs[t] for t in (*TIERS, "all", "event") if t in self._tier_runs),
                reload=self._reload_status, udev_events=dict(self.udev.counts), udev_active=self.udev.active,
                process=LazyMapping(process_stats), bench=self.bench.outcome, bench_findings=self.bench.findings(),
                link_events=dict(self.links.counts), link_active=self.links.active,
                maintenance=m.now, maintenance_ended_at=m.ended_at,
                enforce=self.enforcer.status(cfg), enforce_findings=self.enforcer.findings(cfg),
            )  # fmt: skip
            state = await self.publisher.build(snap, ev, files, ctx)
            old, self._state = self._state, state
            self._last_cycle_mono = time.monotonic()
        self.cursor.save(self.config, snap.kernel)
        if self.history_file is not None:
            self.history_file.save(self.config, snap)
        if self.maintenance.ended_at is not None:
            self.trigger_full()  # the fresh collection that ends it (ignored while one runs)
        log_state_changes(self.log, old, state)
        line = status_line(state)
        if not old.ready:
            self.notifier.ready(line)
        elif line != self._last_status_line:
            self.notifier.status(line)
        self._last_status_line = line

    async def _guarded(self, tier: str, *, quick: bool = False) -> None:
        try:
            await self.collect(tier, quick=quick)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.log.exception("collection.failed", tier=tier, error=f"{type(e).__name__}: {e}")

    async def _tier_loop(self, tier: str) -> None:
        wake = self._wake[tier]
        next_at = time.monotonic() + getattr(self.config.intervals, f"{tier}_s")
        while True:
            delay = next_at - time.monotonic()
            if delay > 0 and not wake.is_set():
                await self._nap(tier, delay)
            if wake.is_set():  # reload: restart the schedule with the new interval
                wake.clear()
                next_at = time.monotonic() + getattr(self.config.intervals, f"{tier}_s")
                continue
            start = time.monotonic()
            await self._guarded(tier, quick=True)
            next_at = max(start + getattr(self.config.intervals, f"{tier}_s"), time.monotonic())

    async def _nap(self, tier: str, delay: float) -> None:
        """Sleep ``delay`` s, or until a reload wakes the tier (``apply_config``). One timer
        and one future: ``wait_for(event.wait())`` took a task and three loop iterations
        per cycle."""
        loop = asyncio.get_running_loop()
        fut = self._naps[tier] = loop.create_future()
        timer = loop.call_later(delay, _settle, fut)
        try:
            await fut
        finally:
            timer.cancel()
            if self._naps.get(tier) is fut:
                del self._naps[tier]

    def trigger_tier(self, tier: str) -> None:
        """Collect one tier now (rtnetlink link changes): pokes within
        ``intervals.link_event_debounce_s`` make one collection, and pokes while it runs one
        more after it. Ignored until the first collection."""
        if not self._state.ready or self._stop is None or self._stop.is_set():
            return
        c = self._tier_triggers.get(tier)
        if c is None:
            c = self._tier_triggers[tier] = Coalescer(asyncio.get_running_loop(), self.config.intervals.link_event_debounce_s, lambda: self._guarded(tier))
        c.poke()

    def links_wanted(self, config: AgentConfig) -> bool:
        mode = config.events.rtnetlink
        return mode == "on" or (mode == "auto" and self.host.is_live)

    # -- kernel log records (agentd.daemon.kmsg_events) ----------------------------------
    KMSG_BEHIND_PAUSE_S = 0.5  # after a poll that stopped behind a flood, the next poke waits this long

    def kmsg_wanted(self, config: AgentConfig) -> bool:
        mode = config.events.kmsg
        return config.kernel.enabled and (mode == "on" or (mode == "auto" and self.host.is_live))

    def _kmsg_watch(self) -> Watch:
        if self.host.is_live:
            return DeviceWatch(live_path(self.host))
        return FileWatch(str(self.host.root / KMSG_REL))

    def trigger_kernel(self) -> None:
        """Read the kernel log now (a new record): pokes within
        ``intervals.link_event_debounce_s`` make one read, pokes while it runs one more after
        it. Ignored until the first collection (the fast tier re-arms the watcher)."""
        if not self._state.ready or self._stop is None or self._stop.is_set():
            return
        c = self._tier_triggers.get("kernel")
        if c is None:
            c = self._tier_triggers["kernel"] = Coalescer(asyncio.get_running_loop(), self.config.intervals.link_event_debounce_s, self._kernel_event)
        c.poke()

    async def _kernel_event(self) -> None:
        """One read of the kernel log; published when its events changed (ordinary records
        are only counted: the next scheduled publish shows them)."""
        source = self.collector.kernel_source
        before: KernelLog | None = source.last if source is not None else None
        t0, cpu0, began = time.monotonic(), time.process_time(), time.time()
        try:
            self.kmsg.rearm()
            await self.collector.run(["kernel"])
            after: KernelLog | None = source.last if source is not None else None
            if after is None or before is None or (after is not before and _events_mark(after) != _events_mark(before)):
                await self._publish("kernel", t0, cpu0, began)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.log.exception("collection.failed", tier="kernel", error=f"{type(e).__name__}: {e}")
            return
        if after is not None and after.behind:
            await asyncio.sleep(self.KMSG_BEHIND_PAUSE_S)  # a flood: its records are read at the reader's pace

    def trigger_full(self) -> None:
        """Collect every probe now (udev events, reload). Ignored until the first collection."""
        if not self._state.ready or (self._event_task is not None and not self._event_task.done()):
            return
        self._event_task = asyncio.get_running_loop().create_task(self._guarded("event"))

    # -- heartbeat, watchdog, reload ---------------------------------------------------
    # How often the loop stamps its heartbeat when no watchdog asks for more: /livez calls
    # the loop dead past 5 s. Every wake of an idle daemon costs CPU (cold caches), so it
    # wakes as seldom as that allows (docs/performance.md, "Few wakes").
    HEARTBEAT_S = 2.0

    def _beat(self) -> None:
        """One heartbeat (a plain loop callback, re-armed by itself: no task step per beat):
        the stamp /livez reads, and WATCHDOG=1 every ``period_s`` while collections complete."""
        wd = self.watchdog
        every = min(self.HEARTBEAT_S, wd.period_s) if wd is not None else self.HEARTBEAT_S
        self._beat_handle = asyncio.get_running_loop().call_later(every, self._beat)  # re-armed first: nothing below can stop the beat
        now = self._heartbeat_mono = time.monotonic()
        if wd is not None and self._state.ready and now - self._last_pet >= wd.period_s:
            if wd.should_pet(self._last_cycle_mono, now):
                self.notifier.watchdog()
                self._last_pet = now
                if self._watchdog_withheld:
                    self._watchdog_withheld = False
                    self.log.info("watchdog.resumed")
            elif not self._watchdog_withheld:
                self._watchdog_withheld = True
                self.log.error("watchdog.withheld", reason="no collection completed within WatchdogSec/2", watchdog_s=wd.interval_s)

    async def reload(self) -> bool:
        """SIGHUP: load the config again; on error keep the running one. True if applied.

        The files are read in the reload lane (a daemon thread), waited for at most
        ``timeouts.probe_s``: a config on a filesystem that never answers fails the reload
        instead of holding it, and never holds the exit (asyncio's own worker threads are
        joined at exit, a lane's are not). A reload while one still hangs fails at once.

        Reloads run one after the other, in the order the signals came: a second SIGHUP
        while the first hands the socket over (``HANDOVER_S``) reads its files after that,
        so the latest reload is the one the metrics and the log end on."""
        async with self._reloading:
            return await self._reload()

    async def _reload(self) -> bool:
        self.notifier.reloading()
        old = self.config
        path, overrides = self.config_path, self.overrides or None

        def read() -> tuple[AgentConfig, tuple[list[Middleware], ssl.SSLContext | None]]:
            new = load_config(path, overrides=overrides)
            # web.config_file is read again on every reload (rotated certificates, removed users)
            return new, web_options(new)

        fut, started = self._reload_lane.submit(read)
        if not started:
            return self._reload_failed("the previous reload is still reading its files (hung filesystem?)")
        try:
            new, (middlewares, ssl_context) = await await_future(fut, old.timeouts.probe_s)
        except TimeoutError:
            return self._reload_failed(f"the config was not read within {old.timeouts.probe_s:g} s (timeouts.probe_s; hung filesystem?)")
        except ConfigError as e:
            return self._reload_failed(str(e))
        fixed = {k: getattr(old, k) for k in ("listen", "host_root", "host_mode") if getattr(new, k) != getattr(old, k)}
        if fixed:
            self.log.warning("config.reload_needs_restart", keys=sorted(fixed), effect="kept the running values")
            new = new.model_copy(update=fixed)
        if self.server is not None:  # new app (auth, headers, rate limit), TLS context and limits; same socket
            try:
                await self.server.replace(build_app(self, middlewares=middlewares), ServerLimits.from_config(new), ssl_context=ssl_context)
            except OSError as e:
                return self._reload_failed(f"web server not rebuilt: {e.strerror or e}")
        self.apply_config(new)
        self._reload_status = ReloadStatus(ok=True, at=time.time())
        self.log.info("config.reloaded", path=str(self.config_path) if self.config_path else None)
        self.notifier.ready(status_line(self._state))
        self.trigger_full()
        return True

    def _reload_failed(self, error: str) -> bool:
        self._reload_status = ReloadStatus(ok=False, at=time.time(), error=error)
        self.log.error("config.reload_failed", error=error, effect="the previous configuration keeps running, web config included")
        self.notifier.ready(status_line(self._state))
        return False

    def apply_config(self, new: AgentConfig) -> None:
        old, self.config = self.config, new
        self.collector = self.collector.with_config(new)
        th = new.thresholds
        self.history.configure(th.history_size, new.intervals.medium_s, recent_s=th.rate_window_s, counters_s=th.short_rate_window_s)
        if (new.log_format, new.log_level) != (old.log_format, old.log_level):
            configure_logging(new.log_format, new.log_level)
        self.udev.set_debounce(new.intervals.event_debounce_s)
        for c in self._tier_triggers.values():
            c.delay_s = new.intervals.link_event_debounce_s
        if self._stop is not None and not self._stop.is_set():
            if self.links_wanted(new):
                self.links.start(asyncio.get_running_loop())
            else:
                self.links.stop()
            if self.kmsg_wanted(new):
                self.kmsg.start(asyncio.get_running_loop())
            else:
                self.kmsg.stop()
        for ev in self._wake.values():
            ev.set()
        for fut in self._naps.values():
            _settle(fut)

    async def _load_baseline(self, config: AgentConfig) -> None:
        """Read the baseline in the publisher's lane with a timeout: no file I/O on the event
        loop, so a FIFO or a hung filesystem at ``paths.baseline`` never stops /health or
        SIGTERM (agentd.daemon.publisher.Publisher.load_baseline). A reload that names
        another path: the next publish reads that one the same way."""
        await self.publisher.load_baseline(config.paths.baseline, config.timeouts.probe_s)

    # -- lifecycle ---------------------------------------------------------------------
    def stop(self) -> None:
        if self._stop is not None and not self._stop.is_set():
            self.log.info("agentd.stopping")
            self._stop.set()

    def _on_sighup(self) -> None:
        task = asyncio.get_running_loop().create_task(self.reload())
        self._tasks.append(task)  # keep a reference until it is done (and cancel it on stop)
        task.add_done_callback(self._forget_task)

    def _forget_task(self, task: asyncio.Task[object]) -> None:
        if task in self._tasks:
            self._tasks.remove(task)

    async def _startup(self) -> None:
        await self._load_baseline(self.config)
        await self.cursor.load(self.config)
        if self.history_file is not None:
            await self.history_file.load(self.config)
        await self._guarded("all")
        for tier in TIERS:
            self._tasks.append(asyncio.create_task(self._tier_loop(tier), name=f"agentd-{tier}"))

    async def run(self, *, on_listening: Callable[[list[tuple[str, int]]], None] | None = None) -> int:
        """Serve until stop() (SIGTERM/SIGINT). 0 on a clean stop; 3 when the HTTP server
        cannot start (address in use, bad web config), as for anything else that keeps a
        command from running; ``start_error`` then says why."""
        loop = asyncio.get_running_loop()
        self._publish_lock, self._stop = asyncio.Lock(), asyncio.Event()
        self._wake = {t: asyncio.Event() for t in TIERS}
        cfg = self.config
        try:
            middlewares, ssl_context = web_options(cfg)
            server = self.server = await HttpServer.start(build_app(self, middlewares=middlewares), cfg.listen, ServerLimits.from_config(cfg), ssl_context=ssl_context)
            self.addresses = server.addresses
        except (OSError, ConfigError) as e:
            self.start_error = str(e) if isinstance(e, ConfigError) else (e.strerror or str(e))
            self.log.error("http.start_failed", listen=cfg.listen, error=self.start_error)
            return 3
        self.log.info("agentd.started", listen=cfg.listen, host_root=str(self.host.root), host_mode=self.host.mode, host_mode_reason=self.host.mode_reason, tls=ssl_context is not None, intervals=cfg.intervals.model_dump())
        signals = {signal.SIGTERM: self.stop, signal.SIGINT: self.stop, signal.SIGHUP: self._on_sighup}
        for sig, handler in signals.items():  # before "serving" is said: a signal sent on it is handled
            loop.add_signal_handler(sig, handler)
        if on_listening is not None:
            on_listening(self.addresses)
        if self.host.is_live:
            self.udev.start(loop)
        if self.links_wanted(cfg):
            self.links.start(loop)
        if self.kmsg_wanted(cfg):
            self.kmsg.start(loop)
        self._beat()
        self._tasks = [
            asyncio.create_task(self._startup(), name="agentd-startup"),
            asyncio.create_task(self.bench.run_forever(self), name="agentd-bench"),
            asyncio.create_task(self.enforcer.run_forever(self), name="agentd-enforce"),
        ]
        try:
            await self._stop.wait()
        finally:
            self.notifier.stopping()
            if self._beat_handle is not None:
                self._beat_handle.cancel()
            for sig in signals:
                loop.remove_signal_handler(sig)
            self.udev.stop()
            self.links.stop()
            self.kmsg.stop()
            tasks = [t for t in (*self._tasks, self._event_task) if t is not None]
            for c in self._tier_triggers.values():
                tasks.extend(c.cancel())
            for t in tasks:
                t.cancel()
            await asyncio.wait(tasks, timeout=1.0)
            if self.history_file is not None:
                await self.history_file.save_at_stop(self.config, self._state.snapshot if self._state.ready else None)
            await server.close()
            self.server = None
            self.notifier.close()
            self.log.info("agentd.stopped")
        return 0
