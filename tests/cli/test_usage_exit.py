"""A usage error exits 3 ("could not run"), never argparse's 2, which agentd's exit codes
give to "critical": a typo'd flag in a Slurm HealthCheckProgram or a cron line must not read
as a sick node (issue 43). Every subcommand, nested ones included, from the real parser."""

from __future__ import annotations

import argparse

import pytest

from agentd.cli import EXIT_INTERNAL, build_parser
from tests.support.cli import run_cli


def command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every runnable command of the parser: ("check",), ("baseline", "reset"), ..."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [prefix]
    return [path for name, sub in subs[0].choices.items() for path in command_paths(sub, (*prefix, name))]


PATHS = command_paths(build_parser())


def test_the_parser_has_the_commands_the_readme_lists():
    assert {p[0] for p in PATHS} >= {"run", "check", "inspect", "topology", "capture", "render", "simulate", "baseline", "maintenance", "bench"}
    assert ("baseline", "reset") in PATHS and ("maintenance", "status") in PATHS and ("bench", "nccl") in PATHS


@pytest.mark.parametrize("path", PATHS, ids=" ".join)
def test_an_unknown_flag_exits_3_with_the_usage(path):
    r = run_cli(*path, "--no-such-flag")
    assert r.returncode == EXIT_INTERNAL == 3
    assert r.stderr.startswith("usage: agentd")
    assert "unrecognized arguments: --no-such-flag" in r.stderr or "the following arguments are required" in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("argv", [
    ("check", "--formt", "json"),  # the typo of the review
    ("check", "--format", "yaml"),  # a value outside the choices
    ("check", "--npd", "gpu"),
    ("check", "--npd-timeout", "soon"),  # a value of the wrong type
    ("nosuchcommand",),
    (),  # no command at all
    ("baseline",),  # a group without its subcommand
], ids=repr)
def test_bad_values_missing_commands_and_typos_exit_3(argv):
    r = run_cli(*argv)
    assert r.returncode == 3, r
    assert "usage: agentd" in r.stderr


def test_help_and_version_still_exit_0():
    assert run_cli("--help").returncode == 0
    assert run_cli("check", "--help").returncode == 0
    assert run_cli("--version").returncode == 0
