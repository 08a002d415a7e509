#!/usr/bin/env python3
"""List top-level names defined in agentd/ that nothing references: dead code.

A module's top-level functions, classes and assigned names count as referenced when any
file in agentd/, tests/ or bench/ reads the name (as a name, an attribute, or an imported
name) anywhere other than at its own definition. The match is by name alone, so a dead
name that shares its spelling with a live one elsewhere is missed: the scan errs on the
side of silence. Entry points that only packaging names (pyproject's scripts) are in
``ALLOWED``. Exit 1 when a name is unused (``make lint``); ``--all`` lists every
definition with its reference count.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFINED_IN = ("agentd",)
READ_IN = ("agentd", "tests", "bench", "tools")
# Referenced from outside Python: pyproject.toml's [project.scripts] and ``python -m agentd``.
ALLOWED = {
    "agentd/entry.py": {"main"},
}


def _files(parts: tuple[str, ...]) -> list[Path]:
    out: list[Path] = []
    for part in parts:
        out += sorted(p for p in (ROOT / part).rglob("*.py") if "fixtures" not in p.relative_to(ROOT).parts)
    return out


def definitions(tree: ast.Module) -> list[tuple[str, int]]:
    """(name, line) of the module's top-level functions, classes and assigned names."""
    out: list[tuple[str, int]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append((node.name, node.lineno))
        elif isinstance(node, ast.Assign):
            out += [(t.id, node.lineno) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.append((node.target.id, node.lineno))
    return [(n, line) for n, line in out if not (n.startswith("__") and n.endswith("__"))]


def references(tree: ast.Module) -> Counter[str]:
    """Every name the file reads: names, attributes, imported names, ``__all__`` entries."""
    seen: Counter[str] = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Load, ast.Del)):
            seen[node.id] += 1
        elif isinstance(node, ast.Attribute):
            seen[node.attr] += 1
        elif isinstance(node, ast.ImportFrom):
            seen.update(a.name for a in node.names)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            seen.update(e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return seen


def main(argv: list[str]) -> int:
    refs: Counter[str] = Counter()
    for path in _files(READ_IN):
        refs.update(references(ast.parse(path.read_text(), str(path))))
    unused = []
    for path in _files(DEFINED_IN):
        rel = str(path.relative_to(ROOT))
        for name, line in definitions(ast.parse(path.read_text(), str(path))):
            if "--all" in argv:
                print(f"{rel}:{line}: {name} {refs[name]}")
            if refs[name] == 0 and name not in ALLOWED.get(rel, set()):
                unused.append(f"{rel}:{line}: {name} is referenced nowhere in {', '.join(READ_IN)}")
    for line in unused:
        print(line)
    return 1 if unused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
