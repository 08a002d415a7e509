"""Run a function in a private network namespace (a forked child), for tests that need
real netdevs: nothing they create is visible to, or left on, the machine.

``in_netns(fn, veth=True)`` forks; the child unshares its network namespace
(``unshare(CLONE_NEWNET)``, root only), brings up ``lo`` and, with ``veth``, a veth pair
``v0``/``v1`` (``v0`` up), runs ``fn()`` and sends back its pickled result (or the
exception's text). The namespace goes with the child. Skips the test where a namespace
cannot be made (not root, no iproute2, a sandbox that forbids it).
"""

from __future__ import annotations

import ctypes
import os
import pickle
import shutil
import subprocess
from typing import Any, Callable

import pytest

CLONE_NEWNET = 0x40000000


def _child(fn: Callable[[], Any], veth: bool, w: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")
        cmds = [["ip", "link", "set", "lo", "up"]]
        if veth:
            cmds += [["ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1"], ["ip", "link", "set", "v0", "up"]]
        for cmd in cmds:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
            if r.returncode != 0:
                raise OSError(f"{' '.join(cmd)}: {r.stderr.strip()}")
        payload = ("ok", fn())
    except OSError as e:
        payload = ("skip", str(e))
    except BaseException as e:  # reported to the parent, which fails the test with it
        payload = ("error", f"{type(e).__name__}: {e}")
    with os.fdopen(w, "wb") as f:
        pickle.dump(payload, f)


def in_netns(fn: Callable[[], Any], *, veth: bool = True) -> Any:  # Any: whatever fn returns (picklable)
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("a private network namespace needs root and iproute2")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(r)
        try:
            _child(fn, veth, w)
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    status, value = pickle.loads(data) if data else ("error", "the child died without an answer")
    if status == "skip":
        pytest.skip(f"no private network namespace here: {value}")
    if status == "error":
        pytest.fail(f"in the namespace: {value}")
    return value
