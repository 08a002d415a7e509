#!/usr/bin/env python3
"""List the lines of agentd/ that use ``typing.Any`` without a comment saying why.

Where the type is importable, name it; where it is not (an untyped library, JSON before
validation, a heterogeneous table), the line says so in a comment (house rule, DESIGN.md).
Imports and prose are not uses. Exit 1 when a line has none (``make lint``).
"""

from __future__ import annotations

import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bare_uses(source: str) -> list[int]:
    """Lines where the name ``Any`` is used in code and no comment is on that line."""
    uses: set[int] = set()
    commented: set[int] = set()
    importing = False
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME and tok.string in ("import", "from") and tok.start[1] == _indent(tok.line):
            importing = True
        elif tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
            importing = False
        if tok.type == tokenize.COMMENT:
            commented.add(tok.start[0])
        elif tok.type == tokenize.NAME and tok.string == "Any" and not importing:
            uses.add(tok.start[0])
    return sorted(uses - commented)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def main() -> int:
    found = []
    for path in sorted((ROOT / "agentd").rglob("*.py")):
        for line in bare_uses(path.read_text()):
            found.append(f"{path.relative_to(ROOT)}:{line}: Any without a comment saying why")
    print("\n".join(found)) if found else None
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
