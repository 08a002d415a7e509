"""probe.failed from probe statuses and read errors."""

from __future__ import annotations

from agentd.judging.checks.probes import MAX_PER_SOURCE, check_probes
from agentd.model import NvmlInfo, ProbeStatus, ReadError
from tests.support.check_snapshots import T0, inp, node, one


def with_probes(s, *statuses, errors=()):
    keep = [p for p in s.probes if p.name not in {x.name for x in statuses}]
    return s.model_copy(update={"probes": (*keep, *statuses), "read_errors": tuple(errors)})


def test_healthy_no_findings():
    assert check_probes(inp(node())) == []


def test_nvml_timeout_names_the_limit_and_staleness():
    st = ProbeStatus(name="nvml", ok=False, duration_s=5.0, finished_at=T0, timed_out=True, stale=True,
                     last_success_at=T0 - 30)
    f = one(check_probes(inp(with_probes(node(), st))), "probe.failed", "nvml")
    assert f.severity == "warning"
    assert "NVML did not answer within 5 s (timeouts.nvml_s)" in f.message and "30 s ago" in f.message


def test_failed_probe_with_error():
    st = ProbeStatus(name="ethtool", ok=False, duration_s=0.1, finished_at=T0, error="SIOCETHTOOL: Operation not permitted")
    f = one(check_probes(inp(with_probes(node(), st))), "probe.failed", "ethtool")
    assert "Operation not permitted" in f.message


def test_stale_never_succeeded():
    st = ProbeStatus(name="dcb", ok=True, duration_s=0.1, finished_at=T0, stale=True)
    assert "never succeeded" in one(check_probes(inp(with_probes(node(), st))), "probe.failed", "dcb").message


def test_read_errors_become_findings_bounded_per_source():
    errors = [ReadError(source="infiniband", path=f"class/infiniband/mlx5_{i}/ports/1/rate", kind="unparsable",
                        detail="'garbage'") for i in range(12)]
    errors.append(ReadError(source="pci", path="bus/pci/devices/0000:1b:00.0/config", kind="unreadable"))
    f = check_probes(inp(with_probes(node(), errors=errors)))
    ib = [x for x in f if x.subject.startswith("infiniband:")]
    assert len(ib) == MAX_PER_SOURCE + 1
    summary = one(f, "probe.failed", "infiniband:*")
    assert "7 more infiniband read errors (unparsable 7)" in summary.message
    one(f, "probe.failed", "pci:bus/pci/devices/0000:1b:00.0/config")
    assert all(x.severity == "warning" for x in f)


def test_repeated_error_on_one_path_is_one_finding():
    errors = [ReadError(source="netdev", path="class/net/eth0/mtu", kind="unreadable")] * 3
    f = check_probes(inp(with_probes(node(), errors=errors)))
    assert len(f) == 1 and "(+2 more)" in f[0].message


def test_nvml_unavailable_with_gpus_is_not_a_probe_failure():
    # nvml.blind (checks/nvlink.py) reports it, with nvmlInit's error in its message
    s = node().model_copy(update={"nvml": NvmlInfo(available=False, error="Insufficient Permissions")})
    assert check_probes(inp(s)) == []
    err = ReadError(source="nvml", path="nvmlInit", kind="unreadable", detail="Insufficient Permissions")
    assert check_probes(inp(with_probes(s, errors=[err]))) == []
    # without GPUs on the PCI bus nothing is blind: the read error is reported as before
    bare = node(gpus=0).model_copy(update={"nvml": s.nvml})
    f = one(check_probes(inp(with_probes(bare, errors=[err]))), "probe.failed", "nvml:nvmlInit")
    assert "Insufficient Permissions" in f.message
    # a hung NVML stays probe.failed on nvml
    hung = ProbeStatus(name="nvml", ok=False, duration_s=5.0, finished_at=T0, timed_out=True)
    assert one(check_probes(inp(with_probes(s, hung))), "probe.failed", "nvml").measured == "timeout"
