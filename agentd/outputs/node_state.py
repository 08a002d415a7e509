"""State that belongs to the node (DESIGN.md 3): where it goes for a root that is not the node.

The node's state is its baseline, agentd's state directory (benchmark history), the NCCL
files and the node-feature-discovery file (``paths.*``). It is read and written only for
the node itself, i.e. for a live host root (agentd.host.fs.HostRoot.is_live: ``/``, or a
container's ``/host`` of the running kernel). For any other root (a simulated node, a
capture, a copied tree) ``agentd run`` moves every one of those paths, whatever the
config says, into a directory named after the root, beside it::

    /tmp/sim          ->  /tmp/sim-out/{nccl.env, nccl.conf, topo.xml, baseline.json, ...}

each file keeping its configured name (``state_dir`` is the directory itself). Pure:
``state_dir_for`` and ``moved_paths`` only compute paths (docs/node-state.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from agentd.config import STATE_DIR_FILES, Paths

# The file settings under [paths] that are the node's; state_dir is the directory itself.
STATE_FILES: tuple[str, ...] = ("nccl_env", "nccl_conf", "nccl_topo", "baseline", "nfd_features")


def state_dir_for(root: str | os.PathLike[str]) -> Path:
    """``<root>-out`` beside ``root`` (made absolute, symlinks not resolved): where the state
    of a root that is not the node goes. ValueError for ``/`` (nothing is beside it)."""
    p = Path(os.path.abspath(root))
    if not p.name:
        raise ValueError(f"host root {p} is not the running node, and a root at / has no directory beside it for its state")
    return p.parent / f"{p.name}-out"


def moved_paths(paths: Paths, out: Path) -> dict[str, str | None]:
    """Every state path of ``paths`` moved into ``out`` (a ``[paths]`` override): each file
    keeps its name (a name another setting, or a file agentd keeps in ``state_dir``, already
    took gets the setting's name in front),
    ``state_dir`` becomes ``out``, an unset ``nfd_features`` stays unset."""
    moved: dict[str, str | None] = {"state_dir": str(out)}
    taken: set[str] = set(STATE_DIR_FILES.values())  # agentd's own files in state_dir
    for key in STATE_FILES:
        p = getattr(paths, key)
        if p is None:
            moved[key] = None
            continue
        name = Path(p).name
        if name in taken:
            name = f"{key}-{name}"
        taken.add(name)
        moved[key] = str(out / name)
    return moved
