"""Crash safety and serialisation of `agentd enforce apply`, with real processes and SIGKILL.

The node is a simulated pcie-4gpu tree with nvidia_peermem gone, read as a live root
(``host_mode = "live"``), so the peermem knob goes through the configured modprobe: a
stand-in that records each call, makes the change the kernel would (the module's sysfs
directory under the root) and, on cue, stops before or after it so the apply can be
killed right there. Whatever is killed where, the next run finishes or rolls back and the
journal never loses the prior value; two applies at once never interleave."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentd import sim
from tests.support.daemon_harness import ROOT

pytestmark = [pytest.mark.proc, pytest.mark.tree]

WAIT_S = 60.0


class Node:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.root = sim.build_tree("pcie-4gpu", tmp / "node", faults=["peermem_gone"])
        self.module = self.root / "sys/module/nvidia_peermem"
        self.calls = tmp / "calls"
        self.mark = tmp / "mark"
        self.state = tmp / "state"
        modprobe = tmp / "modprobe"
        modprobe.write_text(f"""#!/bin/sh
echo "$$ start $*" >> {self.calls}
case "$1" in
  -r) rm -rf {self.module} ;;
  *) [ -f {tmp}/stop-before ] && {{ echo $$ > {self.mark}; sleep 120; }}
     sleep 0.3
     mkdir -p {self.module} && echo 535.183.01 > {self.module}/version
     [ -f {tmp}/stop-after ] && {{ echo $$ > {self.mark}; sleep 120; }} ;;
esac
echo "$$ end $*" >> {self.calls}
""")
        modprobe.chmod(modprobe.stat().st_mode | stat.S_IXUSR)
        self.config = tmp / "agentd.toml"
        self.config.write_text(f"""host_root = "{self.root}"
host_mode = "live"
[paths]
state_dir = "{self.state}"
baseline = "{self.state}/baseline.json"
[enforce]
knobs = ["peermem"]
modprobe = "{modprobe}"
""")

    def start(self, cmd: str = "apply") -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "agentd", "enforce", cmd, "--config", str(self.config), "--yes", "--format", "json"],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(self, cmd: str = "apply") -> tuple[int, dict]:
        p = self.start(cmd)
        out, err = p.communicate(timeout=WAIT_S)
        assert out, err
        return p.returncode, json.loads(out)

    def journal(self) -> list[dict]:
        return json.loads((self.state / "enforce-journal.json").read_text())["entries"]

    def kill_at_the_mark(self, p: subprocess.Popen[str]) -> None:
        deadline = time.monotonic() + WAIT_S
        while not self.mark.exists():
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline, "the stand-in never reached its mark"
            time.sleep(0.05)
        time.sleep(0.1)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=WAIT_S)
        os.kill(int(self.mark.read_text()), signal.SIGKILL)  # the stand-in, in its own session
        self.mark.unlink()


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_killed_between_the_journal_and_the_change(node: Node) -> None:
    (node.tmp / "stop-before").touch()
    node.kill_at_the_mark(node.start())
    (pending,) = node.journal()
    assert (pending["state"], pending["before"], pending["desired"]) == ("pending", False, True)
    assert not node.module.exists()  # the change never happened
    (node.tmp / "stop-before").unlink()

    rc, doc = node.run()
    assert rc == 0 and [r["outcome"] for r in doc["results"]] == ["interrupted", "applied"]
    assert [(e["state"], e["before"]) for e in node.journal()] == [("interrupted", False), ("applied", False)]
    assert node.module.is_dir()
    rc, doc = node.run("rollback")
    assert rc == 0 and [r["outcome"] for r in doc["results"]] == ["restored"] and not node.module.exists()


def test_killed_between_the_change_and_the_read_back(node: Node) -> None:
    (node.tmp / "stop-after").touch()
    node.kill_at_the_mark(node.start())
    (pending,) = node.journal()
    assert (pending["state"], pending["before"]) == ("pending", False)
    assert node.module.is_dir()  # changed, never verified
    (node.tmp / "stop-after").unlink()

    rc, doc = node.run("rollback")  # the next run finishes the entry, then its prior value is restored
    assert rc == 0 and [r["outcome"] for r in doc["results"]] == ["applied", "restored"]
    assert not node.module.exists()
    assert [e["state"] for e in node.journal()] == ["restored", "rollback"]


def test_two_applies_at_once_never_interleave(node: Node) -> None:
    first, second = node.start(), node.start()
    outs = [p.communicate(timeout=WAIT_S) for p in (first, second)]
    assert (first.returncode, second.returncode) == (0, 0), outs
    calls = node.calls.read_text().splitlines()
    assert [c.split(" ", 1)[1] for c in calls] == ["start -- nvidia_peermem", "end -- nvidia_peermem"]  # one change, whole
    assert [e["state"] for e in node.journal()] == ["applied"]
    results = [json.loads(o)["results"] for o, _ in outs]
    assert sorted(len(r) for r in results) == [0, 1]  # the one that waited found nothing left to do
