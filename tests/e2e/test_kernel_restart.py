"""The kernel log across restarts of the real daemon (issue 14): a restart on the same
boot counts no record twice and keeps its findings; a new boot inherits nothing.

``agentd run --host-root`` on a simulated tree (each simulator build is a new boot: a
new boot id and an empty log); the cursor lives in the tree's state directory beside it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agentd import sim
from tests.support.daemon_harness import REACT_S, agentd_cmd, config_text, free_port, http_get, poll, sample, stop_process

pytestmark = pytest.mark.e2e


class Run:
    """``agentd run`` on ``root`` (log ``tmp/agentd-<n>.log``; ``extra``: config sections)."""

    def __init__(self, tmp: Path, root: Path, n: int, extra: str = ""):
        self.port = free_port()
        cfg = tmp / "agentd.toml"
        cfg.write_text(config_text(out=tmp / "node", extra=extra))
        self.logfile = tmp / f"agentd-{n}.log"
        self.log = open(self.logfile, "wb")
        self.proc = subprocess.Popen([*agentd_cmd(), "run", "--config", str(cfg), "--host-root", str(root), "--listen", f"127.0.0.1:{self.port}"],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            return http_get(f"http://127.0.0.1:{self.port}{path}")
        except OSError:
            return 0, b""

    def xids(self, code: str, gpu: str) -> float | None:
        code_, body = self.get("/metrics")
        return sample(body.decode(), "agentd_kernel_events_total", kind="xid", code=code, gpu=gpu) if code_ == 200 else None

    def findings(self) -> set[tuple[str, str]]:
        import json

        code, body = self.get("/health")
        return {(f["code"], f["subject"]) for f in json.loads(body)["findings"]} if code in (200, 503) else set()

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()


def test_restart_counts_nothing_twice_and_a_new_boot_starts_over(tmp_path):
    root = tmp_path / "root"
    sim.build_tree("h100-ib", root)
    sim.apply_fault(root, "xid@gpu3")  # 79: fallen off the bus
    sim.apply_fault(root, "xid@gpu0=13")  # an application's fault: counted only
    first = Run(tmp_path, root, 1)
    try:
        assert poll(lambda: first.xids("79", "3") == 1 and first.xids("13", "0") == 1, REACT_S), first.get("/metrics")[1].decode()[-2000:]
        assert ("gpu.xid", "gpu3") in first.findings()
        cursor = sim_state(root) / "kernel-cursor.json"
        assert poll(cursor.is_file, REACT_S)
    finally:
        first.stop()

    sim.apply_fault(root, "xid@gpu0=13")  # printed while agentd was down
    second = Run(tmp_path, root, 2)
    try:
        assert poll(lambda: second.xids("13", "0") == 1, REACT_S)  # only the new record
        assert second.xids("79", "3") is None  # read by the first run: not counted again
        assert poll(lambda: ("gpu.xid", "gpu3") in second.findings(), REACT_S)  # its finding came back with the cursor
    finally:
        second.stop()

    sim.build_tree("h100-ib", root)  # a reboot: new boot id, a new (empty) log
    third = Run(tmp_path, root, 3)
    try:
        assert poll(lambda: third.get("/health")[0] == 200, REACT_S), third.findings()
        assert not {f for f in third.findings() if f[0].startswith("gpu.")}
        assert third.xids("13", "0") is None and third.xids("79", "3") is None
    finally:
        third.stop()


def sim_state(root: Path) -> Path:
    from agentd.outputs.node_state import state_dir_for

    return state_dir_for(root)


def test_a_cursor_that_cannot_be_written_is_said_once_and_costs_nothing_else(tmp_path):
    root = tmp_path / "root"
    sim.build_tree("h100-ib", root)
    sim.apply_fault(root, "xid@gpu3")
    blocked = sim_state(root) / "kernel-cursor.json"
    blocked.mkdir(parents=True)  # a directory where the file goes: every write fails
    run = Run(tmp_path, root, 1)
    try:
        assert poll(lambda: ("gpu.xid", "gpu3") in run.findings(), REACT_S)
        log = tmp_path / "agentd-1.log"
        assert poll(lambda: b"kernel_cursor.write_failed" in log.read_bytes(), REACT_S), log.read_text()[-2000:]
        sim.apply_fault(root, "xid@gpu0=13")  # a new event: another write, failing the same way
        assert poll(lambda: run.xids("13", "0") == 1, REACT_S)
    finally:
        run.stop()
    assert (tmp_path / "agentd-1.log").read_bytes().count(b"kernel_cursor.write_failed") == 1
