"""The label vocabulary (docs/topology.md) and the scheduler configurations that read it
(docs/topology.md, docs/kubernetes.md), held to the labels agentd writes and to each
scheduler's own schema and rules:

- the vocabulary table lists exactly the labels agentd.outputs.nfd writes, and no other
  doc lists labels in a table (one vocabulary);
- every ``<!-- checked: NAME -->`` block parses, validates against the scheduler's CRD or
  values schema vendored in tests/fixtures/schedulers (the CEL rules the schemas carry are
  applied here), follows the rules the scheduler's source applies (Volcano's label
  discovery), and names only agentd labels that exist;
- the topology levels, evaluated as Kueue and Volcano evaluate them over the labels agentd
  writes, put a GB200 rack's trays in one domain and leave an HGX node out."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from agentd.outputs.nfd import LABEL_VALUE_RE, nfd_labels
from tests.support.check_snapshots import node
from tests.support.crd import structural
from tests.support.paths import DOCS, FIXTURES, REPO
from tests.support.placement_snapshots import COMPUTE, gb200_tray

SCHEDULERS = FIXTURES / "schedulers"
TAINT_KEY = "agentd.io/fabric-unhealthy"
HOSTNAME = "kubernetes.io/hostname"
CHECKED = re.compile(r"<!-- checked: (\S+) -->\n```yaml\n(.*?)```", re.S)


def _crd(name: str) -> dict:
    return structural(json.loads((SCHEDULERS / name).read_text()))


def _vocabulary_rows(text: str) -> list[str]:
    return re.findall(r"^\| `(agentd\.io/[^`]+)` \|", text, re.M)


def vocabulary() -> set[str]:
    text = (DOCS / "topology.md").read_text()
    section = text.split("## Labels: one vocabulary\n", 1)[1].split("\n## ", 1)[0]
    return set(_vocabulary_rows(section))


def _generic(name: str) -> str:
    return re.sub(r"\.gpu\d+\.", ".gpu<i>.", name)


def written_labels() -> set[str]:
    """Every label name agentd writes, over a tray in a domain (every label) and an HGX
    node (no domain), rail indices written <i>."""
    names: set[str] = set()
    for snap, roles in ((gb200_tray(), COMPUTE), (node(), None)):
        names |= {_generic(n) for n in nfd_labels(None, [], snap, roles=roles)}
    return names


def test_the_vocabulary_is_what_agentd_writes() -> None:
    assert vocabulary() == written_labels()


def test_the_vocabulary_is_listed_once() -> None:
    tables = {p.name: _vocabulary_rows(p.read_text()) for p in [*DOCS.glob("*.md"), REPO / "README.md"]}
    assert {name for name, rows in tables.items() if rows} == {"topology.md"}
    rows = tables["topology.md"]
    assert len(rows) == len(set(rows))


def test_the_domain_value_never_needs_topographs_hash() -> None:
    # topograph replaces values over 63 characters by a hash; the largest clique id
    # (uint32) keeps agentd's domain value at 47
    labels = nfd_labels(None, [], gb200_tray(clique=2**32 - 1), roles=COMPUTE)
    value = labels["agentd.io/nvlink-domain"]
    assert len(value) == 47 and LABEL_VALUE_RE.match(value)


def checked_blocks() -> dict[str, list[Any]]:
    blocks: dict[str, list[Any]] = {}
    for doc in ("topology.md", "kubernetes.md"):
        for name, body in CHECKED.findall((DOCS / doc).read_text()):
            assert name not in blocks, f"two blocks checked as {name}"
            blocks[name] = [d for d in yaml.safe_load_all(body) if d is not None]
    return blocks


BLOCKS = checked_blocks()


def test_every_scheduler_has_its_block() -> None:
    assert set(BLOCKS) == {"kueue-tas", "kueue-job", "volcano-discovery", "topograph-values", "kai-topology"}


@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_blocks_name_only_labels_agentd_writes(name: str) -> None:
    used = set(re.findall(r"agentd\.io/[-A-Za-z0-9_.<>]+", json.dumps(BLOCKS[name])))
    assert used and used <= vocabulary() | {TAINT_KEY}


def _levels_rules(levels: list[dict]) -> list[str]:
    """The CEL rules of Kueue's and KAI's Topology levels: unique, and the hostname label
    only as the lowest level."""
    labels = [lv["nodeLabel"] for lv in levels]
    assert len(labels) == len(set(labels)), "must be unique"
    assert HOSTNAME not in labels or labels[-1] == HOSTNAME, "kubernetes.io/hostname only at the lowest level"
    return labels


def test_kueue_topology_and_flavor() -> None:
    topology, flavor = BLOCKS["kueue-tas"]
    assert (topology["apiVersion"], topology["kind"]) == ("kueue.x-k8s.io/v1beta2", "Topology")
    jsonschema.validate(topology, _crd("kueue-topologies.v1beta2.schema.json"))
    levels = _levels_rules(topology["spec"]["levels"])
    assert (flavor["apiVersion"], flavor["kind"]) == ("kueue.x-k8s.io/v1beta2", "ResourceFlavor")
    jsonschema.validate(flavor, _crd("kueue-resourceflavors.v1beta2.schema.json"))
    # CEL: "at least one nodeLabel is required when topology is set"
    assert flavor["spec"]["topologyName"] == topology["metadata"]["name"] and flavor["spec"]["nodeLabels"]
    (job,) = BLOCKS["kueue-job"]
    required = job["spec"]["template"]["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"]
    assert required in levels


def test_kai_topology() -> None:
    (topology,) = BLOCKS["kai-topology"]
    assert (topology["apiVersion"], topology["kind"]) == ("kai.scheduler/v1alpha1", "Topology")
    jsonschema.validate(topology, _crd("kai-topologies.v1alpha1.schema.json"))
    _levels_rules(topology["spec"]["levels"])


def _volcano_types(configmap: dict) -> dict[str, list[str]]:
    """Volcano's label discovery config, parsed and checked as
    pkg/controllers/hypernode/discovery/label/label.go parseCfg does (v1.13+): each type's
    name at most 20 characters, no label twice; the labels run from the top tier down and
    the last one, the hostname, is not a tier. Returns type -> tier labels, tier 1 first."""
    conf = yaml.safe_load(configmap["data"]["volcano-controller.conf"])
    (source,) = [s for s in conf["networkTopologyDiscovery"] if s["source"] == "label"]
    assert source["enabled"] is True
    out = {}
    for name, labels in source["config"]["networkTopologyTypes"].items():
        assert len(name) <= 20
        keys = [lv["nodeLabel"] for lv in labels]
        assert len(keys) == len(set(keys)) and keys[-1] == HOSTNAME and len(keys) >= 2
        out[name] = keys[-2::-1]
    return out


def test_volcano_label_discovery() -> None:
    (configmap,) = BLOCKS["volcano-discovery"]
    kubernetes_validate.validate(configmap, "1.30.0", strict=True)
    assert configmap["metadata"] == {"name": "volcano-controller-configmap", "namespace": "volcano-system"}
    assert _volcano_types(configmap) == {"nvlink": ["agentd.io/nvlink-domain"]}


def test_topograph_values() -> None:
    (values,) = BLOCKS["topograph-values"]
    jsonschema.validate(values, json.loads((SCHEDULERS / "topograph-values.schema.json").read_text()))
    assert values["engine"]["name"] in ("k8s", "nfd", "slinky")  # the engines that take a source label
    assert values["engine"]["params"]["acceleratorDomainSourceLabel"] == "agentd.io/nvlink-domain"
    accelerator = values["provider"]["params"]["accelerator"]
    assert accelerator == {"source": "kubernetes-label", "kubernetesLabel": {"key": "agentd.io/nvlink-domain"}}


# --- the levels over agentd's labels, as the schedulers evaluate them ---------------------


def _fleet() -> dict[str, dict[str, str]]:
    """Node name -> labels: two racks of two trays (cliques 1 and 2), an HGX node, each
    with kubernetes.io/hostname and the GPU operator's gpu.present."""
    nodes = {f"gb-{rack}{i}": nfd_labels(None, [], gb200_tray(clique=clique), roles=COMPUTE)
             for rack, clique in (("a", 1), ("b", 2)) for i in (1, 2)}
    nodes["hgx-1"] = nfd_labels(None, [], node(), roles=None)
    return {name: {**labels, HOSTNAME: name, "nvidia.com/gpu.present": "true"} for name, labels in nodes.items()}


