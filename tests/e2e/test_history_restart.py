"""The history across restarts of the real daemon (issue 15): a port that flapped is still
flapping from the first collection after a restart; a corrupt state file is set aside and
the daemon starts.

``agentd run --host-root`` on a simulated tree (the same tree: the same boot); the state
file lives in the tree's state directory beside it (agentd.outputs.node_state).
"""

from __future__ import annotations

import json

import pytest

from agentd import sim
from agentd.outputs.node_state import state_dir_for
from tests.e2e.test_kernel_restart import Run
from tests.support.daemon_harness import REACT_S, poll

pytestmark = pytest.mark.e2e
FLAPPING = ("ib.port.flapping", "mlx5_0:1")


def first_findings(run: Run) -> set[tuple[str, str]]:
    """The findings of the first State the daemon serves (before its first collection /health has none)."""
    found: set[tuple[str, str]] = set()

    def ready() -> bool:
        code, body = run.get("/health")
        doc = json.loads(body) if code in (200, 503) else {}
        if not doc.get("ready"):
            return False
        found.update((f["code"], f["subject"]) for f in doc["findings"])
        return True

    assert poll(ready, REACT_S)
    return found


def since(run: Run, key: tuple[str, str]) -> float | None:
    code, body = run.get("/health")
    doc = json.loads(body) if code in (200, 503) else {}
    return next((f.get("since") for f in doc.get("findings", []) if (f["code"], f["subject"]) == key), None)


def test_a_flapping_port_is_still_flapping_after_a_restart(tmp_path):
    root = tmp_path / "root"
    sim.build_tree("h100-ib", root)
    state = state_dir_for(root) / "history.json"
    first = Run(tmp_path, root, 1)
    try:
        assert FLAPPING not in first_findings(first)  # a first collection: link_downed read
        sim.apply_fault(root, "flapping@mlx5_0:1=3")  # link_downed +3 between two collections
        assert poll(lambda: FLAPPING in first.findings(), REACT_S), first.findings()
        downed = (root / "sys/class/infiniband/mlx5_0/ports/1/counters/link_downed").read_text().strip()
        # written at once, not only at stop (a flap must not be lost to a crash)
        assert poll(lambda: state.is_file() and f'"link_downed":{downed}' in state.read_text(), REACT_S)
        was = since(first, FLAPPING)
        assert was is not None and poll(lambda: '"ib.port.flapping"' in state.read_text(), REACT_S)  # its episode too
    finally:
        first.stop()

    second = Run(tmp_path, root, 2)
    try:
        assert FLAPPING in first_findings(second)
        log = (tmp_path / "agentd-2.log").read_bytes()
        assert b"history.loaded" in log
        assert FLAPPING in second.findings()
        assert since(second, FLAPPING) == was  # critical since the flaps, not since the restart
        code, body = second.get("/health")
        assert code == 503 and json.loads(body)["status"] == "critical"
    finally:
        second.stop()


def test_a_corrupt_state_file_is_set_aside_and_the_daemon_starts(tmp_path):
    root = tmp_path / "root"
    sim.build_tree("h100-ib", root)
    state = state_dir_for(root) / "history.json"
    state.parent.mkdir(parents=True)
    state.write_bytes(b'{"format": "agentd-history", "version": 1, "snapsh')
    run = Run(tmp_path, root, 1)
    try:
        assert poll(lambda: run.get("/health")[0] == 200, REACT_S), run.findings()
        log = tmp_path / "agentd-1.log"
        assert poll(lambda: b"history.set_aside" in log.read_bytes(), REACT_S)
        aside = list(state.parent.glob("history.json.corrupt-*"))
        assert len(aside) == 1 and aside[0].read_bytes().endswith(b'"snapsh')
        assert poll(lambda: state.is_file() and json.loads(state.read_text())["format"] == "agentd-history", REACT_S)
    finally:
        run.stop()
