"""Runner 1 (nccl-tests) with fake binaries printing real captured output; runner 2's
result handling with a fake interpreter; env file, sizes and invocation planning."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from agentd.ncclbench.runners import (
    BenchRequest,
    choose_runner,
    find_nccl_tests,
    nccl_tests_argv,
    parse_env_file,
    parse_size,
    parse_sizes,
    plan_invocations,
    run_nccl_tests,
    run_torch,
    validate_ops,
)
from tests.support.bench_data import DATA

MiB = 1 << 20


def fake_binary(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    p = directory / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return p


def printing(directory: Path, op: str, data_file: str, record: Path | None = None) -> Path:
    rec = f'echo "$@" >> {shlex.quote(str(record))}\nenv | grep ^NCCL_ | sort >> {shlex.quote(str(record))}\n' if record else ""
    return fake_binary(directory, f"{op}_perf", f"{rec}cat {shlex.quote(str(DATA / data_file))}\n")


def test_parse_size_like_nccl_tests():
    assert parse_size("8") == 8
    assert parse_size("64K") == 65536
    assert parse_size("0.1M") == 104857  # (size_t)(0.1 * 1048576)
    assert parse_size("256M") == 256 * MiB
    assert parse_size("1G") == 1 << 30
    assert parse_size("16MiB") == 16 * MiB
    assert parse_sizes("256M,0.1M,1M,1M") == (104857, MiB, 256 * MiB)
    for bad in ("", "x", "1T", "-1"):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_plan_invocations_reproduces_the_sizes_exactly():
    assert plan_invocations([104857, MiB, 16 * MiB, 64 * MiB, 256 * MiB]) == [(104857, 104857, 2), (MiB, 16 * MiB, 16), (64 * MiB, 256 * MiB, 4)]
    assert plan_invocations([MiB, 2 * MiB, 4 * MiB, 8 * MiB]) == [(MiB, 8 * MiB, 2)]
    assert plan_invocations([256 * MiB]) == [(256 * MiB, 256 * MiB, 2)]
    for sizes in ([3, 5, 7, 100, 1000, 10000], [104857, MiB, 16 * MiB, 64 * MiB, 256 * MiB], [1, 2, 4, 6, 12, 24]):
        covered = []
        for b, e, f in plan_invocations(sizes):
            s = b
            while s <= e:
                covered.append(s)
                s *= f
        assert covered == sorted(sizes)


def test_env_file_forms():
    text = "\n".join(
        [
            "# written by agentd",
            "export NCCL_IB_HCA='=mlx5_0:1,mlx5_1:1'",
            "NCCL_SOCKET_IFNAME=eth0",
            'export NCCL_TOPO_FILE="/etc/nccl/topo.xml"  # comment',
            "export NCCL_X='it'\\''s'",
            "",
            "not a line",
            "export BROKEN='x",
        ]
    )
    env, problems = parse_env_file(text)
    assert env == {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_TOPO_FILE": "/etc/nccl/topo.xml", "NCCL_X": "it's"}
    assert len(problems) == 2 and "line 7" in problems[0] and "BROKEN" in problems[1]


def test_argv_uses_explicit_sizes_gpus_and_check(tmp_path):
    req = BenchRequest(ops=("all_reduce",), sizes=(MiB,), gpus=8, iters=10, warmup=2)
    assert nccl_tests_argv("/x/all_reduce_perf", req, MiB, 16 * MiB, 16) == [
        "/x/all_reduce_perf", "-b", str(MiB), "-e", str(16 * MiB), "-f", "16", "-g", "8", "-n", "10", "-w", "2", "-c", "1",
    ]  # fmt: skip


@pytest.mark.proc
def test_runner1_fake_binary_prints_real_output(tmp_path):
    record = tmp_path / "calls.txt"
    bindir = tmp_path / "bin"
    printing(bindir, "all_reduce", "a3mega-h100x16-allreduce.txt", record)
    req = BenchRequest(ops=("all_reduce",), sizes=(256 * MiB, 512 * MiB, 1024 * MiB), gpus=8, env={"NCCL_IB_HCA": "=mlx5_0:1"}, env_file="/etc/nccl.env")
    run = run_nccl_tests(req, {"all_reduce": find_nccl_tests("all_reduce", bindir)})
    assert run.status == "ok" and run.runner == "nccl-tests" and run.n_ranks == 16
    assert [(r.size_bytes, r.busbw_gbps) for r in run.results] == [(268435456, 213.28), (536870912, 263.69), (1073741824, 298.82)]
    r = run.results[0]
    assert (r.busbw_out_of_place_gbps, r.busbw_in_place_gbps, r.time_us, r.wrong) == (213.19, 213.28, 2359.9, 0.0)
    assert run.avg_busbw_gbps == {"all_reduce": 70.742}
    assert run.env["NCCL_IB_HCA"] == "=mlx5_0:1" and run.env_file == "/etc/nccl.env"
    calls = record.read_text().splitlines()
    assert calls[0] == f"-b {256 * MiB} -e {1024 * MiB} -f 2 -g 8 -n 20 -w 5 -c 1"
    assert "NCCL_IB_HCA==mlx5_0:1" in calls


@pytest.mark.proc
def test_runner1_one_run_per_size_group_and_no_duplicates(tmp_path):
    record = tmp_path / "calls.txt"
    printing(tmp_path / "bin", "all_reduce", "a3mega-h100x16-allreduce.txt", record)  # prints every size each time
    req = BenchRequest(ops=("all_reduce",), sizes=(MiB, 64 * MiB, 256 * MiB, 8 << 30), gpus=8)
    run = run_nccl_tests(req, {"all_reduce": tmp_path / "bin" / "all_reduce_perf"})
    assert [r.size_bytes for r in run.results] == [MiB, 64 * MiB, 256 * MiB, 8 << 30]
    assert [c.split()[:6] for c in record.read_text().splitlines() if c.startswith("-b")] == [
        ["-b", str(MiB), "-e", str(64 * MiB), "-f", "64"], ["-b", str(256 * MiB), "-e", str(8 << 30), "-f", "32"],
    ]  # fmt: skip


@pytest.mark.proc
def test_runner1_net_transport_disables_p2p_and_shm(tmp_path):
    record = tmp_path / "calls.txt"
    printing(tmp_path / "bin", "all_reduce", "a3mega-h100x16-allreduce.txt", record)
    req = BenchRequest(ops=("all_reduce",), sizes=(8,), gpus=8, transport="net")
    run = run_nccl_tests(req, {"all_reduce": tmp_path / "bin" / "all_reduce_perf"})
    assert run.transport == "net" and run.env["NCCL_P2P_DISABLE"] == "1"
    assert {"NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1"} <= set(record.read_text().splitlines())


@pytest.mark.proc
def test_runner1_hanging_binary_is_killed_at_the_time_limit(tmp_path):
    pidfile = tmp_path / "pid"
    fake_binary(tmp_path / "bin", "all_reduce_perf", f"echo $$ > {pidfile}\necho '# nThread 1 nGpus 8'\nexec sleep 300\n")
    req = BenchRequest(ops=("all_reduce", "all_gather"), sizes=(MiB,), gpus=8, time_limit_s=1.0)
    run = run_nccl_tests(req, {"all_reduce": tmp_path / "bin" / "all_reduce_perf", "all_gather": tmp_path / "bin" / "all_reduce_perf"})
    assert run.status == "timeout" and "time limit" in run.reason and run.results == ()
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.proc
def test_runner1_nonzero_exit_fails_with_the_error(tmp_path):
    fake_binary(tmp_path / "bin", "all_reduce_perf", "echo 'node1: Test NCCL failure common.cu:1005 unhandled system error'\necho 'NCCL WARN oops' >&2\nexit 3\n")
    run = run_nccl_tests(BenchRequest(ops=("all_reduce",), sizes=(MiB,), gpus=2), {"all_reduce": tmp_path / "bin" / "all_reduce_perf"})
    assert run.status == "failed" and "exited 3" in run.reason and "NCCL WARN oops" in run.reason
    assert any("Test NCCL failure" in e for e in run.errors)


@pytest.mark.proc
def test_runner1_wrong_values_are_reported(tmp_path):
    printing(tmp_path / "bin", "all_gather", "dgx2-v100x12-legacy-5ops.txt")
    run = run_nccl_tests(BenchRequest(ops=("all_gather",), sizes=(8589934560,), gpus=12), {"all_gather": tmp_path / "bin" / "all_gather_perf"})
    assert run.status == "wrong_results" and "4 out-of-bounds values" in run.reason
    assert [r.op for r in run.results] == ["all_gather"]  # the file's other sections are other ops: ignored


@pytest.mark.proc
def test_runner1_empty_output_fails(tmp_path):
    fake_binary(tmp_path / "bin", "all_reduce_perf", "echo hello\n")
    run = run_nccl_tests(BenchRequest(ops=("all_reduce",), sizes=(MiB,), gpus=2), {"all_reduce": tmp_path / "bin" / "all_reduce_perf"})
    assert run.status == "failed" and "no result rows" in run.reason


def test_choose_runner(tmp_path, monkeypatch):
    printing(tmp_path / "bin", "all_reduce", "a3mega-h100x16-allreduce.txt")
    monkeypatch.setattr("agentd.ncclbench.runners.torch_available", lambda: False)
    r, bins, _ = choose_runner("auto", ["all_reduce"], tmp_path / "bin")
    assert r == "nccl-tests" and bins["all_reduce"].name == "all_reduce_perf"
    r, _, why = choose_runner("auto", ["all_reduce", "all_gather"], tmp_path / "bin")
    assert r is None and "all_gather_perf" in why and "agentd[bench]" in why
    r, _, _ = choose_runner("auto", ["all_reduce"], None, path=str(tmp_path / "bin"))
    assert r == "nccl-tests"
    monkeypatch.setattr("agentd.ncclbench.runners.torch_available", lambda: True)
    assert choose_runner("auto", ["all_gather"], tmp_path / "bin")[0] == "torch"
    assert choose_runner("nccl-tests", ["all_gather"], tmp_path / "bin")[0] is None
    with pytest.raises(ValueError):
        validate_ops(["allreduce"])


def fake_python(tmp_path: Path, stdout: str, rc: int = 0) -> str:
    out = tmp_path / "out.txt"
    out.write_text(stdout)
    p = fake_binary(tmp_path, "python", f'echo "$@" > {shlex.quote(str(tmp_path / "argv"))}\ncat {shlex.quote(str(out))}\nexit {rc}\n')
    return str(p)


@pytest.mark.proc
def test_runner2_result_handling_with_a_fake_interpreter(tmp_path):
    doc = {
        "runner": "torch", "world_size": 8, "torch_version": "2.4.0", "nccl_version": "2.21.5",
        "results": [{"op": "all_reduce", "size_bytes": 268435456, "count": 67108864, "dtype": "float", "time_us": 1000.0,
                     "algbw_gbps": 268.435456, "busbw_gbps": 469.762, "busbw_in_place_gbps": 469.762, "wrong": 0.0}],
        "wrong": [],
    }  # fmt: skip
    py = fake_python(tmp_path, "some NCCL INFO line\n" + json.dumps(doc) + "\n")
    req = BenchRequest(ops=("all_reduce",), sizes=(256 * MiB,), gpus=8)
    run = run_torch(req, python=py)
    assert run.status == "ok" and run.runner == "torch" and run.n_ranks == 8 and run.nccl_version == "2.21.5"
    assert run.results[0].busbw_gbps == 469.762 and run.tool_version == "2.4.0"
    argv = (tmp_path / "argv").read_text().split()
    assert argv[:2] == ["-m", "agentd.ncclbench.torchbench"] and "--gpus" in argv and str(256 * MiB) in argv
    bad = dict(doc, wrong=["all_reduce 268435456 B: 5 wrong elements"])
    assert run_torch(req, python=fake_python(tmp_path, json.dumps(bad) + "\n")).status == "wrong_results"
    failed = run_torch(req, python=fake_python(tmp_path, "", rc=1))
    assert failed.status == "failed" and failed.results == ()


@pytest.mark.proc
def test_runner2_is_bounded_too(tmp_path):
    p = fake_binary(tmp_path, "python", "exec sleep 300\n")
    run = run_torch(BenchRequest(ops=("all_reduce",), sizes=(MiB,), gpus=2, time_limit_s=0.5), python=str(p))
    assert run.status == "timeout"


def test_torchbench_module_is_importable_without_torch():
    from agentd.ncclbench.torchbench import layout

    assert layout("all_gather", 1000, 8) == (31, 248, 992)
    assert layout("reduce_scatter", 256 * MiB, 8) == (64 * MiB, 8 * MiB, 256 * MiB)
    assert layout("all_reduce", 104857, 8) == (26214, 26214, 104856)
    assert layout("alltoall", 64, 8) == (16, 16, 64)
