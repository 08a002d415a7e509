"""The Helm chart packaging/helm/agentd: rendered with its defaults and with every option
on (ci/full-values.yaml), linted strictly, each object validated against the Kubernetes
OpenAPI schemas (kubernetes-validate) or the Prometheus-operator CRD schemas (vendored in
tests/fixtures/prometheus-operator), and held to one source: the PrometheusRule and the
dashboards are grafana/'s files, packaging/k8s/daemonset.yaml is the chart's render."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import helm_python
import jsonschema
import kubernetes_validate
import pytest
import yaml

from agentd.config import load_config
from tests.support.crd import structural as _structural

pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "packaging" / "helm" / "agentd"
FULL_VALUES = CHART / "ci" / "full-values.yaml"
RULES = REPO / "grafana" / "alerts" / "agentd.rules.yml"
DASHBOARDS = REPO / "grafana" / "dashboards"
CRDS = REPO / "tests" / "fixtures" / "prometheus-operator"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
SYNC = "make helm"
RELEASE, NAMESPACE = "agentd", "gpu-monitoring"
# The chart's kubeVersion floor, a current release, and the newest kubernetes-validate has.
KUBE_VERSIONS = ("1.25.0", "1.30.0", "1.37.0")
MONITORING = {"ServiceMonitor": "servicemonitors", "PodMonitor": "podmonitors", "PrometheusRule": "prometheusrules"}
CRD_KINDS = {*MONITORING, "NodeFeatureRule"}  # validated against vendored CRD schemas, not Kubernetes' own


def _sync_module() -> Any:
    spec = importlib.util.spec_from_file_location("agentd_helm_sync", REPO / "packaging" / "helm" / "sync.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def render(values: dict) -> list[dict]:
    with helm_python.Chart.load(CHART) as chart:
        rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    objs = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        objs += [d for d in yaml.safe_load_all(text) if d]
    return objs


def by_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict], kind: str) -> dict:
    (obj,) = by_kind(objs, kind)
    return obj


FULL = yaml.safe_load(FULL_VALUES.read_text())
CASES = {"default": {}, "full": FULL}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> tuple[str, list[dict]]:
    return request.param, render(CASES[request.param])


@pytest.fixture(scope="module")
def default() -> list[dict]:
    return render({})


@pytest.fixture(scope="module")
def full() -> list[dict]:
    return render(FULL)


def _pod(objs: list[dict]) -> dict:
    return one(objs, "DaemonSet")["spec"]["template"]


def _agentd(objs: list[dict]) -> dict:
    (c,) = _pod(objs)["spec"]["containers"]
    return c


def _env(objs: list[dict]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in _agentd(objs)["env"]}


def _volumes(objs: list[dict]) -> dict[str, dict]:
    return {v["name"]: v for v in _pod(objs)["spec"]["volumes"]}


def _mounts(objs: list[dict]) -> dict[str, dict]:
    return {m["mountPath"]: m for m in _agentd(objs)["volumeMounts"]}


# --- chart metadata and lint ------------------------------------------------------


def test_chart_metadata_follows_the_project() -> None:
    with helm_python.Chart.load(CHART) as chart:
        meta = chart.metadata
    assert meta["apiVersion"] == "v2" and meta["name"] == "agentd"
    assert meta["version"] == VERSION and meta["appVersion"] == VERSION
    assert meta["kubeVersion"] == ">=1.25.0-0"


@pytest.mark.parametrize("name", sorted(CASES))
def test_helm_lint_strict_is_clean(name: str) -> None:
    report = helm_python.lint(CHART, CASES[name], strict=True, kube_version="v1.30.0")
    assert report["errors"] == []
    # Severity 1 (info) "icon is recommended" is the only message allowed: the project has
    # no icon, and a borrowed one would misrepresent the chart.
    assert [(m["severity"], m["error"]) for m in report["messages"]] == [(1, "icon is recommended")]


@pytest.mark.parametrize(
    "values",
    [{"nvml": {"mode": "all"}}, {"image": {"digest": "latest"}}, {"port": "9478"}, {"serviceMonitr": {"enabled": True}}],
    ids=["nvml-mode", "digest", "port-type", "unknown-key"],
)
def test_values_schema_rejects_wrong_values(values: dict) -> None:
    with helm_python.Chart.load(CHART) as chart:
        chart.validate_schema({})
        chart.validate_schema(FULL)
        with pytest.raises(helm_python.HelmValuesError):
            chart.validate_schema(values)


# --- validation against the Kubernetes and Prometheus-operator schemas ----------------


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_core_objects_validate_strictly(case: tuple[str, list[dict]], version: str) -> None:
    _name, objs = case
    core = [o for o in objs if o["kind"] not in CRD_KINDS]
    assert {o["kind"] for o in core} >= {"ServiceAccount", "ConfigMap", "DaemonSet"}
    for obj in core:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.fixture(scope="module")
def crd_schemas() -> dict[str, dict]:
    return {kind: _structural(json.loads((CRDS / f"{plural}.v1.schema.json").read_text())) for kind, plural in MONITORING.items()}


def test_structural_schema_catches_what_the_api_server_would_prune(crd_schemas: dict[str, dict], full: list[dict]) -> None:
    monitor = copy.deepcopy(one(full, "ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["relabellings"] = []
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, crd_schemas["ServiceMonitor"])
    monitor = copy.deepcopy(one(full, "ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["port"] = 9478  # port is a name; targetPort takes numbers
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, crd_schemas["ServiceMonitor"])


def test_monitoring_objects_validate_against_the_crds(case: tuple[str, list[dict]], crd_schemas: dict[str, dict]) -> None:
    name, objs = case
    kinds = {o["kind"] for o in objs if o["kind"] in MONITORING}
    assert kinds == ({"ServiceMonitor", "PodMonitor", "PrometheusRule"} if name == "full" else {"ServiceMonitor", "PrometheusRule"})
    for obj in objs:
        if obj["kind"] in MONITORING:
            assert obj["apiVersion"] == "monitoring.coreos.com/v1"
            jsonschema.validate(obj, crd_schemas[obj["kind"]])


# --- one source: grafana/ ----------------------------------------------------------


def test_chart_files_are_grafanas_bytes() -> None:
    sync = _sync_module()
    pairs = sync.sources()
    assert {p.name for p in pairs.values()} == {RULES.name} | {p.name for p in DASHBOARDS.glob("*.json")}
    for copied, source in pairs.items():
        assert copied.is_file() and copied.read_bytes() == source.read_bytes(), f"{copied} is stale: run `{SYNC}`"
    extra = {p.name for p in (CHART / "files" / "dashboards").iterdir()} - {p.name for p in DASHBOARDS.glob("*.json")}
    assert not extra, f"dashboards no longer in grafana/: {extra}; run `{SYNC}`"


def test_prometheus_rule_is_the_grafana_rules_file(case: tuple[str, list[dict]]) -> None:
    _name, objs = case
    rule = one(objs, "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
    # The Prometheus templates came through, not evaluated by Helm.
    assert "{{ $labels.instance }}" in json.dumps(rule["spec"]["groups"])


def test_dashboard_configmaps_are_the_grafana_json(case: tuple[str, list[dict]]) -> None:
    name, objs = case
    dashboards = [o for o in by_kind(objs, "ConfigMap") if "agentd.toml" not in o["data"]]
    label, value = ("grafana_dashboard", "1")
    found = {}
    for cm in dashboards:
        assert cm["metadata"]["labels"][label] == value
        ((key, text),) = cm["data"].items()
        found[key] = text
        assert cm["metadata"]["namespace"] == ("monitoring" if name == "full" else NAMESPACE)
        if name == "full":
            assert cm["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    assert found == {p.name: p.read_text() for p in DASHBOARDS.glob("*.json")}
    for text in found.values():
        json.loads(text)


def test_raw_manifest_is_the_charts_render() -> None:
    sync = _sync_module()
    manifest = REPO / "packaging" / "k8s" / "daemonset.yaml"
    assert manifest.read_text() == sync.render_manifest(), f"{manifest.relative_to(REPO)} is stale: run `{SYNC}`"
    objs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    assert [o["kind"] for o in objs] == ["Namespace", "ServiceAccount", "ConfigMap", "DaemonSet"]
    ns = one(objs, "Namespace")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for obj in objs:
        kubernetes_validate.validate(obj, "1.30.0", strict=True)


# --- behaviour ---------------------------------------------------------------------


def _relabel(rules: list[dict], meta: dict[str, str]) -> dict[str, str]:
    """Prometheus' replace action, enough for the chart's relabelings."""
    labels = dict(meta)
    for r in rules:
        assert r.get("action", "replace") == "replace"
        source = ";".join(labels.get(s, "") for s in r.get("sourceLabels", []))
        match = re.fullmatch(r.get("regex", "(.*)"), source)
        if match:
            labels[r["targetLabel"]] = match.expand(r.get("replacement", "$1").replace("$1", r"\1"))
    return labels


def test_scraped_series_carry_the_job_and_node_name_the_rules_and_dashboards_use(case: tuple[str, list[dict]]) -> None:
    name, objs = case
    endpoints = [one(objs, "ServiceMonitor")["spec"]["endpoints"][0]]
    if name == "full":
        endpoints.append(one(objs, "PodMonitor")["spec"]["podMetricsEndpoints"][0])
    meta = {"job": "gpu-monitoring/agentd", "instance": "10.0.0.7:9478", "__meta_kubernetes_pod_node_name": "gpu-node-17"}
    job_matcher = re.search(r'job=~"([^"]+)"', RULES.read_text())
    assert job_matcher
    for endpoint in endpoints:
        labels = _relabel(endpoint["relabelings"], meta)
        assert labels["instance"] == "gpu-node-17"
        assert re.fullmatch(job_matcher.group(1), labels["job"])
        assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    if name == "default":
        assert _relabel(endpoints[0]["relabelings"], meta)["job"] == "agentd"
    else:
        assert [_relabel(e["relabelings"], meta)["job"] for e in endpoints] == ["agentd-gpu", "agentd-pods"]
        assert _relabel(endpoints[0]["relabelings"], meta)["cluster"] == "gpu-west"
        assert endpoints[0]["metricRelabelings"] == FULL["serviceMonitor"]["metricRelabelings"]
        assert endpoints[0]["interval"] == "15s" and endpoints[0]["scrapeTimeout"] == "5s"


def test_service_and_monitors_select_the_pods(case: tuple[str, list[dict]]) -> None:
    name, objs = case
    pod_labels = _pod(objs)["metadata"]["labels"]
    service = one(objs, "Service")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    assert port["name"] == "metrics" and port["targetPort"] == "metrics"
    assert port["port"] == (9479 if name == "full" else 9478)
    sm = one(objs, "ServiceMonitor")
    assert sm["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    for pm in by_kind(objs, "PodMonitor"):
        assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ds = one(objs, "DaemonSet")
    assert ds["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert _env(objs)["AGENTD_LISTEN"] == f"0.0.0.0:{port['port']}"
    assert {p["name"]: p["containerPort"] for p in _agentd(objs)["ports"]} == {"metrics": port["port"]}


def test_labels_and_additional_labels(case: tuple[str, list[dict]]) -> None:
    name, objs = case
    for obj in objs:
        labels = obj["metadata"]["labels"]
        assert labels["helm.sh/chart"] == f"agentd-{VERSION}"
        assert labels["app.kubernetes.io/name"] == "agentd" and labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        if obj["kind"] == "NodeFeatureRule":  # cluster-scoped
            assert "namespace" not in obj["metadata"]
            continue
        assert obj["metadata"]["namespace"] == ("monitoring" if name == "full" and obj["kind"] == "ConfigMap" and "agentd.toml" not in obj["data"] else NAMESPACE)
        assert ("release" in labels) == (name == "full" and obj["kind"] in MONITORING)
        if "release" in labels:
            assert labels["release"] == "kube-prometheus-stack"
    assert not by_kind(objs, "Namespace") and not [o for o in objs if o["kind"].endswith(("Role", "RoleBinding"))]
    if name == "full":
        assert _pod(objs)["metadata"]["labels"]["team"] == "gpu"
        assert one(objs, "DaemonSet")["metadata"]["name"] == "gpu-agent"


def test_default_pod_is_unprivileged_and_reads_nvml_through_the_toolkit(default: list[dict]) -> None:
    spec = _pod(default)["spec"]
    assert spec["runtimeClassName"] == "nvidia" and spec["hostNetwork"] is True
    assert spec["automountServiceAccountToken"] is False
    assert one(default, "ServiceAccount")["automountServiceAccountToken"] is False
    sc = _agentd(default)["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532 and sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["readOnlyRootFilesystem"] is True
    env = _env(default)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert "/dev/kmsg" not in _mounts(default) and "/run/udev" not in _mounts(default)
    assert _agentd(default)["image"] == f"ghcr.io/example/agentd:{VERSION}"
    for section in _agentd(default)["resources"].values():
        assert not any(k.startswith("nvidia.com/") for k in section)


@pytest.mark.parametrize("mode", ["env", "volume-mounts", "cdi", "none"])
def test_nvml_modes(mode: str) -> None:
    objs = render({"nvml": {"mode": mode}})
    env = _env(objs)
    annotations = _pod(objs)["metadata"].get("annotations", {})
    mounts, volumes = _mounts(objs), _volumes(objs)
    devices = "/var/run/nvidia-container-devices/all"
    visible = {"env": "all", "volume-mounts": "/var/run/nvidia-container-devices"}
    assert env.get("NVIDIA_VISIBLE_DEVICES") == visible.get(mode)
    assert env.get("NVIDIA_DRIVER_CAPABILITIES") == ("utility" if mode in ("env", "volume-mounts") else None)
    assert (devices in mounts) == (mode == "volume-mounts")
    if mode == "volume-mounts":
        assert volumes[mounts[devices]["name"]]["hostPath"] == {"path": "/dev/null", "type": "CharDevice"}
    assert annotations.get("cdi.k8s.io/agentd") == ("nvidia.com/gpu=all" if mode == "cdi" else None)
    assert _agentd(objs)["securityContext"]["privileged"] is False
    for obj in objs:
        if obj["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(obj, "1.30.0", strict=True)


def test_kernel_log_and_udev(full: list[dict]) -> None:
    sc = _agentd(full)["securityContext"]
    assert sc["privileged"] is True and sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False
    assert "capabilities" not in sc  # privileged uid 0 has them all: a list would only pretend otherwise
    mounts, volumes = _mounts(full), _volumes(full)
    assert volumes[mounts["/dev/kmsg"]["name"]]["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    assert mounts["/run/udev"]["readOnly"] is True
    assert volumes[mounts["/run/udev"]["name"]]["hostPath"]["path"] == "/run/udev"
    # /sys and /proc stay read-only for the root, privileged container.
    assert mounts["/host/sys"]["readOnly"] is True and mounts["/host/proc"]["readOnly"] is True


def test_full_values_reach_the_pod(full: list[dict], tmp_path: Path) -> None:
    pod = _pod(full)
    c = _agentd(full)
    digest = FULL["image"]["digest"]
    assert c["image"] == f"registry.example.com/gpu/agentd@{digest}"
    assert pod["spec"]["initContainers"][0]["image"] == c["image"]
    assert "runtimeClassName" not in pod["spec"]
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    # Helm merges maps with the defaults (a key set to null removes one).
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.present": "true", **FULL["nodeSelector"]}
    assert pod["spec"]["affinity"] == FULL["affinity"]
    assert pod["spec"]["tolerations"] == FULL["tolerations"]
    assert c["resources"] == FULL["resources"]
    assert pod["metadata"]["annotations"]["example.com/owner"] == "gpu-team"
    env = {e["name"]: e["value"] for e in c["env"] if e["name"].startswith("AGENTD_")}
    assert env["AGENTD_LOG_LEVEL"] == "debug"
    (config,) = [o for o in by_kind(full, "ConfigMap") if "agentd.toml" in o["data"]]
    assert config["data"]["agentd.toml"] == FULL["config"]
    config_file = tmp_path / "agentd.toml"
    config_file.write_text(config["data"]["agentd.toml"])
    cfg = load_config(config_file, environ=env)
    assert cfg.expect.gpus == 8 and cfg.log_level == "debug" and str(cfg.host_root) == "/host"
    assert cfg.paths.nfd_features is not None


def test_optional_host_paths() -> None:
    objs = render({"nfd": {"enabled": False}, "hostPaths": {"machineId": "", "nccl": "/srv/nccl"}})
    env, mounts, volumes = _env(objs), _mounts(objs), _volumes(objs)
    assert "AGENTD_PATHS__NFD_FEATURES" not in env and "nfd-features" not in volumes
    assert "host-machine-id" not in volumes and "/host/etc/machine-id" not in mounts
    assert env["AGENTD_PATHS__NCCL_ENV"] == "/host/srv/nccl/nccl.env"
    assert volumes[mounts["/host/srv/nccl"]["name"]]["hostPath"]["path"] == "/srv/nccl"
    init = _pod(objs)["spec"]["initContainers"][0]
    assert init["command"][2:] == ["/host/srv/nccl", "/host/var/lib/agentd"]


def test_monitors_off_render_no_monitoring_objects() -> None:
    objs = render({"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False}, "dashboards": {"enabled": False}, "service": {"enabled": False}})
    assert sorted(o["kind"] for o in objs) == ["ConfigMap", "DaemonSet", "ServiceAccount"]
    with pytest.raises(helm_python.HelmError):
        render({"service": {"enabled": False}})
