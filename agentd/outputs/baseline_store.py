"""Load and persist the inventory baseline (the shell side of agentd.judging.baseline)."""

from __future__ import annotations

from pathlib import Path

from agentd.base.atomic import WriteResult, atomic_write, read_regular, sweep_temps
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


def save_baseline(path: Path, baseline: Baseline) -> WriteResult:
    return atomic_write(path, baseline_to_json(baseline), mode=0o644)


def sweep_baseline_temps(path: Path) -> int:
    """Remove temp files a writer killed while saving the baseline left behind."""
    return sweep_temps(path)


def reset_baseline(path: Path) -> bool:
    """Remove the baseline so the next healthy snapshot becomes the new one."""
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False
