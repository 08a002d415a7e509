"""run_checks: registry, ordering, error isolation, no false alarms, documented codes."""

from __future__ import annotations

import re

import pytest

from agentd.judging.baseline import baseline_from
from agentd.judging.checks import CHECKS, CheckInput, check_name, run_checks
from agentd.judging.roles import HcaRoles, hca_roles
from agentd.model import (
    Finding,
    NcclConf,
    NvmlInfo,
    PfcConfig,
    ProbeStatus,
    RoceEcn,
    overall_status,
    sort_findings,
)
from tests.support.check_snapshots import (
    T0,
    cfg,
    inp,
    later,
    layout,
    node,
    problems,
    with_counters,
    with_ethtool,
    with_gdr,
    with_gpu,
    with_hca,
    with_netdev,
    with_nvlink,
    with_nvml_gpu,
    with_pci,
    with_port,
    without_gpu,
    without_hca,
)
from tests.support.paths import DOCS

DOC = DOCS / "findings.md"
FULL = cfg(expect={"gpus": 8, "hca_ports": 8, "nvlinks_per_gpu": 18, "ipoib_mtu": 4092, "gpu_nic_path": "PXB"})


@pytest.mark.parametrize("layer", ["InfiniBand", "Ethernet"])
@pytest.mark.parametrize("n_history", [0, 1, 5])
def test_healthy_nodes_are_ok_with_no_warnings(layer, n_history):
    s = node(layer=layer)
    history = [later(s, -10.0 * (n_history - i)) for i in range(n_history)]
    base = baseline_from(s, hca_roles(s, FULL.hca))
    for config in (cfg(), FULL):
        findings = run_checks(inp(s, history, config=config, baseline=base))
        assert problems(findings) == []
        assert overall_status(findings) == "ok"


