"""The agentd command hints print is one the user's shell can run (issue 43: after `make demo`
the hint said `agentd ...`, which is not on PATH; `.venv/bin/agentd` is)."""

from __future__ import annotations

import shlex
import sys

from agentd.base.selfcmd import agentd_command


def _program(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_not_on_path_gives_the_absolute_path(tmp_path, monkeypatch):
    exe = _program(tmp_path / "repo" / ".venv" / "bin" / "agentd")
    monkeypatch.chdir(tmp_path / "repo")
    assert agentd_command(".venv/bin/agentd", path="/usr/bin:/bin") == str(exe)


def test_on_path_and_the_same_program_gives_agentd(tmp_path):
    exe = _program(tmp_path / "bin" / "agentd")
    assert agentd_command(str(exe), path=str(tmp_path / "bin")) == "agentd"


def test_another_agentd_first_on_path_gives_the_path_of_this_one(tmp_path):
    _program(tmp_path / "other" / "agentd")
    exe = _program(tmp_path / "bin" / "agentd")
    assert agentd_command(str(exe), path=str(tmp_path / "other")) == str(exe)


def test_python_dash_m_gives_the_interpreter(tmp_path):
    assert agentd_command("/somewhere/agentd/__main__.py") == f"{shlex.quote(sys.executable)} -m agentd"


def test_odd_paths_are_quoted_for_a_shell(tmp_path):
    exe = _program(tmp_path / "my dir" / "agentd")
    assert shlex.split(agentd_command(str(exe), path="/nonexistent")) == [str(exe)]
