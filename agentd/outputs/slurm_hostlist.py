"""Slurm hostlist expressions: ``gpu[001-004,010]`` read into names, and names written
back as the shortest such expression, as Slurm reads and writes them (src/common/hostlist.c).

Reading (``expand``). A list is tokens separated by commas outside brackets. A token is a
plain name, or ``prefix[ranges]suffix``: the last bracket group's ranges are
comma-separated numbers or ``lo-hi`` pairs (decimal, ``lo <= hi``), each number written
zero-padded to the width of its ``lo`` as typed (``[001-010]`` is 001 ... 010,
``[9-10]`` is 9 and 10), between the prefix and the suffix. The prefix may hold further
bracket groups (``rack[1-2]-gpu[01-18]``), expanded the same way. A ``[`` without its
``]``, an empty range, ``hi < lo`` or a non-decimal number is an error, as is a list of
more names than Slurm takes (64 Ki, ``MAX_SLURM_NODES``), counted before anything is
expanded, so ``gpu[0-999999999]`` costs nothing.

Writing (``compress``). Names that end in digits and share the part before them are
written ``prefix[ranges]``: consecutive numbers whose text is the number at the run's
width join one range (``gpu009,gpu010`` -> ``gpu[009-010]``, ``gpu9,gpu10`` ->
``gpu[9-10]``, ``gpu9,gpu010`` stay apart: ``gpu[9,010]``). A prefix with one name is
written as the name. Groups come in natural order of their first name. ``expand`` of
``compress`` gives the names back, once each.

Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Iterable

from agentd.base.ids import natural_key

MAX_HOSTS = 64 * 1024  # Slurm's MAX_SLURM_NODES (and hostlist.h MAX_RANGE): more is not a node list
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
_TRAILING_DIGITS = re.compile(r"(.*?)(\d+)")


class HostlistError(ValueError):
    """Not a hostlist expression Slurm reads, or one naming more than MAX_HOSTS hosts."""


def _tokens(expr: str) -> list[str]:
    """Split on commas outside brackets; a ``]`` without its ``[`` is an error."""
    out: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"{expr!r}: ']' without '['")
        elif ch == "," and depth == 0:
            out.append(expr[start:i])
            start = i + 1
    if depth != 0:
        raise HostlistError(f"{expr!r}: '[' without ']'")
    out.append(expr[start:])
    return out


def _ranges(body: str, token: str) -> list[tuple[int, int, int]]:
    """``001-004,010`` -> [(1, 4, 3), (10, 10, 3)]: (lo, hi, width)."""
    out = []
    for part in body.split(","):
        m = _RANGE.fullmatch(part)
        if m is None:
            raise HostlistError(f"{token!r}: {part!r} is not a number or a lo-hi range")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise HostlistError(f"{token!r}: range {part!r} runs backwards")
        out.append((lo, hi, len(m.group(1))))
    return out


def _count(token: str) -> int:
    """How many names ``token`` stands for, without building them."""
    total = 1
    rest = token
    while "[" in rest:
        open_at = rest.rindex("[")
        close_at = rest.find("]", open_at)
        if close_at < 0 or "[" in rest[close_at:] or "]" in rest[close_at + 1:]:
            raise HostlistError(f"{token!r}: brackets do not pair")
        total *= sum(hi - lo + 1 for lo, hi, _ in _ranges(rest[open_at + 1:close_at], token))
        rest = rest[:open_at]
        if total > MAX_HOSTS:
            return total
    if "]" in rest:
        raise HostlistError(f"{token!r}: ']' without '['")
    return total


def _expand_token(token: str) -> list[str]:
    if "[" not in token:
        return [token]
    open_at = token.rindex("[")
    close_at = token.index("]", open_at)
    prefix, body, suffix = token[:open_at], token[open_at + 1:close_at], token[close_at + 1:]
    numbers = [f"{n:0{width}d}" for lo, hi, width in _ranges(body, token) for n in range(lo, hi + 1)]
    return [p + n + suffix for p in _expand_token(prefix) for n in numbers]


def expand(expr: str) -> list[str]:
    """The names ``expr`` stands for, in its order (duplicates kept). HostlistError: not a
    hostlist, an empty name, or more than MAX_HOSTS names."""
    tokens = _tokens(expr)
    if any(not t for t in tokens):
        raise HostlistError(f"{expr!r}: an empty name (two commas, or one at an end)")
    total = 0
    for t in tokens:
        total += _count(t)
        if total > MAX_HOSTS:
            raise HostlistError(f"{expr[:80]!r}: more than {MAX_HOSTS} names")
    return [name for t in tokens for name in _expand_token(t)]


def _runs(numbers: list[str]) -> list[str]:
    """Digit strings (one prefix) -> range texts, each run at the width of its first number."""
    ordered = sorted(set(numbers), key=lambda s: (int(s), len(s)))
    out: list[str] = []
    lo = prev = ordered[0]
    for text in ordered[1:]:
        width = len(lo)
        if int(text) == int(prev) + 1 and f"{int(text):0{width}d}" == text:
            prev = text
            continue
        out.append(lo if lo == prev else f"{lo}-{prev}")
        lo = prev = text
    out.append(lo if lo == prev else f"{lo}-{prev}")
    return out


def compress(names: Iterable[str]) -> str:
    """The names as one hostlist expression (module docstring); "" for none. The names
    must be plain (no brackets or commas): callers validate them."""
    groups: dict[str, list[str]] = {}
    singles: list[str] = []
    for name in set(names):
        m = _TRAILING_DIGITS.fullmatch(name)
        if m is None:
            singles.append(name)
        else:
            groups.setdefault(m.group(1), []).append(m.group(2))
    parts: list[tuple[tuple[object, ...], str]] = [(natural_key(s), s) for s in singles]
    for prefix, numbers in groups.items():
        first = prefix + min(numbers, key=lambda s: (int(s), len(s)))
        if len(numbers) == 1:
            parts.append((natural_key(first), first))
        else:
            parts.append((natural_key(first), f"{prefix}[{','.join(_runs(numbers))}]"))
    return ",".join(text for _, text in sorted(parts))
