"""The lock that serialises changes to the node: ``<state_dir>/enforce.lock``.

Whoever changes the node's settings (`agentd enforce apply|rollback|status --reset`, the
daemon's enforcer) holds an exclusive ``flock`` on this file for the whole of its work:
two applies never interleave, and the journal (agentd.outputs.enforce_journal) is
read-modify-written by one at a time. The kernel drops the lock when its holder dies
(SIGKILL included), so a crashed apply never leaves it held.

It is a lock of its own beside the daemon's ``agentd.lock`` (agentd.outputs.state_lock,
held for the daemon's whole life), which would otherwise keep the daemon's own enforcer
out; both are taken the same way (state_lock.held), and the file says who holds it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from agentd.outputs import state_lock

FILE_NAME = "enforce.lock"


def lock_path(state_dir: Path | str) -> Path:
    return Path(state_dir) / FILE_NAME


def holder(state_dir: Path | str) -> str:
    """Who holds the lock, as its file says (``pid 4242, started ...``), for messages; "" when unknown."""
    h = state_lock.holder(lock_path(state_dir))
    return h.describe() if h is not None else ""


@contextlib.contextmanager
def enforce_lock(state_dir: Path | str, *, wait_s: float) -> Iterator[bool]:
    """Hold the lock: yields True once held (waiting at most ``wait_s``; 0: try once),
    False when someone else holds it that long. OSError when the state directory cannot
    hold the file."""
    with state_lock.held(lock_path(state_dir), wait_s=wait_s) as ok:
        yield ok
