"""Issue 16 end to end: the NVLink fabric on the running daemon of a simulated GB200 NVL72
compute tray reaches /health AND the labels it publishes (node-feature-discovery's
features.d file, /topology's placement), and both recover when the fault clears; a
single-node HGX board never raises a multi-node or IMEX finding.

The fault matrix (test_fault_matrix.py) already proves each fabric fault kind's finding,
/health code and recovery; this adds what a scheduler sees: the labels.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from agentd.config import load_config
from agentd.outputs.node_state import moved_paths
from tests.support.daemon_harness import Agent, agentd_cmd, config_text, poll

pytestmark = pytest.mark.e2e

# GPU feature discovery's nvidia.com/gpu.clique value: "<clusterUUID>.<cliqueId>"
CLIQUE_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.[1-9][0-9]*$")
P = "agentd.io/"


def _agent(tmp: Path, profile: str, fabric: str = "") -> tuple[Agent, Path]:
    text = config_text(out=tmp / "node").replace("[paths]\n", f'[paths]\nnfd_features = "{tmp / "node" / "agentd.features"}"\n', 1) + fabric
    (tmp / "agentd.toml").parent.mkdir(parents=True, exist_ok=True)
    a = Agent(tmp, profile=profile, config=text)
    nfd = moved_paths(load_config(a.config_path, environ={}).paths, a.out)["nfd_features"]
    assert nfd is not None
    return a, Path(nfd)


def labels(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k] = v
    return out


def fault(a: Agent, spec: str, *, clear: bool = False) -> None:
    subprocess.run([*agentd_cmd(), "simulate", "--out", str(a.root), "--clear-fault" if clear else "--fault", spec],
                   check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def tray(tmp_path_factory):
    a, nfd = _agent(tmp_path_factory.mktemp("gb200"), "gb200-nvl", "\n[fabric]\nimex = true\n")
    with a:
        a.wait_ready()
        assert poll(lambda: labels(nfd).get(P + "fabric-health") == "ok")
        yield a, nfd


def test_healthy_tray_publishes_its_domain_and_rails(tray):
    a, nfd = tray
    lab = labels(nfd)
    assert CLIQUE_RE.match(lab[P + "nvlink-domain"]), lab
    assert lab[P + "nvlink-domain-gpus"] == "4" and lab[P + "nvlink-domain-health"] == "ok"
    # each GPU on its own rail: GPU i -> mlx5_i, same Grace (NODE)
    assert [lab[f"{P}rail.gpu{i}.nic"] for i in range(4)] == [f"mlx5_{i}" for i in range(4)]
    assert {lab[f"{P}rail.gpu{i}.path"] for i in range(4)} == {"NODE"}
    assert re.fullmatch(r"[0-9a-f]{12}", lab[P + "rail-hash"])
    code, body = a.get("/topology")
    place = json.loads(body)["placement"]
    assert code == 200 and place["domain"]["id"] == lab[P + "nvlink-domain"] and place["rail_hash"] == lab[P + "rail-hash"]
    assert {f["code"] for f in a.health()[1]["findings"]} == set()


# (fault spec, finding code, severity, the domain label's health while faulted; None: no domain label)
FAULTS = [
    ("fabric_status@gpu1", "nvlink.fabric.incomplete", "critical", "unhealthy"),
    ("fabric_unassigned@gpu0=clique", "nvlink.fabric.unassigned", "critical", "unhealthy"),
    ("fabric_health@gpu2=route_unhealthy", "nvlink.fabric.unhealthy", "critical", "unhealthy"),
    ("fabric_health@gpu2=degraded_bandwidth", "nvlink.fabric.degraded", "warning", "degraded"),
    ("fabric_domain_split@gpu3", "nvlink.domain.split", "critical", None),
    ("nvlink_slow@gpu0:5", "nvlink.link.slow", "warning", "ok"),
    ("c2c_down@gpu1", "nvlink.c2c.down", "critical", "ok"),
    ("imex_down", "fabric.imex.down", "critical", "unhealthy"),
]


@pytest.mark.parametrize("spec,code,severity,domain_health", FAULTS, ids=[f[0] for f in FAULTS])
def test_fabric_fault_reaches_health_and_labels_and_recovers(tray, spec, code, severity, domain_health):
    a, nfd = tray
    before = labels(nfd)
    fault(a, spec)
    try:
        assert poll(lambda: code in {f["code"] for f in a.health()[1]["findings"]}), a.health()
        node_health = "critical" if severity == "critical" else "degraded"
        status, body = a.health()
        assert status == (503 if severity == "critical" else 200) and body["status"] == node_health
        assert poll(lambda: labels(nfd).get(P + "fabric-health") == node_health), labels(nfd)
        lab = labels(nfd)
        if domain_health is None:
            assert P + "nvlink-domain" not in lab
        else:
            assert lab[P + "nvlink-domain"] == before[P + "nvlink-domain"] and lab[P + "nvlink-domain-health"] == domain_health
        # the rails do not move with the fabric
        assert {k: v for k, v in lab.items() if ".rail" in k or "rail-" in k} == {k: v for k, v in before.items() if ".rail" in k or "rail-" in k}
    finally:
        fault(a, spec, clear=True)
    assert poll(lambda: a.health()[0] == 200 and not a.health()[1]["findings"]), a.health()
    assert poll(lambda: labels(nfd) == before), (labels(nfd), before)


def test_single_node_hgx_never_raises_multi_node_or_imex_findings(tmp_path):
    a, nfd = _agent(tmp_path, "h100-ib")
    with a:
        a.wait_ready()
        assert poll(lambda: labels(nfd).get(P + "fabric-health") == "ok")
        codes = {f[0] for f in a.checks()}
        assert not codes & {"nvlink.fabric.unassigned", "nvlink.domain.split", "fabric.imex.down"}
        lab = labels(nfd)
        # NVSwitches on the board: no multi-node domain to publish, its rails still are
        assert P + "nvlink-domain" not in lab and lab[P + "rail.gpu0.path"] == "PIX"
        # the fabric manager dies: that is this board's fabric finding, and only that
        fault(a, "fm_down")
        assert poll(lambda: "fabric.manager.down" in {f["code"] for f in a.health()[1]["findings"]})
        assert {f["code"] for f in a.health()[1]["findings"]} == {"fabric.manager.down"}
        fault(a, "fm_down", clear=True)
        assert poll(lambda: a.health()[0] == 200)
