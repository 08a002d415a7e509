"""Profile -> host root with faults: ``build_tree``, the simulator's entry point.

``build_tree`` writes a complete host root (see agentd.sim for the layout: the PCI
hierarchy is written by pci, the rest by rdma/net/node, all put together by
pristine.write_profile_tree) and then applies faults (agentd.sim.faults).

``pci_layout``, ``get_profile`` and ``pristine_root`` are re-exported here:
callers outside the package (benchmarks, end-to-end tests) import them from this module.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable

from agentd.sim.boot import BOOTED_AGO_S
from agentd.sim.faults import apply_fault, parse_fault
from agentd.sim.pci import pci_layout
from agentd.sim.pristine import MARKER, get_profile, pristine_root, write_profile_tree
from agentd.sim.tree import remove_path

__all__ = ["build_tree", "pci_layout", "get_profile", "pristine_root"]


def _prepare(out: Path) -> None:
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ValueError(f"{out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not (out / MARKER).is_file():
            raise ValueError(f"refusing to write into {out}: it is not empty and not a simulator root (no {MARKER})")
        for child in out.iterdir():
            remove_path(child)
    out.mkdir(parents=True, exist_ok=True)


def build_tree(profile_name: str, out_dir: str | Path, *, faults: Iterable[str] = (), booted_ago_s: float = BOOTED_AGO_S) -> Path:
    """Write a complete host root for ``profile_name`` into ``out_dir`` and apply ``faults``.
    The node booted ``booted_ago_s`` before the build (default three days: not just booted).

    ``out_dir`` may be absent, empty, or a previous simulator root (it is then replaced);
    anything else is refused with ValueError. Faults are parsed before anything is written.
    """
    profile = get_profile(profile_name)
    if not (math.isfinite(booted_ago_s) and booted_ago_s >= 0):
        raise ValueError(f"booted_ago_s {booted_ago_s!r}: expected seconds >= 0")
    parsed = [parse_fault(f) for f in faults]
    out = Path(out_dir).absolute()
    _prepare(out)
    try:
        write_profile_tree(profile, out, booted_ago_s=booted_ago_s)
        for f in parsed:
            apply_fault(out, f)
    except BaseException:
        for child in out.iterdir():  # never leave a half-built or half-faulted root behind
            remove_path(child)
        raise
    return out
