"""The parts of the docs that are facts of the code are what `make docs` (docs/generate.py)
writes from the code (issue 43: the alert table listed 21 of 38 alerts, the dashboards'
panel counts and the quoted figures were stale)."""

from __future__ import annotations

import importlib.util
import re

import pytest

from tests.support.paths import REPO


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", REPO / "docs" / "generate.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


GEN = _generator()


@pytest.mark.parametrize("path", GEN.files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_generated_parts_are_current(path):
    text = path.read_text()
    assert GEN.generated(path, text) == text, f"{path.relative_to(REPO)}: run `make docs`"


def test_every_alert_and_command_is_in_its_table():
    alerts = (REPO / "grafana" / "README.md").read_text()
    for rule in GEN.alert_rules():
        assert f"| {rule['alert']} |" in alerts
    guide = (REPO / "docs" / "operator-guide.md").read_text()
    for usage, _ in GEN.command_rows():
        assert f"`{usage.replace('|', chr(92) + '|')}`" in guide
    assert len(GEN.command_rows()) >= 13  # run ... simulate, bench nccl, baseline reset|show, maintenance on|off|status


def test_alerts_said_to_cover_a_finding_by_its_metrics_do_not_match_its_code():
    rules = {r["alert"]: r for r in GEN.alert_rules()}
    for alert, code in GEN.METRIC_ALERTS.items():
        assert alert in rules and not re.search(r"\bcode\s*=", rules[alert]["expr"]), alert
        assert code in GEN.critical_codes()


def test_the_dashboard_headings_count_every_panel():
    text = (REPO / "grafana" / "README.md").read_text()
    for which in GEN.DASHBOARDS:
        panels, rows = GEN.panel_counts(which)
        assert f"`agentd-{which}`, {panels} panels in {rows} rows" in text


def test_the_quoted_figures_come_from_a_bench_run():
    figs = GEN.bench_figures()
    assert figs[0]["figure"] == "machine" and figs[-1]["figure"] == "total_wall"
    for _, keys in GEN.QUOTED:
        for bench, figure, ctx in keys:
            assert GEN._find(figs, bench, figure, **ctx) is not None, (bench, figure, ctx)
