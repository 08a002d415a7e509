"""The daemon's scheduled benchmark: runs off the health loop, its results become
agentd_bench_nccl_* metrics and its findings join the node's."""

from __future__ import annotations

import asyncio
import shlex
import shutil
import subprocess
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentd import sim
from agentd.collection.collector import collect_once
from agentd.config import AgentConfig
from agentd.daemon.bench_schedule import BenchScheduler
from agentd.daemon.exposition import REGISTRY
from agentd.daemon.state import State
from agentd.host.fs import HostRoot
from tests.support.bench_data import DATA


class FakeDaemon:
    def __init__(self, config, snapshot):
        self.config = config
        self.state = SimpleNamespace(snapshot=snapshot, findings=(), compute_hcas=tuple(f"mlx5_{i}" for i in range(8)))
        self.errors = []
        self.log = SimpleNamespace(info=lambda *a, **k: None, error=lambda *a, **k: self.errors.append((a, k)))
        self.triggered = 0

    def trigger_full(self):
        self.triggered += 1


@pytest.mark.proc
@pytest.mark.tree
async def test_scheduled_run_feeds_metrics_and_findings(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    bindir = tmp_path / "nccl-tests"
    bindir.mkdir()
    for op in ("all_reduce", "all_gather", "reduce_scatter"):  # the default ops
        fake = bindir / f"{op}_perf"
        fake.write_text(f"#!/bin/sh\ncat {shlex.quote(str(DATA / 'a3mega-h100x16-allreduce.txt'))}\n")
        fake.chmod(0o755)
    cfg = AgentConfig.model_validate({
        "host_root": str(root),
        "paths": {"state_dir": str(tmp_path / "state"), "nccl_env": str(tmp_path / "none.env")},
        "bench": {"enabled": True, "interval_s": 3600, "nccl_tests_dir": str(bindir), "time_limit_s": 30},
    })
    daemon = FakeDaemon(cfg, collect_once(HostRoot.at(root), cfg))
    sched = BenchScheduler()
    task = asyncio.create_task(sched.run_forever(daemon))
    try:
        for _ in range(300):
            if sched.outcome is not None:
                break
            await asyncio.sleep(0.1)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert daemon.errors == []
    assert sched.outcome is not None and daemon.triggered == 1
    assert sched.outcome.run.results, sched.outcome.run
    text = REGISTRY.render(State(seq=1, generated_at=0, started_at=0, config=cfg, ready=True, bench=sched.outcome)).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    busbw = fams["agentd_bench_nccl_bus_bandwidth_bytes_per_second"].samples
    assert busbw and all(s.value > 0 for s in busbw)
    assert {s.labels["op"] for s in busbw} == {"all_reduce", "all_gather", "reduce_scatter"}
    assert any(s.value == 1 for s in fams["agentd_bench_nccl_result"].samples)
    assert tuple(sched.findings()) == tuple(sched.outcome.findings)
    if shutil.which("promtool"):
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
    # a restarted daemon does not rerun at once: the history file seeds the schedule
    again = BenchScheduler()
    again.seed(cfg.paths.state_dir)
    assert again._last_run is not None and again._last_run.finished_at == sched.outcome.run.finished_at


def test_disabled_by_default():
    assert AgentConfig().bench.enabled is False
