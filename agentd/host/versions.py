"""Versions of the RDMA stack the file system tells (``SoftwareVersions``).

- ``mlx5_core``: ``sys/module/mlx5_core/version``. MLNX_OFED and DOCA-OFED modules set
  one ("5.8-4.1.5"); the kernel's own driver has none (None, no error).
- ``rdma_core``: rdma-core installs libibverbs as ``libibverbs.so.1.<ABI>.<version>``
  with the ``libibverbs.so.1`` symlink to it (Ubuntu 24.04:
  ``usr/lib/x86_64-linux-gnu/libibverbs.so.1 -> libibverbs.so.1.14.50.0``, rdma-core
  50.0). The link is read (never followed) in the library directories below, the first
  found wins; the versioned file itself is not needed.

Cost: one small read and at most a readlink per directory (six), confined to the host
root as every read.
"""

from __future__ import annotations

import re

from agentd.host.fs import ReadContext
from agentd.model import SoftwareVersions

MLX5_CORE_VERSION = "sys/module/mlx5_core/version"
VERSION_MAX_BYTES = 256
LIBIBVERBS = "libibverbs.so.1"
LIB_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib/powerpc64le-linux-gnu",
    "usr/lib64",
    "lib64",
    "usr/lib",
)
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+~_-]{0,63}")
_LIBIBVERBS_TARGET = re.compile(r"libibverbs\.so\.1\.\d{1,4}\.(\d[0-9A-Za-z.+~_-]{0,63})")


def rdma_core_version(target: str) -> str | None:
    """rdma-core's version from libibverbs' versioned file name
    (``libibverbs.so.1.14.50.0`` -> ``50.0``); None for another name, and for the
    libibverbs before rdma-core (``libibverbs.so.1.0.0``: a bare number, no version)."""
    m = _LIBIBVERBS_TARGET.fullmatch(target.rpartition("/")[2])
    return m.group(1) if m and not m.group(1).isdigit() else None


def _mlx5_core(ctx: ReadContext) -> str | None:
    data = ctx.raw(MLX5_CORE_VERSION, max_bytes=VERSION_MAX_BYTES + 1)
    if data is None:
        return None
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        ctx.error(MLX5_CORE_VERSION, "unparsable", "not ASCII text")
        return None
    if not text:
        return None
    if len(data) > VERSION_MAX_BYTES or _VERSION.fullmatch(text) is None:
        ctx.error(MLX5_CORE_VERSION, "unparsable", f"not a version: {text[:60]!r}")
        return None
    return text


def _rdma_core(ctx: ReadContext) -> tuple[str | None, str | None]:
    for d in LIB_DIRS:
        name = ctx.readlink_name(f"{d}/{LIBIBVERBS}")  # the target's file name; None: no link
        if name is None:
            continue
        version = rdma_core_version(name)
        if version is None:
            continue  # a link to something else: look on
        return version, f"{d}/{name}"  # rdma-core links within the directory
    return None, None


def read_versions(ctx: ReadContext) -> SoftwareVersions:
    """The node's SoftwareVersions (fields None where the node has no such thing). Never raises."""
    rdma_core, library = _rdma_core(ctx)
    return SoftwareVersions(mlx5_core=_mlx5_core(ctx), rdma_core=rdma_core, rdma_core_library=library)
