"""Where things are, for tests at any depth: the repository, the tests and their fixtures.

Tests name these instead of counting ``Path(__file__).parents[...]``, so a test file can move
to the folder that mirrors its module without its paths changing meaning."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
PACKAGE = REPO / "agentd"
DOCS = REPO / "docs"
FIXTURES = TESTS / "fixtures"
