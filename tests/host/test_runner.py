"""Probe lanes: a hung probe never piles up threads and never blocks the caller."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref

import pytest

from agentd.host.runner import Lane, await_future


def test_result_and_exception_are_delivered():
    lane = Lane("t")
    fut, started = lane.submit(lambda x: x * 2, 21)
    assert started and fut.result(timeout=5) == 42
    fut, _ = lane.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        fut.result(timeout=5)


def test_hung_run_is_not_restarted():
    release = threading.Event()
    calls = []

    def hang():
        calls.append(1)
        release.wait(10)
        return "late"

    lane = Lane("hang")
    f1, s1 = lane.submit(hang)
    with pytest.raises(TimeoutError):
        f1.result(timeout=0.05)
    f2, s2 = lane.submit(hang)
    assert s1 and not s2 and f2 is f1 and lane.busy
    release.set()
    assert f1.result(timeout=5) == "late"
    assert len(calls) == 1
    f3, s3 = lane.submit(lambda: "fresh")
    assert s3 and f3.result(timeout=5) == "fresh"


def test_worker_threads_are_daemons():
    release = threading.Event()
    lane = Lane("d")
    lane.submit(release.wait, 10)
    workers = [t for t in threading.enumerate() if t.name == "agentd-probe-d"]
    assert workers and all(t.daemon for t in workers)
    release.set()


async def test_async_timeout_leaves_worker_running():
    release = threading.Event()
    lane = Lane("a")
    fut, _ = lane.submit(lambda: release.wait(10) and "done")
    with pytest.raises((TimeoutError, asyncio.TimeoutError)):
        await await_future(fut, 0.05)
    assert not fut.cancelled()
    release.set()
    assert await await_future(fut, 5) == "done"


def test_one_thread_serves_consecutive_runs_and_ends_when_idle(monkeypatch):
    monkeypatch.setattr(Lane, "IDLE_EXIT_S", 0.2)
    lane = Lane("reuse")
    names = []
    for _ in range(3):
        fut, started = lane.submit(lambda: threading.current_thread().ident)
        assert started
        names.append(fut.result(timeout=5))
    assert len(set(names)) == 1  # the same worker thread ran all three
    deadline = threading.Event()
    for _ in range(100):
        if not [t for t in threading.enumerate() if t.name == "agentd-probe-reuse"]:
            break
        deadline.wait(0.05)
    assert not [t for t in threading.enumerate() if t.name == "agentd-probe-reuse"]
    fut, started = lane.submit(lambda: "again")  # a new worker starts on demand
    assert started and fut.result(timeout=5) == "again"


def _probe_workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("agentd-probe-")]


def _wait_until(cond, timeout: float = 10.0) -> bool:
    pause = threading.Event()
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            return False
        pause.wait(0.02)
    return True


def test_lanes_run_in_turn_share_one_thread():
    # Runs of earlier tests have parked (a worker parking late would otherwise be woken next).
    assert _wait_until(lambda: all(t.name == "agentd-probe-idle" for t in _probe_workers()))
    idents = []
    for name in ("turn-a", "turn-b", "turn-c"):
        fut, started = Lane(name).submit(lambda: (threading.current_thread().ident, threading.current_thread().name))
        assert started
        idents.append(fut.result(timeout=5))
    assert len({ident for ident, _ in idents}) == 1  # one parked worker served every lane in turn
    assert [name for _, name in idents] == ["agentd-probe-turn-a", "agentd-probe-turn-b", "agentd-probe-turn-c"]


def test_hung_lane_does_not_stop_another_and_is_not_restarted():
    release = threading.Event()
    calls = []

    def hang():
        calls.append(threading.current_thread().ident)
        release.wait(10)
        return "late"

    hung = Lane("stuck")
    f1, _ = hung.submit(hang)
    assert _wait_until(lambda: calls)
    other = Lane("free")
    for _ in range(3):
        fut, started = other.submit(lambda: threading.current_thread().ident)
        assert started and fut.result(timeout=5) != calls[0]  # served by another thread
        f2, s2 = hung.submit(hang)
        assert not s2 and f2 is f1 and hung.busy
    release.set()
    assert f1.result(timeout=5) == "late"
    assert len(calls) == 1


def test_concurrent_submits_all_complete_one_run_per_lane_at_a_time():
    lanes = [Lane(f"conc-{i}") for i in range(4)]
    guard = threading.Lock()
    running = {lane.name: 0 for lane in lanes}
    overlaps = []
    done = []

    def job(name: str) -> str:
        with guard:
            running[name] += 1
            if running[name] > 1:
                overlaps.append(name)
        threading.Event().wait(0.001)
        with guard:
            running[name] -= 1
        return name

    def submitter(seed: int) -> None:
        for k in range(60):
            lane = lanes[(seed + k) % len(lanes)]
            fut, _ = lane.submit(job, lane.name)
            done.append((lane.name, fut.result(timeout=10)))

    threads = [threading.Thread(target=submitter, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert len(done) == 6 * 60 and all(a == b for a, b in done)
    assert not overlaps


def test_no_worker_is_left_after_idle_exit(monkeypatch):
    monkeypatch.setattr(Lane, "IDLE_EXIT_S", 0.2)
    release = threading.Event()
    # One blocking run more than there are workers now: each takes its own worker, so every
    # worker parked earlier (with the unpatched idle time) runs one and parks again.
    runs = [Lane(f"idle-{i}").submit(release.wait, 10)[0] for i in range(len(_probe_workers()) + 1)]
    release.set()
    assert all(f.result(timeout=5) for f in runs)
    assert _wait_until(lambda: not _probe_workers(), timeout=20)


def test_parked_worker_keeps_no_finished_result():
    class Result:
        pass

    lane = Lane("weak")
    fut, _ = lane.submit(Result)
    ref = weakref.ref(fut.result(timeout=5))
    assert _wait_until(lambda: not lane.busy)
    del fut
    assert _wait_until(lambda: (gc.collect(), ref() is None)[1])
    assert lane.submit(lambda: "next")[0].result(timeout=5) == "next"  # the lane still works


async def test_async_wait_delivers_the_run_s_exception_and_a_cancelled_wait_leaves_the_run():
    lane = Lane("async-exc")
    fut, _ = lane.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        await await_future(fut, 5)
    release = threading.Event()
    fut, _ = lane.submit(lambda: release.wait(10) and "kept")
    waiting = asyncio.ensure_future(await_future(fut, 30))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not fut.done() and lane.busy  # the run goes on; the lane does not start another
    release.set()
    assert await await_future(fut, 5) == "kept"
