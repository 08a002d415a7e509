"""grafana/alerts/agentd.rules.yml: promtool accepts it, its unit tests pass, every alert
has a firing and a not-firing unit test, and every rule is complete (for, severity,
summary/description/runbook) and reads only metrics and finding codes agentd has."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.support.grafana import (
    NO_PROMTOOL,
    PROMTOOL,
    RULE_TESTS,
    RULES,
    alert_names,
    alert_rules,
    finding_codes,
    known_finding_codes,
    known_metrics,
    metric_names,
)

needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason=NO_PROMTOOL)

REQUIRED_ALERTS = {
    "AgentdNodeCritical", "AgentdIbPortDown", "AgentdIbPortRateDegraded", "AgentdIbLinkFlapping", "AgentdGdrUnavailable",
    "AgentdPcieDowntrained", "AgentdMtuMismatch", "AgentdRoceEcnDisabled", "AgentdPfcPauseStorm", "AgentdNvlinkDown",
    "AgentdNvmlBlind", "AgentdStale", "AgentdDown", "AgentdNcclFileWriteFailing",
    # kernel log events (issue 14)
    "AgentdGpuXid", "AgentdGpuOffBus", "AgentdHcaFirmware", "AgentdPcieAerFatal", "AgentdKernelLogBlind",
}


def variant(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """What tells rules of the same name apart: their static labels."""
    return tuple(sorted(labels.items()))


@pytest.mark.proc
@needs_promtool
def test_promtool_check_rules():
    res = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "SUCCESS" in res.stdout, res.stdout + res.stderr


@pytest.mark.proc
@needs_promtool
@pytest.mark.parametrize("path", RULE_TESTS, ids=[p.name for p in RULE_TESTS])
def test_promtool_unit_tests(path):
    res = subprocess.run([PROMTOOL, "test", "rules", path.name], cwd=path.parent, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


def test_unit_tests_exist():
    assert RULE_TESTS, "no promtool unit tests in grafana/alerts/tests/"
    for path in RULE_TESTS:
        doc = yaml.safe_load(path.read_text())
        assert doc["rule_files"] == ["../agentd.rules.yml"], path


def test_required_alerts_exist():
    assert set(alert_names()) >= REQUIRED_ALERTS


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: f"{r['alert']}-{r['labels'].get('severity')}")
def test_rule_is_complete(rule):
    assert rule.get("for"), "every alert waits (for:) before firing"
    # info: a state to know about and inhibit with (AgentdMaintenance), never a fault
    assert rule["labels"].get("severity") in ("critical", "warning") or (rule["alert"], rule["labels"].get("severity")) == ("AgentdMaintenance", "info")
    ann = rule["annotations"]
    for key in ("summary", "description", "runbook"):
        assert len(ann.get(key, "").strip()) > 20, key
    assert ann["runbook"].count("`") >= 2, "the runbook names at least one command to run"
    unknown = metric_names(rule["expr"]) - known_metrics()
    assert not unknown, f"metrics agentd does not export: {unknown}"
    codes = finding_codes(rule["expr"])
    assert codes <= known_finding_codes(), f"finding codes not in docs/findings.md: {codes - known_finding_codes()}"


def test_rule_variants_are_distinct():
    seen = [(r["alert"], variant(r["labels"])) for r in alert_rules()]
    assert len(seen) == len(set(seen)), "two rules with the same name and labels"


def _cases():
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            yield from test.get("alert_rule_test", [])


def test_every_alert_has_a_firing_and_a_not_firing_unit_test():
    firing: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    quiet: set[str] = set()
    for case in _cases():
        if not case.get("exp_alerts"):
            quiet.add(case["alertname"])
        for exp in case.get("exp_alerts") or []:
            firing.add((case["alertname"], variant(exp["exp_labels"])))
    missing_quiet = set(alert_names()) - quiet
    assert not missing_quiet, f"alerts without a not-firing case: {missing_quiet}"
    missing_firing = []
    for rule in alert_rules():
        want = set(rule["labels"].items())
        if not any(name == rule["alert"] and want <= set(labels) for name, labels in firing):
            missing_firing.append(f"{rule['alert']} {rule['labels']}")
    assert not missing_firing, f"rule variants without a firing case: {missing_firing}"


@pytest.mark.proc
@needs_promtool
def test_fleet_peer_label_is_configurable_with_the_documented_sed(tmp_path):
    """The peer group is the `cluster` label; grafana/README.md says to replace it from the
    `# fleet-peers` marker to the end of the file. Done that way (to `pool`), with the unit
    tests' series relabelled the same, every fleet test still passes: nothing else in the
    group depends on the label's name."""
    import re

    text = RULES.read_text()
    at = text.index("# fleet-peers")
    assert text[at:].count("cluster") >= 5  # the group does use the label
    (tmp_path / "agentd.rules.yml").write_text(text[:at] + re.sub(r"\bcluster\b", "pool", text[at:]))
    tests = tmp_path / "tests"
    tests.mkdir()
    fleet = next(p for p in RULE_TESTS if p.name == "agentd_fleet_test.yml")
    (tests / fleet.name).write_text(re.sub(r"\bcluster\b", "pool", fleet.read_text()))
    res = subprocess.run([PROMTOOL, "test", "rules", fleet.name], cwd=tests, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    # and the relabelled tests do fail against the unchanged rules (the label matters)
    (tmp_path / "agentd.rules.yml").write_text(text)
    res = subprocess.run([PROMTOOL, "test", "rules", fleet.name], cwd=tests, capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
