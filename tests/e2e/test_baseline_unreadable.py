"""A baseline agentd cannot read is a finding and is left alone (issue 42, item 7).

A baseline made unreadable (EACCES after an ownership change; EIO) was treated like
corrupt JSON: the next healthy collection wrote a new one over it, and a GPU lost before
was forgotten for good. Only content that does not parse may be replaced.

The real daemon on a simulated root whose baseline (in ``<root>-out``, where a root that
is not the node keeps it) lists 8 GPUs while one is gone. As root, reading the file is
refused by dropping CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the daemon's bounding
set (root reads a mode-0600 file it does not own only through them); otherwise mode 000.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentd import sim
from agentd.outputs.node_state import state_dir_for
from tests.support.daemon_harness import REACT_S, agentd_cmd, config_text, free_port, http_get, poll, sample, stop_process
from tests.support.recorded_baseline import baseline_of

pytestmark = [pytest.mark.e2e, pytest.mark.tree]

PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2
NOBODY = 65534


def _without_dac_override() -> None:
    """preexec_fn: root without the capabilities that let it read others' files."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _unreadable(path: Path) -> object | None:
    """Make ``path`` unreadable to the daemon; the preexec_fn to start it with (None when
    plain permissions do). Skips where neither works."""
    if os.geteuid() != 0:
        path.chmod(0)
        return None
    os.chown(path, NOBODY, NOBODY)
    path.chmod(0o600)
    probe = subprocess.run([sys.executable, "-c", f"open({str(path)!r}).read()"], capture_output=True, preexec_fn=_without_dac_override)
    if probe.returncode == 0 or b"PermissionError" not in probe.stderr:
        pytest.skip("cannot take CAP_DAC_OVERRIDE away from a child process here")
    return _without_dac_override


def test_an_unreadable_baseline_is_a_finding_and_is_never_replaced(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    baseline = state_dir_for(root) / "baseline.json"
    baseline.parent.mkdir(parents=True, exist_ok=True)
    baseline.write_text(json.dumps(json.loads(_baseline_json(root))))
    before = baseline.read_bytes()
    assert len(json.loads(before)["gpus"]) == 8
    sim.apply_fault(root, "gpu_removed@gpu5")  # lost while the baseline could not be read
    preexec = _unreadable(baseline)

    port = free_port()
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(config_text(out=tmp_path / "node"))
    log = open(tmp_path / "agentd.log", "wb")
    proc = subprocess.Popen([*agentd_cmd(), "run", "--config", str(cfg), "--host-root", str(root), "--listen", f"127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec)  # type: ignore[arg-type]
    base = f"http://127.0.0.1:{port}"

    def findings() -> dict[str, dict]:
        try:
            code, body = http_get(base + "/health")
        except OSError:
            return {}
        return {f["code"]: f for f in json.loads(body)["findings"]} if code in (200, 503) else {}

    def slow_collections() -> float:
        try:
            code, body = http_get(base + "/metrics")
        except OSError:
            return 0.0
        return (sample(body.decode(), "agentd_last_collection_timestamp_seconds", tier="slow") or 0.0) if code == 200 else 0.0

    try:
        got = poll(lambda: findings().get("baseline.unreadable"), REACT_S)
        assert got, (tmp_path / "agentd.log").read_text(errors="replace")[-3000:]
        assert got["severity"] == "warning" and "left alone" in got["message"] and str(baseline) in got["message"]
        seen = slow_collections()
        for _ in range(3):  # three more slow collections, each of which could have saved a baseline
            assert poll(lambda: slow_collections() > seen, REACT_S)
            seen = slow_collections()
        assert baseline.stat().st_uid == (NOBODY if os.geteuid() == 0 else os.geteuid())
    finally:
        stop_process(proc)
        log.close()
    if os.geteuid() != 0:
        baseline.chmod(0o600)
    assert baseline.read_bytes() == before  # the 8 GPUs it remembers are still there


def _baseline_json(root: Path) -> str:
    from agentd.judging.baseline import baseline_to_json

    return baseline_to_json(baseline_of(root))
