"""Benchmark history: bounded, atomic, corrupt-file handling, compare."""

from __future__ import annotations

import json
import os

import pytest

from agentd.ncclbench.results import BenchRun, OpResult
from agentd.ncclbench.run_history import append_run, compare, history_path, load_history, previous_comparable

MiB = 1 << 20


def r(t: float, bw: dict[tuple[str, int], float], status: str = "ok", transport: str = "nvlink") -> BenchRun:
    res = tuple(OpResult(op=op, size_bytes=s, time_us=1.0, algbw_gbps=v, busbw_gbps=v) for (op, s), v in bw.items())
    return BenchRun(started_at=t, finished_at=t + 1, status=status, runner="nccl-tests", transport=transport, results=res)


def test_bounded_and_roundtrip(tmp_path):
    p = history_path(tmp_path)
    for i in range(7):
        assert append_run(p, r(float(i), {("all_reduce", MiB): 10.0 + i}), keep=5).ok
    runs, problem = load_history(p)
    assert problem is None and [x.started_at for x in runs] == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert runs[-1].results[0].busbw_gbps == 16.0
    assert json.loads(p.read_text())["format"] == 1
    assert sorted(os.listdir(tmp_path)) == ["bench-nccl.json"]  # no temp files left


def test_atomic_write_failure_keeps_the_old_file(tmp_path, monkeypatch):
    p = history_path(tmp_path)
    append_run(p, r(1.0, {("all_reduce", MiB): 1.0}))
    before = p.read_bytes()

    def no_rename(src, dst):
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr(os, "replace", no_rename)
    res = append_run(p, r(2.0, {("all_reduce", MiB): 2.0}))
    assert not res.ok and "No space left" in res.error
    assert p.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["bench-nccl.json"]  # the temp file was removed


def test_missing_and_corrupt_files(tmp_path):
    p = history_path(tmp_path)
    assert load_history(p) == ([], None)
    p.write_text("{broken")
    runs, problem = load_history(p)
    assert runs == [] and "not valid JSON" in problem
    assert append_run(p, r(1.0, {("all_reduce", MiB): 1.0})).ok
    assert (tmp_path / "bench-nccl.json.corrupt").read_text() == "{broken"
    assert len(load_history(p)[0]) == 1
    p.write_text(json.dumps({"format": 1, "runs": [{"nonsense": 1}, r(3.0, {}).model_dump(mode="json")]}))
    runs, problem = load_history(p)
    assert len(runs) == 1 and "1 unreadable run(s) skipped" in problem


def test_compare_per_op_and_size():
    a = r(1.0, {("all_reduce", MiB): 100.0, ("all_reduce", 256 * MiB): 400.0, ("all_gather", MiB): 50.0})
    b = r(2.0, {("all_reduce", MiB): 110.0, ("all_reduce", 256 * MiB): 300.0, ("reduce_scatter", MiB): 20.0})
    d = {(x.op, x.size_bytes): x for x in compare(a, b)}
    assert [(x.op, x.size_bytes) for x in compare(a, b)] == [("all_gather", MiB), ("all_reduce", MiB), ("all_reduce", 256 * MiB), ("reduce_scatter", MiB)]
    assert d[("all_reduce", MiB)].delta_pct == pytest.approx(10.0)
    assert d[("all_reduce", 256 * MiB)].delta_pct == pytest.approx(-25.0)
    assert d[("all_gather", MiB)].after_gbps is None and d[("all_gather", MiB)].delta_pct is None
    assert d[("reduce_scatter", MiB)].before_gbps is None


def test_previous_comparable_skips_empty_and_other_transport():
    runs = [r(1.0, {("all_reduce", MiB): 1.0}), r(2.0, {("all_reduce", MiB): 2.0}, transport="net"), r(3.0, {}, status="refused")]
    cur = r(4.0, {("all_reduce", MiB): 3.0})
    assert previous_comparable(runs, cur).started_at == 1.0
    assert previous_comparable(runs + [cur], cur).started_at == 1.0
    assert previous_comparable([], cur) is None
