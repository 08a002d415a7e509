"""Run blocking probe functions off the caller's thread, with a timeout that really holds.

A hung NVML call or a sysfs read stuck in the kernel cannot be cancelled from Python. So
each probe gets a *lane*: at most one run in flight at a time. While a run is still in
flight (hung), the lane does not start another one: the caller gets the same pending
future back, sees it time out again, and marks the probe stale. A hung run holds only the
one thread it runs on; every other lane goes on with other threads.

Lanes share one process-wide pool of parked daemon worker threads. A worker that finishes
a run parks and serves the next submit of *any* lane, so probes run in turn (a collection,
``run_sync``) are served by one thread, and the daemon's tiers stop starting threads every
cycle (what a thread per probe cost: docs/performance.md, "Reading files"). Each parked worker waits on its own
condition, so a submit wakes exactly the one worker it hands its run to; with none parked
it starts a new thread. A worker parked for ``Lane.IDLE_EXIT_S`` ends, so short-lived
collectors (``agentd check``, tests) leave no threads behind; the most recently parked
worker is woken first, so the surplus after a burst is the part that times out.

Workers are daemon threads: they never block interpreter exit, so ``agentd check`` still
finishes inside Slurm's limit when NVML hangs (concurrent.futures' pool threads are joined
at exit, which is why it is not used here). A worker is named ``agentd-probe-<lane>``
while it runs a lane's job and ``agentd-probe-idle`` while parked, and keeps no reference
to a finished run (its future, function, arguments or result) while parked.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, TypeVar, TypeVarTuple

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

IDLE_THREAD_NAME = "agentd-probe-idle"

# (lane, its future, fn, args): run as fn(*args), whatever the job (Any: the futures of all jobs)
_Job = tuple["Lane", "Future[Any]", Callable[..., object], tuple[object, ...]]  # Any: see above

# One lock guards the pool and every lane's in-flight future: each hold is a few list and
# attribute operations, and one lock leaves no lock order to get wrong.
_lock = threading.Lock()


class _Worker:
    __slots__ = ("job", "thread", "wake")

    def __init__(self, job: _Job):
        self.job: _Job | None = job
        self.wake = threading.Condition(_lock)
        self.thread = threading.Thread(target=_serve, args=(self,), name=_run_name(job[0]), daemon=True)


_idle: list[_Worker] = []  # parked workers; the most recently parked last


def _run_name(lane: Lane) -> str:
    return f"agentd-probe-{lane.name}"


def _reset_after_fork() -> None:
    # A forked child has none of the parent's threads: forget the parked ones.
    global _lock
    _lock = threading.Lock()
    _idle.clear()


os.register_at_fork(after_in_child=_reset_after_fork)


class Lane:
    IDLE_EXIT_S = 15.0  # a parked worker thread with no run for this long ends (a submit starts one)

    def __init__(self, name: str):
        self.name = name
        # The lane's run until its worker is done with it (Any: submit hands it back to a caller
        # as that caller's type; a lane runs one job, or its callers check ``started``).
        self._inflight: Future[Any] | None = None  # Any: see above

    @property
    def busy(self) -> bool:
        f = self._inflight
        return f is not None and not f.done()

    def submit(self, fn: Callable[[*Ts], T], *args: *Ts) -> tuple[Future[T], bool]:
        """Run fn(*args) in a pool worker thread. Returns (future, started); when the lane's
        previous run is still in flight nothing new starts and that run's future is returned."""
        with _lock:
            if self._inflight is not None and not self._inflight.done():
                return self._inflight, False
            fut: Future[T] = Future()
            self._inflight = fut
            job: _Job = (self, fut, fn, args)
            if _idle:
                worker = _idle.pop()
                worker.job = job
                worker.thread.name = _run_name(self)  # named before submit returns, not when it wakes
                worker.wake.notify()
                return fut, True
        _Worker(job).thread.start()  # outside the lock: start() waits for the thread to come up
        return fut, True


def _serve(worker: _Worker) -> None:
    with _lock:
        job, worker.job = worker.job, None
    while job is not None:
        lane, fut, fn, args = job
        del job
        if fut.set_running_or_notify_cancel():
            try:
                fut.set_result(fn(*args))
            except BaseException as e:
                fut.set_exception(e)
        del fn, args
        with _lock:
            if lane._inflight is fut:
                lane._inflight = None  # the caller has the future; the lane holds no finished run
            del lane, fut  # park holding nothing of the finished run
            worker.thread.name = IDLE_THREAD_NAME
            _idle.append(worker)
            deadline = time.monotonic() + Lane.IDLE_EXIT_S
            while worker.job is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    _idle.remove(worker)  # under the lock: no submit can hand it a job any more
                    return
                worker.wake.wait(left)
            job, worker.job = worker.job, None


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


async def await_future(fut: Future[T], timeout: float) -> T:  # noqa: ASYNC109 - the timeout bounds the wait only; the worker runs on
    """Wait for a lane future from asyncio, at most ``timeout`` seconds (then TimeoutError),
    without cancelling the worker: a hung run stays the lane's in-flight run, and a
    cancelled wait (stop) leaves it running too.

    One asyncio future woken from the worker's done callback and one timer, where
    ``wait_for(shield(wrap_future(fut)))`` chains three futures and takes about twice the
    event loop iterations per hand-off (a steady daemon makes several hand-offs a cycle)."""
    if fut.done():
        return fut.result()
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def done(_: Future[T]) -> None:  # in the worker's thread, or here if it just finished
        try:
            loop.call_soon_threadsafe(_wake, waiter)
        except RuntimeError:  # the loop closed while the run was in flight: nobody waits
            pass

    fut.add_done_callback(done)
    timer = loop.call_later(timeout, _expire, waiter)
    try:
        await waiter
    finally:
        timer.cancel()
    return fut.result()
