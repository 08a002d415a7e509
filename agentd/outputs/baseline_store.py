"""Load and persist the inventory baseline (the shell side of agentd.judging.baseline)."""

from __future__ import annotations

from pathlib import Path

from agentd.base.atomic import WriteResult, atomic_write
from agentd.judging.baseline import Baseline, baseline_from_json, baseline_to_json


class BaselineError(Exception):
    pass


def load_baseline(path: Path) -> Baseline | None:
    """None when there is no baseline yet; BaselineError when the file is corrupt."""
    try:
        text = path.read_text(encoding="utf-8")
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


def reset_baseline(path: Path) -> bool:
    """Remove the baseline so the next healthy snapshot becomes the new one."""
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False
