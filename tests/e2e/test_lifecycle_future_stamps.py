"""A history file written while the wall clock was ahead does not keep a cleared critical
(issue 42, item 4).

The daemon persists every finding's episode beside the history. Written while the clock
was a day ahead (an RTC wrong at boot, before NTP stepped it back), its stamps lie in the
future; read back as they were, a port that came back up stayed "down" (503) until the
clock caught up, a day later. Stamps in the future are clamped when loading, and episodes
age on the monotonic clock.
"""

from __future__ import annotations

import json

import pytest

from agentd import sim
from agentd.outputs.node_state import state_dir_for
from tests.e2e.test_lifecycle_daemon import Run, codes, critical
from tests.support.daemon_harness import REACT_S, poll

pytestmark = [pytest.mark.e2e, pytest.mark.tree]

DAY = 86400.0


def _a_day_ahead(path) -> None:
    doc = json.loads(path.read_text())
    doc["written_at"] = doc.get("written_at", 0) + DAY
    for e in doc["snapshots"]:
        e["taken_at"] += DAY
    for item in doc["lifecycle"]:
        item["since"] += DAY
        item["last_seen"] += DAY
    path.write_text(json.dumps(doc))


def test_a_port_back_up_is_ok_after_a_restart_whose_history_is_from_the_future(tmp_path):
    root = tmp_path / "root"
    sim.build_tree("h100-ib", root, faults=["port_down@mlx5_0"])
    history = state_dir_for(root) / "history.json"
    first = Run(tmp_path, root, 1)
    try:
        assert poll(lambda: critical(first) and "ib.port.down" in codes(first.health()[1]), REACT_S)
    finally:
        first.stop()  # the final save holds the episode
    assert any(item["finding"]["code"] == "ib.port.down" for item in json.loads(history.read_text())["lifecycle"])
    _a_day_ahead(history)
    sim.clear_fault(root, "port_down@mlx5_0")
    second = Run(tmp_path, root, 2)
    try:
        got = poll(lambda: (h := second.health())[0] == 200 and h, REACT_S)
        assert got, second.health()
        assert "ib.port.down" not in codes(got[1])
    finally:
        second.stop()
