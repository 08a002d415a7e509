"""pcie.aer.{fatal,nonfatal,correctable}, gpu.pcie.replay and pcie.link.retrained."""

from __future__ import annotations

from agentd.collection.history import History
from agentd.judging.checks import run_checks
from agentd.judging.checks.pcie_errors import check_aer, check_replay, check_retrained
from agentd.model import AerCounts, NodeSnapshot, PcieAer
from tests.support.check_snapshots import cfg, inp, later, layout, node, one, only, with_nvml_gpu, with_pci

GPU = layout(0)["gpu"]
NIC = layout(0)["nic"]
DN_GPU = layout(0)["dn_gpu"]
DN_NIC = layout(0)["dn_nic"]


def aer(cor: int = 0, nonfatal: int = 0, fatal: int = 0) -> PcieAer:
    return PcieAer(
        correctable=AerCounts(total=cor, by_type={"RxErr": 0, "BadTLP": cor}),
        nonfatal=AerCounts(total=nonfatal, by_type={"CmpltTO": nonfatal}),
        fatal=AerCounts(total=fatal, by_type={"DLP": fatal}),
    )


def with_aer(snap: NodeSnapshot, bdf: str, **counts: int) -> NodeSnapshot:
    return with_pci(snap, bdf, aer=aer(**counts))


def series(bdf: str, *values: dict[str, int], dt: float = 60.0) -> list[NodeSnapshot]:
    base = node()
    return [later(with_aer(base, bdf, **v), i * dt) for i, v in enumerate(values)]


def test_fatal_rise_within_window_is_critical():
    *hist, now = series(NIC, {}, {"fatal": 1})
    f = one(check_aer(inp(now, hist)), "pcie.aer.fatal", NIC)
    assert f.severity == "critical" and f.measured == 1
    assert "TOTAL_ERR_FATAL 0 -> 1" in f.message and "DLP +1" in f.message


def test_nonfatal_rise_is_a_warning():
    *hist, now = series(GPU, {"nonfatal": 2}, {"nonfatal": 3})
    f = one(check_aer(inp(now, hist)), "pcie.aer.nonfatal", GPU)
    assert f.severity == "warning" and "rose 1" in f.message


def test_a_single_corrected_error_never_fires():
    *hist, now = series(NIC, {}, {"cor": 1})
    assert [(f.code, f.severity) for f in check_aer(inp(now, hist))] == [("pcie.aer.correctable", "info")]  # shown, not judged
    assert not [f for f in run_checks(inp(now, hist)) if f.code.startswith("pcie.aer") and f.severity != "info"]


def test_correctable_fires_only_above_the_threshold():
    *hist, now = series(DN_NIC, {"cor": 5}, {"cor": 105})
    assert [f.severity for f in check_aer(inp(now, hist))] == ["info"]  # exactly 100 more: allowed
    *hist, now = series(DN_NIC, {"cor": 5}, {"cor": 106})
    f = one(check_aer(inp(now, hist)), "pcie.aer.correctable", DN_NIC)
    assert f.severity == "warning" and f.expected == 100
    config = cfg(thresholds={"pcie_aer_correctable_max": 1000})
    assert [f.severity for f in check_aer(inp(now, hist, config=config))] == ["info"]


def test_rise_before_the_window_does_not_count():
    # 0 -> 1 fatal 20 minutes ago, flat since: the window (600 s) holds only flat readings
    *hist, now = series(NIC, {}, {"fatal": 1}, {"fatal": 1}, {"fatal": 1}, dt=400.0)
    assert check_aer(inp(now, hist)) == []


def test_counter_reset_is_not_a_rise():
    *hist, now = series(NIC, {"fatal": 4, "cor": 900}, {"fatal": 0, "cor": 0})
    assert check_aer(inp(now, hist)) == []
    # measured again from the first reading after the reset
    *hist, now = series(NIC, {"fatal": 4}, {"fatal": 0}, {"fatal": 1})
    f = one(check_aer(inp(now, hist)), "pcie.aer.fatal", NIC)
    assert "TOTAL_ERR_FATAL 0 -> 1" in f.message


