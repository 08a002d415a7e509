"""Issue 37: an event whose action is a node reboot (Xid 79, a GPU off the bus) holds its
finding past kernel.hold_s, across a restart of the daemon (the cursor keeps it), until the
node reboots (a new boot id, a new log).

``agentd run --host-root`` on a simulated tree (each simulator build is a new boot), with
kernel.hold_s and window_s at 2 s: before this change the finding cleared after 2 s."""

from __future__ import annotations

import time

import pytest

from agentd import sim
from tests.e2e.test_kernel_restart import Run
from tests.support.daemon_harness import REACT_S, poll

pytestmark = pytest.mark.e2e

SHORT = "[kernel]\nhold_s = 2\nwindow_s = 2\n"


def test_a_reboot_hold_outlives_hold_s_and_a_restart_and_ends_with_the_boot(tmp_path):
    root = tmp_path / "root"
    sim.build_tree("h100-ib", root)
    sim.apply_fault(root, "xid@gpu3")  # 79: fallen off the bus (RESTART_BM)
    first = Run(tmp_path, root, 1, extra=SHORT)
    try:
        assert poll(lambda: ("gpu.xid", "gpu3") in first.findings(), REACT_S), first.get("/health")[1][-2000:]
        time.sleep(3)  # past hold_s and window_s
        assert ("gpu.xid", "gpu3") in first.findings()
        assert first.get("/health")[0] == 503
    finally:
        first.stop()

    second = Run(tmp_path, root, 2, extra=SHORT)  # the same boot: the cursor hands the event over
    try:
        assert poll(lambda: second.get("/health")[0] in (200, 503) and second.findings(), REACT_S)
        assert ("gpu.xid", "gpu3") in second.findings()
    finally:
        second.stop()

    sim.build_tree("h100-ib", root)  # a reboot: a new boot id and a new log
    third = Run(tmp_path, root, 3, extra=SHORT)
    try:
        assert poll(lambda: third.get("/health")[0] == 200, REACT_S), third.findings()
        assert not {f for f in third.findings() if f[0].startswith("gpu.")}
    finally:
        third.stop()
