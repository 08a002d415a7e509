"""Run blocking probe functions off the caller's thread, with a timeout that really holds.

A hung NVML call or a sysfs read stuck in the kernel cannot be cancelled from Python. So
each probe gets a *lane*: one daemon thread at a time. While a run is still in flight
(hung), the lane does not start another one: the caller gets the same pending future
back, sees it time out again, and marks the probe stale. Daemon threads never block
interpreter exit, so `agentd check` still finishes inside Slurm's limit when NVML hangs.
(concurrent.futures' pool threads are joined at exit, which is why it is not used here.)

The lane's thread waits for the next run instead of ending after each one (starting a
thread per run was ~7% of the idle daemon's CPU); it ends after ``IDLE_EXIT_S`` without
work, so short-lived collectors (``agentd check``, tests) leave no threads behind.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class Lane:
    IDLE_EXIT_S = 15.0  # a worker thread with no run for this long ends (the next submit starts one)

    def __init__(self, name: str):
        self.name = name
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._inflight: Future[Any] | None = None
        self._job: tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None = None
        self._worker = False  # a worker thread is running (or starting)

    @property
    def busy(self) -> bool:
        f = self._inflight
        return f is not None and not f.done()

    def submit(self, fn: Callable[..., T], *args: Any) -> tuple[Future[T], bool]:
        """Run fn(*args) in the lane's daemon thread. Returns (future, started); when the
        previous run is still in flight nothing new starts and that run's future is returned."""
        with self._lock:
            if self._inflight is not None and not self._inflight.done():
                return self._inflight, False
            fut: Future[T] = Future()
            self._inflight = fut
            self._job = (fut, fn, args)
            if self._worker:
                self._wake.notify()
                return fut, True
            self._worker = True
        threading.Thread(target=self._loop, name=f"agentd-probe-{self.name}", daemon=True).start()
        return fut, True

    def _next(self) -> tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None:
        with self._lock:
            deadline = time.monotonic() + self.IDLE_EXIT_S
            while self._job is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._worker = False  # under the lock: a submit from now on starts a new thread
                    return None
                self._wake.wait(left)
            job, self._job = self._job, None
            return job

    def _loop(self) -> None:
        while (job := self._next()) is not None:
            fut, fn, args = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as e:
                fut.set_exception(e)
            del job, fut, fn, args  # hold nothing of a finished run while waiting


async def await_future(fut: Future[T], timeout: float) -> T:  # noqa: ASYNC109 - the timeout bounds the wait only; the shielded worker runs on
    """Wait for a lane future from asyncio without cancelling the worker on timeout."""
    return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), timeout)
