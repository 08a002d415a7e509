"""Fabric daemons in the node's process table: ``ROOT/proc/<pid>/comm``.

Which of the NVLink fabric's userspace daemons run (the fabric manager on NVSwitch boards,
IMEX and the NVLink subnet manager on multi-node NVLink systems) is read from the kernel's
process names, not from systemd: the GPU operator runs them inside its driver container.
Whether the table is the node's whole one is told by ``kthreadd`` being PID 2: the kernel
starts it as PID 2 of the initial PID namespace, and kernel threads are invisible from any
other (a container's own PID namespace has a PID 1, its entrypoint, but never kthreadd). So
the host's ``/proc``, or a container given it at ``/host/proc``, is complete; a container
reading its own ``/proc`` is not, and a daemon missing from it says nothing
(``FabricDaemons.complete``).

Bounded: at most ``MAX_PIDS`` processes, ``COMM_MAX_BYTES`` a name (the kernel's are at
most 15 bytes and a newline); names need not be UTF-8. Reads go through the ReadContext,
so they stay under the host root. A process that exits between the listing and the read
is skipped quietly.
"""

from __future__ import annotations

from agentd.host.fs import ReadContext
from agentd.model import FabricDaemons

# The names of interest (agentd.judging.fabric_role keeps the same constants).
FABRIC_MANAGER = "nv-fabricmanager"
IMEX = "nvidia-imex"
NVLSM = "nvlsm"
DAEMON_NAMES: tuple[str, ...] = (FABRIC_MANAGER, IMEX, NVLSM)

MAX_PIDS = 65536
COMM_MAX_BYTES = 64
# The kernel keeps TASK_COMM_LEN - 1 = 15 bytes of a process name: nv-fabricmanager (16)
# shows as "nv-fabricmanage" in proc/<pid>/comm.
TASK_COMM_MAX = 15
KTHREADD = b"kthreadd"  # PID 2 of the initial PID namespace


def daemon_name(comm: bytes) -> str | None:
    """The name of interest a ``comm`` file's content names (full or cut to the kernel's 15
    bytes), or None."""
    name = comm.rstrip(b"\n").rstrip(b"\x00")
    for d in DAEMON_NAMES:
        full = d.encode()
        if name == full or (len(full) > TASK_COMM_MAX and name == full[:TASK_COMM_MAX]):
            return d
    return None


def pids(ctx: ReadContext) -> list[str]:
    """The process directories under ROOT/proc (decimal names), lowest first, at most MAX_PIDS."""
    found = [n for n in ctx.listdir("proc") if n.isascii() and n.isdigit()]
    found.sort(key=int)
    return found[:MAX_PIDS]


def read_daemons(ctx: ReadContext) -> FabricDaemons:
    """The fabric daemons running on the node. Never raises; ``asked`` False when the root
    has no ``proc``."""
    if not ctx.exists("proc"):
        return FabricDaemons(asked=False)
    kthreadd = ctx.raw("proc/2/comm", max_bytes=COMM_MAX_BYTES)
    running: set[str] = set()
    for pid in pids(ctx):
        data = kthreadd if pid == "2" else ctx.raw(f"proc/{pid}/comm", max_bytes=COMM_MAX_BYTES)
        if data is None:
            continue
        name = daemon_name(data)
        if name is not None:
            running.add(name)
    complete = kthreadd is not None and kthreadd.rstrip(b"\n") == KTHREADD
    return FabricDaemons(asked=True, complete=complete, running=tuple(sorted(running)))
