"""GPUDirect RDMA prerequisites from small host-root trees with real strings."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.host.fs import HostRoot, ReadContext
from agentd.host.modules import kernel_version, parse_nvrm_version, read_gdr

# /proc/driver/nvidia/version as the two module flavours print it (535.161.08).
NVRM_OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.161.08  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Tue Feb 20 17:46:52 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)
NVRM_PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Feb 20 17:46:52 UTC 2024\n"
    "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n"
)
NVRM_ARM_OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  550.54.15  Release Build  (dvs-builder@U16-T02-35-3)  Tue Mar  5 22:15:33 UTC 2024\n"


def tree(root: Path, files: dict[str, str]) -> ReadContext:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith("/"):
            p.mkdir(exist_ok=True)
        else:
            p.write_text(content)
    return ReadContext(HostRoot.at(root), "gdr")


@pytest.mark.parametrize(
    "text, expected",
    [
        (NVRM_OPEN, ("535.161.08", True)),
        (NVRM_PROPRIETARY, ("535.161.08", False)),
        (NVRM_ARM_OPEN, ("550.54.15", True)),
        ("GCC version: gcc\n", (None, None)),
    ],
)
def test_parse_nvrm_version(text, expected):
    assert parse_nvrm_version(text) == expected


@pytest.mark.parametrize(
    "release, expected",
    [
        ("6.5.0-1024-nvidia", (6, 5)),
        ("5.4.0-150-generic", (5, 4)),
        ("4.18.0-513.el8.x86_64", (4, 18)),
        ("5.12.0", (5, 12)),
        ("garbage", None),
    ],
)
def test_kernel_version(release, expected):
    assert kernel_version(release) == expected


def test_h100_node_with_peermem_and_open_module(tmp_path):
    ctx = tree(
        tmp_path,
        {
            "sys/module/nvidia_peermem/version": "535.161.08\n",
            "sys/module/nvidia/version": "535.161.08\n",
            "proc/driver/nvidia/version": NVRM_OPEN,
            "proc/sys/kernel/osrelease": "6.5.0-1024-nvidia\n",
        },
    )
    gdr = read_gdr(ctx)
    assert gdr.peermem_loaded is True
    assert gdr.peermem_version_path == "sys/module/nvidia_peermem/version"
    assert gdr.peermem_version == "535.161.08"
    assert gdr.nvidia_loaded is True
    assert gdr.nvidia_driver_version == "535.161.08"
    assert gdr.nvidia_open_module is True
    assert gdr.kernel_release == "6.5.0-1024-nvidia"
    assert gdr.dmabuf_kernel_ok is True
    assert ctx.errors == []


def test_legacy_nv_peer_mem_path_wins_in_nccl_order(tmp_path):
    ctx = tree(
        tmp_path,
        {
            "sys/kernel/mm/memory_peers/nv_mem/version": "1.3-0\n",
            "sys/module/nvidia_peermem/version": "535.161.08\n",
        },
    )
    gdr = read_gdr(ctx)
    assert gdr.peermem_version_path == "sys/kernel/mm/memory_peers/nv_mem/version"
    assert gdr.peermem_version == "1.3-0"
    assert gdr.peermem_loaded is True


def test_nv_mem_nc_second(tmp_path):
    gdr = read_gdr(tree(tmp_path, {"sys/kernel/mm/memory_peers/nv_mem_nc/version": "1.0\n"}))
    assert gdr.peermem_version_path == "sys/kernel/mm/memory_peers/nv_mem_nc/version"
    assert gdr.peermem_loaded is False  # nvidia_peermem itself is not loaded


def test_peermem_module_without_version_file(tmp_path):
    # /sys/module/<m> exists but NCCL's version path does not: NCCL would not enable GDR.
    gdr = read_gdr(tree(tmp_path, {"sys/module/nvidia_peermem/": ""}))
    assert gdr.peermem_loaded is True
    assert gdr.peermem_version_path is None


def test_proprietary_module_old_kernel(tmp_path):
    ctx = tree(
        tmp_path,
        {
            "sys/module/nvidia/version": "535.161.08\n",
            "proc/driver/nvidia/version": NVRM_PROPRIETARY,
            "proc/sys/kernel/osrelease": "5.4.0-150-generic\n",
        },
    )
    gdr = read_gdr(ctx)
    assert gdr.peermem_loaded is False and gdr.peermem_version_path is None
    assert gdr.nvidia_open_module is False
    assert gdr.dmabuf_kernel_ok is False


def test_rhel8_kernel_is_too_old_for_dmabuf(tmp_path):
    gdr = read_gdr(tree(tmp_path, {"proc/sys/kernel/osrelease": "4.18.0-513.el8.x86_64\n"}))
    assert gdr.kernel_release == "4.18.0-513.el8.x86_64"
    assert gdr.dmabuf_kernel_ok is False


def test_driver_version_from_proc_when_sysfs_has_none(tmp_path):
    gdr = read_gdr(tree(tmp_path, {"sys/module/nvidia/": "", "proc/driver/nvidia/version": NVRM_OPEN}))
    assert gdr.nvidia_driver_version == "535.161.08"
    assert gdr.nvidia_open_module is True


@pytest.mark.parametrize("taint, is_open", [("POE\n", False), ("OE\n", True)])
def test_open_module_from_taint_without_procfs(tmp_path, taint, is_open):
    gdr = read_gdr(tree(tmp_path, {"sys/module/nvidia/version": "550.54.15\n", "sys/module/nvidia/taint": taint}))
    assert gdr.nvidia_open_module is is_open


def test_no_nvidia_at_all(tmp_path):
    ctx = tree(tmp_path, {"proc/sys/kernel/osrelease": "6.8.0-45-generic\n"})
    gdr = read_gdr(ctx)
    assert (gdr.nvidia_loaded, gdr.nvidia_driver_version, gdr.nvidia_open_module) == (False, None, None)
    assert gdr.dmabuf_kernel_ok is True
    assert ctx.errors == []


def test_garbage_files_are_errors_not_exceptions(tmp_path):
    ctx = tree(
        tmp_path,
        {"proc/sys/kernel/osrelease": "not-a-release\n", "proc/driver/nvidia/version": "\x00garbage\n", "sys/module/nvidia/": ""},
    )
    gdr = read_gdr(ctx)
    assert gdr.dmabuf_kernel_ok is None and gdr.nvidia_open_module is None
    assert {(e.path, e.kind) for e in ctx.errors} == {
        ("proc/sys/kernel/osrelease", "unparsable"),
        ("proc/driver/nvidia/version", "unparsable"),
    }


def test_empty_root(tmp_path):
    ctx = ReadContext(HostRoot.at(tmp_path), "gdr")
    gdr = read_gdr(ctx)
    assert gdr.model_dump() == {
        "peermem_loaded": False,
        "peermem_version_path": None,
        "peermem_version": None,
        "nvidia_loaded": False,
        "nvidia_driver_version": None,
        "nvidia_open_module": None,
        "kernel_release": None,
        "dmabuf_kernel_ok": None,
    }
    assert ctx.errors == []


def test_live_root_does_not_raise():
    ctx = ReadContext(HostRoot.at("/"), "gdr")
    gdr = read_gdr(ctx)
    assert gdr.kernel_release  # /proc/sys/kernel/osrelease always exists on Linux
