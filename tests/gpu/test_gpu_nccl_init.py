"""tests/gpu/nccl_init.py, the one-rank NCCL initialisation of the GPU check, where there is
no GPU: which NCCL it finds, how it spells NCCL's version, and what it answers when there
is none (its ctypes path was run against the nvidia-nccl-cu13 2.31.2 wheel on the
development machine: tests/fixtures/nccl-logs/nccl-2.31.2-no-cuda-driver.log)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.gpu import compare as cmp
from tests.gpu import nccl_init
from tests.support.paths import FIXTURES, REPO


def test_version_codes_as_nccl_prints_them():
    assert [nccl_init.version_text(v) for v in (23102, 22703, 21805, 2708)] == ["2.31.2", "2.27.3", "2.18.5", "2.7.8"]


def test_the_nccl_of_the_wheels_first_each_once(tmp_path):
    site, other = tmp_path / "site", tmp_path / "other"
    for lib in (site / "nvidia/nccl/lib", site / "nvidia/cu13/lib", other / "torch/lib"):
        lib.mkdir(parents=True)
    (site / "nvidia/nccl/lib/libnccl.so.2").write_bytes(b"\x7fELF")
    (site / "nvidia/cu13/lib/libnccl.so.2").symlink_to(site / "nvidia/nccl/lib/libnccl.so.2")  # the same file twice
    (other / "torch/lib/libnccl.so.2").write_bytes(b"\x7fELF")
    found = nccl_init.wheel_libraries([str(site), str(tmp_path / "absent"), str(other)])
    assert found == [site / "nvidia/cu13/lib/libnccl.so.2", other / "torch/lib/libnccl.so.2"]


@pytest.mark.proc
def test_without_nccl_it_answers_not_created(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["NCCL_TOPO_FILE"] = str(tmp_path / "topo.xml")
    p = subprocess.run([sys.executable, str(REPO / "tests" / "gpu" / "nccl_init.py")], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    doc = json.loads(p.stdout)
    if doc["library"] is not None or doc["via"] == "torch" and "ModuleNotFoundError" not in doc["error"]:
        pytest.skip(f"this machine has an NCCL ({doc['library'] or 'torch'}): the answer depends on its GPUs")
    assert p.returncode == 1 and doc["ok"] is False and doc["topo_file"] == str(tmp_path / "topo.xml")
    assert doc["error"].startswith("no libnccl.so.2 found") and "torch: ModuleNotFoundError" in doc["error"]


def test_nccl_2_31_log_layout():
    log = cmp.parse_nccl_log((FIXTURES / "nccl-logs" / "nccl-2.31.2-no-cuda-driver.log").read_text())
    assert log.version is None  # ncclCommInitRank failed before NCCL printed it: the init answer carries it
    assert log.warnings == ("Cuda failure 'CUDA driver version is insufficient for CUDA runtime version'",) * 2
    init = {"ok": False, "via": "ctypes", "nccl_version": "2.31.2", "error": "ncclCommInitRank: unhandled cuda error (1)"}
    rows = {(r.subject, r.field): r for r in cmp.nccl_log_rows((FIXTURES / "nccl-logs" / "nccl-2.31.2-no-cuda-driver.log").read_text(), None, init, None, topo_written=False)}
    assert rows[("nccl", "version")].outcome == "missing" and dict(rows[("nccl", "version")].values)["init"] == "2.31.2"
    assert rows[("init a", "communicator")].outcome == "mismatch"
