"""Nothing to judge: a node with no GPUs and no RDMA devices is neither found healthy nor
given a baseline (issue 43; on main `agentd check` said "ok" there and saved an empty
inventory as the node's baseline)."""

from __future__ import annotations

from agentd.collection.collector import Collector
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot
from agentd.judging.baseline import Baseline, BaselineGpu
from agentd.judging.judge import judge
from agentd.judging.scope import nothing_to_judge
from tests.support.empty_node import empty_node


def _snapshot(root):
    c = Collector(HostRoot.at(root), AgentConfig.model_validate({"host_root": root}))
    c.run_sync()
    return c.snapshot()


def test_a_node_without_gpus_and_rdma_devices_has_nothing_to_judge_and_no_baseline(tmp_path):
    snap = _snapshot(empty_node(tmp_path / "cpu"))
    j = judge(snap, (), AgentConfig.model_validate({"host_root": tmp_path / "cpu"}), None)
    assert j.status == "ok"  # nothing found wrong...
    assert j.nothing_to_judge == "no GPUs, no RDMA devices"  # ...and nothing found
    assert j.new_baseline is None  # an empty inventory is no baseline


def test_rdma_devices_are_something_to_judge(tmp_path):
    snap = _snapshot(empty_node(tmp_path / "ib", rdma=True))
    assert snap.hcas and not snap.gpus
    j = judge(snap, (), AgentConfig.model_validate({"host_root": tmp_path / "ib"}), None)
    assert j.nothing_to_judge is None
    assert j.status == "degraded"  # the fixture's mlx4_0 has saturated counters: judged, as before


def test_a_baseline_with_gpus_makes_their_absence_a_finding_not_an_empty_node(tmp_path):
    snap = _snapshot(empty_node(tmp_path / "cpu"))
    had = Baseline(taken_at=0.0, gpus=(BaselineGpu(index=0, pci_bus_id="0000:18:00.0"),))
    assert nothing_to_judge(snap, had) is None
    j = judge(snap, (), AgentConfig.model_validate({"host_root": tmp_path / "cpu"}), had)
    assert j.nothing_to_judge is None and "inventory.gpu.missing" in {f.code for f in j.findings}


def test_a_finder_that_failed_is_no_proof_of_absence(tmp_path):
    snap = _snapshot(empty_node(tmp_path / "cpu"))
    failed = snap.model_copy(update={"probes": tuple(p.model_copy(update={"ok": False}) if p.name == "pci" else p for p in snap.probes)})
    assert nothing_to_judge(snap, None) is not None
    assert nothing_to_judge(failed, None) is None
