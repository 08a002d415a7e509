"""A real Prometheus scraping real ``agentd run --simulate`` processes on loopback.

Two simulated nodes (h100-ib, h100-roce) and one unreachable target are scraped every
second with grafana/alerts/agentd.rules.yml loaded. On the healthy nodes every dashboard
query must return series (a few, listed below with the reason, are empty by nature and
must fill once the fault named beside them is injected), no alert expression may match,
and every rule must evaluate without error. Then faults are injected one at a time and the
matching alert expression (the rule variant of the expected severity) must return the
faulty subject; where the simulator can undo the fault, the expression must empty again.

Every wait is a bounded poll; nothing asserts how fast anything was.
The tests share one stack and run in file order: the healthy-node tests first, then the
faults, those that cannot be undone (flap, pause storm, hung NVML) last.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support.grafana import PROMETHEUS, REPO, RULES, alert_rules, dashboards, label_values_selector, panel_targets, substitute, target_id, variable_query, variables

sim = pytest.importorskip("agentd.sim")
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (Debian package 'prometheus'; CI installs it)")]

# Generous bounds for a loaded 2-core CI runner; polls return as soon as the data is there.
START_S = 90.0
REACT_S = 45.0
RATE_WINDOW = "20s"  # $__rate_interval: must hold >= 2 scrapes of a 1 s scrape interval
AGENT_CONFIG = """
[intervals]
fast_s = 0.5
medium_s = 1.0
slow_s = 2.0
stale_after = 10
event_debounce_s = 0.2

