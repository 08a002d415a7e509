"""The synthetic benchmark nodes (16 GPUs / 18 NICs, and 16 GPUs / 64 HCAs) read back
cleanly and judge ok.

The profile is registered only while this module's tree is built (MonkeyPatch context),
so the stock-profile parametrisations elsewhere keep their three profiles.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd import sim
from agentd.cli import main
from agentd.sim import profile_hca64, profile_large


def _built(tmp_path_factory, mod):
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sim.PROFILES, mod.NAME, mod.PROFILE)
        yield sim.build_tree(mod.NAME, tmp_path_factory.mktemp(mod.NAME) / "root")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    yield from _built(tmp_path_factory, profile_large)


@pytest.fixture(scope="module")
def hca64_tree(tmp_path_factory):
    yield from _built(tmp_path_factory, profile_hca64)


def _env(monkeypatch, tmp_path) -> None:
    for k, v in {"AGENTD_TIMEOUTS__NVML_S": "2", "AGENTD_INTERVALS__CHECK_RATE_WINDOW_S": "0"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AGENTD_PATHS__BASELINE", str(tmp_path / "state" / "baseline.json"))
    monkeypatch.delenv("AGENTD_CONFIG", raising=False)


@pytest.fixture
def large(tree, monkeypatch, tmp_path) -> Path:
    _env(monkeypatch, tmp_path)
    return tree


@pytest.fixture
def hca64(hca64_tree, monkeypatch, tmp_path) -> Path:
    _env(monkeypatch, tmp_path)
    return hca64_tree


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main([*argv, "--format", "json"])
    return rc, json.loads(capsys.readouterr().out)


def test_large_profile_shape(monkeypatch):
    p = profile_large.PROFILE
    assert len(p.gpu_bdfs) == 16 and len(p.nvswitch_bdfs) == 4
    assert len(p.hcas) == 18 and p.compute_hcas == [f"mlx5_{i}" for i in range(16)]
    assert len(p.numa_cpulists) == 4
    registry: dict = {}
    monkeypatch.setattr(profile_large, "PROFILES", registry)
    assert profile_large.register() is p and profile_large.register() is p
    assert registry == {profile_large.NAME: p}


@pytest.mark.tree
def test_large_profile_inspects_without_read_errors(large, capsys):
    rc, doc = run_json(capsys, "inspect", "--host-root", str(large))
    assert rc == 0
    assert doc["read_errors"] == []
    assert [g["index"] for g in doc["gpus"]] == list(range(16))
    roles = {h["name"]: h["role"] for h in doc["hcas"]}
    assert sorted(n for n, r in roles.items() if r == "compute") == sorted(f"mlx5_{i}" for i in range(16))
    assert sorted(n for n, r in roles.items() if r == "other") == ["mlx5_16", "mlx5_17"]
    for g in doc["gpus"]:  # one GPU/NIC pair per PCIe switch
        assert sum(1 for h in range(16) if g["nic_paths"][f"mlx5_{h}"] == "PIX") == 1
    assert {g["numa_node"] for g in doc["gpus"]} == {0, 1, 2, 3}
    assert all(p["ok"] for p in doc["probes"])


def test_large_profile_judges_ok(large, capsys):
    rc, doc = run_json(capsys, "check", "--host-root", str(large))
    assert (rc, doc["status"]) == (0, "ok")
    assert not [f for f in doc["findings"] if f["severity"] != "ok"]


def test_large_profile_port_down_is_critical(large, capsys):
    sim.apply_fault(large, "port_down@mlx5_12")
    try:
        rc, doc = run_json(capsys, "check", "--host-root", str(large))
    finally:
        sim.clear_fault(large, "port_down@mlx5_12")
    assert (rc, doc["status"]) == (2, "critical")
    assert any(f["subject"].startswith("mlx5_12") and f["severity"] == "critical" for f in doc["findings"])


def test_hca64_profile_shape(monkeypatch):
    p = profile_hca64.PROFILE
    assert p.compute_hcas == [f"mlx5_{i}" for i in range(64)]
    assert len({h.bdf for h in p.hcas}) == 64 and len({h.node_guid for h in p.hcas}) == 64
    registry: dict = {}
    monkeypatch.setattr(profile_hca64, "PROFILES", registry)
    assert profile_hca64.register() is p and profile_hca64.register() is p
    assert registry == {profile_hca64.NAME: p}


@pytest.mark.tree
def test_hca64_profile_inspects_without_read_errors_and_checks_ok(hca64, capsys):
    rc, doc = run_json(capsys, "inspect", "--host-root", str(hca64))
    assert rc == 0
    assert doc["read_errors"] == []
    assert [g["index"] for g in doc["gpus"]] == list(range(16))
    assert sorted(h["name"] for h in doc["hcas"] if h["role"] == "compute") == sorted(f"mlx5_{i}" for i in range(64))
    for g in doc["gpus"]:  # four HCAs share each GPU's PCIe switch
        assert sum(1 for h in range(64) if g["nic_paths"][f"mlx5_{h}"] == "PIX") == 4
    assert all(p["ok"] for p in doc["probes"])
    rc, doc = run_json(capsys, "check", "--host-root", str(hca64))
    assert (rc, doc["status"]) == (0, "ok")
    assert not [f for f in doc["findings"] if f["severity"] != "ok"]
