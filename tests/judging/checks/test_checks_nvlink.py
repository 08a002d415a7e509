"""nvml.blind, gpu.lost, nvlink.link.down, nvlink.link.errors, nvlink.fabric.incomplete."""

from __future__ import annotations

from agentd.judging.checks.nvlink import check_nvlink, check_nvml_blind
from agentd.model import NvmlInfo, ProbeStatus
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


def _without_nvml_gpus(s, *indexes):
    return s.model_copy(update={"nvml": s.nvml.model_copy(update={"gpus": tuple(g for g in s.nvml.gpus if g.index not in indexes)})})


def test_healthy_node_is_not_blind():
    assert check_nvml_blind(inp(node())) == []
    assert check_nvml_blind(inp(node(gpus=0))) == []


def test_nvml_unavailable_with_gpus_on_pci_is_blind_and_critical():
    s = node().model_copy(update={"nvml": NvmlInfo(available=False, error="Insufficient Permissions")})
    f = check_nvml_blind(inp(s))
    assert problems(f) == [("critical", "nvml.blind", "nvml")]
    assert "Insufficient Permissions" in f[0].message and "8 NVIDIA GPUs" in f[0].message
    assert f[0].measured == "unavailable" and f[0].expected == 8
    assert "nvidia-smi" in f[0].remediation
    assert check_nvlink(inp(s)) == []  # the NVML checks themselves stay quiet: no data, no verdict


def test_nvml_unavailable_without_gpus_is_not_blind():
    s = node(gpus=0).model_copy(update={"nvml": NvmlInfo(available=False, error="Driver Not Loaded")})
    assert check_nvml_blind(inp(s)) == []


def test_fewer_gpus_in_nvml_than_on_pci_is_blind_not_lost():
    s = _without_nvml_gpus(with_gpu(node(), 2, in_nvml=False), 2)
    f = check_nvml_blind(inp(s))
    assert problems(f) == [("critical", "nvml.blind", "nvml")]
    bus = next(g.pci_bus_id for g in s.gpus if g.index == 2)
    assert "NVML lists 7 of the 8 NVIDIA GPUs" in f[0].message and bus in f[0].message
    assert f[0].measured == 7 and f[0].expected == 8
    # a GPU NVML does not list cannot be told from one hidden from agentd: not gpu.lost
    assert only(check_nvlink(inp(s)), "gpu.lost") == []


def test_blind_names_at_most_four_gpus():
    s = _without_nvml_gpus(node(), 0, 1, 2, 3, 4, 5)
    f = one(check_nvml_blind(inp(s)), "nvml.blind", "nvml")
    assert "NVML lists 2 of the 8" in f.message and "(+2 more)" in f.message


def test_a_hung_nvml_is_not_blind():
    s = node().model_copy(update={"nvml": NvmlInfo(available=False, error="not collected yet")})
    hung = ProbeStatus(name="nvml", ok=False, duration_s=5.0, finished_at=s.taken_at, timed_out=True)
    others = tuple(p for p in s.probes if p.name != "nvml")
    assert check_nvml_blind(inp(s.model_copy(update={"probes": (*others, hung)}))) == []
    assert problems(check_nvml_blind(inp(s))) == [("critical", "nvml.blind", "nvml")]


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
