"""Debouncing of udev bursts."""

from __future__ import annotations

import asyncio

from agentd.daemon.events import Debouncer


async def test_a_burst_fires_once_after_the_delay():
    fired = []
    d = Debouncer(asyncio.get_running_loop(), 0.05, lambda: fired.append(1))
    for _ in range(10):
        d.poke()
    assert fired == []
    await asyncio.sleep(0.2)
    assert fired == [1]
    d.poke()
    await asyncio.sleep(0.2)
    assert fired == [1, 1] and d.fired == 2


async def test_cancel():
    fired = []
    d = Debouncer(asyncio.get_running_loop(), 0.05, lambda: fired.append(1))
    d.poke()
    d.cancel()
    await asyncio.sleep(0.15)
    assert fired == []
