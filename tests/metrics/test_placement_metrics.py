"""The placement metrics area: NVLink domain and rail layout series (agentd.metrics.placement)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.support.check_snapshots import node
from tests.support.placement_snapshots import CLIQUE_ID, CLUSTER_UUID, COMPUTE, DOMAIN_ID, fabric_finding, gb200_tray
from tests.support.service_snapshots import state


def _samples(**kw) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = state(**kw).metrics_bytes().decode("utf-8")
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_tray_in_a_domain() -> None:
    m = _samples(snap=gb200_tray(), compute_hcas=COMPUTE.compute)
    assert m["agentd_nvlink_domain_info"] == [
        ({"domain": DOMAIN_ID, "cluster_uuid": CLUSTER_UUID, "clique_id": str(CLIQUE_ID), "health": "ok"}, 1.0)]
    assert m["agentd_nvlink_domain_gpus"] == [({}, 4.0)]
    [(labels, value)] = m["agentd_rail_layout_info"]
    assert len(labels["hash"]) == 12 and value == 1.0


def test_domain_health_label_and_layout_follow_the_state() -> None:
    warn = (fabric_finding("nvlink.fabric.degraded", "warning"),)
    m = _samples(snap=gb200_tray(), compute_hcas=COMPUTE.compute, findings=warn)
    assert m["agentd_nvlink_domain_info"][0][0]["health"] == "degraded"
    other = _samples(snap=gb200_tray(), compute_hcas=("mlx5_4", "mlx5_5"))  # the BlueFields as compute: another layout
    assert other["agentd_rail_layout_info"] != _samples(snap=gb200_tray(), compute_hcas=COMPUTE.compute)["agentd_rail_layout_info"]


def test_no_domain_series_without_a_domain() -> None:
    m = _samples(snap=node(), compute_hcas=tuple(f"mlx5_{i}" for i in range(8)))
    assert "agentd_nvlink_domain_info" not in m and "agentd_nvlink_domain_gpus" not in m
    assert len(m["agentd_rail_layout_info"]) == 1
    split = _samples(snap=gb200_tray(gpu1={"fabric_clique_id": 9}), compute_hcas=COMPUTE.compute)
    assert "agentd_nvlink_domain_info" not in split
