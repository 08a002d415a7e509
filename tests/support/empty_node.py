"""A host root with nothing agentd judges: no GPU, no RDMA device (a CPU or login node).

Real published sysfs (node_exporter's fixtures, tests/fixtures/SOURCES.md) without its
``class/infiniband``: an Intel I350 Ethernet NIC on PCI, bonds and plain netdevs. The same
tree with its InfiniBand devices is a node that has something to judge."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.paths import FIXTURES

SOURCE = FIXTURES / "sysfs" / "node-exporter-fixtures" / "sys"


def empty_node(dest: Path, *, rdma: bool = False) -> Path:
    """Write the tree under ``dest`` (``dest/sys``, ``dest/proc``); ``rdma``: keep the
    InfiniBand devices (then there is something to judge)."""
    shutil.copytree(SOURCE, dest / "sys", symlinks=True)
    if not rdma:
        shutil.rmtree(dest / "sys" / "class" / "infiniband")
    (dest / "proc").mkdir()
    return dest
