"""Every simulator fault kind yields its specific finding on the right subject with the
right severity, and the finding clears when the fault is undone (issue 3).

Collections run in-process with explicit timestamps: s1 healthy, fault, s2 judged
against (s1,), clear, s3 judged against (s1, s2) far enough later that rate and flap
windows no longer cover the fault's counter jump.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentd import sim
from agentd.collection.collector import Collector
from agentd.config import AgentConfig, Timeouts
from agentd.host.fs import HostRoot
from agentd.judging.judge import judge

# Wall-clock time: kernel log events are dated when they are read (a simulated root has
# no recorded uptime), so the snapshots are taken on the same clock.
T0 = float(int(time.time()))
LATER = 25 * 3600.0  # beyond the 12 h flap window, the 10 min rate window and the 24 h kernel event hold

ROCE = "h100-roce"
# kind -> (profile, spec, expected (code, severity, subject) present while faulted)
EXPECT = {
    "port_down": ("h100-ib", "port_down", ("ib.port.down", "critical", "mlx5_0:1")),
    "rate_degraded": ("h100-ib", "rate_degraded", ("ib.port.rate_degraded", "critical", "mlx5_0:1")),
    "flapping": ("h100-ib", "flapping", ("ib.port.flapping", "critical", "mlx5_0:1")),
    "peermem_gone": ("h100-ib", "peermem_gone", ("gdr.path", "ok", "node")),
    "dmabuf_only": ("h100-ib", "dmabuf_only", ("gdr.path", "ok", "node")),
    "no_gdr": ("h100-ib", "no_gdr", ("gdr.unavailable", "critical", "node")),
    "pcie_downtrained": ("h100-ib", "pcie_downtrained", ("pcie.link.downtrained", "warning", "0000:18:00.0")),
    "acs_on": ("h100-ib", "acs_on", ("pcie.acs.redirect", "critical", "0000:16:01.0")),
    "mtu_mismatch": (ROCE, "mtu_mismatch", ("mtu.mismatch", "critical", "ens1np0")),
    "ecn_off": (ROCE, "ecn_off", ("roce.ecn.disabled", "critical", "ens1np0")),
    "pfc_off": (ROCE, "pfc_off", ("roce.pfc.disabled", "critical", "ens1np0")),
    "pause_storm": (ROCE, "pause_storm", ("roce.pfc.pause_storm", "critical", "ens1np0")),
    "pause_on": (ROCE, "pause_on", ("roce.pause.global", "warning", "ens1np0")),
    "nvlink_down": ("h100-ib", "nvlink_down", ("nvlink.link.down", "critical", "gpu0:link0")),
    "nvlink_errors": ("h100-ib", "nvlink_errors", ("nvlink.link.errors", "warning", "gpu0:link0")),
    "gpu_lost": ("h100-ib", "gpu_lost", ("gpu.lost", "critical", "gpu0")),
    "gpu_removed": ("h100-ib", "gpu_removed", ("inventory.gpu.missing", "critical", "0000:18:00.0")),
    "nic_removed": ("h100-ib", "nic_removed", ("inventory.hca.missing", "critical", "mlx5_0")),
    "counter_reset": ("h100-ib", "counter_reset", ("ib.counter.reset", "warning", "mlx5_0:1")),
    "counter_saturated": ("h100-ib", "counter_saturated", ("ib.counter.saturated", "warning", "mlx5_0:1")),
    "unreadable_file": ("h100-ib", "unreadable_file", ("probe.failed", "warning", "ib:sys/class/infiniband/mlx5_0/ports/1/rate")),
    "garbage_file": ("h100-ib", "garbage_file", ("probe.failed", "warning", "ib:sys/class/infiniband/mlx5_0/ports/1/state")),
    "nvml_hang": ("h100-ib", "nvml_hang=1", ("probe.failed", "warning", "nvml")),
    "nvml_init_error": ("h100-ib", "nvml_init_error", ("nvml.blind", "critical", "nvml")),
    "ethtool_failure": (ROCE, "ethtool_failure", ("probe.failed", "warning", "ethtool:.agentd/ethtool/ens1np0")),
    "fabric_incomplete": ("h100-ib", "fabric_incomplete", ("nvlink.fabric.incomplete", "critical", "gpu0")),
    "xid": ("h100-ib", "xid@gpu3", ("gpu.xid", "critical", "gpu3")),
    "fell_off_bus_multiline": ("h100-ib", "fell_off_bus_multiline@gpu5", ("gpu.off_bus", "critical", "gpu5")),
    "mlx5_cmd_timeout": ("h100-ib", "mlx5_cmd_timeout@mlx5_2", ("hca.firmware", "warning", "mlx5_2")),
    # issue 36: the failure follows agentd's counter read, so it backs off (a fact, for the boot)
    "mlx5_access_reg": ("h100-ib", "mlx5_access_reg@mlx5_2", ("collect.device.backed_off", "ok", "0000:49:00.0")),
    "aer_uncorrectable": ("h100-ib", "aer_uncorrectable=fatal", ("pcie.aer.fatal", "critical", "0000:18:00.0")),
    "aer_correctable": ("h100-ib", "aer_correctable@mlx5_0", ("pcie.aer.correctable", "warning", "0000:17:00.0")),
    "pcie_replay": ("h100-ib", "pcie_replay", ("gpu.pcie.replay", "warning", "gpu0")),
    # issue 16: the NVLink fabric
    "fabric_status": ("gb200-nvl", "fabric_status@gpu1", ("nvlink.fabric.incomplete", "critical", "gpu1")),
    "fabric_unassigned": ("gb200-nvl", "fabric_unassigned@gpu0=clique", ("nvlink.fabric.unassigned", "critical", "gpu0")),
    "fabric_health": ("gb200-nvl", "fabric_health@gpu2", ("nvlink.fabric.unhealthy", "critical", "gpu2")),
    "fabric_domain_split": ("gb200-nvl", "fabric_domain_split@gpu3", ("nvlink.domain.split", "critical", "node")),
    "nvlink_slow": ("gb200-nvl", "nvlink_slow@gpu0:5", ("nvlink.link.slow", "warning", "gpu0:link5")),
    "c2c_down": ("gb200-nvl", "c2c_down@gpu1", ("nvlink.c2c.down", "critical", "gpu1")),
    "fm_down": ("h100-ib", "fm_down", ("fabric.manager.down", "critical", "node")),
    "imex_down": ("gb200-nvl", "imex_down", ("fabric.imex.down", "critical", "node")),
    # issue 17: the RoCE QoS chain (the profile's /etc/nccl.conf sets NCCL_IB_TC=106: DSCP 26, priority 3)
    "tclass_override": (ROCE, "tclass_override", ("roce.qos.tclass_override", "warning", "mlx5_0:1")),
    "trust_pcp": (ROCE, "trust_pcp", ("roce.qos.trust_mismatch", "warning", "ens1np0")),
    "dscp_map_lossy": (ROCE, "dscp_map_lossy", ("roce.qos.lossy", "critical", "ens1np0")),
    "nccl_tc_mismatch": (ROCE, "nccl_tc_mismatch", ("roce.qos.lossy", "critical", "ens1np0")),
    "roce_lossy_traffic": (ROCE, "roce_lossy_traffic", ("roce.qos.lossy_traffic", "critical", "ens1np0")),
    # issue 38: the physical layer
    "module_hot": ("h100-ib", "module_hot", ("optics.module.temperature", "critical", "mlx5_0:1")),
    "rx_power_low": (ROCE, "rx_power_low", ("optics.rx_power.low", "critical", "mlx5_0:1")),
    "fec_errors": (ROCE, "fec_errors", ("optics.fec.pre_fec_ber", "warning", "mlx5_0:1")),
    "link_down_reason": (ROCE, "link_down_reason", ("ib.port.down", "critical", "mlx5_0:1")),
}
# Kinds whose finding needs configuration beyond the defaults: [section] -> settings.
CONFIG = {"imex_down": {"fabric": {"imex": True}}}
# A GPU off the bus holds until the node reboots (the simulator's log only grows): bounded
# here by kernel.reset_hold_s, as the demo does, so clearing the fault is seen.
CONFIG |= {kind: {"kernel": {"reset_hold_s": 86400}} for kind in ("xid", "fell_off_bus_multiline")}
# The gdr.path fact says which registration path is in use; these faults change it.
GDR_PATH_MEASURED = {"peermem_gone": "dmabuf", "dmabuf_only": "dmabuf"}
# link_downed jumping from its value to 255 between two collections is read as (at
# least) that many link-down events: flapping (critical) beside the saturation warning.
STATUS_OVERRIDE = {"counter_saturated": "critical"}
# The override (tclass 0) and pcp trust (SL 0) put the traffic on priority 0, where PFC
# is off: roce.qos.lossy (critical) beside the warning that names the broken link.
STATUS_OVERRIDE |= {"tclass_override": "critical", "trust_pcp": "critical"}
# A device gone is critical once a second collection misses it too (checks/inventory.py):
# these are judged on the collection after the first that missed it.
CONFIRMED = {"gpu_removed", "nic_removed"}
# A back-off lasts for the rest of the boot: its fact stays after the log stops growing.
STATUS_OVERRIDE |= {"mlx5_access_reg": "ok"}
FOR_THE_BOOT = {"mlx5_access_reg"}


def config(root: Path, kind: str | None = None) -> AgentConfig:
    return AgentConfig.model_validate({"host_root": root, "timeouts": Timeouts(nvml_s=0.3), **CONFIG.get(kind or "", {})})


def triples(findings, *, include_ok=False):
    return {(f.code, f.severity, f.subject) for f in findings if include_ok or f.severity != "ok"}


def test_every_fault_kind_has_an_expectation():
    assert set(EXPECT) == set(sim.FAULT_KINDS)


@pytest.mark.tree
@pytest.mark.parametrize("profile", sorted(sim.PROFILES))
def test_healthy_profiles_are_ok_without_warnings(profile, tmp_path):
    root = sim.build_tree(profile, tmp_path / "root")
    cfg = config(root)
    c = Collector(HostRoot.at(root), cfg)
    c.run_sync()
    s1 = c.snapshot(taken_at=T0)
    c.run_sync()
    s2 = c.snapshot(taken_at=T0 + 10)
    j = judge(s2, (s1,), cfg, None)
    assert j.status == "ok", triples(j.findings)
    assert triples(j.findings) == set()
    assert j.new_baseline is not None


@pytest.mark.tree
@pytest.mark.parametrize("kind", sorted(EXPECT))
def test_fault_produces_its_finding_and_clears(kind, tmp_path):
    profile, spec, expected = EXPECT[kind]
    root = sim.build_tree(profile, tmp_path / "root")
    cfg = config(root, kind)
    c = Collector(HostRoot.at(root), cfg)
    c.run_sync()
    s1 = c.snapshot(taken_at=T0)
    healthy = judge(s1, (), cfg, None)
    assert healthy.status == "ok"
    baseline = healthy.new_baseline

    sim.apply_fault(root, spec)
    c.run_sync()
    s2 = c.snapshot(taken_at=T0 + 10)
    faulted = judge(s2, (s1,), cfg, baseline)
    if kind in CONFIRMED:
        c.run_sync()
        s2, first = c.snapshot(taken_at=T0 + 20), s2
        faulted = judge(s2, (s1, first), cfg, baseline)
    assert expected in triples(faulted.findings, include_ok=True), triples(faulted.findings, include_ok=True)
    if kind in GDR_PATH_MEASURED:
        gdr = next(f for f in faulted.findings if f.code == "gdr.path")
        assert gdr.measured == GDR_PATH_MEASURED[kind]
        assert faulted.status == "ok"
    else:
        assert faulted.status == STATUS_OVERRIDE.get(kind, "critical" if expected[1] == "critical" else "degraded")

    sim.clear_fault(root, spec)
    if kind == "nvml_hang":
        # A hung NVML call answers only when it returns; the lane waits for it.
        c._lanes["nvml"].submit(lambda: None)[0].result(timeout=10)
    c.run_sync()
    s3 = c.snapshot(taken_at=T0 + LATER)
    # Clearing a fault can itself be an event (a counter set back reads as a reset), so
    # recovery is judged one collection later.
    c.run_sync()
    s4 = c.snapshot(taken_at=T0 + LATER + 10)
    recovered = judge(s4, (s1, s2, s3), cfg, baseline)
    assert recovered.status == "ok", triples(recovered.findings)
    if kind not in GDR_PATH_MEASURED.keys() | FOR_THE_BOOT:
        assert expected not in triples(recovered.findings, include_ok=True)


@pytest.mark.tree
def test_an_application_xid_is_counted_and_leaves_the_node_ok(tmp_path):
    """xid=13@gpu0 (a job's illegal memory access): counted and shown (info), never judged."""
    root = sim.build_tree("h100-ib", tmp_path / "root")
    cfg = config(root)
    c = Collector(HostRoot.at(root), cfg)
    c.run_sync()
    s1 = c.snapshot(taken_at=T0)
    sim.apply_fault(root, "xid@gpu0=13")
    c.run_sync()
    s2 = c.snapshot(taken_at=T0 + 10)
    j = judge(s2, (s1,), cfg, None)
    assert j.status == "ok" and triples(j.findings) == {("gpu.xid", "info", "gpu0")}
    assert [(k.kind, k.code, k.device, k.count) for k in s2.kernel.counts] == [("xid", "13", "0000:18:00.0", 1)]
