"""The peermem knob's actuator runs the node's modprobe (enforce.modprobe) as it is told,
without a shell, bounded, and reports what modprobe said: tested with a recording
stand-in at a configurable path."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentd.base.actuation import Setting
from agentd.host.actuators import LiveActuators
from agentd.host.fs import HostRoot
from agentd.host.modprobe import modprobe

pytestmark = pytest.mark.proc


def stand_in(tmp_path: Path, body: str) -> Path:
    """An executable that records its argv and environment, then runs ``body``."""
    p = tmp_path / "modprobe"
    log = tmp_path / "calls"
    p.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {log}\nenv | sort > {tmp_path}/env\n{body}\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def calls(tmp_path: Path) -> list[str]:
    f = tmp_path / "calls"
    return f.read_text().splitlines() if f.exists() else []


def test_load_and_unload_run_the_configured_modprobe(tmp_path: Path) -> None:
    path = stand_in(tmp_path, "exit 0")
    act = LiveActuators(HostRoot.at("/", "live"), path)
    assert act.apply(Setting("peermem", "node", True), 5).ok
    assert act.apply(Setting("peermem", "node", False), 5).ok
    assert calls(tmp_path) == ["-- nvidia_peermem", "-r -- nvidia_peermem"]
    env = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines() if "=" in line)
    assert env["PATH"] == "/usr/sbin:/usr/bin:/sbin:/bin" and "HOME" not in env  # nothing of agentd's environment


def test_a_refusal_is_reported_with_modprobes_words(tmp_path: Path) -> None:
    path = stand_in(tmp_path, "echo \"modprobe: FATAL: Module nvidia_peermem not found in directory /lib/modules/6.5.0\" >&2; exit 1")
    out = modprobe(path, "nvidia_peermem", remove=False, timeout_s=5)
    assert not out.ok and "exit status 1" in out.detail and "Module nvidia_peermem not found" in out.detail


def test_a_hung_modprobe_is_killed_at_the_limit(tmp_path: Path) -> None:
    path = stand_in(tmp_path, "sleep 60")
    out = modprobe(path, "nvidia_peermem", remove=False, timeout_s=0.5)
    assert not out.ok and "did not finish within 0.5 s" in out.detail


def test_a_missing_modprobe_is_a_failure_not_an_exception(tmp_path: Path) -> None:
    out = modprobe(tmp_path / "nope", "nvidia_peermem", remove=False, timeout_s=5)
    assert not out.ok and "exit status 127" in out.detail


def test_the_module_name_cannot_become_an_option(tmp_path: Path) -> None:
    path = stand_in(tmp_path, "exit 0")
    modprobe(path, "-r", remove=False, timeout_s=5)
    assert calls(tmp_path) == ["-- -r"]
    assert os.access(path, os.X_OK)
