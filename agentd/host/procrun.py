"""Run an external program with a hard time limit that also holds for its children.

The program starts in its own session (``start_new_session=True``), so it and everything
it forks share one process group that nothing else is in. On timeout the whole group gets
SIGTERM, then SIGKILL after a short grace period: an ``mpirun`` or a hung NCCL rank
cannot outlive the limit. No shell is involved (argv is executed directly).

Output is captured whole and cut to ``max_output_bytes`` per stream (nccl-tests prints a
few KiB; a runaway program must not fill agentd's memory twice over).

``exclusive_lock`` is an advisory ``flock`` on a file, used so that a scheduled benchmark
and one started by hand never run on the same GPUs at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator, Mapping, Sequence

DEFAULT_MAX_OUTPUT = 8 * 1024 * 1024
TERM_GRACE_S = 2.0
_DRAIN_S = 5.0


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _text(data: bytes | None, limit: int) -> str:
    if not data:
        return ""
    if len(data) > limit:
        data = data[:limit]
    return data.decode("utf-8", "replace")


def run_bounded(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    timeout_s: float,
    cwd: str | os.PathLike[str] | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT,
) -> tuple[int, str, str, bool]:
    """Run ``argv`` and return ``(rc, stdout, stderr, timed_out)``. Never raises for the
    program's own failures: a missing or non-executable program answers rc 127 / 126 with
    the reason on stderr. A killed program has a negative rc (-signal), as subprocess
    reports it."""
    if not argv:
        return 127, "", "empty command", False
    try:
        proc = subprocess.Popen(
            list(argv),
            env=None if env is None else dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
    except FileNotFoundError as e:
        return 127, "", f"{argv[0]}: not found ({e.strerror})", False
    except PermissionError as e:
        return 126, "", f"{argv[0]}: cannot execute ({e.strerror})", False
    except OSError as e:
        return 126, "", f"{argv[0]}: cannot start ({e.strerror or e})", False
    pgid = proc.pid  # session leader: its pid is the group id
    timed_out = False
    try:
        out, err = proc.communicate(timeout=max(timeout_s, 0.001))
    except subprocess.TimeoutExpired:
        timed_out = True
        out, err = _stop_group(proc, pgid)
    return proc.returncode, _text(out, max_output_bytes), _text(err, max_output_bytes), timed_out


def _leader_exited(pid: int) -> bool:
    """True once the leader has exited, without reaping it (a zombie keeps its pid, so
    the group id cannot be reused while we still signal it)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _stop_group(proc: subprocess.Popen[bytes], pgid: int) -> tuple[bytes, bytes]:
    _killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    while time.monotonic() < deadline and not _leader_exited(proc.pid):
        time.sleep(0.02)
    # SIGKILL the group while the leader is not yet reaped: members that ignored SIGTERM
    # die too, and the group id still belongs to us.
    _killpg(pgid, signal.SIGKILL)
    try:
        return proc.communicate(timeout=_DRAIN_S)
    except subprocess.TimeoutExpired:
        # A descendant left the group (setsid) and holds our pipes open: stop reading.
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait()
        return b"", b""


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike[str]) -> Iterator[bool | None]:
    """``with exclusive_lock(p) as held:`` -- True: this process holds the lock; False:
    another process holds it; None: the lock file cannot be created (read-only state
    directory), so nothing is known. Released on exit."""
    p = Path(path)
    fd = -1
    held: bool | None = None
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = True
        except OSError:
            held = False
        if held:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()} {time.time():.0f}\n".encode())
    try:
        yield held
    finally:
        if fd >= 0:
            if held:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
