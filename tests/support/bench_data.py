"""Captured benchmark outputs for the NCCL benchmark tests (tests/ncclbench/data)."""

from __future__ import annotations

from tests.support.paths import TESTS

DATA = TESTS / "ncclbench" / "data"


def data(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")
