"""The chart's optional NodeFeatureRule (nfd.taint): node-feature-discovery's nfd-master
taints a node whose agentd.io/fabric-health label is critical. Rendered off, on and with
NoExecute; validated against NFD's NodeFeatureRule CRD schema (vendored,
tests/fixtures/node-feature-discovery); the plain manifest is the chart's render; and the
rule, evaluated as NFD evaluates it over the labels agentd writes, taints exactly the
critical node: not a degraded one, not one in maintenance, not one whose labels expired."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import re
from typing import Any

import helm_python
import jsonschema
import pytest
import yaml

from agentd.outputs.nfd import render_nfd_features
from tests.support.crd import structural
from tests.support.paths import FIXTURES, REPO
from tests.support.placement_snapshots import COMPUTE, T0, fabric_finding, gb200_tray

pytestmark = pytest.mark.packaging

CHART = REPO / "packaging" / "helm" / "agentd"
RULE_MANIFEST = REPO / "packaging" / "k8s" / "nfd-taint-rule.yaml"
SCHEMA = structural(json.loads((FIXTURES / "node-feature-discovery" / "nodefeaturerules.v1alpha1.schema.json").read_text()))
TAINT_KEY = "agentd.io/fabric-unhealthy"
# nfd-master refuses taints in kubernetes.io namespaces other than feature.node.kubernetes.io,
# unprefixed keys and other effects (pkg/apis/nfd/validate/validate.go Taint, v0.19.0).
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _rules(values: dict) -> list[dict]:
    with helm_python.Chart.load(CHART) as chart:
        rendered = chart.render(values, name="agentd", namespace="gpu-monitoring")
    objs = [d for path, text in rendered.items() if not path.endswith("NOTES.txt") for d in yaml.safe_load_all(text) if d]
    return [o for o in objs if o["kind"] == "NodeFeatureRule"]


def _valid_taint(taint: dict) -> bool:
    ns, sep, _ = taint["key"].rpartition("/")
    kube = ns == "kubernetes.io" or ns.endswith(".kubernetes.io")
    nfd_ns = ns == "feature.node.kubernetes.io" or ns.endswith(".feature.node.kubernetes.io")
    return bool(sep and ns) and (not kube or nfd_ns) and taint["effect"] in TAINT_EFFECTS


def test_off_by_default_and_off_without_nfd() -> None:
    assert _rules({}) == []
    assert _rules({"nfd": {"enabled": False, "taint": {"enabled": True}}}) == []


@pytest.mark.parametrize("effect", ["NoSchedule", "NoExecute"])
def test_the_rule_validates_against_nfds_crd(effect: str) -> None:
    (rule,) = _rules({"nfd": {"taint": {"enabled": True, "effect": effect}}})
    jsonschema.validate(rule, SCHEMA)
    assert rule["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1" and "namespace" not in rule["metadata"]
    ((taint,),) = [r["taints"] for r in rule["spec"]["rules"]]
    assert taint == {"key": TAINT_KEY, "effect": effect} and _valid_taint(taint)


def test_the_schema_catches_a_misspelt_rule() -> None:
    (rule,) = _rules({"nfd": {"taint": {"enabled": True}}})
    rule["spec"]["rules"][0]["matchFeatures"][0]["matchExpression"] = rule["spec"]["rules"][0]["matchFeatures"][0].pop("matchExpressions")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(rule, SCHEMA)


def test_values_schema_takes_only_the_two_effects() -> None:
    with helm_python.Chart.load(CHART) as chart:
        chart.validate_schema({"nfd": {"taint": {"enabled": True, "effect": "NoExecute"}}})
        for bad in ({"nfd": {"taint": {"effect": "PreferNoSchedule"}}}, {"nfd": {"taint": {"key": "x"}}}):
            with pytest.raises(helm_python.HelmValuesError):
                chart.validate_schema(bad)


def test_plain_manifest_is_the_charts_rule() -> None:
    spec = importlib.util.spec_from_file_location("agentd_helm_sync", REPO / "packaging" / "helm" / "sync.py")
    assert spec and spec.loader
    sync = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sync)
    assert RULE_MANIFEST.read_text() == sync.render_nfd_rule(), "packaging/k8s/nfd-taint-rule.yaml is stale: run `make helm`"
    (rule,) = [d for d in yaml.safe_load_all(RULE_MANIFEST.read_text()) if d]
    jsonschema.validate(rule, SCHEMA)
    assert rule["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kubectl"
    assert rule["spec"]["rules"][0]["taints"] == [{"key": TAINT_KEY, "effect": "NoSchedule"}]


# --- the rule over agentd's labels, as NFD evaluates it --------------------------------


def local_labels(features_file: str, now: float) -> dict[str, str]:
    """nfd-worker's local source over one features.d file: '#' lines are comments, except
    '# +expiry-time=<RFC3339>', which drops the lines after it once that time has passed
    (source/local/local.go)."""
    labels: dict[str, str] = {}
    expired = False
    for line in features_file.splitlines():
        if line.startswith("# +expiry-time="):
            expiry = dt.datetime.fromisoformat(line.removeprefix("# +expiry-time=").replace("Z", "+00:00"))
            expired = expiry.timestamp() < now
        elif line and not line.startswith("#") and not expired:
            name, _, value = line.partition("=")
            labels[name] = value
    return labels


def matches(rule: dict, features: dict[str, dict[str, str]]) -> bool:
    """A rule's matchFeatures over attribute features, for the operators it uses: every
    term matches; In: the attribute exists and its value is listed."""
    for term in rule["matchFeatures"]:
        attrs = features.get(term["feature"], {})
        for name, expr in term["matchExpressions"].items():
            assert expr["op"] == "In", "the evaluator knows In only"
            if attrs.get(name) not in expr["value"]:
                return False
    return True


def taints(values: dict, features_file: str, *, now: float = T0) -> list[dict]:
    (obj,) = _rules(values)
    features = {"local.label": local_labels(features_file, now)}
    return [t for rule in obj["spec"]["rules"] if matches(rule, features) for t in rule.get("taints", [])]


ON: dict[str, Any] = {"nfd": {"taint": {"enabled": True}}}
CRITICAL = [fabric_finding("nvlink.fabric.unhealthy", "critical")]


def _features(status: str | None, findings: list) -> str:
    return render_nfd_features(status, findings, gb200_tray(), roles=COMPUTE, expiry_s=180.0)


def test_a_critical_node_is_tainted() -> None:
    assert taints(ON, _features(None, CRITICAL)) == [{"key": TAINT_KEY, "effect": "NoSchedule"}]
    noexec = {"nfd": {"taint": {"enabled": True, "effect": "NoExecute"}}}
    assert taints(noexec, _features(None, CRITICAL)) == [{"key": TAINT_KEY, "effect": "NoExecute"}]


@pytest.mark.parametrize("status, findings", [
    (None, []),  # recovered
    (None, [fabric_finding("nvlink.fabric.degraded", "warning")]),  # degraded: labels say so, no taint
    (None, [fabric_finding("nvlink.fabric.unhealthy", "critical", withheld="pending")]),  # not yet confirmed
    ("maintenance", CRITICAL),  # in maintenance the label says maintenance, whatever is found
], ids=["ok", "degraded", "pending", "maintenance"])
def test_no_taint_unless_critical(status: str | None, findings: list) -> None:
    assert taints(ON, _features(status, findings)) == []


def test_labels_that_expired_take_the_taint_with_them() -> None:
    text = _features(None, CRITICAL)
    assert taints(ON, text, now=T0 + 179) != []
    assert taints(ON, text, now=T0 + 181) == []


def test_the_rule_reads_the_label_agentd_writes() -> None:
    (obj,) = _rules(ON)
    ((name, expr),) = obj["spec"]["rules"][0]["matchFeatures"][0]["matchExpressions"].items()
    written = re.findall(r"^([^#=\n]+)=", _features(None, CRITICAL), re.M)
    assert name in written and expr["value"] == ["critical"]
