"""What NCCL looks at to decide whether GPUDirect RDMA can work, read from sysfs/procfs.

Peer memory: NCCL (src/transport/net_ib/gdr.cc) enables NCCL_PTR_CUDA when any of three
files exists, checked with access(F_OK) in this order; we test exactly those paths.
DMA-BUF needs the open GPU kernel modules and Linux >= 5.12; the kernel half is decided
here by version only (distribution backports are not detected).
"""

from __future__ import annotations

import re

from agentd.host.fs import ReadContext, parse_decimal
from agentd.model import GdrInfo

PEERMEM_MODULE = "sys/module/nvidia_peermem"
# NCCL's order (gdr.cc): the legacy nv_peer_mem paths first, then nvidia_peermem.
PEERMEM_VERSION_PATHS = (
    "sys/kernel/mm/memory_peers/nv_mem/version",
    "sys/kernel/mm/memory_peers/nv_mem_nc/version",
    "sys/module/nvidia_peermem/version",
)
NVIDIA_MODULE = "sys/module/nvidia"
NVIDIA_MODULE_VERSION = "sys/module/nvidia/version"
NVIDIA_MODULE_TAINT = "sys/module/nvidia/taint"
PROC_NVIDIA_VERSION = "proc/driver/nvidia/version"
OSRELEASE = "proc/sys/kernel/osrelease"
DMABUF_MIN_KERNEL = (5, 12)

# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.161.08  Release Build ..."
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Feb 20 ..."
_NVRM = re.compile(r"NVRM version:.*?Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)*)")
_RELEASE = re.compile(r"^(\d+)\.(\d+)", re.ASCII)


def parse_nvrm_version(text: str) -> tuple[str | None, bool | None]:
    """(driver version, open module?) from /proc/driver/nvidia/version."""
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            m = _NVRM.search(line)
            is_open = "Open Kernel Module" in line
            return (m.group(1) if m else None), is_open
    return None, None


def kernel_version(release: str) -> tuple[int, int] | None:
    """(major, minor) of a release string: "6.5.0-1024-nvidia" -> (6, 5); None when it
    does not start with two ASCII numbers (of sane length)."""
    m = _RELEASE.match(release.strip())
    if not m:
        return None
    major, minor = parse_decimal(m.group(1)), parse_decimal(m.group(2))
    return None if major is None or minor is None else (major, minor)


def _exists(ctx: ReadContext, rel: str) -> bool:
    return ctx.exists(rel)


def read_gdr(ctx: ReadContext) -> GdrInfo:
    """GPUDirect RDMA prerequisites. Absent modules are facts, not read errors."""
    peermem_path: str | None = None
    peermem_version: str | None = None
    for rel in PEERMEM_VERSION_PATHS:
        if _exists(ctx, rel):
            peermem_path = rel
            peermem_version = ctx.text(rel) or None
            break

    nvidia_loaded = _exists(ctx, NVIDIA_MODULE)
    driver_version = ctx.text(NVIDIA_MODULE_VERSION) or None
    is_open: bool | None = None
    proc = ctx.text(PROC_NVIDIA_VERSION)
    if proc is not None:
        proc_version, is_open = parse_nvrm_version(proc)
        if proc_version is None and is_open is None:
            ctx.error(PROC_NVIDIA_VERSION, "unparsable", f"no NVRM version line in {proc[:80]!r}")
        driver_version = driver_version or proc_version
    if is_open is None and nvidia_loaded:
        # Without procfs (a copied tree): the proprietary module taints the kernel with
        # 'P'; the open one (Dual MIT/GPL) only with 'O' (out of tree) and maybe 'E'.
        taint = ctx.text(NVIDIA_MODULE_TAINT)
        if taint:
            is_open = "P" not in taint

    release = ctx.text(OSRELEASE) or None
    dmabuf_ok: bool | None = None
    if release is not None:
        ver = kernel_version(release)
        if ver is None:
            ctx.error(OSRELEASE, "unparsable", f"not a kernel release: {release[:60]!r}")
        else:
            dmabuf_ok = ver >= DMABUF_MIN_KERNEL

    return GdrInfo(
        peermem_loaded=_exists(ctx, PEERMEM_MODULE),
        peermem_version_path=peermem_path,
        peermem_version=peermem_version,
        nvidia_loaded=nvidia_loaded,
        nvidia_driver_version=driver_version,
        nvidia_open_module=is_open,
        kernel_release=release,
        dmabuf_kernel_ok=dmabuf_ok,
    )
