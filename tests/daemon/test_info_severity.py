"""Severity info (issue 37): an event worth seeing (an application's XID, a corrected PCIe
error) is shown wherever findings are shown, /checks and the /health text lines the Slurm
wrapper reads included, and never weighs in the node's health: status, HTTP code, the
status line, the metrics' health gauge."""

from __future__ import annotations

import json

from agentd.base.expo import Exposition
from agentd.daemon.health import checks_json, health, health_json, health_text, status_line
from agentd.daemon.logging import state_changes
from agentd.metrics.agent import FAMILIES, render
from agentd.model import Finding, overall_status, sort_findings
from tests.support import service_snapshots as fixtures

INFO = Finding(code="gpu.xid", severity="info", subject="gpu0", message="XID 13 (Graphics Engine Exception) x3 in the kernel log")
CRIT = Finding(code="ib.port.down", severity="critical", subject="mlx5_1:1", message="port DOWN, expected ACTIVE")
WARN = Finding(code="mtu.mismatch", severity="warning", subject="ens1np0", message="MTU 1500, expected 9000")
OK_FACT = Finding(code="mtu.ipoib", severity="ok", subject="ib0", message="IPoIB MTU 4092")


def test_info_alone_is_ok_200_and_shown_in_the_text_and_json():
    st = fixtures.state(findings=(INFO, OK_FACT))
    h = health(st, st.generated_at)
    assert (h.status, h.http_status) == ("ok", 200)
    assert health_text(h).decode().splitlines() == ["ok", "info gpu.xid gpu0: XID 13 (Graphics Engine Exception) x3 in the kernel log"]
    assert [f["severity"] for f in json.loads(health_json(st, h))["findings"]] == ["info"]
    assert status_line(st).startswith("ok: ")  # nothing wrong to count
    checks = json.loads(checks_json(st))
    assert checks["status"] == "ok" and {f["severity"] for f in checks["findings"]} == {"info", "ok"}


def test_info_never_raises_the_status_and_sorts_after_warnings():
    assert overall_status([INFO]) == "ok" and overall_status([INFO, WARN]) == "degraded"
    assert [f.severity for f in sort_findings([OK_FACT, INFO, CRIT, WARN])] == ["critical", "warning", "info", "ok"]
    st = fixtures.state(findings=tuple(sort_findings([INFO, CRIT])))  # as the evaluation hands them over
    h = health(st, st.generated_at)
    lines = health_text(h).decode().splitlines()
    assert (h.status, h.http_status) == ("critical", 503) and lines[1].startswith("critical ib.port.down")
    assert status_line(st).startswith("critical: 1 findings (1 critical)")  # info is not a finding that counts


def test_metrics_count_info_apart_and_the_health_gauge_ignores_it():
    x = Exposition(FAMILIES)
    render(x, fixtures.state(findings=(INFO,)))
    text = x.render().decode()
    assert 'agentd_findings{severity="info"} 1' in text and 'agentd_findings{severity="warning"} 0' in text
    assert "agentd_health_status 0" in text


def test_a_new_info_finding_is_logged_as_news_not_trouble():
    events = state_changes(fixtures.state(findings=()), fixtures.state(findings=(INFO,)))
    assert [(level, name) for level, name, _ in events if name.startswith("finding.")] == [("info", "finding.raised")]
