"""Run blocking probe functions off the caller's thread, with a timeout that really holds.

A hung NVML call or a sysfs read stuck in the kernel cannot be cancelled from Python. So
each probe gets a *lane*: one daemon thread at a time. While a run is still in flight
(hung), the lane does not start another one: the caller gets the same pending future
back, sees it time out again, and marks the probe stale. Daemon threads never block
interpreter exit, so `agentd check` still finishes inside Slurm's limit when NVML hangs.
(concurrent.futures' pool threads are joined at exit, which is why it is not used here.)
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class Lane:
    def __init__(self, name: str):
        self.name = name
        self._lock = threading.Lock()
        self._inflight: Future[Any] | None = None

    @property
    def busy(self) -> bool:
        f = self._inflight
        return f is not None and not f.done()

    def submit(self, fn: Callable[..., T], *args: Any) -> tuple[Future[T], bool]:
        """Start fn(*args) in a daemon thread. Returns (future, started); when the previous
        run is still in flight nothing new starts and that run's future is returned."""
        with self._lock:
            if self._inflight is not None and not self._inflight.done():
                return self._inflight, False
            fut: Future[T] = Future()
            self._inflight = fut

        def body() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(fn(*args))
            except BaseException as e:
                fut.set_exception(e)

        threading.Thread(target=body, name=f"agentd-probe-{self.name}", daemon=True).start()
        return fut, True


async def await_future(fut: Future[T], timeout: float) -> T:  # noqa: ASYNC109 - the timeout bounds the wait only; the shielded worker runs on
    """Wait for a lane future from asyncio without cancelling the worker on timeout."""
    return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), timeout)