def test_kueue_counts_the_trays_and_leaves_the_hgx_node_out() -> None:
    topology, flavor = BLOCKS["kueue-tas"]
    levels = [lv["nodeLabel"] for lv in topology["spec"]["levels"]]

    def matches(labels: dict[str, str]) -> bool:  # pkg/util/tas/node.go NodeMatchesFlavor
        return all(labels.get(k) == v for k, v in flavor["spec"]["nodeLabels"].items()) and all(lv in labels for lv in levels)

    fleet = _fleet()
    domains: dict[str, set[str]] = {}
    for name, labels in fleet.items():
        if matches(labels):
            domains.setdefault(labels[levels[0]], set()).add(name)
    assert sorted(map(sorted, domains.values())) == [["gb-a1", "gb-a2"], ["gb-b1", "gb-b2"]]


def test_volcano_builds_one_hypernode_a_domain() -> None:
    (configmap,) = BLOCKS["volcano-discovery"]
    ((tier1,),) = _volcano_types(configmap).values()
    hypernodes: dict[str, set[str]] = {}
    for name, labels in _fleet().items():
        if tier1 in labels:  # generateHyperNodeInfo: a node without the label is in none
            hypernodes.setdefault(labels[tier1], set()).add(name)
    assert sorted(map(sorted, hypernodes.values())) == [["gb-a1", "gb-a2"], ["gb-b1", "gb-b2"]]
    assert all(LABEL_VALUE_RE.match(v) for v in hypernodes)  # the HyperNode carries it as a label
