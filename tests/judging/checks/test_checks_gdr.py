"""gdr.path, gdr.unavailable, gdr.peermem.unregistered."""

from __future__ import annotations

from agentd.judging.checks.gdr import check_gdr
from agentd.model import NodeSnapshot
from tests.support.check_snapshots import inp, node, one, only, problems, with_gdr

NO_PEERMEM = {"peermem_loaded": False, "peermem_version_path": None, "peermem_version": None}


def test_peermem_registered_reports_path_ok():
    f = check_gdr(inp(node()))
    assert problems(f) == []
    assert "nvidia-peermem" in one(f, "gdr.path", "node").message


def test_peermem_gone_proprietary_module_is_critical():
    s = with_gdr(node(), **NO_PEERMEM)
    f = one(check_gdr(inp(s)), "gdr.unavailable", "node")
    assert f.severity == "critical"
    assert "nvidia_peermem not loaded" in f.message and "proprietary" in f.message
    assert only(check_gdr(inp(s)), "gdr.path") == []


def test_dmabuf_path_without_peermem():
    s = with_gdr(node(), **NO_PEERMEM, nvidia_open_module=True, dmabuf_kernel_ok=True)
    f = check_gdr(inp(s))
    assert problems(f) == []
    assert "DMA-BUF" in one(f, "gdr.path").message and one(f, "gdr.path").measured == "dmabuf"


def test_dmabuf_blocked_by_old_kernel_or_old_cuda():
    s = with_gdr(node(), **NO_PEERMEM, nvidia_open_module=True, dmabuf_kernel_ok=False, kernel_release="5.4.0-150")
    assert "kernel 5.4.0-150 < 5.12" in one(check_gdr(inp(s)), "gdr.unavailable").message
    s = with_gdr(node(), **NO_PEERMEM, nvidia_open_module=True, dmabuf_kernel_ok=True)
    s = s.model_copy(update={"nvml": s.nvml.model_copy(update={"cuda_driver_version": 11040})})
    assert "CUDA driver 11.4 < 11.7" in one(check_gdr(inp(s)), "gdr.unavailable").message


def test_loaded_but_unregistered_peermem():
    s = with_gdr(node(), peermem_version_path=None, peermem_version=None)
    f = check_gdr(inp(s))
    assert one(f, "gdr.peermem.unregistered", "node").severity == "warning"
    assert one(f, "gdr.unavailable").message.count("loaded but not registered") == 1
    # DMA-BUF still possible: only the warning remains
    s = with_gdr(s, nvidia_open_module=True)
    assert problems(check_gdr(inp(s))) == [("warning", "gdr.peermem.unregistered", "node")]


def test_not_judged_without_gpus_or_compute_hcas():
    s = with_gdr(node(), **NO_PEERMEM)
    assert check_gdr(inp(s.model_copy(update={"gpus": ()}))) == []
    assert check_gdr(inp(s.model_copy(update={"hcas": ()}))) == []
    assert check_gdr(inp(NodeSnapshot(taken_at=1.0, host_root="/"))) == []
