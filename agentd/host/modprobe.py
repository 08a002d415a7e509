"""Load or unload a kernel module with the node's own modprobe (``enforce.modprobe``):
modprobe knows the module's dependencies, its options in /etc/modprobe.d and the
distribution's blacklist, which a raw ``init_module`` would not honour.

Run without a shell, in its own process group, with a hard time limit
(agentd.host.procrun); the environment is a fixed PATH only. An actuator: it runs what it
is told to and reports modprobe's exit status and message, never raises.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentd.base.actuation import Outcome, done, failed
from agentd.host.procrun import run_bounded

ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
MAX_OUTPUT = 64 * 1024


def modprobe(path: Path | str, module: str, *, remove: bool, timeout_s: float) -> Outcome:
    """``modprobe MODULE`` (``modprobe -r MODULE`` when ``remove``)."""
    argv = [os.fspath(path), *(["-r"] if remove else []), "--", module]
    shown = " ".join(argv)
    rc, out, err, timed_out = run_bounded(argv, env=ENV, timeout_s=timeout_s, max_output_bytes=MAX_OUTPUT)
    if timed_out:
        return failed(f"{shown}: did not finish within {timeout_s:g} s (killed)")
    said = " ".join((err or out).split())[:300]
    if rc != 0:
        return failed(f"{shown}: exit status {rc}" + (f": {said}" if said else ""))
    return done(shown + (f": {said}" if said else ""))
