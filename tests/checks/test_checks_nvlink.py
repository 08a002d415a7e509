"""gpu.lost, nvlink.link.down, nvlink.link.errors, nvlink.fabric.incomplete."""

from __future__ import annotations

from agentd.judging.checks.nvlink import check_nvlink
from agentd.model import NvmlInfo
from tests.support.check_snapshots import (
    cfg,
    inp,
    later,
    node,
    one,
    only,
    problems,
    with_gpu,
    with_nvlink,
    with_nvml_gpu,
)


def test_healthy_no_findings():
    s = node()
    assert check_nvlink(inp(later(s, 10), [s])) == []


def test_pcie_gpus_without_nvlinks():
    assert check_nvlink(inp(node(nvlinks=0))) == []


def test_nvml_unavailable_not_judged_here():
    s = node().model_copy(update={"nvml": NvmlInfo(available=False, error="libnvidia-ml.so.1 not found")})
    assert check_nvlink(inp(s)) == []


def test_gpu_lost_nvml_error():
    s = with_nvml_gpu(node(), 5, error="GPU is lost")
    s = with_gpu(s, 5, in_nvml=False)  # as the collector sets it
    f = check_nvlink(inp(s))
    assert problems(f) == [("critical", "gpu.lost", "gpu5")]
    assert "GPU is lost" in f[0].message


def test_gpu_lost_on_pci_not_in_nvml():
    s = with_gpu(node(), 2, in_nvml=False)
    s = s.model_copy(update={"nvml": s.nvml.model_copy(update={"gpus": tuple(g for g in s.nvml.gpus if g.index != 2)})})
    f = one(check_nvlink(inp(s)), "gpu.lost", "gpu2")
    assert "7 GPUs in NVML, 8 on PCI" in f.message


def test_link_down_per_link_and_clears():
    s = with_nvlink(node(), 3, 5, state="down")
    f = one(check_nvlink(inp(s)), "nvlink.link.down", "gpu3:link5")
    assert f.severity == "critical" and "17 of 18" in f.message
    assert check_nvlink(inp(with_nvlink(s, 3, 5, state="up"))) == []


def test_link_count_against_config():
    s = with_nvlink(with_nvlink(node(), 1, 0, state="down"), 1, 1, state="down")
    f = check_nvlink(inp(s, config=cfg(expect={"nvlinks_per_gpu": 18})))
    assert problems(f) == [("critical", "nvlink.link.down", "gpu1")]
    assert "16 NVLinks active, expected 18" in f[0].message and "0, 1" in f[0].message
    assert check_nvlink(inp(s, config=cfg(expect={"nvlinks_per_gpu": 16}))) == []


def test_link_errors_need_history_and_clear():
    s0 = node()
    s1 = later(with_nvlink(s0, 4, 7, errors={"crc_flit": 12, "crc_data": 0, "replay": 3, "recovery": 0}), 10)
    assert check_nvlink(inp(s1)) == []
    f = one(check_nvlink(inp(s1, [s0])), "nvlink.link.errors", "gpu4:link7")
    assert f.severity == "warning" and "crc_flit +12" in f.message and "replay +3" in f.message
    s2 = later(s1, 700)
    assert check_nvlink(inp(s2, [s0, s1])) == []


def test_link_error_counter_reset_is_no_rate():
    s0 = with_nvlink(node(), 4, 7, errors={"crc_flit": 1000})
    s1 = later(with_nvlink(node(), 4, 7, errors={"crc_flit": 0}), 10)
    assert check_nvlink(inp(s1, [s0])) == []


def test_link_errors_threshold():
    s0 = node()
    s1 = later(with_nvlink(s0, 4, 7, errors={"replay": 50}), 10)
    assert check_nvlink(inp(s1, [s0], config=cfg(thresholds={"nvlink_error_per_s": 10}))) == []


def test_fabric_incomplete():
    s = with_nvml_gpu(node(), 6, fabric_state="in_progress", fabric_status=None)
    f = one(check_nvlink(inp(s)), "nvlink.fabric.incomplete", "gpu6")
    assert f.severity == "critical" and "in_progress" in f.message
    s = with_nvml_gpu(node(), 6, fabric_state="completed", fabric_status="NVML_ERROR_INSUFFICIENT_RESOURCES")
    assert only(check_nvlink(inp(s)), "nvlink.fabric.incomplete")
    s = with_nvml_gpu(node(), 6, fabric_state="not_supported", fabric_status=None)
    assert check_nvlink(inp(s)) == []
