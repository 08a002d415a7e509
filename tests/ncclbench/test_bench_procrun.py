"""agentd.host.procrun: bounded child processes and the benchmark lock."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from agentd.host.procrun import exclusive_lock, run_bounded


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0): look at its state
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.proc
def test_output_exit_code_and_environment():
    rc, out, err, timed_out = run_bounded(
        [sys.executable, "-c", "import os,sys; print(os.environ['NCCL_X']); print('e', file=sys.stderr); sys.exit(3)"],
        env={**os.environ, "NCCL_X": "42"},
        timeout_s=30,
    )
    assert (rc, out.strip(), err.strip(), timed_out) == (3, "42", "e", False)


@pytest.mark.proc
def test_missing_program_is_rc_127_not_an_exception(tmp_path):
    rc, out, err, timed_out = run_bounded([str(tmp_path / "nope_perf")], env=None, timeout_s=5)
    assert rc == 127 and "not found" in err and not timed_out
    f = tmp_path / "not_exec"
    f.write_text("#!/bin/sh\necho hi\n")
    rc, _, err, _ = run_bounded([str(f)], env=None, timeout_s=5)
    assert rc == 126 and "cannot execute" in err


@pytest.mark.proc
def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    script = tmp_path / "hang.sh"
    # the child ignores SIGTERM and leaves a grandchild behind: both must die
    script.write_text(f"#!/bin/sh\ntrap '' TERM\nsleep 300 &\necho $! > {pidfile}\necho started\nwait\n")
    script.chmod(0o755)
    rc, out, err, timed_out = run_bounded([str(script)], env=None, timeout_s=1.0)
    assert timed_out and rc == -signal.SIGKILL
    assert "started" in out
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


@pytest.mark.proc
def test_output_is_capped():
    rc, out, _, _ = run_bounded([sys.executable, "-c", "print('x' * 100000)"], env=None, timeout_s=30, max_output_bytes=1000)
    assert rc == 0 and len(out) == 1000


@pytest.mark.proc
def test_exclusive_lock_is_exclusive_and_released(tmp_path):
    p = tmp_path / "state" / "bench.lock"
    with exclusive_lock(p) as first:
        assert first is True
        code = f"import sys; from agentd.host.procrun import exclusive_lock\nwith exclusive_lock({str(p)!r}) as h: sys.exit(0 if h is False else 1)"
        rc, _, err, _ = run_bounded([sys.executable, "-c", code], env=None, timeout_s=30)
        assert rc == 0, err
    with exclusive_lock(p) as again:
        assert again is True


def test_exclusive_lock_unavailable_is_none(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with exclusive_lock(blocker / "sub" / "bench.lock") as held:  # parent is a file
        assert held is None
