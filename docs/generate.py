#!/usr/bin/env python3
"""The parts of the docs that are facts of the code, generated from it (`make docs`).

    .venv/bin/python docs/generate.py           # rewrite every generated part
    .venv/bin/python docs/generate.py --check   # exit 1 and name each part that differs

A generated part of a Markdown file sits between two comments, which name it:

    <!-- generated: alerts (make docs) -->
    ...
    <!-- end generated: alerts -->

and one line may be generated in place (the dashboards' panel counts). The parts:

- ``commands`` (docs/operator-guide.md): every `agentd` command with its options, from the
  real argument parser (agentd.cli.build_parser), and its help line;
- ``alerts`` (grafana/README.md): every alert of grafana/alerts/agentd.rules.yml: severities,
  ``for:``, the summary, the runbook section it names;
- the panel and row counts of both dashboards (grafana/README.md headings);
- ``figures`` (docs/performance.md): the figures quoted from a `make bench` run, from the
  run's own output as kept in bench/figures.jsonl (the machine it ran on included).

tests/docs/test_generated_docs.py fails when a generated part is not what this writes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
OPERATOR_GUIDE = REPO / "docs" / "operator-guide.md"
GRAFANA_README = REPO / "grafana" / "README.md"
PERFORMANCE = REPO / "docs" / "performance.md"
RULES = REPO / "grafana" / "alerts" / "agentd.rules.yml"
DASHBOARDS = {"node": REPO / "grafana" / "dashboards" / "agentd-node.json", "fleet": REPO / "grafana" / "dashboards" / "agentd-fleet.json"}
FIGURES = REPO / "bench" / "figures.jsonl"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# -- commands --------------------------------------------------------------------------


def command_rows() -> list[tuple[str, str]]:
    """(usage, help) of every runnable command, nested ones included, in the parser's order."""
    sys.path.insert(0, str(REPO))
    from agentd.cli import build_parser

    out: list[tuple[str, str]] = []

    def walk(parser: argparse.ArgumentParser, helps: dict[str, str], name: str) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            usage = " ".join(parser.format_usage().split()).removeprefix("usage: ").replace(" [-h]", "")
            out.append((usage, helps.get(name, "")))
            return
        action = subs[0]
        sub_helps = {a.dest: a.help or "" for a in action._choices_actions}
        for sub_name, sub in action.choices.items():
            walk(sub, sub_helps, sub_name)

    walk(build_parser(), {}, "agentd")
    return out


def commands() -> str:
    rows = ["| command | what it does |", "|---|---|"]
    rows += [f"| `{_cell(usage)}` | {_cell(help_)} |" for usage, help_ in command_rows()]
    return "\n".join(rows) + "\n"


# -- alerts ----------------------------------------------------------------------------


def _load_yaml(path: Path) -> Any:  # Any: a YAML document
    import yaml

    return yaml.safe_load(path.read_text())


_TEMPLATE = re.compile(r"\{\{\s*(?:\$labels\.(\w+)|\$value[^}]*|[^}]*)\s*\}\}")


def _untemplated(text: str) -> str:
    """A rule annotation with its template fields as placeholders: ``{instance}``, ``{value}``."""
    return _TEMPLATE.sub(lambda m: "{" + (m.group(1) or "value") + "}", text)


def alert_rules() -> list[dict[str, Any]]:  # Any: a rule as the YAML has it
    return [r for g in _load_yaml(RULES)["groups"] for r in g["rules"] if "alert" in r]


FINDINGS_DOC = REPO / "docs" / "findings.md"
_CODE_MATCH = re.compile(r'code\s*(=~?)\s*"([^"]+)"')


def _codes_matched(expr: str) -> list[tuple[str, str]]:
    """(operator, value) of every ``code=`` / ``code=~`` matcher in an expression."""
    return _CODE_MATCH.findall(expr)


def _alternatives(op: str, value: str) -> list[str]:
    """The codes a matcher names: ``a|b|c`` of a plain alternation, else the value itself."""
    if op == "=~" and re.fullmatch(r"[a-z0-9_.|]+", value.replace("\\.", ".")):
        return value.replace("\\.", ".").split("|")
    return [value]


