"""SR-IOV virtual functions are never the compute rail, and a VF port is not a node fault
(issue 42 item 3; redteam 2026-11 finding 3): with two VFs a PF the 16 VFs outnumbered the
8 PFs, became the "compute" HCAs, filled NCCL_IB_HCA when ACTIVE and drained the node
with 16 criticals when in INIT (normal until the subnet manager assigns vGUIDs)."""

from __future__ import annotations

import pytest

from agentd import sim
from agentd.collection.collector import collect_once
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot
from agentd.judging.baseline import baseline_from
from agentd.judging.judge import judge
from agentd.judging.roles import hca_roles
from agentd.nccl.env import derive_env
from tests.support.sriov import add_vfs

pytestmark = pytest.mark.tree
PFS = [f"mlx5_{i}" for i in range(8)]


def _judged(tmp_path, state: str):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    vfs = add_vfs(root, PFS, 2, state=state)
    config = AgentConfig.model_validate({"host_root": str(root)})
    snap = collect_once(HostRoot.at(root), config)
    assert all(snap.hca(v) is not None for v in vfs) and len(vfs) == 16
    return snap, config, vfs


@pytest.mark.parametrize("state", ["ACTIVE", "INIT", "DOWN"])
def test_the_pfs_stay_the_compute_rail_and_vf_ports_are_no_fault(tmp_path, state):
    snap, config, vfs = _judged(tmp_path, state)
    roles = hca_roles(snap, config.hca)
    assert roles.compute == tuple(PFS)
    assert set(vfs) <= set(roles.other)

    j = judge(snap, (), config, None)
    assert j.status == "ok", [(f.code, f.severity, f.subject) for f in j.findings if f.severity != "ok"]
    vf_findings = [f for f in j.findings if f.subject.split(":")[0] in vfs]
    assert all(f.severity == "ok" for f in vf_findings)
    if state != "ACTIVE":
        down = [f for f in vf_findings if f.code == "ib.port.down"]
        assert len(down) == 16 and "virtual function" in down[0].message

    env = derive_env(snap, j.findings, config, topo_path=None)
    assert env.get("NCCL_IB_HCA") == "=" + ",".join(f"{p}:1" for p in PFS)


def test_vfs_are_not_inventory(tmp_path):
    snap, config, vfs = _judged(tmp_path, "ACTIVE")
    base = baseline_from(snap, hca_roles(snap, config.hca))
    assert {h.name for h in base.hcas}.isdisjoint(vfs)
