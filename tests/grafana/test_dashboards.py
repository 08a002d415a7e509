"""The Grafana dashboards are importable and internally sound: datasource/job/instance
variables, unique panel ids, a non-overlapping grid 24 columns wide, every target a
PromQL expression on the ``${datasource}`` variable that promtool parses and that reads
only metrics agentd exports and finding codes it raises."""

from __future__ import annotations

import pytest

from tests.support.grafana import (
    DASHBOARDS,
    NO_PROMTOOL,
    PROMTOOL,
    all_panels,
    dashboards,
    finding_codes,
    known_finding_codes,
    known_metrics,
    label_values_selector,
    load_dashboard,
    metric_names,
    panel_targets,
    promtool_check_exprs,
    substitute,
    target_id,
    variable_query,
    variables,
)

DS_UID = "${datasource}"
PANEL_TYPES = {"row", "stat", "table", "timeseries", "state-timeline", "bargauge"}
# What each dashboard must show (by the metric families its queries read).
REQUIRED_METRICS = {
    "agentd-node": {
        "agentd_health_status", "agentd_finding", "agentd_ib_port_state_id", "agentd_ib_port_rate_bytes_per_second",
        "agentd_ib_port_rate_expected_bytes_per_second", "agentd_ib_port_symbol_errors_total", "agentd_ib_port_data_transmitted_bytes_total",
        "agentd_roce_pfc_pause_frames_total", "agentd_roce_ecn_enabled", "agentd_ib_port_np_cnp_packets_sent_total",
        "agentd_netdev_mtu_bytes", "agentd_netdev_mtu_expected_bytes", "agentd_pcie_link_current_width_lanes", "agentd_pcie_gpu_nic_path",
        "agentd_gdr_path_info", "agentd_gdr_available", "agentd_nvlink_state", "agentd_nvlink_errors_total", "agentd_nccl_file_write_success",
        "agentd_nccl_file_drift", "agentd_nccl_env_info", "agentd_probe_success", "agentd_probe_stale",
    },
    "agentd-fleet": {"agentd_health_status", "agentd_ib_port_state_id", "agentd_ib_port_symbol_errors_total", "agentd_nccl_env_info", "agentd_finding"},
}
ids = [p.name for p in DASHBOARDS]


def test_dashboards_exist():
    assert {d["uid"] for _, d in dashboards()} >= set(REQUIRED_METRICS)


@pytest.mark.parametrize("path", DASHBOARDS, ids=ids)
def test_importable_shape(path):
    d = load_dashboard(path)
    assert d["title"] and d["uid"] and d.get("id") is None
    assert 36 <= d["schemaVersion"] <= 41
    inputs = [i for i in d.get("__inputs", []) if i["type"] == "datasource"]
    assert inputs and all(i["pluginId"] == "prometheus" for i in inputs)
    assert {p["type"] for p in all_panels(d)} <= PANEL_TYPES
    required = {r["id"] for r in d.get("__requires", []) if r["type"] == "panel"}
    assert {p["type"] for p in all_panels(d)} - {"row"} <= required


def test_dashboard_uids_unique():
    uids = [d["uid"] for _, d in dashboards()]
    assert len(uids) == len(set(uids))


@pytest.mark.parametrize("path", DASHBOARDS, ids=ids)
def test_variables(path):
    d = load_dashboard(path)
    v = variables(d)
    assert v["datasource"]["type"] == "datasource" and v["datasource"]["query"] == "prometheus"
    for name in ("job", "instance"):
        assert v[name]["type"] == "query" and v[name]["datasource"]["uid"] == DS_UID
        selector, label = label_values_selector(variable_query(v[name]))
        assert selector.startswith("agentd_build_info") and label == name
    assert "$job" in variable_query(v["instance"]), "the node list follows the job selection"


@pytest.mark.parametrize("path", DASHBOARDS, ids=ids)
def test_panel_ids_unique_and_grid_sane(path):
    d = load_dashboard(path)
    panels = list(all_panels(d))
    pids = [p["id"] for p in panels]
    assert len(pids) == len(set(pids)), "duplicate panel ids"
    boxes = []
    for p in d["panels"]:
        g = p["gridPos"]
        assert g["w"] >= 1 and g["h"] >= 1 and g["x"] >= 0 and g["y"] >= 0 and g["x"] + g["w"] <= 24, (p["title"], g)
        boxes.append((p["title"], g))
    for i, (ta, a) in enumerate(boxes):
        for tb, b in boxes[i + 1:]:
            overlap = a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]
            assert not overlap, f"{ta!r} {a} overlaps {tb!r} {b}"


@pytest.mark.parametrize("path", DASHBOARDS, ids=ids)
def test_targets(path):
    d = load_dashboard(path)
    defined = {name: "x" for name in variables(d)}
    for p in all_panels(d):
        if p["type"] == "row":
            continue
        assert p["title"] and p["datasource"]["uid"] == DS_UID, p["title"]
        assert p.get("targets"), f"panel {p['title']!r} has no query"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
    for p, t in panel_targets(d):
        tid = target_id(d, p, t)
        assert t["datasource"] == {"type": "prometheus", "uid": DS_UID}, tid
        assert t.get("expr", "").strip(), tid
        substitute(t["expr"], **defined)  # KeyError: a variable the dashboard does not define
        unknown = metric_names(t["expr"]) - known_metrics()
        assert not unknown, f"{tid}: metrics agentd does not export: {unknown}"
        codes = finding_codes(t["expr"])
        assert codes <= known_finding_codes(), f"{tid}: unknown finding codes {codes - known_finding_codes()}"


@pytest.mark.parametrize("path", DASHBOARDS, ids=ids)
def test_required_content(path):
    d = load_dashboard(path)
    used = set().union(*(metric_names(t["expr"]) for _, t in panel_targets(d)))
    want = REQUIRED_METRICS.get(d["uid"], set())
    assert want <= used, f"missing: {want - used}"
    if d["uid"] == "agentd-fleet":
        exprs = [t["expr"] for _, t in panel_targets(d)]
        assert any('variable="NCCL_IB_HCA"' in e and "count by (value)" in e for e in exprs), "NCCL_IB_HCA consistency across nodes"
        if "agentd_bench_nccl_bus_bandwidth_bytes_per_second" in known_metrics():
            assert "agentd_bench_nccl_bus_bandwidth_bytes_per_second" in used


@pytest.mark.proc
@pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)
def test_every_expression_parses_with_promtool():
    exprs = {}
    for _, d in dashboards():
        values = {name: "agentd" if name == "job" else "gpu-node-1:9478" for name in variables(d)}
        for p, t in panel_targets(d):
            exprs[target_id(d, p, t)] = substitute(t["expr"], **values)
        for name, var in variables(d).items():
            if var["type"] == "query":
                exprs[f"{d['uid']}/variable/{name}"] = label_values_selector(substitute(variable_query(var), **values))[0]
    rc, out = promtool_check_exprs(exprs)
    assert rc == 0, out
    assert f"SUCCESS: {len(exprs)} rules found" in out, out
