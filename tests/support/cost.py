"""What the running test costs: the processes it starts and the simulated trees it writes.

tests/conftest.py installs the spies and checks each test's markers against what they saw.
A fixture that a module or the session shares builds its tree once; it says so with
``shared()`` when it builds lazily, from inside a test (a factory fixture)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class Spy:
    def __init__(self) -> None:
        self.processes: list[str] = []
        self.trees: list[str] = []
        self.shared_depth = 0  # > 0 while something shared by many tests is being built


current: Spy | None = None


@contextmanager
def shared() -> Iterator[None]:
    """Trees written inside are shared by many tests: not counted against the running one."""
    spy = current
    if spy is not None:
        spy.shared_depth += 1
    try:
        yield
    finally:
        if spy is not None:
            spy.shared_depth -= 1


_real_execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]


def _spying_execute_child(self: subprocess.Popen[Any], args: Any, *rest: Any, **kw: Any) -> Any:  # Any: Popen's private signature
    if current is not None:
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        current.processes.append(" ".join(os.fsdecode(a) for a in argv[:3]))
    return _real_execute_child(self, args, *rest, **kw)


def install() -> None:
    """Spy on every process start (asyncio's subprocesses go through Popen too) and on the
    simulator's tree writer (what build_tree calls)."""
    subprocess.Popen._execute_child = _spying_execute_child  # type: ignore[attr-defined]
    from agentd.sim import build

    real = build.write_profile_tree
    if getattr(real, "_spied", False):
        return

    def spying(profile: Any, root: Path, **kw: Any) -> None:  # Any: the simulator's Profile, passed through
        if current is not None and not current.shared_depth:
            current.trees.append(f"{profile.name} -> {root}")
        real(profile, root, **kw)

    spying._spied = True  # type: ignore[attr-defined]
    build.write_profile_tree = spying  # type: ignore[assignment]
