"""The real ``agentd run`` process on a simulated H100 InfiniBand node: scrape, inject
faults, watch /health and the metrics follow, recover, hang NVML, stop with SIGTERM.

Deadlines are bounded polls (the daemon has to notice within a few fast intervals),
never assertions on how fast something was.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.daemon_harness import agentd_cmd, free_port, sim_state_dir, stop_process

sim = pytest.importorskip("agentd.sim")
if not hasattr(sim, "build_tree") or not hasattr(sim, "apply_fault"):
    pytest.skip("agentd.sim (build_tree/apply_fault) is not available yet", allow_module_level=True)

pytestmark = pytest.mark.e2e

PROMTOOL = shutil.which("promtool")
FAST_S = 0.2
# Generous bound for "within two fast intervals" on a loaded CI machine: the poll returns
# as soon as the daemon reacts; the bound only keeps a broken daemon from hanging the suite.
REACT_S = 15.0
HANG_S = 6

CONFIG = f"""
[intervals]
fast_s = {FAST_S}
medium_s = 0.4
slow_s = 1.0
stale_after = 3
event_debounce_s = 0.1

[timeouts]
probe_s = 2.0
nvml_s = 1.0
"""


def get(url: str, *, timeout: float = 5.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Accept-Encoding": "identity"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def poll(pred, limit_s: float = REACT_S, step: float = 0.05):
    deadline = time.monotonic() + limit_s
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(step)
    return last


class Agent:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.root = tmp / "root"
        self.out = sim_state_dir(tmp)  # a simulated root's state is beside it, not at the configured paths
        node = tmp / "node"
        cfg = tmp / "agentd.toml"
        cfg.write_text(
            CONFIG
            + f'\n[paths]\nnccl_env = "{node}/nccl.env"\nnccl_conf = "{node}/nccl.conf"\n'
            f'nccl_topo = "{node}/topo.xml"\nbaseline = "{node}/baseline.json"\nstate_dir = "{node}"\n'
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_") and k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
        self.log = open(tmp / "agentd.log", "wb")
        self.proc = subprocess.Popen(
            [*agentd_cmd(), "run", "--config", str(cfg), "--simulate", "h100-ib", "--sim-dir", str(self.root), "--listen", f"127.0.0.1:{self.port}"],
            stdout=self.log,
            stderr=self.log,
            env=env,
        )

    def logs(self) -> str:
        return (self.tmp / "agentd.log").read_text(errors="replace")[-4000:]

    def health(self) -> tuple[int, dict]:
        code, body = get(self.base + "/health")
        return code, json.loads(body)

    def codes(self) -> dict[tuple[str, str], str]:
        _, body = self.health()
        return {(f["code"], f["subject"]): f["severity"] for f in body["findings"]}

    def metrics(self) -> str:
        code, body = get(self.base + "/metrics")
        assert code == 200
        return body.decode()

    def stop(self) -> int | None:
        return stop_process(self.proc)


@pytest.fixture
def agent(tmp_path):
    a = Agent(tmp_path)
    try:
        def ready() -> bool:
            if a.proc.poll() is not None:
                return True  # exited: fail below with its log
            return _listening(a) and get(a.base + "/readyz")[0] == 200

        assert poll(ready, 60) and a.proc.poll() is None, a.logs()
        yield a
    finally:
        a.stop()
        a.log.close()


def _listening(a: Agent) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", a.port), timeout=0.5):
            return True
    except OSError:
        return False


def test_healthy_node_scrape(agent):
    code, body = agent.health()
    assert code == 200, body
    assert body["status"] in ("ok", "degraded") and body["stale_probes"] == []
    text = agent.metrics()
    for family in ("agentd_ib_port_state_id", "agentd_ib_port_info", "agentd_gpu_info", "agentd_nvlink_links_up",
                   "agentd_pcie_gpu_nic_path", "agentd_gdr_path_info", "agentd_probe_success", "agentd_build_info",
                   "agentd_nccl_file_write_success", "agentd_ib_port_data_transmitted_bytes_total"):
        assert f"\n{family}" in text, family
    code, text_body = get(agent.base + "/health?format=text")
    assert text_body.decode().splitlines()[0] == body["status"]
    assert (agent.out / "nccl.env").exists()
    code, topo = get(agent.base + "/topology")
    assert code == 200 and len(json.loads(topo)["gpus"]) == 8


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package 'prometheus'; CI installs it)")
def test_promtool_on_a_live_scrape(agent):
    res = subprocess.run([PROMTOOL, "check", "metrics"], input=agent.metrics().encode(), capture_output=True, timeout=30)
    out = (res.stdout + res.stderr).decode()
    assert res.returncode == 0 and not out.strip(), out


FAULTS = [
    ("port_down", "ib.port.down", "mlx5_0:1"),
    ("nvlink_down@gpu3", "nvlink.link.down", "gpu3"),
    # peermem gone with the proprietary module: no GPUDirect RDMA path at all.
    ("no_gdr", "gdr.unavailable", None),
]


@pytest.mark.parametrize("spec,code,subject", FAULTS, ids=[f[0] for f in FAULTS])
def test_fault_turns_health_503_and_recovers(agent, spec, code, subject):
    assert agent.health()[0] == 200
    sim.apply_fault(agent.root, spec)

    def critical_with_finding():
        status, body = agent.health()
        hits = [f for f in body["findings"] if f["code"].startswith(code) and (subject is None or f["subject"].startswith(subject))]
        return (status, hits) if status == 503 and any(f["severity"] == "critical" for f in hits) else None

    got = poll(critical_with_finding)
    assert got, f"/health did not turn 503 with {code} {subject}: {agent.health()}\n{agent.logs()}"
    sev = {(f["code"], f["subject"]) for f in got[1]}
    text = agent.metrics()
    assert any(f'agentd_finding{{code="{c}",severity="critical",subject="{s}"}} 1' in text for c, s in sev)

    sim.clear_fault(agent.root, spec)
    recovered = poll(lambda: agent.health()[0] == 200)
    assert recovered, f"no recovery after clearing {spec}: {agent.health()}"


def test_peermem_gone_with_dmabuf_switches_the_gdr_path(agent):
    """h100-ib runs the open GPU module: without nvidia_peermem, DMA-BUF still gives GDR.
    The node stays healthy and the metrics say which path is in use."""
    assert 'agentd_gdr_path_info{path="peermem"} 1' in agent.metrics()
    sim.apply_fault(agent.root, "peermem_gone")
    assert poll(lambda: 'agentd_gdr_path_info{path="dmabuf"} 1' in agent.metrics()), agent.metrics()[-2000:]
    assert agent.health()[0] == 200
    sim.clear_fault(agent.root, "peermem_gone")
    assert poll(lambda: 'agentd_gdr_path_info{path="peermem"} 1' in agent.metrics())


def ib_hca(env: Path) -> list[str]:
    for line in env.read_text().splitlines() if env.exists() else ():
        if line.startswith("export NCCL_IB_HCA="):
            return line.split("=", 1)[1].strip("'\"").lstrip("=").split(",")
    return []


def test_port_down_leaves_nccl_ib_hca_and_comes_back(agent):
    env = agent.out / "nccl.env"
    assert poll(lambda: "mlx5_0:1" in ib_hca(env)), env.read_text()
    sim.apply_fault(agent.root, "port_down@mlx5_0:1")
    assert poll(lambda: ib_hca(env) and "mlx5_0:1" not in ib_hca(env)), env.read_text()
    assert len(ib_hca(env)) == 7
    # The file is written before the new State is swapped in: poll, do not assume order.
    assert poll(lambda: 'agentd_ib_port_state_id{device="mlx5_0",port="1"} 1' in agent.metrics())
    sim.clear_fault(agent.root, "port_down@mlx5_0:1")
    assert poll(lambda: "mlx5_0:1" in ib_hca(env)), env.read_text()


def test_hung_nvml_is_stale_while_endpoints_keep_answering(agent):
    # Each hung NVML call blocks HANG_S; the probe times out after nvml_s (1 s) and its data
    # is stale after 3 x medium_s (1.2 s). Every request below must answer (urllib gives
    # each 5 s); nothing here measures how fast.
    sim.apply_fault(agent.root, f"nvml_hang={HANG_S}")
    assert poll(lambda: 'agentd_probe_stale{probe="nvml"} 1' in agent.metrics()), agent.logs()
    assert poll(lambda: 'agentd_probe_success{probe="nvml"} 0' in agent.metrics())

    def stale_503():
        code, body = agent.health()
        return code == 503 and "nvml" in body["stale_probes"] and any(
            f["code"] == "agentd.data.stale" and f["subject"] == "nvml" and f["severity"] == "critical" for f in body["findings"])

    assert poll(stale_503), agent.health()
    assert get(agent.base + "/livez")[0] == 200
    assert get(agent.base + "/readyz")[0] == 200
    sim.clear_fault(agent.root, f"nvml_hang={HANG_S}")
    # The hung call still in flight finishes after at most HANG_S; then NVML answers again.
    assert poll(lambda: agent.health()[0] == 200, 30 + HANG_S), agent.health()


def test_sigterm_exits_zero(agent):
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.proc.wait(10) == 0
    assert '"agentd.stopped"' in agent.logs()