def _fires_on(expr: str) -> str:
    codes = [c for op, v in _codes_matched(expr) for c in _alternatives(op, v)]
    if codes:
        return "finding " + ", ".join(f"`{c}`" for c in dict.fromkeys(codes))
    metrics = list(dict.fromkeys(re.findall(r"\b(agentd[:_][\w:]+|up)\b(?!\s*\()", expr)))
    if len(metrics) > 1:  # "unless ... agentd_maintenance == 1" is no cause
        metrics = [m for m in metrics if m != "agentd_maintenance"]
    return ", ".join(f"`{m}`" for m in metrics)


def _sentences(text: str) -> list[str]:
    """``text`` cut after each ". " that is outside a code span."""
    out, start, code = [], 0, False
    for i, ch in enumerate(text):
        if ch == "`":
            code = not code
        elif ch == "." and not code and text[i + 1:i + 2] in (" ", "") and text[max(0, i - 3):i + 1] not in ("e.g.", "i.e."):
            out.append(text[start:i + 1].strip())
            start = i + 1
    rest = text[start:].strip()
    return [*out, rest] if rest else out


def _first_step(runbook: str) -> str:
    """What the rule's runbook annotation says to do first: its first sentence, without a
    section reference, an "On the node:" or a "1." before it."""
    text = re.sub(r"^docs/runbooks\.md#[\w-]+\.\s*", "", runbook.strip())
    text = re.sub(r"^(?:On the node:\s*|1\.\s*)", "", text)
    first = (_sentences(text) or [""])[0]
    return _untemplated(first[0].upper() + first[1:] if first else first)


# Alerts that fire on the metrics behind a finding, not on the finding's code.
METRIC_ALERTS = {"AgentdIbPortRateDegraded": "ib.port.rate_degraded", "AgentdMtuMismatch": "mtu.mismatch",
                 "AgentdStale": "agentd.data.stale"}


def critical_codes() -> list[str]:
    """Finding codes docs/findings.md gives a critical severity (in any case)."""
    rows = re.findall(r"^\| `([a-z0-9_.*]+)` \| ([^|]*)\|", FINDINGS_DOC.read_text(), re.M)
    return [code for code, severity in rows if "critical" in severity]


def unalerted_critical() -> list[str]:
    """Critical codes no alert matches by code (AgentdNodeCritical covers them)."""
    matchers = [(op, v) for r in alert_rules() for op, v in _codes_matched(r["expr"])]

    def matched(code: str) -> bool:
        return any(v == code if op == "=" else re.fullmatch(v, code) is not None for op, v in matchers)

    covered = {METRIC_ALERTS[r["alert"]] for r in alert_rules() if r["alert"] in METRIC_ALERTS}
    return [c for c in critical_codes() if not matched(c) and c not in covered]


def alerts() -> str:
    by_name: dict[str, list[dict[str, Any]]] = {}
    for rule in alert_rules():
        by_name.setdefault(rule["alert"], []).append(rule)
    rows = ["| alert | severity | for | fires on | says | first thing to do |", "|---|---|---|---|---|---|"]
    for name, rules in by_name.items():
        severities = " / ".join(dict.fromkeys(r["labels"]["severity"] for r in rules))
        fors = " / ".join(dict.fromkeys(r.get("for", "0s") for r in rules))
        fires = " / ".join(dict.fromkeys(_fires_on(r["expr"]) for r in rules))
        says = _untemplated(rules[0]["annotations"]["summary"])
        runbook = rules[0]["annotations"].get("runbook", "")
        m = re.match(r"docs/runbooks\.md#([\w-]+)", runbook)
        step = _cell(_first_step(runbook)) + (f" ([runbook](../docs/runbooks.md#{m.group(1)}))" if m else "")
        rows.append(f"| {name} | {severities} | {fors} | {_cell(fires)} | {_cell(says)} | {step} |")
    records = sum(1 for g in _load_yaml(RULES)["groups"] for r in g["rules"] if "record" in r)
    rows.append("")
    rows.append(f"{len(by_name)} alerts in {sum(len(v) for v in by_name.values())} alerting rules, beside {records} recording rules. "
                "Each rule's `runbook` annotation has the whole procedure.")
    rows.append("")
    rows.append("Critical findings without an alert of their own, which AgentdNodeCritical covers (the dashboard's findings "
                "table names them): " + ", ".join(f"`{c}`" for c in unalerted_critical()) + ".")
    return "\n".join(rows) + "\n"


