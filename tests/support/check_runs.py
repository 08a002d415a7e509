"""Running `agentd check` in-process with something happening between its two collections
(it collects twice, ``intervals.check_rate_window_s`` apart): a device gone, a counter
advanced, as on a node that changes while it is checked."""

from __future__ import annotations

import time
import types
from typing import Callable

import pytest

from agentd import cli


def between_collections(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
    """Run ``change`` where `agentd check` waits between its two collections."""

    def sleep(s: float) -> None:
        change()
        time.sleep(s)

    fake = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("_")})
    fake.sleep = sleep
    monkeypatch.setattr(cli, "time", fake)
