"""Every `agentd ...` command line the README (and the guides it points to) shows parses with
agentd's real parser, and its `--help` runs; what the README says `make demo` prints is what
it prints (issue 43: the README quoted a `/metrics | grep` line the demo never printed, and
a hint the user could not run)."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from agentd.cli import build_parser
from agentd.daemon.app import demo_commands
from tests.support.cli import run_cli
from tests.support.markdown import CODE_SPAN, FENCE
from tests.support.paths import DOCS, REPO

PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
COMMAND = re.compile(r"^(?:\$\s+)?(?:sudo\s+)?(?:\S*/)?agentd\s+(?=[a-z-])")
PLACEHOLDER = re.compile(r"<[^<>]+>")


def command_lines(text: str) -> list[tuple[str, bool]]:
    """The agentd command lines of a page, with whether each is meant to be run as it is: the
    lines of code blocks (continuations joined) that start with ``agentd`` or a path to it,
    and code spans in the text (mentions: ``agentd capture``, ``agentd check --npd CONCERN``)."""
    out = []
    for block in FENCE.finditer(text):
        body = block.group(0).split("\n", 1)[1].rsplit("\n", 1)[0].replace("\\\n", " ")
        lines = [line.strip() for line in body.splitlines()]
        if any(line.startswith("$ ") for line in lines):  # a transcript: the commands are the prompted lines, the rest is output
            lines = [line for line in lines if line.startswith("$ ")]
        out += [(line, True) for line in lines if COMMAND.match(line)]
    for span in CODE_SPAN.finditer(FENCE.sub("", text)):
        inner = span.group(0).strip("`").strip()
        if COMMAND.match(inner) and "\n" not in inner:
            out.append((inner, False))
    return out


def words_of(line: str) -> list[str]:
    line = re.sub(r"\s+#.*$", "", line.replace("\\|", "|"))  # a shell comment; a table cell's escaped pipe
    line = PLACEHOLDER.sub("X", line).replace("...", "X")  # <sim root>, "...": a word
    if "[" in line:  # a synopsis: [--a | --b]
        line = line.replace("|", " ").replace("[", " ").replace("]", " ")
    else:
        line = re.split(r"\s(?:&&|\|\||;)\s", line)[0]  # a list: the first command (agentd check && scontrol ...)
        line = line.split("|")[0].split(">")[0]  # a pipe or redirect after the command
    words = shlex.split(line)
    while words and not words[0].endswith("agentd"):
        words.pop(0)
    return words[1:]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subs[0].choices) if subs else {}


def command_path(words: list[str]) -> tuple[list[str], argparse.ArgumentParser]:
    """The (sub)command words at the start and the parser that takes the rest."""
    parser: argparse.ArgumentParser = build_parser()
    path = []
    for w in words:
        subs = _subparsers(parser)
        if w not in subs:
            break
        path.append(w)
        parser = subs[w]
    return path, parser


CASES = [(page, line, runnable) for page in PAGES for line, runnable in command_lines(page.read_text())]


def test_the_readme_shows_commands():
    assert len([line for page, line, run in CASES if page.name == "README.md" and run]) >= 3


@pytest.mark.parametrize(("page", "line", "runnable"), CASES, ids=[f"{p.relative_to(REPO)}: {line[:60]}" for p, line, _ in CASES])
def test_every_command_line_shown_parses_and_its_help_runs(page: Path, line: str, runnable: bool):
    words = words_of(line)
    path, parser = command_path(words)
    assert path, f"{page.relative_to(REPO)}: `{line}` names no agentd command"
    if runnable:
        assert not _subparsers(parser), f"{page.relative_to(REPO)}: `{line}` stops before a subcommand"
    synopsis = "[" in line or any(re.fullmatch(r"[A-Z][A-Z_]*", w) for w in words)
    if runnable and not synopsis:
        try:
            build_parser().parse_args(words)
        except SystemExit as e:
            pytest.fail(f"{page.relative_to(REPO)}: `{line}` does not parse (exit {e.code})")
    else:  # a synopsis or a mention: every option it names is one the command has
        known = {s for a in parser._actions for s in a.option_strings}
        named = {w.split("=")[0] for w in re.findall(r"--[a-z][a-z-]*(?:=\S+)?", line)}
        assert named <= known, f"{page.relative_to(REPO)}: `{line}`: {sorted(named - known)} not options of agentd {' '.join(path)}"
    assert run_cli(*path, "--help").returncode == 0


def test_what_make_demo_prints_is_what_the_readme_says():
    readme = (REPO / "README.md").read_text()
    printed = demo_commands(Path("/tmp/agentd-sim-XXXX"), Path("/tmp/agentd-sim-XXXX-out/nccl.env"),
                            "/path/to/agentd/.venv/bin/agentd")("http://127.0.0.1:9478")
    assert printed in readme
