"""`agentd check` on a node with no GPUs and no RDMA devices says so and exits 4: neither
ok (0: the Slurm wrapper resumes on it) nor critical (2: it drains), nor "agentd could not
run" (3), which an operator should alert on (issue 43; on main it printed "ok", exit 0)."""

from __future__ import annotations

import json

from agentd.cli import EXIT_NOTHING
from tests.support.cli import run_cli
from tests.support.empty_node import empty_node

NO_WINDOW = {"AGENTD_INTERVALS__CHECK_RATE_WINDOW_S": "0"}


def test_check_says_nothing_to_judge_and_exits_4(tmp_path):
    root = empty_node(tmp_path / "cpu")
    r = run_cli("check", "--host-root", str(root), env=NO_WINDOW)
    assert r.returncode == EXIT_NOTHING == 4
    assert r.stdout.splitlines()[:2] == ["nothing-to-judge", "nothing to judge: no GPUs, no RDMA devices"]
    doc = json.loads(run_cli("check", "--host-root", str(root), "--format", "json", env=NO_WINDOW).stdout)
    assert doc["status"] == "nothing-to-judge" and doc["nothing_to_judge"] == "no GPUs, no RDMA devices"


def test_render_writes_no_nccl_files_there(tmp_path):
    root = empty_node(tmp_path / "cpu")
    r = run_cli("render", "--host-root", str(root), "--out-dir", str(tmp_path / "nccl"))
    assert r.returncode == 4 and "nothing to judge" in r.stderr
    assert not (tmp_path / "nccl").exists()


def test_a_node_with_rdma_devices_is_judged_as_before(tmp_path):
    root = empty_node(tmp_path / "ib", rdma=True)
    r = run_cli("check", "--host-root", str(root), env=NO_WINDOW)
    assert r.returncode in (0, 1, 2) and r.stdout.splitlines()[0] in ("ok", "degraded", "critical")
