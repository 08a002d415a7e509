"""Back off by evidence: a device that fails the firmware commands agentd's reads cause
is not read that way again for the rest of the boot (agentd.host.gate does the stopping).

The collector knows when each probe read (``ReadWindow``: a full run or a journal replay
of a probe whose files the driver answers with firmware commands, ``FIRMWARE_PROBES``),
and the kernel log reader knows when a driver logged a command failure and for which PCI
function (``KernelEvent``: kind ``mlx5``, code ``cmd_failed`` for ``mlx5_cmd_out_err:
... ACCESS_REG(0x805) op_mod(0x1) failed, status bad operation(0x2) ...``, or
``cmd_timeout``; kind ``efa``, code ``cmd_failed`` for ``Failed to process command
GET_STATS (opcode 13) comp_status 0 err -62`` or ``cmd_timeout`` for ``The device didn't
send any completion for admin cmd GET_STATS(13) ...``; agentd.host.kernel_catalog). A
failure of a function agentd reads,
stamped within a read window (``BEFORE_S`` before it began to ``AFTER_S`` after it ended),
is taken as caused by that read: the function backs off at the window's level,
``firmware`` (counters, statistics, DCB, ECN) before ``link`` (port state and rate).
When windows of both levels hold the failure, ``firmware`` goes first; a failure that
comes again while only the link is read widens it to ``link``. Pure.

Only failures of the commands agentd's reads issue count (``READ_COMMANDS``, per driver):
a driver failing ENABLE_HCA at load or CREATE_QP for a job is not agentd's doing. An EFA
function's only such command is GET_STATS, which its port ``hw_counters`` cost
(efa_get_hw_stats -> efa_com_get_stats); its port state and rate are constants of the
driver, so only ``firmware`` windows hold its failures (``READ_LEVELS``).

Live roots stamp kernel records from their monotonic timestamp (exact to the
microsecond); a recorded log is stamped when agentd first read it, at most one fast
interval after the record was written, which ``AFTER_S`` covers at the default
intervals. The records of a recorded log's first read are history stamped all alike, so
the collector matches only what comes after it there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from agentd.host.gate import covers
from agentd.model import BackedOff, BackOffReads, KernelEvent

# (kind, code) of kernel events that are a device's firmware refusing or not answering
# a command (agentd.host.kernel_catalog).
FIRMWARE_FAILURES: frozenset[tuple[str, str]] = frozenset({
    ("mlx5", "cmd_failed"), ("mlx5", "cmd_timeout"), ("efa", "cmd_failed"), ("efa", "cmd_timeout"),
})
# The commands agentd's reads make each driver issue. mlx5 (names as mlx5_command_str prints
# them, drivers/net/ethernet/mellanox/mlx5/core/cmd.c): the PMA counters, ethtool
# statistics, DCB and hwmon go through ACCESS_REG (PPCNT, PFCC, MTMP registers),
# counters_ext through QUERY_VPORT_COUNTER, hw_counters through QUERY_Q_COUNTER and
# QUERY_CONG_STATISTICS, the ECN switches through QUERY_CONG_STATUS, an IB port's state
# through QUERY_HCA_VPORT_CONTEXT and MAD_IFC. efa (names as efa_com_cmd_str prints them,
# drivers/infiniband/hw/efa/efa_com.c): the port hw_counters through GET_STATS; the port's
# state, rate and GIDs are the driver's constants and cached attributes (efa_query_port,
# efa_query_gid), no command. A failure of any other command (ENABLE_HCA at driver load,
# CREATE_QP or REG_MR for a job) is not agentd's doing.
READ_COMMANDS: Mapping[str, frozenset[str]] = {
    "mlx5": frozenset({
        "ACCESS_REG", "QUERY_VPORT_COUNTER", "QUERY_Q_COUNTER", "QUERY_CONG_STATISTICS", "QUERY_CONG_STATUS",
        "QUERY_HCA_VPORT_CONTEXT", "QUERY_VPORT_STATE", "MAD_IFC",
    }),
    "efa": frozenset({"GET_STATS"}),
}
# The read levels whose windows can hold a driver's failure: those whose reads issue its READ_COMMANDS.
READ_LEVELS: Mapping[str, frozenset[BackOffReads]] = {"mlx5": frozenset({"firmware", "link"}), "efa": frozenset({"firmware"})}
# How each driver names the command in its failure line: mlx5 "ACCESS_REG(0x805)"; efa
# "command GET_STATS (opcode 13)" (efa_com_cmd_exec) or "admin cmd GET_STATS(13)" (the timeouts).
_COMMAND_RES: Mapping[str, re.Pattern[str]] = {
    "mlx5": re.compile(r"\b([A-Z][A-Z0-9_]{2,40})\(0x[0-9a-fA-F]{1,4}\)"),
    "efa": re.compile(r"\badmin cmd ([A-Z][A-Z0-9_]{2,40})\(\d+\)|\bcommand ([A-Z][A-Z0-9_]{2,40}) \(opcode \d+\)"),
}
BEFORE_S = 1.0
AFTER_S = 10.0


@dataclass(frozen=True)
class ReadWindow:
    """One probe run that read firmware-backed files (wall-clock times)."""

    probe: str
    reads: BackOffReads
    began: float
    ended: float
    # Functions the run did not read at this level (backed off already when it began).
    skipped: frozenset[str] = frozenset()


def evidence_line(e: KernelEvent) -> str:
    return f"kernel log #{e.seq}: {e.detail}"


def read_command(kind: str, detail: str) -> str | None:
    """The command a driver's (``kind``'s) failure line names, when agentd's reads issue it."""
    pattern = _COMMAND_RES.get(kind)
    m = pattern.search(detail) if pattern is not None else None
    name = next((g for g in m.groups() if g), None) if m is not None else None
    return name if name is not None and name in READ_COMMANDS.get(kind, ()) else None


def back_offs(events: Iterable[KernelEvent], windows: Sequence[ReadWindow], read: frozenset[str],
              current: Mapping[str, BackedOff]) -> list[BackedOff]:
    """The back-offs ``events`` call for: each firmware failure of a function in ``read``
    (the PCI functions agentd reads) that falls in a window that read it. At most one per
    function, the narrowest level the evidence allows; none that ``current`` covers."""
    out: dict[str, BackedOff] = {}
    for e in events:
        if (e.kind, e.code) not in FIRMWARE_FAILURES or e.device is None or e.device not in read or read_command(e.kind, e.detail) is None:
            continue
        levels = {w.reads for w in windows
                  if w.reads in READ_LEVELS[e.kind] and w.began - BEFORE_S <= e.at <= w.ended + AFTER_S and e.device not in w.skipped}
        if not levels:
            continue
        level: BackOffReads = "firmware" if "firmware" in levels and not covers(current.get(e.device), "firmware") else "link"
        if covers(current.get(e.device), level) or covers(out.get(e.device), level):
            continue
        out[e.device] = BackedOff(pci_bus_id=e.device, reads=level, reason="kernel_log", evidence=evidence_line(e), since=e.at)
    return list(out.values())
