"""/topology carries the placement (agentd.judging.placement) beside the snapshot's keys."""

from __future__ import annotations

import json

from agentd.config import AgentConfig
from agentd.model import IbPort
from tests.support.check_snapshots import with_hca
from tests.support.placement_snapshots import COMPUTE, DOMAIN_ID, fabric_finding, gb200_tray
from tests.support.service_snapshots import state


def _topology(**kw) -> dict:
    doc: dict = json.loads(state(**kw).topology_json().decode("utf-8"))
    return doc


def test_topology_keeps_every_snapshot_key_and_adds_the_placement() -> None:
    snap = gb200_tray()
    doc = _topology(snap=snap, compute_hcas=COMPUTE.compute)
    assert set(doc) == set(snap.model_dump()) | {"placement"}
    assert doc["hcas"][0]["name"] == "mlx5_0"  # the snapshot, as before
    p = doc["placement"]
    assert p["domain"] == {"id": DOMAIN_ID, "cluster_uuid": DOMAIN_ID.split(".")[0], "clique_id": int(DOMAIN_ID.split(".")[1]),
                           "gpus": 4, "health": "ok"}
    assert p["multi_node"] is True
    assert [(r["gpu"], r["nic"], r["port"], r["netdev"]) for r in p["rails"]] == [(i, f"mlx5_{i}", 1, f"ibp{i}s0") for i in range(4)]
    assert p["rails"][0]["gpu_pcie_root"] == "pci0008:00" and p["rails"][0]["nic_pcie_root"] == "pci0000:00"
    assert len(p["rail_hash"]) == 12


def test_topology_placement_uses_the_states_compute_hcas_findings_and_fabric_settings() -> None:
    snap = gb200_tray()
    only_bluefield = _topology(snap=snap, compute_hcas=("mlx5_4", "mlx5_5"))
    assert {r["nic"] for r in only_bluefield["placement"]["rails"]} == {"mlx5_4", "mlx5_5"}
    degraded = _topology(snap=snap, compute_hcas=COMPUTE.compute, findings=(fabric_finding("nvlink.fabric.degraded", "warning"),))
    assert degraded["placement"]["domain"]["health"] == "degraded"
    single = _topology(snap=snap, compute_hcas=COMPUTE.compute, config=AgentConfig(fabric={"multi_node": "no"}))
    assert single["placement"]["multi_node"] is False


def test_topology_with_a_netdev_name_that_is_not_utf8() -> None:
    snap = with_hca(gb200_tray(), "mlx5_1", ports=(IbPort(port=1, state="ACTIVE", netdev="ib\udcff1"),))
    doc = _topology(snap=snap, compute_hcas=COMPUTE.compute)
    assert doc["placement"]["rails"][1]["netdev"] == "ib\\xff1"


def test_topology_before_the_first_collection() -> None:
    assert json.loads(state(ready=False).topology_json()) == {"error": "no collection yet"}
