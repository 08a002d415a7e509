"""Captured benchmark outputs for the NCCL benchmark tests (tests/bench/data)."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "bench" / "data"


def data(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")
