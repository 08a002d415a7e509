"""Counter math, windows and PMA widths shared by the checks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.base.pma import is_saturated, pma_max
from agentd.judging.checks.common import (
    MIN_EVENTS,
    CounterChange,
    counter_change,
    exceeds,
    in_window,
)
from tests.support.check_snapshots import node


def test_rate_from_two_readings():
    c = counter_change([(0.0, 10), (10.0, 40)])
    assert c.status == "rate" and c.delta == 30 and c.rate == pytest.approx(3.0)


def test_one_reading_or_none_values_is_unknown():
    assert counter_change([(0.0, 10)]).status == "unknown"
    assert counter_change([(0.0, None), (10.0, 5)]).status == "unknown"
    assert counter_change([]).rate is None


def test_non_increasing_time_is_unknown():
    assert counter_change([(10.0, 1), (10.0, 50)]).status == "unknown"


def test_latest_step_backwards_is_a_reset_never_a_rate():
    c = counter_change([(0.0, 500), (10.0, 3)])
    assert c.status == "reset" and c.rate is None
    assert not exceeds(c, 0.0)


def test_rate_restarts_after_an_earlier_reset():
    # 100 -> 900 (+800), reset to 0, then 0 -> 30 over 10 s: only the last segment counts
    c = counter_change([(0.0, 100), (10.0, 900), (20.0, 0), (30.0, 30)])
    assert c.status == "rate" and c.delta == 30 and c.seconds == 10.0


def test_saturated_counter_has_no_rate_but_a_lower_bound():
    c = counter_change([(0.0, 65000), (10.0, 65535)], pma_max("symbol_error"))
    assert c.status == "saturated" and c.rate is None and c.delta == 535
    assert not exceeds(c, 0.0)
    flat = counter_change([(0.0, 255), (10.0, 255)], pma_max("link_downed"))
    assert flat.status == "saturated" and not exceeds(flat, 0.0)


@pytest.mark.parametrize(
    "name,bits",
    [
        ("symbol_error", 16), ("link_error_recovery", 8), ("link_downed", 8), ("port_rcv_errors", 16),
        ("port_rcv_remote_physical_errors", 16), ("port_rcv_switch_relay_errors", 16), ("port_xmit_discards", 16),
        # IBA PortCounters and Linux sysfs.c: the constraint error counters are 8-bit, not 16
        ("port_xmit_constraint_errors", 8), ("port_rcv_constraint_errors", 8),
        ("local_link_integrity_errors", 4), ("excessive_buffer_overrun_errors", 4), ("VL15_dropped", 16),
        ("port_xmit_data", 32), ("port_rcv_data", 32), ("port_xmit_packets", 32), ("port_rcv_packets", 32),
        ("port_xmit_wait", 32),
    ],
)
def test_pma_widths(name, bits):
    assert pma_max(name) == (1 << bits) - 1
    assert is_saturated(name, (1 << bits) - 1)
    assert not is_saturated(name, (1 << bits) - 2)


def test_64bit_extended_data_counters_are_not_saturated():
    # sysfs prints the 64-bit PortCountersExtended value under the 32-bit name
    assert not is_saturated("port_xmit_data", 230442669431839)
    assert not is_saturated("out_of_sequence", 4294967295)  # hw_counters: not a PMA counter
    assert pma_max("out_of_sequence") is None


def test_exceeds_needs_min_events_for_positive_thresholds():
    few = CounterChange("rate", delta=MIN_EVENTS - 1, seconds=2.0)
    enough = CounterChange("rate", delta=MIN_EVENTS, seconds=2.0)
    assert not exceeds(few, 0.01)
    assert exceeds(enough, 0.01)
    assert exceeds(CounterChange("rate", delta=1, seconds=2.0), 0.0)  # zero threshold: any increase
    assert not exceeds(CounterChange("rate", delta=0, seconds=2.0), 0.0)
    assert not exceeds(CounterChange("rate", delta=100, seconds=1.0), 100.0)  # equal is not above


def test_in_window_picks_recent_or_the_newest_older_one():
    snaps = [node(t=t) for t in (0.0, 500.0, 900.0, 950.0)]
    assert [s.taken_at for s in in_window(snaps, 1000.0, 200.0)] == [900.0, 950.0]
    assert [s.taken_at for s in in_window(snaps[:2], 1000.0, 200.0)] == [500.0]
    assert in_window([], 1000.0, 200.0) == []
    # snapshots not older than now are ignored (defensive: history must be earlier)
    assert in_window([node(t=1000.0), node(t=2000.0)], 1000.0, 200.0) == []


def test_in_window_thins_keeping_oldest_and_newest():
    snaps = [node(t=float(t)) for t in range(500)]
    picked = in_window(snaps, 500.0, 1000.0, max_snapshots=10)
    assert len(picked) <= 10 and picked[0].taken_at == 0.0 and picked[-1].taken_at == 499.0
    assert [s.taken_at for s in picked] == sorted(s.taken_at for s in picked)


@given(st.lists(st.one_of(st.none(), st.integers(0, 70000)), max_size=12), st.sampled_from([None, 255, 65535]))
def test_counter_change_never_negative_or_rate_at_ceiling(values, ceiling):
    readings = [(float(i), v) for i, v in enumerate(values)]
    c = counter_change(readings, ceiling)
    present = [v for v in values if v is not None]
    if c.rate is not None:
        assert c.rate >= 0 and c.delta >= 0
        assert ceiling is None or present[-1] < ceiling
    if len(present) >= 2 and present[-1] < present[-2]:
        assert c.status == "reset"
