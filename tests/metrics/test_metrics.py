"""The exposition: parses, follows the naming rules, passes promtool, matches docs/metrics.md."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentd.base.expo import Exposition, Family, format_value
from agentd.base.ids import bus_id_label
from agentd.daemon.exposition import REGISTRY
from tests.support import service_snapshots as fixtures

ROOT = Path(__file__).resolve().parents[2]
PROMTOOL = shutil.which("promtool")


def _parse(text: bytes) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text.decode())}


def _samples(text: bytes) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _states():
    yield "ready", fixtures.state(findings=fixtures.FINDINGS)
    yield "starting", fixtures.state(ready=False)
    yield "stale", fixtures.state(snap=fixtures.snapshot(probes=fixtures.probes(__import__("time").time(), stale={"nvml": 300.0})))


@pytest.mark.parametrize("name,state", list(_states()), ids=[n for n, _ in _states()])
def test_exposition_parses_and_follows_conventions(name, state):
    text = state.metrics_bytes()
    fams = _parse(text)
    assert fams, "no families"
    declared = {f.name: f for f in REGISTRY.families()}
    seen: set[tuple[str, tuple]] = set()
    lines = text.decode().splitlines()
    helped = {l.split()[2] for l in lines if l.startswith("# HELP ")}
    typed = {l.split()[2]: l.split()[3] for l in lines if l.startswith("# TYPE ")}
    for line in lines:
        if line.startswith("#") or not line:
            continue
        metric = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
        assert metric in declared, metric
        assert metric in helped and metric in typed, f"{metric}: HELP and TYPE required"
        assert metric.startswith(("agentd_",)), metric
    for metric, typ in typed.items():
        assert typ == declared[metric].type
        assert metric.endswith("_total") == (typ == "counter"), metric
    for sname, samples in _samples(text).items():
        for labels, _ in samples:
            key = (sname, tuple(sorted(labels.items())))
            assert key not in seen, f"duplicate series {key}"
            seen.add(key)


@pytest.mark.proc
@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package 'prometheus'; CI installs it)")
@pytest.mark.parametrize("name,state", list(_states()), ids=[n for n, _ in _states()])
def test_promtool_check_metrics_is_clean(name, state):
    res = subprocess.run([PROMTOOL, "check", "metrics"], input=state.metrics_bytes(), capture_output=True, timeout=30)
    assert res.returncode == 0, (res.stdout + res.stderr).decode()
    assert not (res.stdout + res.stderr).strip(), (res.stdout + res.stderr).decode()


def test_values_and_units_of_a_hand_built_state():
    s = _samples(fixtures.state(findings=fixtures.FINDINGS).metrics_bytes())

    def value(name: str, **labels: str) -> float:
        hits = [v for lab, v in s[name] if all(lab.get(k) == v2 for k, v2 in labels.items())]
        assert len(hits) == 1, (name, labels, s.get(name))
        return hits[0]

    port = {"device": "mlx5_0", "port": "1"}
    assert value("agentd_ib_port_state_id", **port) == 4
    assert value("agentd_ib_port_rate_bytes_per_second", **port) == 400 * 125_000_000
    assert value("agentd_ib_port_rate_expected_bytes_per_second", **port) == 400 * 125_000_000
    assert value("agentd_ib_port_width_lanes", **port) == 4
    assert value("agentd_ib_port_data_transmitted_bytes_total", **port) == 4000  # words x 4
    assert value("agentd_ib_port_data_received_bytes_total", **port) == 8000
    assert value("agentd_ib_hw_counters_total", counter="weird_counter") == 7  # summed over ports; per port is opt-in
    assert "agentd_ib_port_hw_counters_total" not in s
    assert value("agentd_ib_port_pma_saturated", counter="symbol_error", **port) == 1  # 65535 = 16-bit max
    assert not [lab for lab, _ in s["agentd_ib_port_pma_saturated"] if lab["counter"] == "link_downed"]  # not saturated: no series
    assert value("agentd_ib_pma_saturated_counters") == 1
    info = [lab for lab, _ in s["agentd_ib_port_info"] if lab["device"] == "mlx5_0"][0]
    assert info == {**port, "netdev": "ibp27s0", "link_layer": "InfiniBand", "pci_bus_id": "00000000:1B:00.0",
                    "numa_node": "0", "nearest_gpus": "0", "role": "compute", "sm_sl": "", "nccl_ib_sl": ""}
    assert value("agentd_roce_ecn_enabled", netdev="ens1np0", priority="3", point="np") == 1
    assert value("agentd_roce_ecn_enabled", netdev="ens1np0", priority="3", point="rp") == 0
    assert value("agentd_roce_pfc_enabled", netdev="ens1np0", priority="3") == 1
    assert value("agentd_roce_pfc_enabled", netdev="ens1np0", priority="0") == 0
    assert value("agentd_roce_pfc_pause_frames_total", netdev="ens1np0", priority="3", direction="received") == 10
    assert value("agentd_netdev_mtu_bytes", netdev="ens1np0") == 1500
    assert value("agentd_netdev_mtu_expected_bytes", netdev="ens1np0") == 9000
    assert value("agentd_pcie_gpu_nic_path", gpu="0", device="mlx5_1") == 5  # SYS
    assert value("agentd_pcie_link_current_speed_transfers_per_second", pci_bus_id="00000000:1C:00.0") == 16e9
    assert value("agentd_gdr_path_info", path="peermem") == 1
    assert value("agentd_nvlink_state", gpu="0", link="1") == 0  # down: named
    assert not [lab for lab, _ in s["agentd_nvlink_state"] if lab["link"] == "0"]  # up: counted, not named
    assert value("agentd_nvlink_links", gpu="0") == 2 and value("agentd_nvlink_links_up", gpu="0") == 1
    assert value("agentd_nvlink_remote_links", gpu="0", remote_pci_bus_id="00000000:05:00.0", remote_type="nvswitch", version="4") == 1
    assert value("agentd_nvlink_errors_total", gpu="0", type="replay") == 2  # summed over the GPU's links
    assert "agentd_nvlink_link_errors_total" not in s
    assert value("agentd_finding", code="ib.port.down", severity="critical", subject="mlx5_1:1") == 1
    assert value("agentd_health_status") == 2
    assert value("agentd_healthy") == 0
    assert value("agentd_nccl_file_write_failures_total", file="topo.xml") == 3
    assert value("agentd_nccl_env_info", variable="NCCL_IB_HCA") == 1
    assert value("agentd_probe_success", probe="nvml") == 1
    assert value("agentd_netdev_up", netdev='we"ird\\name') == 0  # escaping round-trips


def test_stale_probe_shows_in_metrics_and_makes_health_critical():
    import time

    st = fixtures.state(snap=fixtures.snapshot(probes=fixtures.probes(time.time(), stale={"nvml": 300.0})))
    s = _samples(st.metrics_bytes())
    stale = {lab["probe"]: v for lab, v in s["agentd_probe_stale"]}
    assert stale["nvml"] == 1 and stale["ib"] == 0
    assert ({"code": "agentd.data.stale", "severity": "critical", "subject": "nvml"}, 1.0) in s["agentd_finding"]
    assert s["agentd_health_status"] == [({}, 2.0)]


def test_not_ready_state_exports_only_agent_metrics():
    s = _samples(fixtures.state(ready=False).metrics_bytes())
    assert s["agentd_ready"] == [({}, 0.0)]
    assert s["agentd_healthy"] == [({}, 0.0)]
    assert not any(name.startswith("agentd_ib_") for name in s)


def test_writer_rejects_wrong_labels_and_formats_values():
    x = Exposition([Family("agentd_x", "gauge", "x", ("a",))])
    with pytest.raises(ValueError):
        x.add("agentd_x", (), 1)
    assert format_value(True) == "1" and format_value(3) == "3" and format_value(2.0) == "2"
    assert format_value(0.5) == "0.5" and format_value(float("nan")) == "NaN" and format_value(float("-inf")) == "-Inf"
    assert bus_id_label("0000:1b:00.0") == "00000000:1B:00.0"
    assert bus_id_label(None) == ""


def test_gzip_is_cached_and_decodes_to_the_text():
    import gzip

    st = fixtures.state()
    assert gzip.decompress(st.metrics_gzip()) == st.metrics_bytes()
    assert st.metrics_gzip() is st.metrics_gzip()


def test_docs_metrics_md_matches_the_declared_families():
    doc = ROOT / "docs" / "metrics.md"
    assert doc.read_text() == REGISTRY.reference_markdown(), "regenerate: python -m agentd.daemon.exposition > docs/metrics.md"


def test_area_cache_reuses_unchanged_parts_and_follows_changes():
    import dataclasses
    import time

    now = time.time()
    a = fixtures.state(now=now)
    first = a.metrics_bytes()
    b = dataclasses.replace(a, generated_at=now + 2)  # same snapshot objects, new State
    assert b.metrics_bytes().replace(repr(now + 2).encode(), repr(now).encode()) == first
    port = a.snapshot.hcas[0].ports[0].model_copy(update={"state_id": 1, "state": "DOWN"})
    hcas = (a.snapshot.hcas[0].model_copy(update={"ports": (port,)}), *a.snapshot.hcas[1:])
    c = dataclasses.replace(a, snapshot=a.snapshot.model_copy(update={"hcas": hcas}))
    assert b'agentd_ib_port_state_id{device="mlx5_0",port="1"} 1' in c.metrics_bytes()
    assert b'agentd_ib_port_state_id{device="mlx5_0",port="1"} 4' in first