def _scenarios():
    """(name, healthy, faulty, expected problem or None, undo), together covering every code.
    undo "restore": the next snapshot is healthy again; "freeze": the faulty values stay (a
    counter that stopped rising); "reset": counters restored by a reset, one step later."""
    h = node()
    r = node(layer="Ethernet")
    L = layout(2)
    lost = with_gpu(with_nvml_gpu(h, 2, error="GPU is lost"), 2, in_nvml=False)
    blind = h.model_copy(update={"nvml": NvmlInfo(available=False, error="Driver Not Loaded")})
    timed_out = h.model_copy(update={"probes": (ProbeStatus(name="nvml", ok=False, duration_s=5, finished_at=T0, timed_out=True),)})
    qos = r.model_copy(update={"nccl_conf": NcclConf(path="etc/nccl.conf", variables={"NCCL_IB_TC": "106"})})
    dscp_map = {d: d >> 3 for d in range(64)}
    qos = with_netdev(qos, "eth2", pfc=PfcConfig(enabled=(3,), trust="dscp", dscp2prio=dscp_map))
    lossy_map = with_netdev(qos, "eth2", pfc=PfcConfig(enabled=(3,), trust="dscp", dscp2prio={**dscp_map, 26: 0}))
    prio_bytes = with_ethtool(r, "eth2", tx_prio0_bytes=0, tx_prio3_bytes=0)
    xmit = r.hca("mlx5_2").ports[0].counters["port_xmit_data"]
    lossy_bytes = with_ethtool(with_counters(prio_bytes, "mlx5_2", port_xmit_data=xmit + 10**9), "eth2", tx_prio0_bytes=4 * 10**9)
    return [
        ("qos lossy", qos, lossy_map, ("critical", "roce.qos.lossy", "eth2"), "restore"),
        ("qos lossy traffic", prio_bytes, lossy_bytes, ("critical", "roce.qos.lossy_traffic", "eth2"), "freeze"),
        ("port down", h, with_port(h, "mlx5_3", state="DOWN"), ("critical", "ib.port.down", "mlx5_3:1"), "restore"),
        ("ports count", h, with_port(h, "mlx5_3", state="DOWN"), ("critical", "ib.ports.count", "node"), "restore"),
        ("rate", h, with_port(h, "mlx5_3", rate_gbps=200.0), ("critical", "ib.port.rate_degraded", "mlx5_3:1"), "restore"),
        ("width", h, with_port(h, "mlx5_3", width=2), ("warning", "ib.port.width_degraded", "mlx5_3:1"), "restore"),
        ("flapping", h, with_counters(h, "mlx5_3", link_downed=5), ("critical", "ib.port.flapping", "mlx5_3:1"), "freeze"),
        ("errors", h, with_counters(h, "mlx5_2", symbol_error=500), ("critical", "ib.counter.symbol_error", "mlx5_2:1"), "freeze"),
        ("reset", with_counters(h, "mlx5_2", port_xmit_wait=10**6), h, ("warning", "ib.counter.reset", "mlx5_2:1"), "freeze"),
        ("saturated", h, with_counters(h, "mlx5_2", link_downed=255), ("warning", "ib.counter.saturated", "mlx5_2:1"), "reset"),
        ("peermem gone", h, with_gdr(h, peermem_loaded=False, peermem_version_path=None), ("critical", "gdr.unavailable", "node"), "restore"),
        ("peermem unregistered", h, with_gdr(h, peermem_version_path=None), ("warning", "gdr.peermem.unregistered", "node"), "restore"),
        ("pcie", h, with_pci(h, L["nic"], current_link_speed_gts=16.0), ("warning", "pcie.link.downtrained", L["nic"]), "restore"),
        ("cross socket", h, with_gpu(h, 2, nic_paths={"mlx5_2": "SYS"}), ("warning", "pcie.gpu_nic.cross_socket", "gpu2"), "restore"),
        ("distance", h, with_gpu(h, 2, nic_paths={"mlx5_2": "PHB"}), ("warning", "pcie.gpu_nic.distance", "gpu2"), "restore"),
        ("acs", h, with_pci(h, L["dn_nic"], acs_ctrl=0x1D), ("critical", "pcie.acs.redirect", L["dn_nic"]), "restore"),
        ("mtu", r, with_netdev(r, "eth2", mtu=1500), ("critical", "mtu.mismatch", "eth2"), "restore"),
        ("ecn", r, with_netdev(r, "eth2", ecn=RoceEcn(np={3: False}, rp={3: True})), ("critical", "roce.ecn.disabled", "eth2"), "restore"),
        ("pfc", r, with_netdev(r, "eth2", pfc=PfcConfig(enabled=(0,))), ("critical", "roce.pfc.disabled", "eth2"), "restore"),
        ("pause", r, with_ethtool(r, "eth2", tx_prio3_pause=10**6), ("critical", "roce.pfc.pause_storm", "eth2"), "freeze"),
        ("cnp", r, with_counters(r, "mlx5_2", hw=True, np_cnp_sent=100), None, "freeze"),
        ("nvlink", h, with_nvlink(h, 2, 3, state="down"), ("critical", "nvlink.link.down", "gpu2"), "restore"),
        ("nvlink errors", h, with_nvlink(h, 2, 3, errors={"replay": 9}), ("warning", "nvlink.link.errors", "gpu2:link3"), "freeze"),
        ("fabric", h, with_nvml_gpu(h, 2, fabric_state="in_progress"), ("critical", "nvlink.fabric.incomplete", "gpu2"), "restore"),
        ("gpu lost", h, lost, ("critical", "gpu.lost", "gpu2"), "restore"),
        ("nvml blind", h, blind, ("critical", "nvml.blind", "nvml"), "restore"),
        ("gpu gone", h, without_gpu(h, 2), ("critical", "inventory.gpu.missing", L["gpu"]), "restore"),
        ("gpu count", h, without_gpu(h, 2), ("critical", "inventory.gpu.count", "node"), "restore"),
        ("nic gone", h, without_hca(h, "mlx5_2"), ("critical", "inventory.hca.missing", "mlx5_2"), "restore"),
        ("port gone", h, with_hca(h, "mlx5_2", ports=()), ("critical", "inventory.port.missing", "mlx5_2:1"), "restore"),
        ("ipoib", h, with_netdev(h, "ib2", mtu=2044), ("warning", "mtu.mismatch", "ib2"), "restore"),
        ("probe", h, timed_out, ("warning", "probe.failed", "nvml"), "restore"),
    ]


