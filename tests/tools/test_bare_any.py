"""tools/bare_any.py: every Any in agentd/ says why on its line (`make lint`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location("bare_any", Path(__file__).resolve().parents[2] / "tools" / "bare_any.py")
assert _SPEC is not None and _SPEC.loader is not None
bare_any = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bare_any)

SOURCE = '''"""Any in a docstring is prose."""
from typing import (
    Any,
    Mapping,
)

A = dict[str, Any]  # Any: JSON
B: Any = None
# Any in a comment is prose


def f(x: Any,  # Any: a library's object
      y: Any) -> Mapping[str, Any]:
    return {"Any": x}
'''


def test_uses_without_a_comment_on_their_line_are_listed():
    assert bare_any.bare_uses(SOURCE) == [8, 13]
