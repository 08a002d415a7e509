"""When a simulated node booted: ``proc/stat`` (its ``btime`` line) and ``proc/uptime``.

Every build writes both: by default the node booted ``BOOTED_AGO_S`` (three days) before
the build, so a simulated node is never "just booted" unless asked. ``set_boot_time``
changes them on an existing tree, while a daemon reads it (each file is replaced
atomically), to simulate a node that booted a moment ago; ``reboot=True`` also starts a
new boot (a new boot id and an empty kernel log, as each build does).

The files have the kernel's layout (fs/proc/stat.c, fs/proc/uptime.c): ``cpu`` and
``cpuN`` lines (zero counts), ``intr``, ``ctxt``, ``btime``, ``processes``,
``procs_running``, ``procs_blocked``, ``softirq`` with its ten counts; uptime and the idle
time summed over CPUs, with two decimals. ``uptime`` is the time since boot when the file
was written (a regular file does not advance; readers date a recording by it).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from pathlib import Path

from agentd.base import recorded
from agentd.base.atomic import atomic_write
from agentd.sim.node import write_log
from agentd.sim.profiles import PROFILES

MARKER = f"{recorded.DIR}/{recorded.SIMULATION}"  # as agentd.sim.pristine (which imports this module)

PROC_STAT = "proc/stat"
PROC_UPTIME = "proc/uptime"
BOOTED_AGO_S = 3 * 86400.0  # longer than any boot grace window
_CPU_ZEROS = " 0 0 0 0 0 0 0 0 0 0"  # user nice system idle iowait irq softirq steal guest guest_nice


def stat_text(btime: int, nr_cpus: int) -> str:
    lines = [f"cpu {_CPU_ZEROS}"] + [f"cpu{i}{_CPU_ZEROS}" for i in range(nr_cpus)]
    lines += ["intr 0", "ctxt 0", f"btime {btime}", "processes 1", "procs_running 1", "procs_blocked 0", "softirq 0" + " 0" * 10]
    return "\n".join(lines) + "\n"


def uptime_text(uptime_s: float, nr_cpus: int) -> str:
    return f"{uptime_s:.2f} {uptime_s * nr_cpus:.2f}\n"


def write_boot_time(root: Path, booted_at: float, nr_cpus: int, *, now: float | None = None) -> None:
    """Write ``proc/stat`` and ``proc/uptime`` for a node that booted at ``booted_at``
    (unix time, whole seconds in ``btime``), as of ``now`` (default: the clock)."""
    if not math.isfinite(booted_at) or booted_at <= 0:
        raise ValueError(f"boot time {booted_at!r}: expected a unix time after 1970")
    now = time.time() if now is None else now
    for rel, text in ((PROC_STAT, stat_text(int(booted_at), nr_cpus)), (PROC_UPTIME, uptime_text(max(0.0, now - int(booted_at)), nr_cpus))):
        res = atomic_write(root / rel, text, only_if_changed=False)
        if not res.ok:
            raise OSError(f"{root / rel}: {res.error}")


def set_boot_time(root: str | Path, booted_at: float, *, reboot: bool = False) -> None:
    """Make the simulated node at ``root`` one that booted at ``booted_at`` (unix time):
    e.g. ``set_boot_time(root, time.time() - 60)`` for a node up for a minute. With
    ``reboot`` also a new boot id and an empty kernel log. ValueError when ``root`` is not
    a simulator root."""
    root = Path(root)
    try:
        nr_cpus = PROFILES[json.loads((root / MARKER).read_text())["profile"]].nr_cpus
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"{root} is not a simulator root (no readable {MARKER} naming a known profile)") from None
    write_boot_time(root, booted_at, nr_cpus)
    if reboot:
        write_log(root, str(uuid.uuid4()))
