"""Node trees of the RDMA families beyond mlx5, from tests/fixtures/rdma-families/*.json.

Each JSON file holds what the public sources say of a family's devices (its ``sources``:
the kernel driver for counter names, the anchors' test data and issue threads for the
directory shapes and values); this module lays them out as the kernel does: the PCI
function under ``sys/devices``, ``sys/bus/pci/devices/<bdf>`` and the driver link, the RDMA
device under ``<function>/infiniband/<name>`` with its ``device`` link and ports, the netdev
under ``<function>/net/<name>``, and the class links. ``einval`` names the files whose
read answers EINVAL (``failing_reads`` installs that).
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from agentd.host import fs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rdma-families"
FAMILIES = tuple(sorted(p.stem for p in FIXTURES.glob("*.json")))


def load(family: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{family}.json").read_text())
    return data


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + ("\n" if text else ""))


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(target, link.parent), link)


def build(root: Path, *families: str) -> set[str]:
    """Lay the families' devices out under ``root``; the real paths that answer EINVAL."""
    einval: set[str] = set()
    for family in families:
        for d in load(family)["devices"]:
            fn = root / d["path"]
            for name, value in d["pci"].items():
                _write(fn / name, value)
            drivers = root / "sys/bus/pci/drivers" / d["driver"]
            drivers.mkdir(parents=True, exist_ok=True)
            _link(fn / "driver", drivers)
            _link(root / "sys/bus/pci/devices" / d["bdf"], fn)
            ib = fn / "infiniband" / d["rdma"]
            for name, value in d.get("attrs", {}).items():
                _write(ib / name, value)
            _link(ib / "device", fn)
            for name, value in d.get("hw_counters", {}).items():
                _write(ib / "hw_counters" / name, value)
            for port, attrs in d["ports"].items():
                pdir = ib / "ports" / port
                for name, value in attrs.items():
                    if isinstance(value, dict):
                        (pdir / name).mkdir(parents=True, exist_ok=True)
                        for counter, v in value.items():
                            _write(pdir / name / counter, v)
                    else:
                        _write(pdir / name, value)
            _link(root / "sys/class/infiniband" / d["rdma"], ib)
            nd = d.get("netdev")
            if nd is not None:
                ndir = fn / "net" / nd["name"]
                for name, value in nd["attrs"].items():
                    _write(ndir / name, value)
                _link(ndir / "device", fn)
                _link(root / "sys/class/net" / nd["name"], ndir)
            einval |= {str(ib / p) for p in d.get("einval", ())}
    return einval


def failing_reads(monkeypatch: pytest.MonkeyPatch, einval: set[str]) -> None:
    """Reads of ``einval`` answer EINVAL, as the kernel's attribute does there."""
    real = fs.read_bounded

    def read(path: Any, max_bytes: int = fs.MAX_ATTR_BYTES) -> bytes:  # Any: a str or fs._AtPath
        if str(path) in einval:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(path, max_bytes)

    monkeypatch.setattr(fs, "read_bounded", read)
