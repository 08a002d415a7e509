"""ib.counter.<name> rates, ib.counter.reset and ib.counter.saturated."""

from __future__ import annotations

from agentd.judging.checks.ib_counters import check_counters
from tests.support.check_snapshots import cfg, inp, later, node, one, only, problems, with_counters

HCA = "mlx5_2"


def _pair(dt=10.0, hw=False, before=None, **after):
    """(current, history) with the port's counters at ``before`` then ``after``."""
    base = node()
    old = with_counters(base, HCA, hw=hw, **(before or {k: 0 for k in after}))
    new = later(with_counters(base, HCA, hw=hw, **after), dt)
    return new, [old]


def test_no_history_no_rate_findings():
    s = with_counters(node(), HCA, symbol_error=5000, link_error_recovery=7)
    assert check_counters(inp(s)) == []


def test_flat_counters_no_findings():
    s = node()
    assert check_counters(inp(later(s, 10), [s])) == []


def test_zero_threshold_counter_fires_on_any_increase():
    new, hist = _pair(link_error_recovery=1)
    f = one(check_counters(inp(new, hist)), "ib.counter.link_error_recovery", f"{HCA}:1")
    assert f.severity == "warning" and "rose 1 in 10 s" in f.message


def test_configured_severity_and_threshold():
    new, hist = _pair(symbol_error=30)
    f = one(check_counters(inp(new, hist)), "ib.counter.symbol_error", f"{HCA}:1")
    assert f.severity == "critical" and f.measured == 3.0 and "/h" in f.message


def test_below_threshold_or_too_few_events():
    new, hist = _pair(port_xmit_discards=500)  # 50/s < 100/s
    assert only(check_counters(inp(new, hist)), "ib.counter.port_xmit_discards") == []
    new, hist = _pair(dt=2.0, symbol_error=2)  # 1/s > 120/h but only 2 events
    assert only(check_counters(inp(new, hist)), "ib.counter.symbol_error") == []


def test_hw_counters_are_judged():
    new, hist = _pair(hw=True, rnr_nak_retry_err=4)
    f = one(check_counters(inp(new, hist)), "ib.counter.rnr_nak_retry_err", f"{HCA}:1")
    assert f.severity == "critical"


def test_custom_counter_threshold_from_config():
    new, hist = _pair(port_rcv_switch_relay_errors=50)
    config = cfg(thresholds={"counters": {"port_rcv_switch_relay_errors": {"per_s": 1, "severity": "warning"}}})
    assert one(check_counters(inp(new, hist, config=config)), "ib.counter.port_rcv_switch_relay_errors").severity == "warning"
    assert check_counters(inp(new, hist)) == []  # not in the default set


def test_rate_uses_window_over_several_snapshots():
    base = node()
    snaps = [later(with_counters(base, HCA, symbol_error=v), 60 * i) for i, v in enumerate([0, 0, 0, 0, 0, 10])]
    # 10 errors over 300 s = 0.033/s = 120/h: not above the threshold
    assert check_counters(inp(snaps[-1], snaps[:-1])) == []
    snaps[-1] = with_counters(snaps[-1], HCA, symbol_error=40)
    assert one(check_counters(inp(snaps[-1], snaps[:-1])), "ib.counter.symbol_error").severity == "critical"


def test_rate_finding_clears_when_counter_stops():
    base = node()
    s0 = with_counters(base, HCA, link_error_recovery=0)
    s1 = later(with_counters(base, HCA, link_error_recovery=5), 10)
    s2 = later(s1, 700)  # flat since, and s0 left the window
    assert only(check_counters(inp(s1, [s0])), "ib.counter.link_error_recovery")
    assert check_counters(inp(s2, [s0, s1])) == []


def test_reset_is_reported_never_as_a_rate():
    new, hist = _pair(before={"symbol_error": 60000, "link_error_recovery": 200}, symbol_error=0, link_error_recovery=0)
    f = check_counters(inp(new, hist))
    assert [x.code for x in f] == ["ib.counter.reset"]
    assert f[0].severity == "warning" and "symbol_error" in f[0].message and f[0].subject == f"{HCA}:1"


def test_rate_measured_again_after_reset():
    base = node()
    s0 = with_counters(base, HCA, link_error_recovery=200)
    s1 = later(with_counters(base, HCA, link_error_recovery=0), 10)
    s2 = later(with_counters(base, HCA, link_error_recovery=0), 20)
    assert check_counters(inp(s2, [s0, s1])) == []  # reset no longer in the latest step, flat since
    s3 = later(with_counters(base, HCA, link_error_recovery=2), 30)
    f = one(check_counters(inp(s3, [s0, s1, s2])), "ib.counter.link_error_recovery")
    assert "rose 2 in 20 s" in f.message


def test_saturated_counters_single_snapshot():
    # the real gpud-h100-ndr fixture: excessive_buffer_overrun_errors=15 (4-bit), link_downed=255 (8-bit)
    s = with_counters(node(), HCA, excessive_buffer_overrun_errors=15, link_downed=255, port_xmit_wait=2489603687)
    f = one(check_counters(inp(s)), "ib.counter.saturated", f"{HCA}:1")
    assert f.severity == "warning"
    assert "excessive_buffer_overrun_errors=15 (4-bit max" in f.message and "link_downed=255 (8-bit max" in f.message
    assert "port_xmit_wait" not in f.message


def test_saturation_never_produces_a_rate_finding():
    new, hist = _pair(before={"excessive_buffer_overrun_errors": 9}, excessive_buffer_overrun_errors=15)
    f = check_counters(inp(new, hist))
    assert [x.code for x in f] == ["ib.counter.saturated"]
    assert "rose >= 6" in f[0].message
    # stuck flat at the maximum
    new, hist = _pair(before={"symbol_error": 65535}, symbol_error=65535)
    assert [x.code for x in check_counters(inp(new, hist))] == ["ib.counter.saturated"]


def test_saturation_clears_after_counter_reset():
    s0 = with_counters(node(), HCA, link_downed=255)
    s1 = later(with_counters(node(), HCA, link_downed=0), 10)
    s2 = later(s1, 10)
    assert [x.code for x in check_counters(inp(s1, [s0]))] == ["ib.counter.reset"]
    assert check_counters(inp(s2, [s0, s1])) == []


def test_non_compute_counter_capped_at_warning():
    base = node()
    s0 = with_counters(base, "mlx5_8", local_link_integrity_errors=0)
    s1 = later(with_counters(base, "mlx5_8", local_link_integrity_errors=2), 10)
    assert problems(check_counters(inp(s1, [s0]))) == [("warning", "ib.counter.local_link_integrity_errors", "mlx5_8:1")]


def test_lifespan_setting_is_not_a_counter():
    new, hist = _pair(hw=True, before={"lifespan": 12}, lifespan=10)
    assert check_counters(inp(new, hist)) == []
