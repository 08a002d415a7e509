"""Load and persist the inventory baseline (the shell side of agentd.judging.baseline).

``paths.baseline`` is the node's own (DESIGN.md 3): only a live host root reads or
writes it. A root that is not the node may carry the baseline its node had when it was
captured (``<root>/.agentd/state/baseline.json``, agentd.base.recorded.BASELINE), read
through the host root and never written (``load_recorded_baseline``).
"""

from __future__ import annotations

from pathlib import Path

from agentd.base import recorded
from agentd.base.atomic import WriteResult, atomic_write, read_regular
from agentd.host.fs import HostRoot, ReadContext
from agentd.judging.baseline import Baseline, baseline_from_json, baseline_to_json


class BaselineError(Exception):
    pass


MAX_BYTES = 4 << 20  # a baseline is a few kB; more is not one


def load_baseline(path: Path) -> Baseline | None:
    """None when there is no baseline yet; BaselineError when the file is corrupt or not a
    regular file (opened with O_NONBLOCK: a FIFO there is an error, not a hang). Blocking
    file I/O: the daemon calls it in a lane, never on the event loop."""
    try:
        text = read_regular(path, MAX_BYTES).decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise BaselineError(f"cannot read baseline {path}: {e}") from None
    try:
        return baseline_from_json(text)
    except ValueError as e:
        raise BaselineError(f"baseline {path} is not valid: {e}") from None


def recorded_baseline_path(host: HostRoot) -> str | None:
    """Root-relative path of the baseline a root that is not the node may carry, or None
    for a live root (its baseline is ``paths.baseline``) or a root without recorded answers."""
    return None if host.is_live else host.recorded(recorded.BASELINE)


def load_recorded_baseline(host: HostRoot) -> Baseline | None:
    """The baseline recorded with a capture (read-only, through the host root), or None
    when the root has none. BaselineError when it is there but cannot be used."""
    rel = recorded_baseline_path(host)
    if rel is None:
        return None
    ctx = ReadContext(host, "baseline")
    data = ctx.raw(rel, max_bytes=MAX_BYTES)
    if ctx.errors:
        e = ctx.errors[0]
        raise BaselineError(f"cannot read the recorded baseline {host.abs(rel)}: {e.kind}{': ' + e.detail if e.detail else ''}")
    if data is None:
        return None
    try:
        return baseline_from_json(data)
    except ValueError as e:
        raise BaselineError(f"recorded baseline {host.abs(rel)} is not valid: {e}") from None


def save_baseline(path: Path, baseline: Baseline) -> WriteResult:
    return atomic_write(path, baseline_to_json(baseline), mode=0o644)


def reset_baseline(path: Path) -> bool:
    """Remove the baseline so the next healthy snapshot becomes the new one."""
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False
