"""The RDMA families beyond mlx5, each from its published layout
(tests/fixtures/rdma-families, tests/support/rdma_families): read without a probe failure,
named by ``agentd inspect``, and judged right (issue 36)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd.cli import main
from agentd.collection.collector import Collector, collect_once
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot
from agentd.judging.judge import judge
from agentd.judging.roles import hca_roles
from agentd.nccl.env import derive_env
from tests.support.rdma_families import FAMILIES, build, failing_reads, load

RDMA_SOURCES = ("ib", "ib_counters", "ib_gids", "netdev", "pci", "pci_errors")


def _collect(root: Path):
    config = AgentConfig.model_validate({"host_root": str(root)})
    return collect_once(HostRoot.at(root), config), config


def _write(path: Path, text: str) -> None:
    path.write_text(text + "\n")


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_reads_without_a_probe_failure_and_inspect_names_it(family, tmp_path, monkeypatch, capsys):
    root = tmp_path / "root"
    failing_reads(monkeypatch, build(root, family))
    snap, _ = _collect(root)
    names = sorted(d["rdma"] for d in load(family)["devices"])
    assert sorted(h.name for h in snap.hcas) == names
    assert {h.family for h in snap.hcas} == {family}
    assert [e for e in snap.read_errors if e.source in RDMA_SOURCES] == []
    assert all(p.ok for p in snap.probes if p.name in RDMA_SOURCES)
    assert all(p.hw_counters for h in snap.hcas for p in h.ports)  # what the family counts is read

    main(["inspect", "--host-root", str(root), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert {h["name"]: h["family"] for h in doc["hcas"]} == dict.fromkeys(names, family)
    main(["inspect", "--host-root", str(root)])
    text = capsys.readouterr().out
    assert all(f" {family} " in line for line in text.splitlines() if line.split(" ", 1)[0] in names)


def test_an_efa_port_whose_netdev_is_down_is_down(tmp_path):
    root = tmp_path / "root"
    build(root, "efa")
    snap, config = _collect(root)
    assert [(p.state, p.state_from) for h in snap.hcas for p in h.ports] == [("ACTIVE", "enp0s6"), ("ACTIVE", "enp0s7")]
    assert hca_roles(snap, config.hca).compute == ("rdmap0s6", "rdmap0s7")  # the compute fabric on instances that have it

    netdev = root / "sys/devices/pci0000:00/0000:00:07.0/net/enp0s7"
    _write(netdev / "operstate", "down")
    _write(netdev / "carrier", "0")
    later, _ = _collect(root)
    port = later.hca("rdmap0s7").ports[0]
    assert (port.state, port.state_from) == ("DOWN", "enp0s7")  # the driver's file still says ACTIVE
    j = judge(later, (snap,), config, None)
    down = [f for f in j.findings if f.code == "ib.port.down"]
    assert [(f.severity, f.subject) for f in down] == [("critical", "rdmap0s7:1")]
    assert "enp0s7" in down[0].message and "enp0s7" in down[0].remediation


def test_efa_compute_devices_are_reached_by_nccl_through_its_plugin_not_nccl_ib_hca(tmp_path):
    root = tmp_path / "root"
    build(root, "efa")
    snap, config = _collect(root)
    j = judge(snap, (), config, None)
    env = derive_env(snap, j.findings, config, topo_path=None)
    assert env.get("NCCL_IB_HCA") is None
    assert any("net plugin" in o.reason for o in env.omitted if o.key == "NCCL_IB_HCA")


def test_efa_counters_are_judged_by_their_own_thresholds(tmp_path):
    root = tmp_path / "root"
    build(root, "efa")
    config = AgentConfig.model_validate({"host_root": str(root)})
    c = Collector(HostRoot.at(root), config)
    c.run_sync()
    before = c.snapshot(taken_at=1000.0)
    drops = root / "sys/devices/pci0000:00/0000:00:06.0/infiniband/rdmap0s6/ports/1/hw_counters/rx_drops"
    _write(drops, str(60 * 1000))  # 1000 drops/s over a minute: NVSentinel's and the EKS agent's limit is 100/s
    c.run_sync()
    after = c.snapshot(taken_at=1060.0)
    j = judge(after, (before,), config, None)
    assert [(f.code, f.severity, f.subject) for f in j.findings if f.code.startswith("ib.counter.")] == [
        ("ib.counter.rx_drops", "warning", "rdmap0s6:1")]


def test_a_bnxt_re_node_raises_no_probe_failure_for_its_missing_or_einval_counters(tmp_path, monkeypatch):
    root = tmp_path / "root"
    failing_reads(monkeypatch, build(root, "bnxt_re"))
    snap, config = _collect(root)
    assert [p.counters for h in snap.hcas for p in h.ports] == [{}, {}]
    assert snap.hca("bnxt_re0").ports[0].hw_counters["to_retransmits"] == 0
    j = judge(snap, (), config, None)
    assert [f for f in j.findings if f.code == "probe.failed"] == []


def test_irdma_counters_without_a_pma_are_absent_not_errors(tmp_path):
    root = tmp_path / "root"
    build(root, "irdma")
    snap, _ = _collect(root)
    port = snap.hca("irdma0").ports[0]
    assert port.counters == {} and port.hw_counters["tcpRetransSegs"] == 0
    assert snap.hca("irdma0").hca_type is None  # absent on irdma: unknown, no error
    assert [e for e in snap.read_errors if e.source in RDMA_SOURCES] == []


def test_a_mana_einval_costs_that_field_of_that_device_only(tmp_path, monkeypatch):
    root = tmp_path / "root"
    failing_reads(monkeypatch, build(root, "mana", "bnxt_re"))
    snap, _ = _collect(root)
    mana = snap.hca("mana_0").ports[0]
    assert mana.rate_gbps is None and mana.rate_raw is None  # the one field
    assert (mana.state, mana.link_layer, mana.netdev) == ("ACTIVE", "Ethernet", "enP30832s1")
    assert mana.hw_counters["requester_timeout"] == 0
    assert [h.ports[0].rate_gbps for h in snap.hcas if h.family == "bnxt_re"] == [100.0, 100.0]  # never another device
    assert all(p.ok for p in snap.probes if p.name in RDMA_SOURCES)  # never the probe
