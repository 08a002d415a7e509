"""packaging/k8s/npd/agentd-plugin-monitor.json: an NPD custom-plugin-monitor config whose
rules run real `agentd check --npd` concerns within NPD's timeouts (the config format:
node-problem-detector pkg/custompluginmonitor/types/config.go)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentd import cli, npd

pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "packaging" / "k8s" / "npd" / "agentd-plugin-monitor.json"
README = REPO / "packaging" / "k8s" / "npd" / "README.md"


def _seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", text)
    assert m, f"not a Go duration agentd's test understands: {text!r}"
    return float(m[1]) * {"ms": 0.001, "s": 1.0, "m": 60.0}[m[2]]


def _doc() -> dict:
    return json.loads(CONFIG.read_text())


def test_every_rule_runs_a_real_concern_within_its_timeout():
    doc = _doc()
    assert doc["plugin"] == "custom"
    global_timeout = _seconds(doc["pluginConfig"]["timeout"])
    parser = cli.build_parser()
    concerns = []
    for rule in doc["rules"]:
        assert rule["path"].endswith("/agentd")
        args = parser.parse_args(rule["args"])  # the CLI accepts exactly these arguments
        assert args.command == "check" and args.npd in npd.CONCERNS
        concerns.append(args.npd)
        timeout = min(global_timeout, _seconds(rule.get("timeout") or doc["pluginConfig"]["timeout"]))
        assert timeout > args.npd_timeout, rule  # agentd answers before NPD kills it
        assert timeout > cli.NPD_TIMEOUT_S
    assert sorted(concerns) == sorted(npd.CONCERNS)  # one rule per concern


def test_conditions_are_declared_and_distinct():
    doc = _doc()
    declared = [c["type"] for c in doc["conditions"]]
    assert len(declared) == len(set(declared))
    for c in doc["conditions"]:
        assert c["reason"] and c["message"]
    for rule in doc["rules"]:
        assert rule["type"] == "permanent" and rule["condition"] in declared and rule["reason"]
    assert {r["condition"] for r in doc["rules"]} == set(declared)


def test_plugin_config_fits_the_interval():
    cfg = _doc()["pluginConfig"]
    rules = len(_doc()["rules"])
    # one worker runs the rules one after another: all of them fit in one interval
    assert _seconds(cfg["timeout"]) * rules / cfg["concurrency"] <= _seconds(cfg["invoke_interval"])
    assert cfg["max_output_length"] >= 80


def test_readme_documents_every_concern_and_condition():
    text = README.read_text()
    for concern in npd.CONCERNS:
        assert f"| `{concern}` |" in text
    for c in _doc()["conditions"]:
        assert c["type"] in text
