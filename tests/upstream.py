"""Access to ../shared/upstream real data for tests.

In some checkouts of shared/ the sysfs symlinks were flattened into regular files whose
content is the link target. ``materialize`` copies a tree and restores such files as
symlinks (only files whose whole content looks like a relative sysfs link target), so
readers see the layout the kernel makes. The original tree is never modified.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
UPSTREAM = SHARED / "upstream"
SYSFS_TREES = UPSTREAM / "sysfs"
OUTPUTS = UPSTREAM / "outputs"
NCCL_TOPO = UPSTREAM / "nccl-topo"

_LINK_RE = re.compile(r"^(\.\./)+[\w:.\-/]+/?$")


def upstream_available() -> bool:
    return SYSFS_TREES.is_dir()


def materialize(tree: Path, dest: Path) -> Path:
    """Copy ``tree`` (a directory holding ``sys/``) into ``dest`` and restore flattened
    symlinks. Returns the new host root."""
    shutil.copytree(tree, dest, symlinks=True)
    for dirpath, dirnames, filenames in os.walk(dest):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                continue
            os.chmod(p, 0o644)
            if p.stat().st_size > 200:
                continue
            try:
                text = p.read_text()
            except UnicodeDecodeError:
                continue
            if "\n" in text.rstrip("\n") or not _LINK_RE.match(text.strip()):
                continue
            target = text.strip()
            p.unlink()
            os.symlink(target, p)
    return dest
