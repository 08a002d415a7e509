from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


def data(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


@pytest.fixture
def data_dir() -> Path:
    return DATA