[timeouts]
probe_s = 3.0
nvml_s = 1.0
"""

# Queries empty on a healthy node by nature -> (why, fault that must fill them or None).
EXPECTED_EMPTY_WHEN_HEALTHY = {
    "agentd-fleet/Critical and warning findings/A": ("no node has a warning or critical finding", "port_down@mlx5_1:1"),
    "agentd-fleet/Degraded ports/A": ("every port is ACTIVE at its expected rate and width", "port_down@mlx5_1:1"),
    "agentd-fleet/Nodes whose NCCL_IB_HCA differs from the most common value/A": ("every node lists the same HCA ports", "port_down@mlx5_1:1"),
    "agentd-fleet/Nodes with XIDs in the last 24h, by code/A": ("no driver printed an XID", "xid@gpu3"),
    "agentd-node/Kernel events since agentd started (this boot)/A": ("no driver printed an event agentd recognises", "xid@gpu3"),
    "agentd-node/Kernel events by kind, code and GPU/A": ("no driver printed an event agentd recognises", "xid@gpu3"),
    "agentd-node/PCIe AER events by device/A": ("the kernel logged no AER error", "aer_uncorrectable@gpu1=fatal"),
    "agentd-fleet/Top nodes by AER rate (time range)/A": ("the kernel logged no AER error", "aer_uncorrectable@gpu1=fatal"),
    "agentd-node/Withheld findings and maintenance/A": ("the default [lifecycle] withholds nothing and no node is in maintenance "
                                                         "(tests/e2e/test_lifecycle_daemon.py shows both)", None),
    # Issue 16: the simulated H100 boards are single-node NVLink domains with a healthy fabric.
    **{qid: ("the simulated H100 boards have no multi-node NVLink domain (only GB200/GB300 NVL trays have one)", None)
       for qid in ("agentd-fleet/Nodes and GPUs per NVLink domain/A", "agentd-fleet/Nodes and GPUs per NVLink domain/B",
                   "agentd-fleet/Nodes in unhealthy or degraded NVLink domains/A", "agentd-node/GPU NVLink domain/A")},
    **{qid: ("every GPU's fabric is healthy and its NVLinks run at the expected speed", None)
       for qid in ("agentd-node/GPU fabric health (GPUs not healthy)/A", "agentd-node/GPU fabric health (GPUs not healthy)/B",
                   "agentd-node/GPUs with slow NVLinks/A", "agentd-node/GPUs with slow NVLinks/B", "agentd-fleet/NVLink fabric findings/A")},
    # Issue 17: two simulated nodes of different profiles are a tie in every field that differs.
    "agentd-fleet/Fingerprint outliers/A": ("the fleet's two nodes tie wherever they differ (a tie flags nobody)", None),
    # Issue 38: a driver reports a link-down reason only while the link is down.
    "agentd-node/Link-down reasons/A": ("every Ethernet link is up", "link_down_reason@ens7np0"),
    **{f"agentd-node/{t}/A": ("per module and per port only with [metrics] optics_detail (series budget; the findings judge them either way)", None)
       for t in ("Module temperature (EEPROM)", "PHY link-down events", "Modules")},
    **{f"agentd-fleet/{t}/{r}": ("no NCCL benchmark has run on the simulated nodes (agentd_bench_nccl_* bandwidths exist only after a run)", None)
       for t, r in [("NCCL bus bandwidth (last run)", "A"), ("NCCL bus bandwidth (last run)", "B"), ("Bus bandwidth below minimum", "A"),
                    ("Lowest bus bandwidth vs expected", "A"), ("Last benchmark result per node", "A")]},
}
# Node-dashboard queries with no data on h100-ib that must have data on h100-roce.
ROCE_ONLY = {
    "agentd-node/MTU: actual vs expected/C": "h100-ib exports no expected MTU (IPoIB without expect.ipoib_mtu; its Ethernet ports are not compute)",
    "agentd-node/RoCE QoS chain/A": "h100-ib has no RoCE compute port (its Ethernet ports are storage)",
}

# (node, fault spec, alert, severity of the rule variant, labels the alert must carry, clears)
FAULTS = [
    ("ib", "port_down@mlx5_1:1", "AgentdIbPortDown", "critical", {"subject": "mlx5_1:1"}, True),
    ("ib", "rate_degraded@mlx5_2:1", "AgentdIbPortRateDegraded", "critical", {"device": "mlx5_2", "port": "1"}, True),
    ("ib", "no_gdr", "AgentdGdrUnavailable", "critical", {"subject": "node"}, True),
    ("ib", "nvlink_down@gpu3", "AgentdNvlinkDown", "critical", {"subject": "gpu3:link0"}, True),
    ("ib", "nvml_init_error", "AgentdNvmlBlind", "critical", {"subject": "nvml"}, True),
    # An HCA link at half width and one generation slower keeps 25 %: critical. A GPU's
    # speed is not judged (idle GPUs slow down), so a GPU at half width is a warning.
    ("ib", "pcie_downtrained@mlx5_4=both", "AgentdPcieDowntrained", "critical", {"subject": "0000:97:00.0"}, True),
    ("ib", "pcie_downtrained@gpu1=width", "AgentdPcieDowntrained", "warning", {"subject": "0000:39:00.0"}, True),
    ("roce", "mtu_mismatch@ens2np0", "AgentdMtuMismatch", "critical", {"netdev": "ens2np0"}, True),
    # A kernel log only grows: the XID's finding holds for kernel.hold_s (a day), so it does not clear here.
    ("ib", "xid@gpu3", "AgentdGpuXid", "critical", {"subject": "gpu3"}, False),
    # The AER counters stay advanced (as on a real node): the rise stays in the 10 min rate window.
    ("ib", "aer_uncorrectable@gpu1=fatal", "AgentdPcieAerFatal", "critical", {"subject": "0000:39:00.0"}, False),
    ("roce", "ecn_off@ens3np0", "AgentdRoceEcnDisabled", "critical", {"subject": "ens3np0"}, True),
    ("roce", "pfc_off@ens4np0", "AgentdRocePfcDisabled", "critical", {"subject": "ens4np0"}, True),
    # Counters stay advanced after clearing (a flap stays in the 12 h window, a storm in the
    # 60 s one), and a hung NVML call blocks until it returns: no recovery wait for these.
    ("ib", "flapping@mlx5_3:1", "AgentdIbLinkFlapping", "critical", {"subject": "mlx5_3:1"}, False),
    ("roce", "pause_storm@ens5np0", "AgentdPfcPauseStorm", "critical", {"subject": "ens5np0"}, False),
    ("ib", "nvml_hang=60", "AgentdStale", "warning", {"probe": "nvml"}, False),
    # issue 38: the physical layer (fec_errors advances counters: its rise stays in the rate window)
    ("ib", "module_hot@mlx5_6", "AgentdOpticsHot", "critical", {"subject": "mlx5_6:1"}, True),
    ("roce", "rx_power_low@ens6np0", "AgentdOpticsSignalDegraded", "critical", {"subject": "mlx5_5:1"}, True),
    ("roce", "link_down_reason@ens7np0", "AgentdIbPortDown", "critical", {"subject": "mlx5_6:1"}, True),
    ("roce", "fec_errors@ens8np0", "AgentdOpticsSignalDegraded", "warning", {"subject": "mlx5_7:1"}, False),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, data: dict[str, str] | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


def poll(pred, limit_s: float = REACT_S, step: float = 0.25):
    deadline = time.monotonic() + limit_s
    last = pred()
    while not last and time.monotonic() < deadline:
        time.sleep(step)
        last = pred()
    return last


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class Stack:
    def __init__(self, tmp: Path):
        self.tmp, self.procs, self.roots, self.instances = tmp, [], {}, {}
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_") and k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
        exe = REPO / ".venv" / "bin" / "agentd"
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "agentd"]
        for node, profile in (("ib", "h100-ib"), ("roce", "h100-roce")):
            port, out = free_port(), tmp / f"{node}-out"
            cfg = tmp / f"{node}.toml"
            cfg.write_text(AGENT_CONFIG + f'\n[paths]\nnccl_env = "{out}/nccl.env"\nnccl_conf = "{out}/nccl.conf"\nnccl_topo = "{out}/topo.xml"\n'
                           f'baseline = "{out}/baseline.json"\nstate_dir = "{out}"\n')
            self.roots[node], self.instances[node] = tmp / f"{node}-root", f"127.0.0.1:{port}"
            self._start(node, [*cmd, "run", "--config", str(cfg), "--simulate", profile, "--sim-dir", str(self.roots[node]), "--listen", self.instances[node]], env)
        self.dead = f"127.0.0.1:{free_port()}"  # nothing listens here: AgentdDown's target
        self.prom = f"http://127.0.0.1:{free_port()}"
        conf = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}, "rule_files": [str(RULES)],
                "scrape_configs": [{"job_name": "agentd", "static_configs": [{"targets": list(self.instances.values())}]},
                                   {"job_name": "agentd-unreachable", "static_configs": [{"targets": [self.dead]}]}]}
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(conf))
        self._start("prometheus", [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                                   f"--web.listen-address={self.prom.removeprefix('http://')}", "--storage.tsdb.retention.time=1h"], env)

    def _start(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        log = open(self.tmp / f"{name}.log", "wb")
        self.procs.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env), log))

    def logs(self) -> str:
        return "\n".join(f"--- {n} (rc {p.poll()})\n" + (self.tmp / f"{n}.log").read_text(errors="replace")[-2000:] for n, p, _ in self.procs)

    def close(self) -> None:
        for _, p, log in reversed(self.procs):
            stop(p)
            log.close()

    def query(self, expr: str) -> list[dict]:
        code, body = http(self.prom + "/api/v1/query", {"query": expr})
        doc = json.loads(body) if body else {}
        assert code == 200 and doc.get("status") == "success", f"{expr}\n-> {code} {body[:500]!r}"
        return doc["data"]["result"]

    def api(self, path: str) -> dict:
        code, body = http(self.prom + path)
        assert code == 200, (path, code, body[:300])
        return json.loads(body)["data"]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = Stack(tmp_path_factory.mktemp("prom-e2e"))
    try:
        def up() -> bool:
            if any(p.poll() is not None for _, p, _ in s.procs):
                return True  # something exited: fail below with the logs
            try:
                ok = s.query('count(up{job="agentd"} == 1) == 2 and count(agentd_ready{job="agentd"} == 1) == 2')
                return bool(ok) and bool(s.query(f'count(rate(agentd_process_cpu_seconds_total{{job="agentd"}}[{RATE_WINDOW}])) == 2'))
            except (AssertionError, ValueError):
                return False

        assert poll(up, START_S) and all(p.poll() is None for _, p, _ in s.procs), s.logs()
        yield s
    finally:
        s.close()


def dashboard_queries(s: Stack):
    """(id, dashboard uid, expr with the healthy IB node / the whole fleet substituted)."""
    fleet = "|".join(s.instances.values())
    for _, dash in dashboards():
        for panel, target in panel_targets(dash):
            yield target_id(dash, panel, target), dash["uid"], target["expr"], fleet


def run(s: Stack, expr: str, instance: str) -> list[dict]:
    return s.query(substitute(expr, job="agentd", instance=instance, __rate_interval=RATE_WINDOW, __range="5m"))


def alert_expr_results(s: Stack, alert: str, severity: str, instance: str) -> list[dict]:
    rules = [r for r in alert_rules() if r["alert"] == alert and r["labels"]["severity"] == severity]
    assert rules, (alert, severity)
    return [m for r in rules for m in s.query(r["expr"]) if m["metric"].get("instance") == instance]


def rule_errors(s: Stack) -> list[str]:
    return [f"{r['name']}: {r.get('lastError')}" for g in s.api("/api/v1/rules")["groups"] for r in g["rules"] if r.get("health") == "err"]


def test_healthy_nodes_every_dashboard_query_returns_data(stack):
    empty, unexpected = [], []
    for qid, uid, expr, fleet in dashboard_queries(stack):
        instance = fleet if uid == "agentd-fleet" else stack.instances["ib"]
        got = poll(lambda: run(stack, expr, instance), 0 if qid in EXPECTED_EMPTY_WHEN_HEALTHY or qid in ROCE_ONLY else 10)
        if qid in ROCE_ONLY and not got:
            got = poll(lambda: run(stack, expr, stack.instances["roce"]), 10)
        if qid in EXPECTED_EMPTY_WHEN_HEALTHY:
            if got:
                unexpected.append(f"{qid}: listed as empty when healthy but returns {len(got)} series")
        elif not got:
            empty.append(f"{qid}: {expr}")
    assert not empty, "dashboard queries without data on the healthy nodes:\n" + "\n".join(empty)
    assert not unexpected, "\n".join(unexpected)


def test_dashboard_variables_resolve(stack):
    for _, dash in dashboards():
        for name, var in variables(dash).items():
            if var["type"] != "query":
                continue
            selector, label = label_values_selector(substitute(variable_query(var), job="agentd"))
            values = {m["metric"].get(label) for m in stack.query(selector)}
            want = set(stack.instances.values()) if label == "instance" else {"agentd"}
            assert want <= values, (dash["uid"], name, values)


def test_healthy_nodes_no_alert_expression_matches(stack):
    assert poll(lambda: not rule_errors(stack) and stack.api("/api/v1/rules")["groups"]), rule_errors(stack)
    for rule in alert_rules():
        got = stack.query(rule["expr"])
        if rule["alert"] == "AgentdDown":
            assert [m["metric"].get("instance") for m in got] == ([stack.dead] if "up{" in rule["expr"] and "absent" not in rule["expr"] else []), (rule["expr"], got)
        else:
            assert got == [], f"{rule['alert']} ({rule['labels']['severity']}) matches on healthy nodes: {got}"


@pytest.mark.parametrize("node,spec,alert,severity,labels,clears", FAULTS, ids=[f[1] for f in FAULTS])
def test_fault_makes_the_alert_expression_true(stack, node, spec, alert, severity, labels, clears):
    instance = stack.instances[node]
    sim.apply_fault(stack.roots[node], spec)
    try:
        def matching():
            return [m for m in alert_expr_results(stack, alert, severity, instance) if labels.items() <= m["metric"].items()]

        got = poll(matching)
        assert got, f"{alert} ({severity}) expression stayed empty after {spec}\n{stack.logs()}"
        assert poll(lambda: stack.query(f'agentd_health_status{{instance="{instance}"}} >= 1')), "node still ok"
        if severity == "critical":
            assert poll(lambda: alert_expr_results(stack, "AgentdNodeCritical", "critical", instance))
        # The rule itself goes pending (its for: keeps it from firing within the test).
        assert poll(lambda: [a for a in stack.api("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == alert
                             and a["labels"].get("instance") == instance and a["state"] in ("pending", "firing")]), f"{alert} not pending"
        for qid, (_, fault) in EXPECTED_EMPTY_WHEN_HEALTHY.items():
            if fault == spec:
                expr = next(e for i, _, e, _ in dashboard_queries(stack) if i == qid)
                assert poll(lambda: run(stack, expr, "|".join(stack.instances.values()))), f"{qid} still empty after {spec}"
        assert not rule_errors(stack), rule_errors(stack)
    finally:
        sim.clear_fault(stack.roots[node], spec)
    if clears:
        assert poll(lambda: not matching()), f"{alert} expression still true after clearing {spec}"
