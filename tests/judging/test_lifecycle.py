"""The findings' lifecycle (agentd.judging.lifecycle): since, raise_after, clear_after,
observe mode, boot grace, and tracks that survive a restart as JSON."""

from __future__ import annotations

import json

import pytest

from agentd.config import AgentConfig, LifecycleSettings
from agentd.judging.findings import finding, finding_line, port_subject
from agentd.judging.lifecycle import Tracks, advance
from agentd.model import Finding, counted, overall_status

T0 = 1_790_000_000.0


def down(port: int = 1, severity: str = "critical") -> Finding:
    return finding("ib.port.down", severity, port_subject("mlx5_0", port), "compute port state DOWN, expected ACTIVE")  # type: ignore[arg-type]


def settings(**kw: object) -> LifecycleSettings:
    return AgentConfig.model_validate({"lifecycle": kw}).lifecycle


def run(steps: list[tuple[float, list[Finding]]], s: LifecycleSettings, *, booted_at: float | None = None, tracks: Tracks | None = None):
    """advance over (time, findings) steps; the outcome of each."""
    t = tracks or Tracks()
    outs = []
    for at, found in steps:
        o = advance(t, found, now=at, settings=s, booted_at=booted_at)
        t = o.tracks
        outs.append(o)
    return outs


def test_defaults_keep_the_checks_verdict_and_add_since() -> None:
    outs = run([(T0, [down()]), (T0 + 2, [down()]), (T0 + 4, [])], settings())
    [f0], [f1], gone = (o.findings for o in outs)
    assert f0.withheld is None and f0.since == T0 and f0.severity == "critical"
    assert f1.since == T0  # the same episode
    assert gone == ()  # clear_after 0: gone at once, as before
    assert overall_status(outs[0].findings) == "critical"
    assert outs[0].deadline is None  # nothing changes by itself: a memo may hold


def test_ok_facts_pass_untouched() -> None:
    fact = finding("gdr.path", "ok", port_subject("mlx5_0", 1), "fact")
    [o] = run([(T0, [fact])], settings(observe=["*"]))
    assert o.findings == (fact,)


def test_raise_after_seconds_keeps_a_new_condition_pending() -> None:
    s = settings(findings={"ib.port.*": {"raise_after_s": 30}})
    outs = run([(T0, [down()]), (T0 + 10, [down()]), (T0 + 31, [down()])], s)
    first, mid, last = (o.findings[0] for o in outs)
    assert first.withheld == "pending" and first.raises_at == T0 + 30
    assert overall_status(outs[1].findings) == "ok" and counted(outs[1].findings) == []
    assert outs[1].deadline == T0 + 30
    assert last.withheld is None and last.since == T0 and last.raises_at is None


def test_a_pending_condition_that_goes_away_leaves_no_trace() -> None:
    s = settings(findings={"ib.port.down": {"raise_after_s": 30}})
    outs = run([(T0, [down()]), (T0 + 10, []), (T0 + 20, [down()])], s)
    assert outs[1].findings == () and len(outs[1].tracks) == 0
    assert outs[2].findings[0].since == T0 + 20  # a new episode


def test_raise_after_collections() -> None:
    s = settings(findings={"ib.port.down": {"raise_after_collections": 3}})
    outs = run([(T0 + i, [down()]) for i in range(3)], s)
    assert [o.findings[0].withheld for o in outs] == ["pending", "pending", None]
    assert outs[0].deadline == T0  # counted per collection: no memo may skip one


def test_clear_after_keeps_a_cleared_condition_counting_until_clears_at() -> None:
    s = settings(findings={"ib.port.down": {"clear_after_s": 300}})
    outs = run([(T0, [down()]), (T0 + 10, []), (T0 + 200, [down()]), (T0 + 210, []), (T0 + 499, []), (T0 + 501, [])], s)
    sticky = outs[1].findings[0]
    assert sticky.clears_at == T0 + 300 and sticky.since == T0 and sticky.withheld is None
    assert overall_status(outs[1].findings) == "critical" and outs[1].deadline == T0 + 300
    assert outs[2].findings[0].since == T0 and outs[2].findings[0].clears_at is None  # back within the window: same episode
    assert outs[4].findings[0].clears_at == T0 + 500  # from the last sighting
    assert outs[5].findings == ()


