"""Episodes age on the monotonic clock, not the wall clock (issue 42, item 4).

A backward wall-clock step (an RTC wrong at boot, before NTP steps it) kept a cleared
critical counted for as long as the step, across restarts: ``clears_at`` was computed on
wall stamps. Through the daemon's evaluator (agentd.outputs.evaluate.Evaluator, which
applies the lifecycle to each collection) with snapshots whose wall time steps, and
``Tracks.from_json`` for what a restart reads back.
"""

from __future__ import annotations

import time

from agentd.judging.lifecycle import Tracks
from agentd.outputs.evaluate import Evaluator, evaluate
from tests.support.check_snapshots import at, cfg, node, with_port

DAY = 86400.0


def down(t: float):
    return at(with_port(node(), "mlx5_3", state="DOWN"), t)


def counted(ev) -> set[str]:
    return {f.code for f in ev.findings if f.severity == "critical" and f.withheld is None}


def test_a_backward_wall_step_does_not_keep_a_cleared_critical():
    config = cfg()  # default lifecycle: a finding clears as soon as it is no longer seen
    e = Evaluator(evaluate)
    now = time.time()
    assert "ib.port.down" in counted(e(down(now + DAY), (), config, None, refresh_s=0))  # the clock a day ahead
    healthy = at(node(), now)  # NTP stepped it back a day; the port is up again
    assert counted(e(healthy, (), config, None, refresh_s=0)) == set()


def test_a_sticky_finding_stays_its_clear_after_s_not_the_step():
    config = cfg(lifecycle={"findings": {"ib.port.down": {"clear_after_s": 300}}})
    e = Evaluator(evaluate)
    now = time.time()
    e(down(now + DAY), (), config, None, refresh_s=0)
    ev = e(at(node(), now), (), config, None, refresh_s=0)
    [sticky] = [f for f in ev.findings if f.code == "ib.port.down"]
    assert sticky.clears_at is not None and now < sticky.clears_at <= now + 300 + 60  # 300 s from now, not a day and 300 s
    assert sticky.since is not None and sticky.since <= now  # never "first seen" in the future


def test_a_forward_wall_step_does_not_raise_a_pending_finding_early():
    config = cfg(lifecycle={"findings": {"ib.port.down": {"raise_after_s": 600}}})
    e = Evaluator(evaluate)
    now = time.time()
    assert counted(e(down(now), (), config, None, refresh_s=0)) == set()  # pending
    ev = e(down(now + 1200), (), config, None, refresh_s=0)  # the clock jumped 20 minutes forward
    assert counted(ev) == set() and [f.withheld for f in ev.findings if f.code == "ib.port.down"] == ["pending"]


def test_stamps_from_the_future_are_clamped_when_read_back():
    """What a restart reads: the file was written while the clock was a day ahead."""
    config = cfg()
    e = Evaluator(evaluate)
    now = time.time()
    e(down(now + DAY), (), config, None, refresh_s=0)
    saved = e.tracks.to_json()
    restarted = Evaluator(evaluate, tracks=Tracks.from_json(saved, now=now, clock=time.monotonic()))
    assert counted(restarted(at(node(), now + 1), (), config, None, refresh_s=0)) == set()
    [t] = Tracks.from_json(saved, now=now).by_key.values()
    assert t.since <= now and t.last_seen <= now
