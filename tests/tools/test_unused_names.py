"""tools/unused_names.py, the dead-code scan `make lint` runs."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location("unused_names", Path(__file__).resolve().parents[2] / "tools" / "unused_names.py")
assert _SPEC is not None and _SPEC.loader is not None
unused_names = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(unused_names)

MODULE = '''
import os

LIMIT = 3
_PATTERN = "x"
TABLE: dict[str, int] = {}
__all__ = ["exported"]


def used():
    return LIMIT


def exported():
    pass


def dead():
    return used()


class Dead:
    def method(self):
        return TABLE
'''


def test_definitions_are_the_top_level_names_but_dunders():
    names = [n for n, _ in unused_names.definitions(ast.parse(MODULE))]
    assert names == ["LIMIT", "_PATTERN", "TABLE", "used", "exported", "dead", "Dead"]


def test_a_name_is_referenced_when_read_imported_or_exported():
    refs = unused_names.references(ast.parse(MODULE + "\nfrom elsewhere import _PATTERN\n"))
    unreferenced = [n for n, _ in unused_names.definitions(ast.parse(MODULE)) if refs[n] == 0]
    assert unreferenced == ["dead", "Dead"]

