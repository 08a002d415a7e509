"""One log event per state change, none per cycle; JSON when not a TTY."""

from __future__ import annotations

import io
import json
import time

from agentd.daemon.logging import configure_logging, get_logger, log_state_changes, state_changes
from agentd.model import Finding
from agentd.records import FileStatus
from tests.support import service_snapshots as fixtures

CRIT = Finding(code="ib.port.down", severity="critical", subject="mlx5_1:1", message="DOWN")
WARN = Finding(code="mtu.mismatch", severity="warning", subject="ens1np0", message="MTU")


def names(events):
    return [e[1] for e in events]


def test_first_ready_state_logs_ready_and_findings():
    ev = state_changes(fixtures.state(ready=False), fixtures.state(findings=(WARN,)))
    assert names(ev) == ["agentd.ready", "health.status_changed", "finding.raised"]


def test_identical_states_log_nothing():
    now = time.time()
    a = fixtures.state(findings=(WARN,), now=now)
    b = fixtures.state(findings=(WARN,), now=now + 0.1)
    assert state_changes(a, b) == []


def test_finding_raised_changed_cleared_and_status():
    now = time.time()
    a = fixtures.state(findings=(WARN,), now=now)
    b = fixtures.state(findings=(CRIT, WARN.model_copy(update={"severity": "critical"})), now=now)
    ev = state_changes(a, b)
    assert ("warning", "health.status_changed", {"old": "degraded", "new": "critical"}) in ev
    assert "finding.raised" in names(ev) and "finding.changed" in names(ev)
    c = fixtures.state(now=now)
    assert sorted(names(state_changes(b, c))) == ["finding.cleared", "finding.cleared", "health.status_changed"]


def test_the_lifecycle_is_logged_pending_then_counted_then_clearing():
    now = time.time()
    pending = CRIT.model_copy(update={"withheld": "pending", "since": now, "raises_at": now + 30})
    a = fixtures.state(now=now)
    b = fixtures.state(findings=(pending,), now=now)
    [raised] = [e for e in state_changes(a, b) if e[1] == "finding.raised"]
    assert raised[0] == "info" and raised[2]["withheld"] == "pending" and raised[2]["since"] == now
    assert b.status == "ok"  # withheld: not counted
    counted = pending.model_copy(update={"withheld": None, "raises_at": None})
    c = fixtures.state(findings=(counted,), now=now)
    ev = state_changes(b, c)
    assert ("finding.changed", "pending") in [(e[1], e[2].get("old_withheld")) for e in ev]
    assert ("warning", "health.status_changed", {"old": "ok", "new": "critical"}) in ev
    sticky = counted.model_copy(update={"clears_at": now + 300})
    [clearing] = [e for e in state_changes(c, fixtures.state(findings=(sticky,), now=now)) if e[1] == "finding.clearing"]
    assert clearing[2]["clears_at"] == now + 300


def test_probe_stale_and_recovered():
    now = time.time()
    fresh = fixtures.state(now=now)
    stale = fixtures.state(snap=fixtures.snapshot(now, probes=fixtures.probes(now, stale={"nvml": 300.0})), now=now)
    assert [(e[1], e[2]["probe"]) for e in state_changes(fresh, stale) if e[1].startswith("probe.")] == [("probe.stale", "nvml")]
    assert [(e[1], e[2]["probe"]) for e in state_changes(stale, fresh) if e[1].startswith("probe.")] == [("probe.recovered", "nvml")]


def test_file_events():
    now = time.time()
    ok = FileStatus(name="nccl.env", path="/x", ok=True)
    written = FileStatus(name="nccl.env", path="/x", ok=True, changed=True)
    failed = FileStatus(name="nccl.env", path="/x", ok=False, error="EROFS", failures_total=1)
    a = fixtures.state(files=(ok,), now=now)
    assert names(state_changes(a, fixtures.state(files=(written,), now=now))) == ["file.written"]
    b = fixtures.state(files=(failed,), now=now)
    assert names(state_changes(a, b)) == ["file.write_failed"]
    assert names(state_changes(b, fixtures.state(files=(failed,), now=now))) == []  # same failure: once
    assert names(state_changes(b, a)) == ["file.write_recovered"]


def test_json_lines_when_not_a_tty():
    buf = io.StringIO()
    configure_logging("auto", "info", stream=buf)
    log = get_logger()
    log_state_changes(log, fixtures.state(ready=False), fixtures.state(findings=(CRIT,)))
    log.debug("hidden")
    lines = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["agentd.ready", "health.status_changed", "finding.raised"]
    assert lines[2]["code"] == "ib.port.down" and lines[2]["level"] == "warning" and "timestamp" in lines[2]
    configure_logging("json", "info")


def test_the_logger_writes_to_stderr_as_it_is_when_a_line_is_written(capsys):
    """A command run inside another program (an in-process test, a tool embedding agentd)
    configures logging while ``sys.stderr`` is a stream that is closed later: a line logged
    after that goes to the stderr of the moment, not into the closed stream (ValueError)."""
    import io
    import sys

    swapped = io.StringIO()
    real, sys.stderr = sys.stderr, swapped
    try:
        configure_logging("json", "info")
    finally:
        sys.stderr = real
    swapped.close()
    get_logger().info("after.the.swap")
    assert "after.the.swap" in capsys.readouterr().err