def test_the_most_specific_policy_wins() -> None:
    s = settings(findings={"ib.*": {"raise_after_s": 100}, "ib.port.*": {"raise_after_s": 10}, "ib.port.down": {"raise_after_s": 0}})
    [o] = run([(T0, [down(), finding("ib.port.flapping", "critical", port_subject("mlx5_0", 2), "x")])], s)
    by_code = {f.code: f for f in o.findings}
    assert by_code["ib.port.down"].withheld is None
    assert by_code["ib.port.flapping"].raises_at == T0 + 10


def test_observe_by_code_glob_and_by_check_name() -> None:
    f = down().model_copy(update={"check": "ib.check_ports"})
    for s in (settings(observe=["ib.port.*"]), settings(observe=["ib.check_ports"]), settings(findings={"ib.port.down": {"mode": "observe"}})):
        [o] = run([(T0, [f])], s)
        assert o.findings[0].withheld == "observe" and o.findings[0].severity == "critical"
        assert overall_status(o.findings) == "ok"
    [o] = run([(T0, [f])], settings(observe=["gpu.*"]))
    assert o.findings[0].withheld is None


def test_boot_grace_withholds_bring_up_codes_only_within_the_window() -> None:
    s = settings(boot_grace_s=600)
    xid = finding("gpu.xid", "critical", port_subject("mlx5_0", 1), "x")
    booted = T0 - 60
    [o] = run([(T0, [down(), xid])], s, booted_at=booted)
    by_code = {f.code: f for f in o.findings}
    assert by_code["ib.port.down"].withheld == "boot_grace"
    assert by_code["gpu.xid"].withheld is None  # a fault of another kind still counts
    assert o.deadline == booted + 600
    [late] = run([(booted + 601, [down()])], s, booted_at=booted)
    assert late.findings[0].withheld is None
    [unknown] = run([(T0, [down()])], s, booted_at=None)
    assert unknown.findings[0].withheld is None  # boot time unknown: no grace


def test_tracks_round_trip_through_json_keeping_since_and_sticky_windows() -> None:
    s = settings(findings={"ib.port.down": {"clear_after_s": 300}})
    [o] = run([(T0, [down()])], s)
    restored = Tracks.from_json(json.loads(json.dumps(o.tracks.to_json())))
    [again] = run([(T0 + 60, [down()])], s, tracks=restored)
    assert again.findings[0].since == T0
    [gone] = run([(T0 + 60, [])], s, tracks=restored)
    assert gone.findings[0].clears_at == T0 + 300 and gone.findings[0].subject == "mlx5_0:1"
    assert gone.findings[0].about == port_subject("mlx5_0", 1)  # typed: NCCL port verdicts still relate it


def test_a_long_gap_starts_a_new_episode() -> None:
    [o] = run([(T0, [down()])], settings())
    [later] = run([(T0 + 7200, [down()])], settings(), tracks=o.tracks)
    assert later.findings[0].since == T0 + 7200


@pytest.mark.parametrize("junk", [None, 3, "x", [1, "a", {}], [{"finding": {"code": "x"}, "since": "nan"}],
                                  [{"finding": {"code": "a", "severity": "critical", "subject": "s", "message": "m"},
                                    "since": float("nan"), "last_seen": 1, "seen": 1, "raised": True}]])
def test_malformed_tracks_are_skipped(junk: object) -> None:
    assert len(Tracks.from_json(junk)) == 0  # type: ignore[arg-type]


def test_finding_line_carries_the_times_and_marks_withheld_ones() -> None:
    s = settings(findings={"ib.port.down": {"raise_after_s": 30}})
    [o] = run([(T0, [down()])], s)
    line = finding_line(o.findings[0])
    assert line.startswith("(pending) critical ib.port.down mlx5_0:1: ")
    assert "since 2026-" in line and "counts from" in line


def test_one_shot_counts_at_once_but_still_observes_and_graces() -> None:
    s = settings(findings={"ib.port.down": {"raise_after_s": 30}}, observe=["gpu.*"], boot_grace_s=600)
    xid = finding("gpu.xid", "critical", port_subject("mlx5_0", 1), "x")
    o = advance(Tracks(), [down(), xid], now=T0, settings=s, one_shot=True)
    by_code = {f.code: f for f in o.findings}
    assert by_code["ib.port.down"].withheld is None and by_code["gpu.xid"].withheld == "observe"
    o = advance(Tracks(), [down()], now=T0, settings=s, booted_at=T0 - 10, one_shot=True)
    assert o.findings[0].withheld == "boot_grace"
