"""Low-level writers for simulated host roots, plus the helpers faults use to undo them.

Everything the simulator writes goes through these few functions so the tree looks like
the kernel's:

- attribute files end in a newline (real sysfs ``show`` functions print one; the gpud
  fixture files without it were trimmed by that project, not by the kernel);
- symlinks are *relative*, computed from the link's own directory, exactly as sysfs
  presents them (``class/net/ib0 -> ../../devices/pci0000:14/.../net/ib0``,
  ``class/infiniband/mlx5_0/device -> ../../../0000:17:00.0``). They therefore resolve
  inside whichever directory the tree is copied to and never escape it;
- a link may dangle when its target is not part of the tree (the kernel's own trees
  have such links too, e.g. ``iommu_group``); ``os.readlink`` still gives the name.

``snapshot_tree`` reads a whole tree back into a dict, for tests and for proving that
clearing a fault restores what applying it changed. ``restore_path`` copies one path
(file, directory, link, or its absence) from a pristine tree over a mutated one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = [
    "write_attr",
    "write_bytes",
    "symlink",
    "remove_path",
    "restore_path",
    "snapshot_tree",
    "cpumask",
    "parse_cpulist",
]


def _write(path: Path, data: bytes) -> None:
    try:
        f = open(path, "wb")  # noqa: SIM115 - closed by the `with f:` below, once either open has succeeded
    except FileNotFoundError:  # create the parents only when needed: one syscall less per file
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "wb")  # noqa: SIM115 - as above
    with f:
        f.write(data)


def write_attr(path: Path, value: object, *, newline: bool = True) -> None:
    """Write one sysfs/procfs attribute as text (``str(value)`` plus a newline)."""
    text = str(value)
    if newline and not text.endswith("\n"):
        text += "\n"
    _write(path, text.encode())


def write_bytes(path: Path, data: bytes) -> None:
    _write(path, data)


def symlink(link: Path, target: Path) -> None:
    """Create ``link`` pointing at ``target`` with a relative target, as sysfs does.

    The kernel climbs to a common ancestor that is a *strict* ancestor of the target and
    names the target from there, so a link to an ancestor directory reads
    ``../../../0000:17:00.0``, never ``../..``.
    """
    link.parent.mkdir(parents=True, exist_ok=True)
    up = os.path.relpath(target.parent, link.parent)
    rel = target.name if up == "." else f"{up}/{target.name}"
    if link.is_symlink() or link.exists():
        remove_path(link)
    os.symlink(rel, link)


def remove_path(path: Path) -> None:
    """Remove a file, link or directory tree; absent is fine."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def restore_path(pristine_root: Path, root: Path, rel: str) -> None:
    """Make ``root/rel`` exactly what ``pristine_root/rel`` is (or absent if it is absent).

    ``rel`` must be a canonical path (no symlinks in its directory part) so that both
    trees are addressed the same way; faults record canonical paths for this reason.
    """
    src = pristine_root / rel
    dst = root / rel
    remove_path(dst)
    if src.is_symlink():
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.readlink(src), dst)
    elif src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    elif src.is_file():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)


def snapshot_tree(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every path under root -> ("file", bytes) | ("link", target) | ("dir", "")."""
    out: dict[str, tuple[str, bytes | str]] = {}
    stack = [(str(root), "")]
    while stack:
        path, rel = stack.pop()
        with os.scandir(path) as it:
            for e in it:
                r = f"{rel}{e.name}"
                if e.is_symlink():
                    out[r] = ("link", os.readlink(e.path))
                elif e.is_dir():
                    out[r] = ("dir", "")
                    stack.append((e.path, r + "/"))
                else:
                    with open(e.path, "rb") as f:
                        out[r] = ("file", f.read())
    return out


def parse_cpulist(cpulist: str) -> list[int]:
    """``0-55,112-167`` -> [0, 1, ..., 55, 112, ..., 167]."""
    cpus: list[int] = []
    for part in cpulist.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            cpus.extend(range(int(lo), int(hi) + 1))
        elif part:
            cpus.append(int(part))
    return cpus


def cpumask(cpulist: str, nr_cpus: int) -> str:
    """The kernel's ``cpumap`` format: 32-bit hex words, most significant first."""
    mask = 0
    for c in parse_cpulist(cpulist):
        mask |= 1 << c
    words = max(1, (nr_cpus + 31) // 32)
    return ",".join(f"{(mask >> (32 * i)) & 0xFFFFFFFF:08x}" for i in reversed(range(words)))
