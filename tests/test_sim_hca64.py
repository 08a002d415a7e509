"""The synthetic 64-HCA benchmark node builds, reads back without read errors and judges ok.

The profile is registered only while this module's tree is built (MonkeyPatch context),
so the stock-profile parametrisations elsewhere keep their three profiles.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd import sim
from agentd.cli import main
from agentd.sim import profile_hca64


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sim.PROFILES, profile_hca64.NAME, profile_hca64.PROFILE)
        yield sim.build_tree(profile_hca64.NAME, tmp_path_factory.mktemp("hca64") / "root")


@pytest.fixture
def node(tree, monkeypatch, tmp_path) -> Path:
    for k, v in {"AGENTD_TIMEOUTS__NVML_S": "2", "AGENTD_INTERVALS__CHECK_RATE_WINDOW_S": "0"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AGENTD_PATHS__BASELINE", str(tmp_path / "state" / "baseline.json"))
    monkeypatch.delenv("AGENTD_CONFIG", raising=False)
    return tree


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main([*argv, "--format", "json"])
    return rc, json.loads(capsys.readouterr().out)


def test_hca64_profile_shape(monkeypatch):
    p = profile_hca64.PROFILE
    assert len(p.gpu_bdfs) == 16 and len(p.nvswitch_bdfs) == 4
    assert p.compute_hcas == [f"mlx5_{i}" for i in range(64)]
    assert len({h.bdf for h in p.hcas}) == 64 and len({h.node_guid for h in p.hcas}) == 64
    registry: dict = {}
    monkeypatch.setattr(profile_hca64, "PROFILES", registry)
    assert profile_hca64.register() is p and profile_hca64.register() is p
    assert registry == {profile_hca64.NAME: p}


def test_hca64_profile_inspects_without_read_errors(node, capsys):
    rc, doc = run_json(capsys, "inspect", "--host-root", str(node))
    assert rc == 0
    assert doc["read_errors"] == []
    assert [g["index"] for g in doc["gpus"]] == list(range(16))
    assert sorted(h["name"] for h in doc["hcas"] if h["role"] == "compute") == sorted(f"mlx5_{i}" for i in range(64))
    for g in doc["gpus"]:  # four HCAs share each GPU's PCIe switch
        assert sum(1 for h in range(64) if g["nic_paths"][f"mlx5_{h}"] == "PIX") == 4
    assert all(p["ok"] for p in doc["probes"])


def test_hca64_profile_checks_ok(node, capsys):
    rc, doc = run_json(capsys, "check", "--host-root", str(node))
    assert (rc, doc["status"]) == (0, "ok")
    assert not [f for f in doc["findings"] if f["severity"] != "ok"]
