"""udev events -> immediate re-collection, debounced.

A pyudev monitor on the infiniband, net, pci and module subsystems is read from the event
loop (``loop.add_reader`` on its netlink fd, never a blocking call). Any add, remove,
change, bind, unbind, move, online or offline event pokes a debouncer: the first event
of a burst schedules one collection of all tiers ``intervals.event_debounce_s`` later,
and further events inside that window ride along. Only on a live host root: a simulated
root has no udev. Failing to open the monitor (no udev in a container, no permission) is
logged once and is not fatal; the tiered schedule still runs.
"""

from __future__ import annotations

import asyncio
import os
from typing import Awaitable, Callable, Protocol

from agentd.daemon.logging import Log

SUBSYSTEMS = ("infiniband", "net", "pci", "module")
TRIGGER_ACTIONS = frozenset({"add", "remove", "change", "move", "bind", "unbind", "online", "offline"})


class Debouncer:
    """Call ``fn`` once, ``delay_s`` after the first poke of a burst."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay_s: float, fn: Callable[[], None]):
        self._loop = loop
        self.delay_s = delay_s
        self._fn = fn
        self._handle: asyncio.TimerHandle | None = None
        self.fired = 0

    def poke(self) -> None:
        if self._handle is None:
            self._handle = self._loop.call_later(self.delay_s, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self.fired += 1
        self._fn()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class Coalescer:
    """Run ``run`` once, ``delay_s`` after the first poke of a burst; a poke while it runs
    makes exactly one more run after it (what changed during a collection is not lost),
    however many pokes came."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay_s: float, run: Callable[[], Awaitable[None]]):
        self._loop = loop
        self.delay_s = delay_s
        self._run = run
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self.runs = 0

    @property
    def busy(self) -> bool:
        return self._handle is not None or (self._task is not None and not self._task.done())

    def poke(self) -> None:
        if self._task is not None and not self._task.done():
            self._again = True
        elif self._handle is None:
            self._handle = self._loop.call_later(self.delay_s, self._start)

    def _start(self) -> None:
        self._handle = None
        self._task = self._loop.create_task(self._body())

    async def _body(self) -> None:
        while True:
            self._again = False
            self.runs += 1
            await self._run()
            if not self._again:
                return
            await asyncio.sleep(self.delay_s)  # let the rest of that burst arrive too

    def cancel(self) -> list[asyncio.Task[None]]:
        """Stop; returns the running task (cancelled) for the caller to await."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        task, self._task = self._task, None
        if task is None or task.done():
            return []
        task.cancel()
        return [task]


class UdevMonitor(Protocol):
    """What the watcher uses of a started pyudev.Monitor (pyudev has no type hints); a
    polled device is read with getattr and defaults."""

    def fileno(self) -> int: ...

    def poll(self, timeout: float | None = None) -> object | None: ...


def open_udev_monitor() -> UdevMonitor:
    """A started pyudev monitor on SUBSYSTEMS. Raises on failure (caller logs it)."""
    import pyudev

    context = pyudev.Context()
    # Without udevd (containers) libudev's "udev" source receives nothing; the kernel's
    # uevents carry subsystem and action, which is all that is needed here.
    source = "udev" if os.path.exists("/run/udev/control") else "kernel"
    monitor = pyudev.Monitor.from_netlink(context, source=source)
    for subsystem in SUBSYSTEMS:
        monitor.filter_by(subsystem)
    monitor.start()
    started: UdevMonitor = monitor
    return started


class UdevWatcher:
    def __init__(
        self,
        *,
        debounce_s: float,
        trigger: Callable[[], None],
        log: Log,
        opener: Callable[[], UdevMonitor] = open_udev_monitor,
    ):
        self.debounce_s = debounce_s
        self._trigger = trigger
        self._log = log
        self._opener = opener
        self._monitor: UdevMonitor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._debouncer: Debouncer | None = None
        self.counts: dict[tuple[str, str], int] = {}
        self.error: str | None = None

    @property
    def active(self) -> bool:
        return self._monitor is not None

    def start(self, loop: asyncio.AbstractEventLoop) -> bool:
        try:
            monitor = self._opener()
            loop.add_reader(monitor.fileno(), self._readable)
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
            self._log.warning("udev.unavailable", error=self.error, effect="no event-triggered collections; the schedule still runs")
            return False
        self._monitor = monitor
        self._loop = loop
        self._debouncer = Debouncer(loop, self.debounce_s, self._trigger)
        self._log.info("udev.watching", subsystems=list(SUBSYSTEMS))
        return True

    def set_debounce(self, debounce_s: float) -> None:
        self.debounce_s = debounce_s
        if self._debouncer is not None:
            self._debouncer.delay_s = debounce_s

    def _readable(self) -> None:
        monitor = self._monitor
        if monitor is None:
            return
        poke = False
        for _ in range(256):  # bounded drain per wakeup; the reader fires again if more is queued
            try:
                device = monitor.poll(timeout=0)
            except Exception as e:
                self._log.warning("udev.read_failed", error=f"{type(e).__name__}: {e}")
                break
            if device is None:
                break
            subsystem = str(getattr(device, "subsystem", "") or "")
            action = str(getattr(device, "action", "") or "")
            key = (subsystem, action)
            self.counts[key] = self.counts.get(key, 0) + 1
            if action in TRIGGER_ACTIONS:
                poke = True
                self._log.debug("udev.event", subsystem=subsystem, action=action, device=str(getattr(device, "sys_name", "")))
        if poke and self._debouncer is not None:
            self._debouncer.poke()

    def stop(self) -> None:
        if self._debouncer is not None:
            self._debouncer.cancel()
        if self._monitor is not None and self._loop is not None:
            try:
                self._loop.remove_reader(self._monitor.fileno())
            except Exception:
                pass
        self._monitor = None
