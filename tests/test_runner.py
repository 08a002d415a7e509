"""Probe lanes: a hung probe never piles up threads and never blocks the caller."""

from __future__ import annotations

import asyncio
import threading

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