def test_unknown_severity_and_no_history_say_nothing():
    s = with_pci(node(), NIC, aer=PcieAer(fatal=AerCounts(total=3)))
    assert check_aer(inp(s)) == []
    hist = [with_pci(node(), NIC, aer=None)]
    assert check_aer(inp(later(s, 60), hist)) == []  # no earlier reading: no rise


def test_replay_rate_above_threshold():
    base = node()
    old = with_nvml_gpu(base, 0, pcie_replay_errors=10)
    slow = later(with_nvml_gpu(base, 0, pcie_replay_errors=15), 60)  # 5/min
    assert check_replay(inp(slow, [old])) == []
    fast = later(with_nvml_gpu(base, 0, pcie_replay_errors=110), 60)  # 100/min
    f = one(check_replay(inp(fast, [old])), "gpu.pcie.replay", "gpu0")
    assert f.severity == "warning" and f.measured == 100.0 and f.expected == 8.0
    reset = later(with_nvml_gpu(base, 0, pcie_replay_errors=0), 60)
    assert check_replay(inp(reset, [old])) == []


def test_nic_link_that_retrained_down_and_back_up():
    base = node()
    down = later(with_pci(base, NIC, current_link_speed="16 GT/s PCIe", current_link_width=16), 60)
    up = later(base, 120)
    f = one(check_retrained(inp(up, [base, down])), "pcie.link.retrained", NIC)
    assert f.severity == "warning"
    assert "32 GT/s PCIe x16 -> 16 GT/s PCIe x16 -> 32 GT/s PCIe x16" in f.message
    assert check_retrained(inp(later(base, 60), [base])) == []


def test_retrain_outside_the_window_is_forgotten():
    base = node()
    down = later(with_pci(base, DN_NIC, current_link_width=8), 60)
    assert check_retrained(inp(later(base, 120), [base, down]))
    assert check_retrained(inp(later(base, 2000), [base, down, later(base, 120)])) == []


def test_gpu_link_speed_never_counts_but_width_of_its_port_does():
    base = node()
    idle = later(with_pci(with_pci(base, GPU, current_link_speed="2.5 GT/s PCIe", current_link_speed_gts=2.5),
                          DN_GPU, current_link_speed="2.5 GT/s PCIe", current_link_speed_gts=2.5), 60)
    assert check_retrained(inp(later(base, 120), [base, idle])) == []
    narrow = later(with_pci(base, DN_GPU, current_link_width=8), 60)
    f = one(check_retrained(inp(later(base, 120), [base, narrow])), "pcie.link.retrained", DN_GPU)
    assert "width" in f.message and f.measured == "x16 -> x8 -> x16" and f.expected == "x16"  # the speed it does not judge is not named
    assert only(check_retrained(inp(later(base, 120), [base, narrow])), "pcie.link.retrained") == [f]


def test_daemon_history_keeps_what_the_checks_compare():
    """Compact history entries (agentd.collection.history) carry AER, replay and links."""
    h = History(maxlen=10, spacing_s=1.0)
    base = node()
    s1 = with_nvml_gpu(with_aer(base, NIC), 0, pcie_replay_errors=0)
    s2 = later(with_pci(with_aer(s1, NIC, fatal=1), NIC, current_link_width=8), 60)
    s3 = later(with_nvml_gpu(with_aer(s1, NIC, fatal=1), 0, pcie_replay_errors=1000), 120)
    for s in (s1, s2, s3):
        h.append(s)
    hist = h.snapshots()[:-1]
    assert type(hist[0].pci[0]).__name__ == "PciEntry"  # compacted
    now = later(with_nvml_gpu(with_aer(s1, NIC, fatal=2), 0, pcie_replay_errors=2000), 180)
    findings = run_checks(inp(now, hist))
    assert one(findings, "pcie.aer.fatal", NIC).message.startswith("AER fatal errors rose 2")
    assert one(findings, "pcie.link.retrained", NIC)
    assert one(findings, "gpu.pcie.replay", "gpu0")