SCENARIOS = _scenarios()


def _evaluate(healthy, faulty):
    base = baseline_from(healthy, hca_roles(healthy, FULL.hca))
    return run_checks(inp(later(faulty, 10), [healthy], config=FULL, baseline=base)), base


@pytest.mark.parametrize("name,healthy,faulty,expected,undo", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_fault_gives_its_finding_and_clears(name, healthy, faulty, expected, undo):
    findings, base = _evaluate(healthy, faulty)
    keys = [(f.code, f.subject) for f in findings]
    assert len(keys) == len(set(keys)), "a (code, subject) pair appears twice"
    if expected is not None:
        assert expected in problems(findings)
    now = later(faulty, 10)
    after = later(faulty, 1000) if undo == "freeze" else later(healthy, 1000)
    history = [now, later(healthy, 995)] if undo == "reset" else [now]  # the reset step itself is reported
    config = FULL.model_copy(update={"thresholds": FULL.thresholds.model_copy(update={"flap_window_s": 600})})
    assert problems(run_checks(inp(after, history, config=config, baseline=base))) == []


def _boom(inp: CheckInput) -> list[Finding]:
    raise KeyError("mlx5_9")


def test_a_raising_check_becomes_a_finding_and_others_still_run():
    s = with_port(node(), "mlx5_3", state="DOWN")
    findings = run_checks(inp(s), checks=(_boom, *CHECKS))
    err = [f for f in findings if f.code == "agentd.check.error"]
    assert len(err) == 1 and err[0].severity == "warning"
    assert err[0].subject == "test_checks_registry._boom" and "KeyError" in err[0].message
    assert ("critical", "ib.port.down", "mlx5_3:1") in problems(findings)


def test_results_are_sorted():
    s = with_gdr(with_port(node(), "mlx5_3", width=2, rate_gbps=200.0), peermem_loaded=False, peermem_version_path=None)
    findings = run_checks(inp(s))
    assert findings == sort_findings(findings) and findings[0].severity == "critical"


def test_roles_given_are_used():
    s = with_port(node(), "mlx5_3", state="DOWN")
    every_other = HcaRoles(compute=(), other=tuple(h.name for h in s.hcas), source="config")
    f = run_checks(CheckInput(snapshot=s, history=(), config=cfg(), roles=every_other))
    assert [x for x in problems(f) if x[1] == "ib.port.down"] == []  # non-compute, never seen active: reported only


def test_check_names():
    names = [check_name(c) for c in CHECKS]
    assert len(names) == len(set(names)) and "ib.check_ports" in names


def test_every_emitted_code_is_documented():
    doc = DOC.read_text(encoding="utf-8")
    documented = set(re.findall(r"`([a-z0-9_]+(?:\.[a-z0-9_<>]+)+)`", doc))
    seen: set[str] = set()
    for _, healthy, faulty, _, _ in SCENARIOS:
        seen |= {f.code for f in _evaluate(healthy, faulty)[0]}
    seen |= {f.code for f in run_checks(inp(node()), checks=(_boom,))}
    seen |= {f.code for f in run_checks(inp(node(layer="Ethernet")))}
    for code in seen:
        assert code in documented or re.sub(r"^ib\.counter\.(?!reset$|saturated$).*", "ib.counter.<name>", code) in documented, code
