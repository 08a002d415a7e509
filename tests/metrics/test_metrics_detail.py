"""The [metrics] detail keys (series budget, docs/metrics.md): at the defaults the per-item
series are folded (sums that always exist, gauges only where not at their usual value);
each key brings its per-item series back, and the folds agree with the detail."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from agentd.config import AgentConfig
from tests.support import service_snapshots as fixtures

ETHTOOL = {"rx_prio3_pause": 10, "rx_prio0_pause": 1, "rx_prio5_pause": 2, "tx_prio3_pause": 4,
           "rx_prio0_pause_duration": 250, "rx_prio3_pause_duration": 1500, "tx_prio1_bytes": 7, "tx_prio3_bytes": 99}


def samples(**detail: bool) -> dict[str, list[tuple[dict[str, str], float]]]:
    snap = fixtures.snapshot()
    netdevs = tuple(n.model_copy(update={"ethtool": ETHTOOL}) if n.name == "ens1np0" else n for n in snap.netdevs)
    state = fixtures.state(snap=snap.model_copy(update={"netdevs": netdevs}), config=AgentConfig(metrics=detail))
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(state.metrics_bytes().decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def pick(s: dict, name: str, **labels: str) -> list[float]:
    return [v for lab, v in s.get(name, []) if all(lab.get(k) == want for k, want in labels.items())]


def test_roce_priorities_fold_into_other_and_add_up():
    folded = samples()
    assert pick(folded, "agentd_roce_pfc_pause_frames_total", netdev="ens1np0", priority="3", direction="received") == [10]
    assert pick(folded, "agentd_roce_pfc_pause_frames_total", netdev="ens1np0", priority="other", direction="received") == [3]
    assert pick(folded, "agentd_roce_pfc_pause_duration_seconds_total", priority="other", direction="received") == [0.00025]
    assert pick(folded, "agentd_roce_priority_bytes_total", priority="other", direction="transmitted") == [7]
    assert not pick(folded, "agentd_roce_pfc_pause_frames_total", priority="0")
    full = samples(roce_every_priority=True)
    assert pick(full, "agentd_roce_pfc_pause_frames_total", priority="0", direction="received") == [1]
    assert pick(full, "agentd_roce_pfc_pause_frames_total", priority="5", direction="received") == [2]
    assert not pick(full, "agentd_roce_pfc_pause_frames_total", priority="other")


def test_roce_priority_setting_picks_the_priority_kept_apart():
    snap = fixtures.snapshot()
    netdevs = tuple(n.model_copy(update={"ethtool": ETHTOOL}) if n.name == "ens1np0" else n for n in snap.netdevs)
    state = fixtures.state(snap=snap.model_copy(update={"netdevs": netdevs}), config=AgentConfig(roce={"priority": 5}))
    text = state.metrics_bytes().decode()
    assert 'agentd_roce_pfc_pause_frames_total{netdev="ens1np0",priority="5",direction="received"} 2' in text
    assert 'agentd_roce_pfc_pause_frames_total{netdev="ens1np0",priority="other",direction="received"} 11' in text


def test_nvlink_per_link_detail_sums_to_the_gpu_totals():
    folded, full = samples(), samples(nvlink_per_link=True)
    assert "agentd_nvlink_link_errors_total" not in folded
    per_link = pick(full, "agentd_nvlink_link_errors_total", gpu="0", type="replay")
    assert sum(per_link) == pick(folded, "agentd_nvlink_errors_total", gpu="0", type="replay")[0] == 2
    assert {lab["link"] for lab, _ in full["agentd_nvlink_state"]} == {"0", "1"}
    assert {lab["link"] for lab, _ in folded["agentd_nvlink_state"]} == {"1"}  # only the link that is down
    assert {lab["link"] for lab, _ in folded["agentd_nvlink_info"]} == {"1"}


def test_ib_unnamed_counters_per_port_detail():
    folded, full = samples(), samples(ib_counters_per_port=True)
    assert "agentd_ib_port_hw_counters_total" not in folded
    assert pick(full, "agentd_ib_port_hw_counters_total", device="mlx5_0", port="1", counter="weird_counter") == [7]
    assert pick(folded, "agentd_ib_hw_counters_total", counter="weird_counter") == pick(full, "agentd_ib_hw_counters_total", counter="weird_counter") == [7]


def test_pcie_bridges_detail():
    folded, full = samples(), samples(pcie_bridges=True)
    bridge = {"pci_bus_id": "00000000:18:00.0", "role": "bridge"}
    assert not pick(folded, "agentd_pcie_link_current_width_lanes", **bridge)  # at its maximum: not repeated
    assert pick(full, "agentd_pcie_link_current_width_lanes", **bridge) == [16]
    assert pick(folded, "agentd_pcie_link_current_speed_transfers_per_second", pci_bus_id="00000000:1C:00.0") == [16e9]  # GPUs always
    assert pick(folded, "agentd_pcie_acs_redirect_enabled", **bridge) == [1]  # redirect on: always shown
    assert pick(folded, "agentd_pcie_acs_redirect_bridges") == [1]
