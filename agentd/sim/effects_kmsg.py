"""Kernel log faults: records appended to ROOT/dev/kmsg in /dev/kmsg's record format.

Every simulated tree has a ``dev/kmsg`` (empty at build) and a boot id of its own (each
build is a new boot). A fault appends the records a real driver prints for it; the text
is real published driver output (the sources below, the same lines as
tests/fixtures/kmsg with their provenance in tests/fixtures/SOURCES.md), with only the
PCI bus id, pid and process name replaced by the target's. A kernel log only grows:
clearing such a fault appends nothing and removes nothing, so its finding goes away
when its window (``kernel.window_s``) or hold (``kernel.hold_s``; an Xid 79 or a GPU off
the bus: until a reboot, which ``kernel.reset_hold_s`` bounds) has passed, as on a real
node. ``agentd run --simulate`` holds them 30 s, so a cleared one visibly recovers.

Sources:
- Xid 79, 13, 43: leptonai/gpud (Apache-2.0) @ 4a8de33a3f02, components/accelerator/nvidia/xid/kmsg_test.go
  and components/memory/testdata/dmesg.decode.iso.log.
- Xid 94, 95: NVIDIA/open-gpu-kernel-modules (MIT) @ df1c9a3de2be, kern_gpu_error_cont_ga100.c (its example lines).
- Xid 63: stas00/ml-engineering @ 62d4359e4849, compute/accelerator/nvidia/debug.md.
- Xid 119: leptonai/gpud @ 4a8de33a3f02, components/accelerator/nvidia/xid/testdata/dmesg-with-xid-119.log.
- The three-line off-bus message (one record): NVIDIA/NVSentinel issue 155.
- mlx5 command timeout, ACCESS_REG failure: NVIDIA/NVSentinel tests/syslog_health_monitor_test.go
  (the failure every counter read of a Fabric Manager limited PF logs: prometheus/node_exporter#3434).
"""

from __future__ import annotations

import re
import time

from agentd.base.atomic import read_regular
from agentd.sim.boot import PROC_STAT, PROC_UPTIME
from agentd.sim.node import KMSG
from agentd.sim.targets import Ctx, FaultValue, Restorable, Target

# XID -> the message after "NVRM: Xid (PCI:dddd:bb:dd): N, " as the driver printed it
XID_TEXTS: dict[int, str] = {
    13: "pid='<unknown>', name=<unknown>, Graphics SM Global Exception on (GPC 8, TPC 5, SM 1): Multiple Warp Errors",
    43: "pid={pid}, name=pt_main_thread, Ch 00000008",
    63: "pid={pid}, Row Remapper: New row marked for remapping, reset gpu to activate.",
    79: "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    94: "pid={pid}, Contained: CE User Channel (0x9). RST: No, D-RST: No",
    95: "pid={pid}, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No",
    119: "pid={pid}, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU{gpu} GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).",
}
OFF_BUS_MULTILINE = (
    "NVRM: The NVIDIA GPU {bdf}\\x0aNVRM: (PCI ID: 10de:{device}) installed in this system has\\x0a"
    "NVRM: fallen off the bus and is not responding to commands."
)
MLX5_CMD_TIMEOUT = "mlx5_core {bdf}: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource"
MLX5_ACCESS_REG_FAILED = ("mlx5_core {bdf}: mlx5_cmd_out_err:838:(pid {pid}): ACCESS_REG(0x805) op_mod(0x1) failed, "
                          "status bad operation(0x2), syndrome (0x305684), err(-22)")
_SEQ_USEC = re.compile(rb"^\d+,(\d+),(\d+)", re.M)
_BTIME = re.compile(rb"^btime (\d+)", re.M)
PID = 2924364


def append(ctx: Ctx, messages: list[tuple[int, str]]) -> None:
    """Append records (level, text) after the last one, one second apart."""
    path = ctx.path(KMSG)
    try:
        data = read_regular(path, 16 << 20)
    except FileNotFoundError:
        data = b""
    last = _SEQ_USEC.findall(data)
    seq, usec = (int(last[-1][0]), int(last[-1][1])) if last else (0, 10_000_000)
    # Stamped now on the simulated node's clock (the time since its boot, proc/stat btime):
    # a reader dates a simulated node's records by that clock (agentd.host.kernel_log), so
    # an event is dated when the fault was applied and ages from then.
    usec = max(usec + 1_000_000, _uptime_usec(ctx))
    out = []
    for level, text in messages:
        seq = seq + 1
        out.append(f"{level},{seq},{usec},-;{text}\n")
        usec += 1_000_000
    with open(path, "a") as f:
        f.write("".join(out))


