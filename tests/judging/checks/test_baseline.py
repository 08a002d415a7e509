"""Baseline record: built from a snapshot, JSON round trip, validation."""

from __future__ import annotations

import json

import pytest

from agentd.judging.baseline import (
    BASELINE_VERSION,
    BaselineError,
    baseline_from,
    baseline_from_json,
    baseline_to_json,
)
from agentd.judging.roles import hca_roles
from tests.support.check_snapshots import cfg, layout, node, with_port


def make():
    s = with_port(node(), "mlx5_8", state="DOWN")
    return baseline_from(s, hca_roles(s, cfg().hca))


def test_baseline_records_inventory():
    b = make()
    assert b.version == BASELINE_VERSION and b.hostname == "node1" and b.taken_at == node().taken_at
    assert [g.pci_bus_id for g in b.gpus] == sorted(layout(i)["gpu"] for i in range(8))
    assert b.gpus[0].index == 0 and b.gpus[0].name == "NVIDIA H100 80GB HBM3"
    mlx5_0 = b.hca("mlx5_0")
    assert mlx5_0 is not None and mlx5_0.role == "compute" and mlx5_0.pci_bus_id == layout(0)["nic"]
    assert [(p.port, p.active) for p in mlx5_0.ports] == [(1, True)]
    assert b.hca("mlx5_8").role == "other" and not b.port_was_active("mlx5_8", 1)
    assert b.port_was_active("mlx5_0", 1) and not b.port_was_active("mlx5_0", 2) and not b.port_was_active("nope", 1)


def test_json_round_trip():
    b = make()
    text = baseline_to_json(b)
    assert text.endswith("\n") and json.loads(text)["version"] == BASELINE_VERSION
    assert baseline_from_json(text) == b
    assert baseline_from_json(text.encode()) == b


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: "{not json", "not valid JSON"),
    (lambda d: [], "JSON object"),
    (lambda d: {**d, "version": 99}, "version 99"),
    (lambda d: {**d, "extra": 1}, "extra: unknown key"),
    (lambda d: {k: v for k, v in d.items() if k != "taken_at"}, "taken_at"),
    (lambda d: {**d, "gpus": [{**d["gpus"][0], "pci_bus_id": "1b:00.0"}]}, "gpus.0.pci_bus_id"),
    (lambda d: {**d, "gpus": [d["gpus"][0], d["gpus"][0]]}, "appears twice"),
    (lambda d: {**d, "hcas": [{**d["hcas"][0], "role": "boss"}]}, "hcas.0.role"),
])
def test_invalid_baseline_is_rejected_with_reason(mutate, needle):
    data = json.loads(baseline_to_json(make()))
    bad = mutate(data)
    text = bad if isinstance(bad, str) else json.dumps(bad)
    with pytest.raises(BaselineError) as e:
        baseline_from_json(text)
    assert needle in str(e.value)


@pytest.mark.parametrize("bus_id", ["0000:1b:00.0", "10000:e1:00.0", "ffffffff:ff:1f.7"])
def test_baseline_takes_every_sysfs_bus_id_vmd_domains_included(bus_id):
    data = json.loads(baseline_to_json(make()))
    data["gpus"][0]["pci_bus_id"] = bus_id
    data["hcas"][0]["pci_bus_id"] = bus_id
    b = baseline_from_json(json.dumps(data))
    assert (b.gpus[0].pci_bus_id, b.hcas[0].pci_bus_id) == (bus_id, bus_id)


@pytest.mark.parametrize("bus_id", ["00000000:1B:00.0", "0000:1B:00.0", "00010000:e1:00.0", "000:1b:00.0"])
def test_baseline_rejects_other_spellings(bus_id):
    data = json.loads(baseline_to_json(make()))
    data["gpus"][0]["pci_bus_id"] = bus_id
    with pytest.raises(BaselineError) as e:
        baseline_from_json(json.dumps(data))
    assert "gpus.0.pci_bus_id" in str(e.value)


def test_baseline_from_never_raises_on_a_snapshot_bus_id():
    # judge() builds the baseline outside the per-check guard: a bus id a source handed
    # over as text that is not one must not stop the node from ever publishing a state
    s = node()
    bogus = s.model_copy(update={
        "gpus": (s.gpus[0].model_copy(update={"pci_bus_id": "GPU-on-a-bus"}), *s.gpus[1:]),
        "hcas": (s.hcas[0].model_copy(update={"pci_bus_id": "virtual"}), *s.hcas[1:]),
    })
    b = baseline_from(bogus, hca_roles(bogus, cfg().hca))
    assert [g.index for g in b.gpus] == list(range(1, 8))  # cannot be found again by bus id
    assert b.hca(s.hcas[0].name).pci_bus_id is None  # kept, by name
    assert baseline_from_json(baseline_to_json(b)) == b
