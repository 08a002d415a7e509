"""The series budget of /metrics (issue 19): how many series one node exports, measured
from a real render (the simulator's tree, collected, judged and rendered as the daemon
does), at the default settings and with every ``[metrics]`` detail key on.

docs/metrics.md ("Series budget", from agentd/metrics/budget.py) must state the measured
numbers, and the simulated 8x H100 InfiniBand node must stay at or below 1,200 series at
the defaults (a 10,000-node fleet: 12 M series from agentd at most)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from agentd import sim
from agentd.collection.collector import collect_once
from agentd.config import AgentConfig, MetricsDetail
from agentd.daemon.exposition import REGISTRY
from agentd.daemon.state import State
from agentd.host.fs import HostRoot
from agentd.metrics.budget import H100_IB_LIMIT
from agentd.outputs.evaluate import evaluate
from agentd.sim import profile_large

pytestmark = [pytest.mark.e2e, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "h100-ib.metrics"
NODES = ("h100-ib", profile_large.NAME, "no-gpu-no-hca")
ALL_DETAIL = {name: True for name in MetricsDetail.model_fields}


def series(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def render(root: Path, detail: dict[str, bool]) -> str:
    """/metrics of one collection of ``root`` with the given [metrics] settings."""
    config = AgentConfig(host_root=root, metrics=detail)
    snap = collect_once(HostRoot.at(root), config)
    ev = evaluate(snap, [snap], config, None)
    now = time.time()
    state = State(seq=1, generated_at=now, generated_mono=time.monotonic(), started_at=now, config=config, ready=True, snapshot=snap,
                  findings=ev.findings, compute_hcas=ev.roles.compute, hca_roles_source=ev.roles.source, expected=ev.expected,
                  nccl_env=ev.nccl_env, nccl_problems=ev.nccl_problems, render_metrics=REGISTRY.render)
    return state.metrics_bytes().decode()


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sim.PROFILES, profile_large.NAME, profile_large.PROFILE)
        for node in NODES:
            root = tmp_path_factory.mktemp(node) / "root"
            if node == "no-gpu-no-hca":
                root.mkdir()  # nothing to read: no GPU, no HCA, no netdev
            else:
                sim.build_tree(node, root)
            out[node] = (series(render(root, {})), series(render(root, ALL_DETAIL)))
    return out


def documented() -> dict[str, tuple[int, int]]:
    text = (ROOT / "docs" / "metrics.md").read_text()
    section = text.split("## Series budget", 1)[1]
    return {m.group(1): (int(m.group(2).replace(",", "")), int(m.group(3).replace(",", "")))
            for m in re.finditer(r"^\| `([^`]+)`[^|]*\| ([\d,]+) \| ([\d,]+) \|", section, re.M)}


def test_h100_ib_stays_within_the_budget(measured: dict[str, tuple[int, int]]) -> None:
    defaults, detail = measured["h100-ib"]
    assert defaults <= H100_IB_LIMIT, f"h100-ib exports {defaults} series at the defaults (budget {H100_IB_LIMIT})"
    assert detail > defaults, "the [metrics] detail keys add no series"


def test_the_daemons_golden_exposition_stays_within_the_budget() -> None:
    # The golden file is the running daemon's /metrics (tests/golden/test_golden_metrics.py
    # keeps it current): the collection above plus the daemon's own series.
    assert series(GOLDEN.read_text()) <= H100_IB_LIMIT


def test_docs_state_the_measured_budget(measured: dict[str, tuple[int, int]]) -> None:
    assert documented() == measured, "docs/metrics.md 'Series budget' is out of date: edit the table in agentd/metrics/budget.py, then `python -m agentd.daemon.exposition > docs/metrics.md`"
