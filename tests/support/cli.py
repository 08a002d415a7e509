"""The agentd command, run in this process: what a test about the command's output or exit
code needs, without a new interpreter per call (a subprocess costs ~0.5 s of imports).

Tests about the process itself (signals, deadlines that kill, the environment a scheduler
gives it, the console script) keep running it as a subprocess, marked ``proc``."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass

from agentd.cli import main


@dataclass(frozen=True)
class Ran:
    """What subprocess.run would have returned: exit status, standard output and error."""

    returncode: int
    stdout: str
    stderr: str


@contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    """The process environment as a command would get it: agentd's own variables
    (``AGENTD_*``, its configuration) only from ``env``, everything else as it is."""
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith("AGENTD_")]:
        del os.environ[key]
    os.environ.update(env or {})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextmanager
def _stdin(text: str | None) -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.StringIO(text or "")
    try:
        yield
    finally:
        sys.stdin = saved


def run_cli(*args: str, env: Mapping[str, str] | None = None, stdin: str | None = None) -> Ran:
    """``agentd ARGS...`` in this process, standard input ``stdin`` (empty by default); a
    usage error's exit is the status argparse gives."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), _environment(env), _stdin(stdin):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse on a usage error or --help
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return Ran(code, out.getvalue(), err.getvalue())
