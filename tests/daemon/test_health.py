"""/health semantics as pure functions of State and time."""

from __future__ import annotations

import json
import time

from agentd.collection.collector import PROBE_TIERS
from agentd.daemon.health import health, health_json, health_text, status_line
from agentd.model import Finding
from tests.support import service_snapshots as fixtures

WARN = Finding(code="mtu.mismatch", severity="warning", subject="ens1np0", message="MTU 1500, expected 9000")
CRIT = Finding(code="ib.port.down", severity="critical", subject="mlx5_1:1", message="port DOWN, expected ACTIVE")
OK_FACT = Finding(code="mtu.ipoib", severity="ok", subject="ib0", message="IPoIB MTU 4092")


def test_ok_is_200():
    st = fixtures.state(findings=(OK_FACT,))
    h = health(st, st.generated_at)
    assert (h.status, h.http_status) == ("ok", 200)
    body = json.loads(health_json(st, h))
    assert body["status"] == "ok" and body["findings"] == [] and body["stale_probes"] == []
    assert body["generated_at"] == st.generated_at
    assert health_text(h) == b"ok\n"


def test_degraded_is_200_with_the_warning_listed():
    st = fixtures.state(findings=(WARN,))
    h = health(st, st.generated_at)
    assert (h.status, h.http_status) == ("degraded", 200)
    assert [f["code"] for f in json.loads(health_json(st, h))["findings"]] == ["mtu.mismatch"]
    assert health_text(h).decode().splitlines() == ["degraded", "warning mtu.mismatch ens1np0: MTU 1500, expected 9000"]


def test_critical_is_503_and_text_is_a_drain_reason():
    st = fixtures.state(findings=(CRIT, WARN))
    h = health(st, st.generated_at)
    assert (h.status, h.http_status) == ("critical", 503)
    lines = health_text(h).decode().splitlines()
    assert lines[0] == "critical"
    assert lines[1] == "critical ib.port.down mlx5_1:1: port DOWN, expected ACTIVE"
    assert status_line(st).startswith("critical: 2 findings (1 critical); ib.port.down mlx5_1:1")


def test_not_ready_is_503_starting():
    st = fixtures.state(ready=False)
    h = health(st, time.time())
    assert (h.status, h.http_status) == ("starting", 503)
    assert json.loads(health_json(st, h))["ready"] is False
    assert health_text(h).decode().splitlines()[0] == "starting"


def test_stale_probe_is_503_naming_the_probe():
    now = time.time()
    st = fixtures.state(snap=fixtures.snapshot(now, probes=fixtures.probes(now, stale={"nvml": 31.0})), now=now)
    h = health(st, now)
    assert (h.status, h.http_status, h.stale_probes) == ("critical", 503, ("nvml",))
    stale = [f for f in h.findings if f.code == "agentd.data.stale"]
    assert [f.subject for f in stale] == ["nvml"] and "limit 30.0 s" in stale[0].message


def test_data_turns_stale_with_time_alone():
    """No new State is needed: a daemon whose collections stopped goes 503 by itself."""
    now = time.time()
    st = fixtures.state(now=now)
    assert health(st, now).http_status == 200
    later = health(st, now + 7.0)  # fast-tier probes (limit 6 s) are now too old
    assert later.http_status == 503
    assert set(later.stale_probes) == {n for n, t in PROBE_TIERS.items() if t == "fast"}


def test_probe_that_never_succeeded_is_stale():
    now = time.time()
    st = fixtures.state(snap=fixtures.snapshot(now, probes=fixtures.probes(now, never=("nvml",))), now=now)
    h = health(st, now)
    assert h.stale_probes == ("nvml",) and h.http_status == 503
    assert "never succeeded" in [f for f in h.findings if f.subject == "nvml"][0].message
