"""What a newcomer meets in the first minutes, on real daemons (issue 43): a second daemon on
a state directory another holds exits 3 naming it; a node with nothing to judge says so and
writes nothing for workloads; a replayed capture leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from agentd.outputs.node_state import state_dir_for
from agentd.outputs.state_lock import DAEMON_LOCK, acquire, holder
from tests.support.cli import run_cli
from tests.support.daemon_harness import agentd_cmd, free_port, http_get, poll, stop_process
from tests.support.empty_node import empty_node


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_") and k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    return {**env, **extra}


def _start(root: Path, tmp: Path, name: str, **env: str) -> tuple[subprocess.Popen, str, Path]:
    port = free_port()
    cfg = tmp / f"{name}.toml"
    cfg.write_text("[intervals]\nfast_s = 0.2\nmedium_s = 0.4\nslow_s = 0.8\n")
    log = tmp / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*agentd_cmd(), "run", "--config", str(cfg), "--host-root", str(root), "--listen", f"127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT, env=_env(**env))
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            return True
        try:
            return http_get(base + "/readyz", timeout=2)[0] == 200
        except OSError:
            return False

    if not (poll(ready, 60, 0.1) and proc.poll() is None):
        stop_process(proc)
        raise AssertionError(f"agentd did not become ready:\n{log.read_text(errors='replace')}")
    return proc, base, log


@pytest.fixture
def cpu_node_daemon(tmp_path):
    root = empty_node(tmp_path / "cpu")
    proc, base, log = _start(root, tmp_path, "first")
    yield root, proc, base, tmp_path
    stop_process(proc)


def test_nothing_to_judge_is_said_and_nothing_is_written_for_workloads(cpu_node_daemon):
    root, _, base, _ = cpu_node_daemon
    code, body = http_get(base + "/health?format=text")
    assert code == 200  # nothing here is sick: a scheduler that drains on 503 leaves it alone
    assert body.decode().splitlines() == ["nothing-to-judge", "nothing to judge: no GPUs, no RDMA devices"]
    code, body = http_get(base + "/health")
    assert json.loads(body)["status"] == "nothing-to-judge"
    out = state_dir_for(root)
    assert not {"nccl.env", "nccl.conf", "topo.xml", "baseline.json"} & {p.name for p in out.iterdir()}


def test_a_second_daemon_on_the_same_state_directory_exits_3_naming_the_first(cpu_node_daemon):
    root, first, _, tmp = cpu_node_daemon
    second = subprocess.run([*agentd_cmd(), "run", "--host-root", str(root), "--listen", f"127.0.0.1:{free_port()}"],
                            capture_output=True, text=True, timeout=60, env=_env())
    assert second.returncode == 3, second.stderr
    assert f"another agentd uses the state directory {state_dir_for(root)} (pid {first.pid}, started " in second.stderr
    assert f"config {tmp / 'first.toml'}" in second.stderr
    # the first keeps its lock until it exits; then it is free
    assert holder(state_dir_for(root) / DAEMON_LOCK).pid == first.pid
    assert stop_process(first) == 0
    with acquire(state_dir_for(root) / DAEMON_LOCK):
        pass


def test_a_replayed_capture_run_leaves_nothing_behind_and_names_the_file(shared_tree, tmp_path):
    cap = tmp_path / "node.tar.gz"
    assert run_cli("capture", "--host-root", str(shared_tree("pcie-4gpu")), "--out", str(cap)).returncode == 0
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc, _, log = _start(cap, tmp_path, "replay", TMPDIR=str(scratch))
    assert os.listdir(scratch)  # the unpacked capture and its state, while it runs
    assert stop_process(proc) == 0
    assert os.listdir(scratch) == []
    assert f"agentd: capture {cap} (unpacked in {scratch}/" in log.read_text()