def _uptime_usec(ctx: Ctx) -> int:
    """Microseconds since the simulated node booted: now minus its ``btime``, and never
    before the uptime its tree was built with (``proc/uptime``, rounded to 10 ms)."""
    now = written = 0
    try:
        m = _BTIME.search(read_regular(ctx.path(PROC_STAT), 1 << 20))
        if m is not None:
            now = max(0, int((time.time() - int(m.group(1))) * 1_000_000))
    except (OSError, ValueError, OverflowError):
        pass
    try:
        written = int(float(read_regular(ctx.path(PROC_UPTIME), 4096).split()[0]) * 1_000_000)
    except (OSError, ValueError, IndexError, OverflowError):
        pass
    return max(now, written)


def _bus(t: Target) -> str:
    return (t.bdf or "0000:00:00.0").rsplit(".", 1)[0]


def xid_apply(ctx: Ctx, t: Target, v: FaultValue) -> None:
    code = int(v)
    text = XID_TEXTS[code].format(pid=PID, gpu=t.gpu if t.gpu is not None else 0)
    append(ctx, [(4, f"NVRM: Xid (PCI:{_bus(t)}): {code}, {text}")])


def xid_code(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise ValueError(f"expected an XID number, got {s!r}") from None
    if v not in XID_TEXTS:
        raise ValueError(f"XID {v}: the simulator prints only XIDs it has a real driver line for ({', '.join(map(str, sorted(XID_TEXTS)))})")
    return v


def off_bus_multiline_apply(ctx: Ctx, t: Target, v: FaultValue) -> None:
    device = ctx.read(f"sys/bus/pci/devices/{t.bdf}/device").removeprefix("0x") if t.bdf else "2330"
    append(ctx, [(3, OFF_BUS_MULTILINE.format(bdf=t.bdf, device=device))])


def mlx5_cmd_timeout_apply(ctx: Ctx, t: Target, v: FaultValue) -> None:
    bdf = t.hca.bdf if t.hca is not None else t.bdf
    append(ctx, [(4, MLX5_CMD_TIMEOUT.format(bdf=bdf))] * int(v))


def mlx5_access_reg_apply(ctx: Ctx, t: Target, v: FaultValue) -> None:
    bdf = t.hca.bdf if t.hca is not None else t.bdf
    append(ctx, [(4, MLX5_ACCESS_REG_FAILED.format(bdf=bdf, pid=PID))] * int(v))


def nothing_to_restore(ctx: Ctx, t: Target, v: FaultValue) -> list[Restorable]:
    return []


def the_log(ctx: Ctx, t: Target, v: FaultValue) -> list[str]:
    """What these faults leave where it is on clearing: the log (only grows)."""
    return [KMSG]


# The root port's AER service prints one line per error message it receives, naming the
# function that sent it (drivers/pci/pcie/aer.c; the wording of tests/fixtures/kmsg/aer.txt:
# GSConnect issue 1052, pop-os/pop issue 751, geerlingguy/raspberry-pi-pcie-devices
# issue 116, rwth-i6/returnn issue 1500).
AER_RECEIVED = {
    "correctable": "pcieport {port}: AER: Corrected error received: {bdf}",
    "correctable_many": "pcieport {port}: AER: Multiple Corrected error received: {bdf}",
    "nonfatal": "pcieport {port}: AER: Uncorrected (Non-Fatal) error received: {bdf}",
    "fatal": "pcieport {port}: AER: Multiple Uncorrected (Fatal) error received: {bdf}",
}


def _root_port(ctx: Ctx, bdf: str) -> str:
    node = ctx.layout.get(bdf)
    while node is not None and node.parent is not None:
        node = ctx.layout.get(node.parent)
    return node.bdf if node is not None else bdf


def aer_received(ctx: Ctx, t: Target, what: str, n: int = 1) -> None:
    """The kernel log side of an AER error of the target's function (the counters are
    effects_link's): the root port's "error received" line."""
    if t.bdf is None:
        return
    key = "correctable_many" if what == "correctable" and n > 1 else what
    append(ctx, [(3, AER_RECEIVED[key].format(port=_root_port(ctx, t.bdf), bdf=t.bdf))])
