"""Properties of sysfs value parsing: ``fs.parse_int`` and ReadContext raw/text/integer on
generated file contents (NUL bytes, invalid UTF-8, larger than the read cap)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentd.host.fs import MAX_ATTR_BYTES, HostRoot, ReadContext, parse_int

PROFILE = settings.get_profile("agentd")  # registered in conftest.py

_names = itertools.count()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fsroot")


def write(root: Path, data: bytes) -> str:
    rel = f"sys/attr{next(_names)}"
    (root / "sys").mkdir(exist_ok=True)
    (root / rel).write_bytes(data)
    return rel


# Sysfs-ish bytes: numbers with odd whitespace, N/A, NUL, invalid UTF-8, and files larger
# than the cap (a short chunk repeated, so generation stays cheap).
numbers = st.integers(-(2**70), 2**70).map(lambda n: str(n).encode())
chunk = st.one_of(st.binary(max_size=40), numbers, st.sampled_from([b"N/A", b"N/A (no PMA)", b"\0", b"\xff\xfe", b"0x1f", b" \n", b"\xc3", b"-1"]))
contents = st.one_of(
    st.lists(chunk, max_size=6).map(b"".join),
    st.tuples(chunk, st.integers(1, 3 * MAX_ATTR_BYTES // 16)).map(lambda t: (t[0] or b"7") * t[1]),
)


@settings(PROFILE)
@given(st.text(), st.sampled_from([10, 16]))
@example("9" * 5000, 10)  # over Python's int-string digit limit: None, not ValueError
@example("0x" + "f" * 5000, 10)
@example("١٢٣", 10)  # Unicode digits int() accepts
@example("²", 10)
def test_parse_int_never_raises(s: str, base: int) -> None:
    v = parse_int(s, base)
    assert v is None or type(v) is int


@settings(PROFILE)
@given(st.integers(-(2**128), 2**128), st.sampled_from(["", "\n", " \n", "  "]))
def test_parse_int_round_trips(n: int, tail: str) -> None:
    assert parse_int(f"{n}{tail}") == n
    assert parse_int(f"{n:#x}{tail}" if n >= 0 else f"-{-n:#x}{tail}", 16) == n
    if n >= 0:
        assert parse_int(f"{n:x}{tail}", 16) == n


@settings(PROFILE)
@given(contents)
def test_read_context_on_any_bytes(root: Path, data: bytes) -> None:
    rel = write(root, data)
    ctx = ReadContext(HostRoot.at(root), "test")
    raw = ctx.raw(rel)
    assert raw == data[:MAX_ATTR_BYTES]
    text = ctx.text(rel)
    try:
        expected = raw.decode("utf-8").rstrip()
    except UnicodeDecodeError:
        assert text is None
        assert [(e.path, e.kind) for e in ctx.errors] == [(rel, "unparsable")]
    else:
        assert text == expected
        assert ctx.errors == []
    ctx2 = ReadContext(HostRoot.at(root), "test")
    v = ctx2.integer(rel)
    assert v is None or type(v) is int
    assert all(e.kind == "unparsable" and e.path == rel for e in ctx2.errors)
    if v is not None:
        assert ctx2.errors == [] and v == parse_int(text or "")
    elif text is not None and text.strip() and not text.startswith("N/A"):
        assert len(ctx2.errors) == 1 and len(ctx2.errors[0].detail) <= 30 + 60 * 10  # reported; 60 chars, repr-escaped


@settings(PROFILE)
@given(st.integers(0, 2**64 - 1), st.sampled_from([b"", b"\n", b" \n"]))
def test_integer_round_trips(root: Path, n: int, tail: bytes) -> None:
    ctx = ReadContext(HostRoot.at(root), "test")
    assert ctx.integer(write(root, str(n).encode() + tail)) == n
    assert ctx.integer(write(root, f"{n:#x}".encode() + tail), base=16) == n
    assert ctx.errors == []


def test_missing_and_required(root: Path) -> None:
    ctx = ReadContext(HostRoot.at(root), "test")
    assert ctx.text("sys/absent") is None and ctx.errors == []
    assert ctx.text("sys/absent", required=True) is None
    assert [(e.path, e.kind) for e in ctx.errors] == [("sys/absent", "missing")]
