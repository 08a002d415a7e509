"""Real data from upstream projects, vendored under ``tests/fixtures/``.

Provenance and licences: ``tests/fixtures/SOURCES.md``. The sysfs trees under
``tests/fixtures/sysfs/<name>/sys`` were unpacked from the upstream ``.tar.gz`` archives
with their symlinks intact (``bus/pci/devices/*``, ``class/net/*``, ``device`` links), so
readers see the layout the kernel makes. Tests read them in place; a test that writes
into a tree works on ``writable_copy``. Never write into the vendored files.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from agentd.host.fs import HostRoot, ReadContext

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SYSFS_TREES = FIXTURES / "sysfs"
OUTPUTS = FIXTURES / "outputs"
NCCL_TOPO = FIXTURES / "nccl-topo"

TREES = ("gpud-h100-ndr", "procfs-fixtures", "node-exporter-fixtures")


def writable_copy(tree: Path, dest: Path) -> Path:
    """Copy ``tree`` (a directory holding ``sys/``) to ``dest``, symlinks kept as symlinks
    (dangling ones included), every file and directory writable. Returns ``dest``."""
    shutil.copytree(tree, dest, symlinks=True)
    for dirpath, _dirnames, filenames in os.walk(dest):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            p = Path(dirpath) / name
            if not p.is_symlink():
                os.chmod(p, 0o644)
    return dest


def flattened_copy(tree: Path, dest: Path) -> Path:
    """``writable_copy`` with every symlink replaced by a plain file holding the link's
    target text: the shape a checkout that does not keep symlinks hands the readers.
    Readers must not raise on it. Returns ``dest``."""
    writable_copy(tree, dest)
    links = [Path(d) / n for d, dirnames, filenames in os.walk(dest) for n in (*dirnames, *filenames)
             if (Path(d) / n).is_symlink()]  # os.walk lists links to directories as dirnames, unfollowed
    for p in links:
        target = os.readlink(p)
        p.unlink()
        p.write_text(target)
    return dest


def context_over(root: Path, files: dict[str, str], source: str = "system") -> ReadContext:
    """A ReadContext over a host root made of ``files`` (root-relative path -> text),
    written under ``root``."""
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
    return ReadContext(HostRoot.at(root), source)