# -- dashboards ------------------------------------------------------------------------


def panel_counts(which: str) -> tuple[int, int]:
    """(panels, rows) of a dashboard, panels inside collapsed rows included."""
    doc = json.loads(DASHBOARDS[which].read_text())

    def walk(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:  # Any: Grafana's panel JSON
        return [q for p in panels for q in (p, *walk(p.get("panels", [])))]

    every = walk(doc["panels"])
    return sum(p.get("type") != "row" for p in every), sum(p.get("type") == "row" for p in every)


def dashboard_heading(which: str) -> str:
    panels, rows = panel_counts(which)
    return f"### {which.capitalize()} dashboard (`agentd-{which}`, {panels} panels in {rows} rows)"


# -- figures ---------------------------------------------------------------------------


def bench_figures() -> list[dict[str, Any]]:  # Any: a figure as bench/common.py emits it
    return [json.loads(line) for line in FIGURES.read_text().splitlines() if line.strip()]


def _find(figs: list[dict[str, Any]], bench: str, figure: str, **context: Any) -> dict[str, Any] | None:
    for f in figs:
        if f.get("bench") == bench and f.get("figure") == figure and all(f.get(k) == v for k, v in context.items()):
            return f
    return None


def _v(f: dict[str, Any] | None) -> str:
    if f is None or f.get("value") is None:
        return "not measured"
    unit = {"percent_of_one_core": "% of a core", "req/s": "req/s"}.get(f.get("unit", ""), f.get("unit", ""))
    value = f["value"]
    shown = f"{value:.3g}" if isinstance(value, float) and value < 100 else f"{value:,.0f}" if isinstance(value, (int, float)) else str(value)
    return f"{shown} {unit}".strip()


# (what, [(bench, figure, context)...]): the figures quoted, each row's values joined by " / "
QUOTED: list[tuple[str, list[tuple[str, str, dict[str, Any]]]]] = [
    ("full collection, 8x H100 IB (h100-ib): CPU / files read",
     [("snapshot", "collect_full_cpu", {"profile": "h100-ib"}), ("snapshot", "collect_full_files_read", {"profile": "h100-ib"})]),
    ("full collection, 16 GPUs / 18 NICs: CPU / files read",
     [("snapshot", "collect_full_cpu", {"profile": "large-16gpu-18nic"}), ("snapshot", "collect_full_files_read", {"profile": "large-16gpu-18nic"})]),
    ("fast-tier collection (h100-ib): CPU", [("snapshot", "collect_fast_cpu", {"profile": "h100-ib"})]),
    ("`/metrics` (gzip), one client: p50 / p99 / throughput",
     [("daemon", "metrics_gzip_sequential_p50", {}), ("daemon", "metrics_gzip_sequential_p99", {}), ("daemon", "metrics_gzip_sequential_rps", {})]),
    ("`/metrics` (gzip), 50 clients: throughput", [("daemon", "metrics_gzip_concurrent_rps", {})]),
    ("`/health`, one client, while NVML hangs: p99", [("daemon", "health_sequential_nvml_hung_p99", {})]),
    ("`/health`, 50 clients, while NVML hangs: p99", [("daemon", "health_concurrent_nvml_hung_p99", {})]),
    ("series / exposition gzip bytes (h100-ib)",
     [("daemon", "metrics_series", {"profile": "h100-ib"}), ("daemon", "metrics_bytes_gzip", {"profile": "h100-ib"})]),
    ("idle CPU at the default intervals / RSS (h100-ib)",
     [("daemon", "idle_cpu", {"profile": "h100-ib"}), ("daemon", "rss", {"profile": "h100-ib"})]),
    ("port down -> `/health` 503 / `nccl.env` rewritten, fast interval 2 s (median)",
     [("reaction", "port_down_to_health_503", {"fast_s": 2.0}), ("reaction", "port_down_to_nccl_env", {"fast_s": 2.0})]),
    ("port down -> `/health` 503 / `nccl.env` rewritten, fast interval 0.25 s (median)",
     [("reaction", "port_down_to_health_503", {"fast_s": 0.25}), ("reaction", "port_down_to_nccl_env", {"fast_s": 0.25})]),
    ("RoCE carrier loss -> `/health` 503, rtnetlink events / fast-tier poll (median)",
     [("link_event", "carrier_loss_to_health_503", {"mode": "events"}), ("link_event", "carrier_loss_to_health_503", {"mode": "poll"})]),
    ("kernel log: parse / recognise one record", [("kmsg", "parse_per_record", {}), ("kmsg", "recognise_per_record", {})]),
]


def figures() -> str:
    figs = bench_figures()
    machine = _find(figs, "run_all", "machine") or {}
    table = ["| figure | measured |", "|---|---|"]
    for what, keys in QUOTED:
        values = [_find(figs, bench, figure, **ctx) for bench, figure, ctx in keys]
        shown = " / ".join(_v(f) + (f" ({f['errors']} failed)" if f is not None and "errors" in f else "") for f in values)
        table.append(f"| {what} | {shown} |")
    skipped = [f.get("note", "") for f in figs if f.get("figure") == "skipped"]
    when = ", ".join(f"{k} {machine[k]}" for k in ("mode", "cpus", "cpu_model", "loadavg") if k in machine)
    head = (f"From `{FIGURES.relative_to(REPO)}`, one `bench/run_all.py` run ({when}): a shared machine, so "
            "latencies are noisy and ratios and counts are the reliable part.")
    tail = "".join(f"\nNot measured in that run: {note}." for note in skipped if note)
    return head + "\n\n" + "\n".join(table) + "\n" + tail + ("\n" if tail else "")


# -- regions ---------------------------------------------------------------------------


PARTS: dict[str, tuple[Path, Callable[[], str]]] = {
    "commands": (OPERATOR_GUIDE, commands),
    "alerts": (GRAFANA_README, alerts),
    "figures": (PERFORMANCE, figures),
}
HEADINGS: dict[Path, list[tuple[re.Pattern[str], Callable[[], str]]]] = {
    GRAFANA_README: [(re.compile(rf"^### {w.capitalize()} dashboard \(`agentd-{w}`, .*\)$", re.M), lambda w=w: dashboard_heading(w))
                     for w in DASHBOARDS],
}


def region(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- generated: {name} \(make docs\) -->\n)(.*?)(<!-- end generated: {name} -->)", re.S)


def generated(path: Path, text: str) -> str:
    """``text`` (of ``path``) with every generated part as this writes it."""
    for name, (where, make) in PARTS.items():
        if where == path:
            pattern = region(name)
            if not pattern.search(text):
                raise SystemExit(f"{path.relative_to(REPO)}: no generated part {name!r}")
            body = make()
            text = pattern.sub(lambda m, body=body: m.group(1) + body + m.group(3), text)
    for pattern, make in HEADINGS.get(path, []):
        if not pattern.search(text):
            raise SystemExit(f"{path.relative_to(REPO)}: no heading {pattern.pattern!r}")
        line = make()
        text = pattern.sub(lambda m, line=line: line, text)
    return text


def files() -> list[Path]:
    return sorted({p for p, _ in PARTS.values()} | set(HEADINGS))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when a generated part differs")
    args = ap.parse_args(argv)
    stale = []
    for path in files():
        old = path.read_text()
        new = generated(path, old)
        if new != old:
            stale.append(str(path.relative_to(REPO)))
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print("generated parts differ (run `make docs`): " + ", ".join(stale), file=sys.stderr)
        return 1
    for name in stale:
        print(f"rewrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
