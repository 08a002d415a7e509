"""``agentd bench nccl`` end to end on a simulated H100 node with a fake nccl-tests binary
that prints real captured output."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex

import pytest

from agentd import sim
from agentd.config import AgentConfig, load_config
from agentd.host.gpuprocs import GpuProcesses
from agentd.ncclbench.cliargs import add_bench_parser
from agentd.ncclbench.command import cmd_bench
from agentd.ncclbench.job import BenchOptions, next_due, run_bench_job
from agentd.ncclbench.results import BenchRun
from agentd.ncclbench.run_history import history_path, load_history
from tests.support.bench_data import DATA

MiB = 1 << 20
SIZES = "512M,1G,2G,4G,8G"


@pytest.fixture(scope="module")
def h100_root(tmp_path_factory):
    return sim.build_tree("h100-ib", tmp_path_factory.mktemp("node") / "root")


@pytest.fixture
def node(tmp_path, h100_root):
    root = h100_root  # read only; the busy-GPU test restores nvml.json itself
    bindir = tmp_path / "bin"
    bindir.mkdir()
    which = tmp_path / "which"
    record = tmp_path / "calls"
    script = bindir / "all_reduce_perf"
    script.write_text(
        f'#!/bin/sh\necho "$@" >> {shlex.quote(str(record))}\nenv | grep ^NCCL_ | sort >> {shlex.quote(str(record))}\ncat "$(cat {shlex.quote(str(which))})"\n'
    )
    script.chmod(0o755)
    (tmp_path / "nccl.env").write_text("# written by agentd\nexport NCCL_IB_HCA='=mlx5_0:1,mlx5_1:1'\nexport NCCL_TOPO_FILE=/etc/nccl/topo.xml\n")
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(
        f'host_root = "{root}"\n[paths]\nstate_dir = "{tmp_path / "state"}"\nnccl_env = "{tmp_path / "nccl.env"}"\n'
        f'[bench]\nnccl_tests_dir = "{bindir}"\n'
    )

    class Node:
        config = cfg
        state = tmp_path / "state"
        nvml = root / ".agentd" / "nvml.json"

        @staticmethod
        def prints(name: str) -> None:
            which.write_text(str(DATA / name))

        @staticmethod
        def calls() -> list[str]:
            return record.read_text().splitlines() if record.exists() else []

    Node.prints("coreweave-gb200x72-rank-tail.txt")
    return Node


def bench(capsys, *argv: str) -> tuple[int, str, str]:
    ap = argparse.ArgumentParser()
    add_bench_parser(ap.add_subparsers(dest="command"))
    rc = cmd_bench(ap.parse_args(["bench", "nccl", *argv]))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.proc
@pytest.mark.tree
def test_ok_run_is_judged_saved_and_uses_the_env_file(node, capsys):
    rc, out, _ = bench(capsys, "--config", str(node.config), "--ops", "all_reduce", "--sizes", SIZES)
    assert rc == 0, out
    assert "NCCL benchmark: ok" in out and "fabric nvswitch-nvlink4+ib-ndr" in out and "ranks 72" in out
    row = next(x for x in out.splitlines() if x.startswith("all_reduce") and " 8GiB" in x)
    assert row.split()[1:5] == ["8GiB", "20006.0", "429.37", "846.82"]
    calls = node.calls()
    assert calls[0] == f"-b {512 * MiB} -e {8 << 30} -f 2 -g 8 -n 20 -w 5 -c 1"
    assert "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1" in calls and "NCCL_TOPO_FILE=/etc/nccl/topo.xml" in calls
    runs, _ = load_history(history_path(node.state))
    assert len(runs) == 1 and runs[0].status == "ok" and runs[0].env["NCCL_IB_HCA"] == "=mlx5_0:1,mlx5_1:1"


@pytest.mark.proc
def test_below_minimum_exit_1_with_findings_and_compare(node, capsys):
    assert bench(capsys, "--config", str(node.config), "--ops", "all_reduce", "--sizes", SIZES)[0] == 0
    node.prints("a3mega-h100x16-allreduce.txt")
    rc, out, _ = bench(capsys, "--config", str(node.config), "--ops", "all_reduce", "--sizes", SIZES, "--compare")
    assert rc == 1
    assert "NCCL benchmark: below_min (below minimum: all_reduce/512MiB" in out
    assert "WARNING bench.nccl.below_min all_reduce/8GiB: all_reduce 8GiB on 16 ranks" in out
    assert "BELOW MIN" in out
    assert "compare: before" in out
    line = next(x for x in out.splitlines() if x.startswith("all_reduce") and "8GiB" in x and "%" in x)
    assert "846.82" in line and "338.82" in line and "-60.0%" in line
    rc, out, _ = bench(capsys, "--config", str(node.config), "--compare-only", "--format", "json")
    doc = json.loads(out)
    d8 = next(d for d in doc["compare"] if d["size_bytes"] == 8 << 30)
    assert rc == 0 and d8["before_gbps"] == 846.82 and d8["after_gbps"] == 338.82


@pytest.mark.proc
@pytest.mark.tree
def test_likely_causes_come_from_the_faulted_node(tmp_path, node, capsys):
    root = sim.build_tree("h100-ib", tmp_path / "faulted", faults=["rate_degraded@mlx5_2", "no_gdr"])
    text = node.config.read_text().replace(f'host_root = "{load_config(node.config).host_root}"', f'host_root = "{root}"')
    node.config.write_text(text + "min_busbw_gbps = {all_reduce = 500.0}\n")  # appended to [bench]
    node.prints("a3mega-h100x16-allreduce.txt")
    rc, out, _ = bench(capsys, "--config", str(node.config), "--ops", "all_reduce", "--sizes", "8G", "--transport", "net")
    assert rc == 1, out
    causes = next(x for x in out.splitlines() if x.strip().startswith("-> Likely causes"))
    assert "gdr." in causes and "ib.port.rate_degraded (mlx5_2:1)" in causes
    assert causes.index("gdr.") < causes.index("ib.port.rate_degraded")


@pytest.mark.proc
def test_json_format(node, capsys):
    rc, out, _ = bench(capsys, "--config", str(node.config), "--ops", "all_reduce", "--sizes", "8G", "--format", "json", "--no-save")
    doc = json.loads(out)
    assert rc == 0 and doc["run"]["status"] == "ok" and doc["run"]["results"][0]["busbw_gbps"] == 846.82
    assert doc["fabric"]["intra"] == "nvswitch-nvlink4" and doc["expectations"][0]["min_gbps"] > 300
    assert not history_path(node.state).exists()


@pytest.fixture
def busy(node):
    original = node.nvml.read_text()
    nv = json.loads(original)
    nv["processes"] = [{"gpu": 2, "pid": 31337, "name": "train.py"}]
    node.nvml.write_text(json.dumps(nv))
    yield
    node.nvml.write_text(original)


@pytest.mark.proc
def test_busy_gpus_refuse_unless_forced(node, busy, capsys):
    rc, out, _ = bench(capsys, "--config", str(node.config), "--ops", "all_reduce", "--sizes", "8G")
    assert rc == 3 and "NCCL benchmark: refused" in out and "gpu2: pid 31337 (train.py)" in out
    assert node.calls() == []  # nothing was started
    rc, out, _ = bench(capsys, "--config", str(node.config), "--ops", "all_reduce", "--sizes", "8G", "--force")
    assert rc == 0 and "running anyway" in out and node.calls()


def test_no_runner_and_bad_arguments(node, capsys, monkeypatch):
    monkeypatch.setattr("agentd.ncclbench.runners.torch_available", lambda: False)
    rc, out, _ = bench(capsys, "--config", str(node.config), "--ops", "all_gather", "--sizes", "8G")
    assert rc == 3 and "unavailable" in out and "all_gather_perf" in out
    rc, _, err = bench(capsys, "--config", str(node.config), "--ops", "allreduce")
    assert rc == 3 and "unknown collective" in err
    rc, _, err = bench(capsys, "--config", str(node.config), "--env-file", "/nonexistent/nccl.env", "--ops", "all_reduce", "--sizes", "8G")
    assert rc == 3
    rc, _, err = bench(capsys, "--config", str(node.config), "--compare-only")
    assert rc == 3 and "need two stored runs" in err


@pytest.mark.proc
def test_job_for_the_daemon_and_schedule(node):
    config = load_config(node.config)
    opts = dataclasses.replace(BenchOptions.scheduled(config), ops=("all_reduce",))
    outcome = run_bench_job(config, opts, gpu_query=lambda host: GpuProcesses(available=True, gpus=8))
    # default sizes are not in the captured output: the run completes with no matching rows
    assert outcome.run.status == "ok" and outcome.run.results == ()
    last = BenchRun(started_at=100.0, finished_at=200.0, status="ok")
    assert next_due(None, 50.0, 3600) == 50.0
    assert next_due(last, 300.0, 3600) == 3800.0
    assert next_due(last.model_copy(update={"status": "refused"}), 300.0, 86400) == 800.0


def test_scheduled_options_read_proposed_config_keys_when_present():
    from types import SimpleNamespace

    cfg = SimpleNamespace(bench=SimpleNamespace(idle_only=False, ops=["all_reduce"], sizes=["256M", "1M"], runner="torch", transport="net", expected_busbw_gbps={"all_reduce": 400.0}))
    o = BenchOptions.scheduled(cfg)  # type: ignore[arg-type]
    assert (o.ops, o.sizes, o.runner, o.transport, o.force, o.expected_busbw_gbps) == (("all_reduce",), (MiB, 256 * MiB), "torch", "net", True, {"all_reduce": 400.0})
    today = BenchOptions.scheduled(AgentConfig())
    assert today.ops == ("all_reduce", "all_gather", "reduce_scatter") and not today.force and today.sizes[0] == 104857
