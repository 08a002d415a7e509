"""The import-layer contract: one way through the code (docs/development.md "Architecture").

Every import in ``agentd/`` counts, wherever it is written: module level, inside a function,
under ``if TYPE_CHECKING:``. A module may import its own layer or a lower one, never a higher
one, and no two modules (nor two first-level parts) may import each other through any chain.
The simulator writes node trees and depends on the leaves only.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "agentd"

# Lowest first. A module belongs to the first entry whose prefix names it (longest wins).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("leaves", ("agentd", "agentd.base")),
    ("data", ("agentd.model", "agentd.config", "agentd.records")),
    ("host", ("agentd.host",)),
    ("collection", ("agentd.collection",)),
    ("capture", ("agentd.capture",)),
    ("judging", ("agentd.judging", "agentd.judging.checks")),
    ("nccl", ("agentd.nccl",)),
    ("metrics", ("agentd.metrics",)),
    ("ncclbench", ("agentd.ncclbench",)),
    ("outputs", ("agentd.outputs",)),
    ("daemon", ("agentd.daemon",)),
    ("cli", ("agentd.cli", "agentd.entry", "agentd.__main__", "agentd.views", "agentd.configdoc", "agentd.npd", "agentd.enforce_cmd")),
)
LEAVES_ONLY = {"agentd.sim": "leaves"}  # part -> the highest layer it may import (besides itself)


def module_files() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> agentd modules it imports (every import statement in the file)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in modules else origin for a in node.names]
            for t in targets:
                if not t.startswith("agentd"):
                    continue
                resolved = _resolve(t, modules)
                if resolved and resolved != mod:
                    edges[mod].add(resolved)
    return edges


def layer_of(mod: str) -> int:
    best: tuple[int, int] | None = None  # (prefix length, layer index)
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and (best is None or len(p) > best[0]):
                best = (len(p), i)
    if best is None:
        raise AssertionError(f"{mod} is in no layer: add it to LAYERS in {__file__}")
    return best[1]


def part_of(mod: str) -> str:
    parts = mod.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else mod


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    nodes = set(edges) | {b for bs in edges.values() for b in bs}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


MODULES = module_files()
EDGES = import_edges(MODULES)


def test_the_walker_sees_function_level_and_type_checking_imports(tmp_path):
    pkg = tmp_path / "agentd"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from agentd.sub.b import X\n"
        "def f():\n    from . import c\n"
    )
    (pkg / "sub" / "b.py").write_text("from agentd.sub import a\n")
    (pkg / "sub" / "c.py").write_text("")
    mods = {}
    for path in pkg.rglob("*.py"):
        parts = list(path.relative_to(tmp_path).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    edges = import_edges(mods)
    assert edges["agentd.sub.a"] == {"agentd.sub.b", "agentd.sub.c"}
    assert cycles(edges) == [["agentd.sub.a", "agentd.sub.b"]]


def test_every_module_has_a_layer():
    for mod in MODULES:
        if part_of(mod) not in LEAVES_ONLY:
            layer_of(mod)


def test_no_import_cycle_between_modules():
    assert cycles(EDGES) == []


def test_no_import_cycle_between_first_level_parts():
    parts: dict[str, set[str]] = defaultdict(set)
    for a, bs in EDGES.items():
        for b in bs:
            if part_of(a) != part_of(b) and part_of(b) != "agentd":
                parts[part_of(a)].add(part_of(b))
    assert cycles(parts) == []


@pytest.mark.parametrize("mod", sorted(m for m in MODULES if part_of(m) not in LEAVES_ONLY))
def test_no_upward_import(mod):
    mine = layer_of(mod)
    upward = sorted(
        f"{b} ({LAYERS[layer_of(b)][0]})"
        for b in EDGES.get(mod, ())
        if part_of(b) not in LEAVES_ONLY and layer_of(b) > mine
    )
    assert upward == [], f"{mod} ({LAYERS[mine][0]}) imports a higher layer"


@pytest.mark.parametrize("part,ceiling", sorted(LEAVES_ONLY.items()))
def test_simulator_depends_on_leaves_only(part, ceiling):
    limit = [name for name, _ in LAYERS].index(ceiling)
    bad = sorted(
        b
        for a, bs in EDGES.items()
        if part_of(a) == part
        for b in bs
        if part_of(b) != part and layer_of(b) > limit
    )
    assert bad == []
