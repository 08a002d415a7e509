"""A new kernel log record -> read the kernel log at once (issue 37), not on the next
fast-tier poll: an XID reaches /health as fast as a link change does.

``/dev/kmsg`` is pollable: an fd of its own, seeked to the end (SEEK_END), becomes readable
when the kernel logs a record after that point. The watcher adds that fd to the event loop
(``add_reader``; it never reads the records on the loop); when it becomes readable it
stops watching and pokes the daemon, which re-arms it (seeks to the end again) before it
reads the log, so a record logged while agentd reads makes one more poke. The reading is
the kernel probe's (agentd.host.kernel_log, in its lane, with its bounded pace); under a
flood the daemon spaces the pokes (``Daemon.KMSG_BEHIND_PAUSE_S``).

On a root that is not live (a simulator tree: ``events.kmsg = "on"``) ``ROOT/dev/kmsg``
is a file the simulator appends to, and a regular file is always "readable": the watcher
watches its directory with inotify (IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE of
``kmsg``) instead. Failing to open either is logged once and is not fatal: the fast tier
still reads the log.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import os
import struct
from collections.abc import Callable
from typing import Any, Protocol

from agentd.daemon.logging import Log

# <sys/inotify.h>
IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE = 0x2, 0x8, 0x80, 0x100
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
MAX_READS_PER_WAKEUP = 64


class Watch(Protocol):
    """One thing the loop can wait on: its fd, re-armed before each read of the log."""

    def fileno(self) -> int: ...

    def rearm(self) -> None: ...

    def ready(self) -> bool:
        """Called when the fd is readable: whether the kernel log has something new."""
        ...

    def close(self) -> None: ...


class DeviceWatch:
    """The live node's /dev/kmsg (or the root's character device), seeked to its end."""

    def __init__(self, path: str):
        self.path = path
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.rearm()

    def fileno(self) -> int:
        return self._fd

    def rearm(self) -> None:
        os.lseek(self._fd, 0, os.SEEK_END)

    def ready(self) -> bool:
        return True  # readable: a record after the point it was seeked to

    def close(self) -> None:
        os.close(self._fd)


class FileWatch:
    """ROOT/dev/kmsg as a file: inotify on its directory, events for ``kmsg`` only."""

    def __init__(self, path: str):
        self.path = path
        directory, self.name = os.path.split(os.fsencode(path))
        libc: Any = ctypes.CDLL(None, use_errno=True)  # Any: ctypes functions are looked up by name
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        if libc.inotify_add_watch(fd, directory or b".", IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"{directory.decode(errors='replace')}: {os.strerror(err)}")
        self._fd: int = int(fd)

    def fileno(self) -> int:
        return self._fd

    def rearm(self) -> None:
        pass  # the events queue in the kernel while nobody waits: the next wait sees them

    def ready(self) -> bool:
        hit = False
        for _ in range(MAX_READS_PER_WAKEUP):
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                break
            at = 0
            while at + _EVENT.size <= len(data):
                _wd, _mask, _cookie, length = _EVENT.unpack_from(data, at)
                name = data[at + _EVENT.size : at + _EVENT.size + length].rstrip(b"\0")
                hit = hit or name == self.name
                at += _EVENT.size + length
        return hit

    def close(self) -> None:
        os.close(self._fd)


class KmsgWatcher:
    """Pokes ``trigger`` when the kernel log has a new record; ``rearm`` before reading it."""

    def __init__(self, *, trigger: Callable[[], None], log: Log, opener: Callable[[], Watch]):
        self._trigger = trigger
        self._log = log
        self._opener = opener
        self._watch: Watch | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._armed = False
        self.events = 0  # wake-ups that found something new
        self.error: str | None = None

    @property
    def active(self) -> bool:
        return self._watch is not None

    def start(self, loop: asyncio.AbstractEventLoop) -> bool:
        if self._watch is not None:
            return True
        try:
            watch = self._opener()
        except Exception as e:
            if self.error is None:
                self._log.warning("kmsg.unwatched", error=f"{type(e).__name__}: {e}", effect="kernel log events are read on the fast-tier poll")
            self.error = f"{type(e).__name__}: {e}"
            return False
        self._watch, self._loop, self.error = watch, loop, None
        self._arm()
        self._log.info("kmsg.watching", path=getattr(watch, "path", None))
        return True

    def _arm(self) -> None:
        if self._watch is not None and self._loop is not None and not self._armed:
            self._loop.add_reader(self._watch.fileno(), self._readable)
            self._armed = True

    def _readable(self) -> None:
        watch, loop = self._watch, self._loop
        if watch is None or loop is None:
            return
        loop.remove_reader(watch.fileno())
        self._armed = False
        if watch.ready():
            self.events += 1
            self._trigger()
        else:
            self._arm()  # another file of the directory: wait on

    def rearm(self) -> None:
        """Before the log is read: a record logged from now on wakes the watcher again."""
        if self._watch is None:
            return
        try:
            self._watch.rearm()
        except OSError as e:
            self._log.warning("kmsg.rearm_failed", error=f"{type(e).__name__}: {e}")
        self._arm()

    def stop(self) -> None:
        watch, self._watch = self._watch, None
        if watch is None:
            return
        if self._loop is not None and self._armed:
            try:
                self._loop.remove_reader(watch.fileno())
            except Exception:
                pass
        self._armed = False
        try:
            watch.close()
        except OSError:
            pass
