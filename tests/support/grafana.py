"""Shared helpers for the Grafana dashboard and Prometheus rule tests (not a test module).

- ``dashboards()`` / ``panel_targets(dash)``: the committed dashboard JSON and every
  (panel, target) pair in it (rows and nested row panels included);
- ``substitute(expr, **values)``: Grafana variables replaced with valid PromQL
  (``$instance``, ``${job}``, ``$__rate_interval``, ``$__range``...);
- ``alert_rules()``: every rule of grafana/alerts/agentd.rules.yml;
- ``promtool_check_exprs(exprs)``: syntax-checks PromQL offline by writing each
  expression as a recording rule and running ``promtool check rules`` (Prometheus 2.42's
  promtool has no offline query-syntax command);
- ``known_metrics()``: the metric families agentd declares (docs/metrics.md, generated
  from agentd/service/metrics_*.py, plus agentd/ncclbench/bench_metrics.py) and Prometheus' ``up``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterator

import yaml

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
RULES = GRAFANA / "alerts" / "agentd.rules.yml"
RULE_TESTS = sorted((GRAFANA / "alerts" / "tests").glob("*.yml"))
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
NO_PROMTOOL = "promtool not installed (Debian package 'prometheus'; CI installs it)"

# Placeholders for Grafana's built-in variables: any valid duration parses; the e2e test
# keeps windows short because its Prometheus only has seconds of data.
BUILTIN_DEFAULTS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h", "__range_s": "3600", "__interval_ms": "15000"}


def load_dashboard(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def dashboards() -> list[tuple[Path, dict[str, Any]]]:
    return [(p, load_dashboard(p)) for p in DASHBOARDS]


def all_panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in dash.get("panels", []):
        yield p
        yield from p.get("panels", []) or []  # collapsed rows keep their panels inside


def panel_targets(dash: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for p in all_panels(dash):
        if p.get("type") == "row":
            continue
        for t in p.get("targets", []):
            yield p, t


def target_id(dash: dict[str, Any], panel: dict[str, Any], target: dict[str, Any]) -> str:
    return f"{dash['uid']}/{panel['title']}/{target['refId']}"


_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def substitute(expr: str, **values: str) -> str:
    """Replace ``$name``, ``${name}`` and ``${name:fmt}`` with ``values[name]`` (or a
    built-in default). An unknown variable raises KeyError: every variable a dashboard
    uses must be known here."""
    table = {**BUILTIN_DEFAULTS, **values}

    def repl(m: re.Match[str]) -> str:
        return table[m.group(1) or m.group(2)]

    return _VAR.sub(repl, expr)


def variables(dash: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dash.get("templating", {}).get("list", [])}


def variable_query(var: dict[str, Any]) -> str:
    q = var.get("query")
    return q.get("query", "") if isinstance(q, dict) else str(q or "")


_LABEL_VALUES = re.compile(r"^label_values\((?:(?P<sel>.+),\s*)?(?P<label>\w+)\)$")


def label_values_selector(query: str) -> tuple[str, str]:
    """``label_values(metric{...}, label)`` -> (selector, label)."""
    m = _LABEL_VALUES.match(query.strip())
    assert m and m.group("sel"), f"not label_values(selector, label): {query}"
    return m.group("sel"), m.group("label")


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def alert_names() -> list[str]:
    return sorted({r["alert"] for r in alert_rules()})


def promtool_check_exprs(exprs: dict[str, str]) -> tuple[int, str]:
    """Write {name: expr} as recording rules and run ``promtool check rules`` on them."""
    assert PROMTOOL, NO_PROMTOOL
    rules = [{"record": f"agentd_check:{re.sub(r'[^a-zA-Z0-9_]', '_', k)}", "expr": v} for k, v in exprs.items()]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "exprs.rules.yml"
        path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard-exprs", "rules": rules}]}, sort_keys=False, width=10_000))
        res = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    return res.returncode, res.stdout + res.stderr


_METRIC_TABLE_ROW = re.compile(r"^\| `(agentd_\w+)` \|", re.M)


def known_metrics() -> set[str]:
    names = set(_METRIC_TABLE_ROW.findall((REPO / "docs" / "metrics.md").read_text()))
    try:
        from agentd.ncclbench.bench_metrics import FAMILIES  # the benchmark families (served once wired)

        names |= {f.name for f in FAMILIES}
    except ImportError:
        pass
    return names | {"up"}


_NAME_REGEX = re.compile(r'__name__=~"([^"]+)"')
_IDENT = re.compile(r"(?<![\w:\"'.])(agentd_\w+)")


def metric_names(expr: str) -> set[str]:
    """agentd metric names an expression reads; a ``__name__=~"pre_(a|b)_suf"`` selector
    is expanded into its alternatives."""
    names = set()
    for rx in _NAME_REGEX.findall(expr):
        m = re.fullmatch(r"(\w*)\(([\w|]+)\)(\w*)", rx)
        assert m, f"__name__ regex must look like prefix_(a|b)_suffix: {rx}"
        names |= {m.group(1) + alt + m.group(3) for alt in m.group(2).split("|")}
    names |= set(_IDENT.findall(_NAME_REGEX.sub("", expr)))
    return names


_FINDING_CODE_ROW = re.compile(r"^\| `([a-z][\w.<>]+)` \|", re.M)


def known_finding_codes() -> set[str]:
    return set(_FINDING_CODE_ROW.findall((REPO / "docs" / "findings.md").read_text()))


def finding_codes(expr: str) -> set[str]:
    """Codes an expression matches exactly (``code="x"``) or by alternation (``code=~"a|b"``)."""
    out: set[str] = set()
    for op, val in re.findall(r'\bcode(=~|=)"([^"]+)"', expr):
        out |= set(val.split("|")) if op == "=~" else {val}
    return out
