"""Issue 12 item 2: without CAP_SYS_ADMIN the kernel serves only the first 64 bytes of
PCI config space (drivers/pci/pci-sysfs.c pci_read_config). The PCIe port types and ACS
are then unknown, and agentd says so: one finding for the node, and a metric."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentd import sim
from agentd.collection.collector import Collector
from agentd.config import AgentConfig, Timeouts
from agentd.host.fs import HostRoot
from agentd.judging.judge import judge
from tests.support import service_snapshots as fixtures

pytestmark = pytest.mark.tree

T0 = 1_000_000.0
UNPRIVILEGED = 64  # what pci_read_config() returns to an opener without CAP_SYS_ADMIN


def _cut_config_space(root: Path, size: int) -> int:
    n = 0
    for cfg in (root / "sys/devices").rglob("config"):
        if cfg.is_file() and not cfg.is_symlink():
            with open(cfg, "r+b") as f:
                f.truncate(size)
            n += 1
    assert n > 0
    return n


def _collect(root: Path):
    cfg = AgentConfig(host_root=root, timeouts=Timeouts(nvml_s=0.3))
    c = Collector(HostRoot.at(root), cfg)
    c.run_sync()
    return c.snapshot(taken_at=T0), cfg


def _metric(snap, name: str) -> list[float]:
    text = fixtures.state(snap=snap).metrics_bytes().decode()
    return [s.value for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name]


@pytest.mark.parametrize("faults", [(), ("acs_on",)])
def test_config_space_cut_to_64_bytes_is_one_finding_and_a_metric(tmp_path, faults):
    root = sim.build_tree("h100-ib", tmp_path / "root", faults=faults)
    _cut_config_space(root, UNPRIVILEGED)
    snap, cfg = _collect(root)
    j = judge(snap, (), cfg, None)
    cut = [f for f in j.findings if f.code == "pcie.config_space.truncated"]
    assert len(cut) == 1, [(f.code, f.subject) for f in j.findings]
    f = cut[0]
    # the shipped unit's deliberate choice: said (checks JSON, metric), not judged as sick
    assert f.severity == "ok" and j.status == ("ok" if not faults else j.status)
    assert "64 bytes" in f.message and "CAP_SYS_ADMIN" in f.message
    assert "ACS" in f.message and "port type" in f.message
    assert "agentd-acs.conf" in f.remediation
    assert not [f for f in j.findings if f.code == "pcie.acs.redirect"]  # unknown, not "ok"
    # the functions the PCIe checks judge (GPUs, HCAs, the bridges above them), one finding
    assert isinstance(f.measured, int) and f.measured > 1
    [watched] = _metric(snap, "agentd_pcie_config_space_truncated")
    assert watched >= f.measured


def test_full_config_space_has_no_finding_and_metric_zero(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    snap, cfg = _collect(root)
    j = judge(snap, (), cfg, None)
    assert not [f for f in j.findings if f.code == "pcie.config_space.truncated"]
    assert _metric(snap, "agentd_pcie_config_space_truncated") == [0]


def test_legacy_256_byte_config_space_is_not_truncation(tmp_path):
    # A function without extended config space (conventional PCI, no MMCONFIG) gives root
    # 256 bytes: nothing was withheld, the port types are readable.
    root = sim.build_tree("h100-ib", tmp_path / "root")
    _cut_config_space(root, 256)
    snap, cfg = _collect(root)
    assert not [f for f in judge(snap, (), cfg, None).findings if f.code == "pcie.config_space.truncated"]
    assert any(d.pcie_port_type == "upstream" for d in snap.pci)


def test_config_space_refused_is_said_too_and_an_absent_file_is_not(tmp_path):
    # A read the kernel or a security module refuses (EACCES from AppArmor/SELinux, EIO)
    # leaves port type and ACS as unknown as a cut read does. Root passes file modes, so
    # the refusal here is EISDIR: a `config` that cannot be read as a file.
    root = sim.build_tree("h100-ib", tmp_path / "root")
    cfgs = [c for c in (root / "sys/devices").rglob("config") if c.is_file() and not c.is_symlink()]
    for c in cfgs:
        c.unlink()
        c.mkdir()
    snap, cfg = _collect(root)
    [f] = [f for f in judge(snap, (), cfg, None).findings if f.code == "pcie.config_space.truncated"]
    assert "could not be read" in f.message and "refused" in f.message
    assert f.severity == "warning"  # not the default unit's 64 bytes: unexpected
    # Trees without config files (fixtures, some containers' sysfs views) say nothing.
    for c in cfgs:
        c.rmdir()
    snap, cfg = _collect(root)
    assert not [f for f in judge(snap, (), cfg, None).findings if f.code == "pcie.config_space.truncated"]
