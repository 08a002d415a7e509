"""Host identity: hostname, architecture, CPU, NUMA nodes, virtualization, loaded modules.

Architecture, as ``uname -m`` names it, comes from ``proc/sys/kernel/arch`` (Linux >= 6.1),
else from uname(2) on a live root (or the ``uname`` a capture recorded), else from the
layout of ``proc/cpuinfo``
(``arch_from_cpuinfo``): kernels before 6.1 (Ubuntu 22.04's 5.15, RHEL 8/9) read from a
root that is not live have nothing else. The CPU facts are recorded as the kernel prints
them; what NCCL makes of them is agentd.nccl.topo's business.

When the node booted (``booted_at``, ``boot_time_source``; ``boot_time``) comes from the
root, never from the machine agentd runs on unless that machine is the root's kernel:
``btime`` of ``proc/stat``; on a live root without it, now minus ``proc/uptime``; on a
capture of a live node without it, the capture's time (its manifest's ``created``) minus
the ``proc/uptime`` it recorded; else None. On a live root ``proc/stat`` changes every
read (CPU and interrupt counters), so the system probe's journal never replays equal
there: it runs in full each slow cycle (an equal SystemInfo still keeps the previous
object downstream).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Mapping
from datetime import datetime

from agentd.base import recorded
from agentd.host.fs import BOOT_ID, HostRoot, ReadContext
from agentd.model import NumaNode, SystemInfo

HOSTNAME = "proc/sys/kernel/hostname"
MACHINE_ID = "etc/machine-id"  # machine-id(5): the node's identity across reboots
_MACHINE_ID = re.compile(r"[0-9a-f]{32}")
ARCH = "proc/sys/kernel/arch"  # Linux >= 6.1
CPUINFO = "proc/cpuinfo"
NODES = "sys/devices/system/node"
PROC_MODULES = "proc/modules"
HYPERVISOR_TYPE = "sys/hypervisor/type"  # Xen guests
DMI_SYS_VENDOR = "sys/class/dmi/id/sys_vendor"
# The first processor block holds everything we need; 256 KiB covers it with room to spare.
CPUINFO_MAX_BYTES = 256 * 1024
MODULES_MAX_BYTES = 1024 * 1024

PROC_STAT = "proc/stat"
PROC_UPTIME = "proc/uptime"
# /proc/stat has a line per CPU and an "intr" line with a count per interrupt (thousands on
# a node with many MSI-X vectors) before "btime": 1 MiB holds a large node's with room.
STAT_MAX_BYTES = 1 << 20
UPTIME_MAX_BYTES = 4096
# 9999-12-31T23:59:59Z, the latest time a datetime shows: anything later is no boot time.
_MAX_EPOCH_S = 253402300799
_BTIME_LINE = re.compile(rb"^btime[ \t]([^\n]*)", re.M)

_NODE_DIR = re.compile(r"^node(\d+)$")
_POWER_GEN = re.compile(r"^POWER(\d+)")
# DMI sys_vendor -> hypervisor, as systemd-detect-virt names them (case-insensitive prefix).
# EC2 Nitro and Google Compute Engine are KVM-based.
_DMI_VENDORS = (
    ("kvm", "kvm"),
    ("qemu", "qemu"),
    ("amazon ec2", "kvm"),
    ("google", "kvm"),
    ("microsoft corporation", "hyperv"),
    ("vmware", "vmware"),
    ("xen", "xen"),
    ("innotek gmbh", "oracle"),
    ("oracle corporation", "oracle"),
    ("parallels", "parallels"),
    ("bochs", "bochs"),
)


def parse_cpuinfo(text: str) -> dict[str, str]:
    """Key/value pairs of the first processor block of /proc/cpuinfo (x86 and arm64).
    arm64 prints its per-CPU blocks after global lines; both end up merged here."""
    out: dict[str, str] = {}
    seen_processor = False
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if not line.strip() and seen_processor:
                break  # end of the first block
            continue
        key = key.strip()
        if key == "processor":
            if seen_processor:
                break
            seen_processor = True
        out.setdefault(key, value.strip())
    return out


def arch_from_cpuinfo(cpu: dict[str, str]) -> str | None:
    """The machine name ``uname -m`` gives, told from the first block of /proc/cpuinfo
    (``parse_cpuinfo``) by the lines each architecture's kernel prints; None when the
    layout does not say.

    - x86 (arch/x86/kernel/cpu/proc.c): ``vendor_id``, ``cpu family`` and ``flags`` lines,
      whatever the vendor (GenuineIntel, AuthenticAMD, HygonGenuine, CentaurHauls, ...).
      ``lm`` (long mode) in flags: ``x86_64``. Without it the kernel may be i386..i686: None.
      (A 32-bit kernel on a 64-bit CPU still shows ``lm``; no GPU node runs one.)
    - arm64 (arch/arm64/kernel/cpuinfo.c): ``CPU implementer`` with ``CPU architecture: 8``,
      which an arm64 kernel prints for every ARMv8/v9 core (early ones: ``AArch64``);
      32-bit ARM kernels print 7 or lower: None.
    - powerpc (arch/powerpc/kernel/setup-common.c): ``cpu : POWERn...``. The byte order
      is nowhere in cpuinfo, so ppc64 and ppc64le cannot be told apart. POWER8 and later:
      ``ppc64le``, the only POWER port NVIDIA's driver and CUDA exist for (and what every
      current distribution ships); POWER7 and older cannot run little-endian Linux:
      ``ppc64``. NCCL names both ``ppc64``, so its topology file is right either way.
    - s390 (arch/s390/kernel/processor.c): ``vendor_id : IBM/S390``; ``zarch`` in features:
      ``s390x``.
    """
    vendor = cpu.get("vendor_id", "")
    if vendor == "IBM/S390":
        return "s390x" if "zarch" in cpu.get("features", "").split() else None
    if vendor and "cpu family" in cpu and "flags" in cpu:
        return "x86_64" if "lm" in cpu["flags"].split() else None
    if "CPU implementer" in cpu:
        return "aarch64" if cpu.get("CPU architecture") in ("8", "AArch64") else None
    m = _POWER_GEN.match(cpu.get("cpu", ""))
    if m:
        return "ppc64le" if int(m.group(1)) >= 8 else "ppc64"
    return None


def _int(s: str | None) -> int | None:
    if s is None:
        return None
    try:
        return int(s, 10)
    except ValueError:
        return None


def virtualization_from_dmi(sys_vendor: str) -> str:
    v = sys_vendor.strip().lower()
    for prefix, name in _DMI_VENDORS:
        if v.startswith(prefix):
            return name
    return "unknown"


def _virtualization(ctx: ReadContext, flags: list[str]) -> str | None:
    # x86 guests see CPUID's hypervisor bit as the "hypervisor" flag; without it we say
    # bare metal. (arm64 has no such flag: None there means "not detected".) DMI alone is
    # not proof: EC2 bare-metal instances also report "Amazon EC2".
    if "hypervisor" not in flags:
        return None
    hv = ctx.text(HYPERVISOR_TYPE)
    if hv:
        return hv.strip().lower()
    vendor = ctx.text(DMI_SYS_VENDOR)
    return virtualization_from_dmi(vendor) if vendor else "unknown"


def _numa_nodes(ctx: ReadContext) -> tuple[NumaNode, ...]:
    nodes = []
    for entry in ctx.listdir(NODES):
        m = _NODE_DIR.match(entry)
        if not m:
            continue
        nodes.append(
            NumaNode(
                node=int(m.group(1)),
                cpulist=ctx.text(f"{NODES}/{entry}/cpulist") or None,
                cpumap=ctx.text(f"{NODES}/{entry}/cpumap") or None,
            )
        )
    return tuple(sorted(nodes, key=lambda n: n.node))


def parse_proc_modules(text: str) -> tuple[str, ...]:
    return tuple(line.split(None, 1)[0] for line in text.splitlines() if line.strip())


def uname() -> dict[str, str]:
    """uname(2) of the running kernel, as a capture records it (``.agentd/uname.json``)."""
    u = os.uname()
    return {"sysname": u.sysname, "nodename": u.nodename, "release": u.release, "version": u.version, "machine": u.machine}


def _recorded_machine(ctx: ReadContext) -> str | None:
    """``machine`` of the recorded ``uname`` (a capture of a live node)."""
    path = ctx.host.recorded(recorded.UNAME)
    text = ctx.text(path, max_bytes=1 << 16) if path else None
    if not text:
        return None
    try:
        machine = json.loads(text).get("machine")
    except (ValueError, AttributeError, RecursionError):
        ctx.error(path or "", "unparsable", "not a JSON object")
        return None
    return machine if isinstance(machine, str) and machine.isascii() and 0 < len(machine) <= 32 else None


def _machine_id(ctx: ReadContext) -> str | None:
    """None when absent, ``uninitialized`` (first boot) or not 32 hex digits."""
    value = (ctx.text(MACHINE_ID, max_bytes=256) or "").strip().lower()
    return value if _MACHINE_ID.fullmatch(value) else None


def parse_btime(data: bytes) -> int | None:
    """The ``btime`` line of /proc/stat: "boot time, in seconds since the Epoch"
    (Documentation/filesystems/proc.rst). Only the first line that starts with ``btime``
    is parsed; None when there is none, or its value is not a whole number of seconds
    after 1970 and before the year 10000.

    The kernel computes it on every read as the wall clock now minus the time since boot
    (getboottime64), so it moves with steps of the wall clock (NTP, settimeofday): it is
    the wall-clock time of the boot as the clock sees it now, good to seconds, plenty for a
    window of minutes."""
    m = _BTIME_LINE.search(data)
    if m is None:
        return None
    value = m.group(1).strip()
    if not value.isdigit() or len(value) > 20:  # bytes.isdigit: ASCII digits only
        return None
    seconds = int(value)
    return seconds if 0 < seconds <= _MAX_EPOCH_S else None


def parse_uptime(text: str) -> float | None:
    """The first field of /proc/uptime: seconds since boot (CLOCK_BOOTTIME); None unless it
    is a finite number between 0 and the span ``parse_btime`` accepts."""
    try:
        up = float(text.split()[0])
    except (ValueError, IndexError):
        return None
    return up if math.isfinite(up) and 0 <= up <= _MAX_EPOCH_S else None


def recorded_moment(host: HostRoot) -> float | None:
    """When a capture of a live node read its files: its manifest's ``created`` (written
    seconds after the collection it records). None for anything else (a copied tree, a
    simulated root, a capture of a capture: their files were not read at that time)."""
    m = host.manifest
    if m is None or m.get("kind") != "capture":
        return None
    source = m.get("source")
    created = m.get("created")
    if not isinstance(source, Mapping) or source.get("mode") != "live" or not isinstance(created, str):
        return None
    try:
        at = datetime.fromisoformat(created)
    except ValueError:
        return None
    return at.timestamp() if at.tzinfo is not None else None


def _uptime(ctx: ReadContext) -> float | None:
    raw = ctx.raw(PROC_UPTIME, max_bytes=UPTIME_MAX_BYTES)
    if not raw:
        return None
    up = parse_uptime(raw.decode("ascii", "replace"))
    if up is None:
        ctx.error(PROC_UPTIME, "unparsable", f"expected seconds since boot, got {raw[:40]!r}")
    return up


# Boot times read on live roots, by (root, boot id). On a live node proc/stat and
# proc/uptime differ on every read, so reading either each slow cycle would make the
# system probe's read journal never match (a full re-read of cpuinfo and modules every
# time); the boot time of one boot does not change, so it is read once per boot.
_LIVE_BOOTS: dict[tuple[str, str], tuple[float | None, str | None]] = {}


def boot_time(ctx: ReadContext) -> tuple[float | None, str | None]:
    """(unix time the root's node booted, where that came from); (None, None) when the
    root does not say. See the module docstring for the order. Never raises."""
    if not ctx.host.is_live:
        return _boot_time(ctx)
    boot_id = ctx.text(BOOT_ID)
    if not boot_id:
        return _boot_time(ctx)
    key = (str(ctx.host.root), boot_id)
    hit = _LIVE_BOOTS.get(key)
    if hit is None:
        if len(_LIVE_BOOTS) > 64:
            _LIVE_BOOTS.clear()
        hit = _LIVE_BOOTS[key] = _boot_time(ctx)
    return hit


def _boot_time(ctx: ReadContext) -> tuple[float | None, str | None]:
    raw = ctx.raw(PROC_STAT, max_bytes=STAT_MAX_BYTES)
    if raw:
        btime = parse_btime(raw)
        if btime is not None:
            return float(btime), "proc/stat btime"
        ctx.error(PROC_STAT, "unparsable", f"no btime line in its first {len(raw)} bytes")
    if ctx.host.is_live:  # the running kernel is the root's: its clock and uptime agree
        up = _uptime(ctx)
        # whole seconds, so that two reads of one boot give the same SystemInfo
        return (float(round(time.time() - up)), "proc/uptime") if up is not None else (None, None)
    at = recorded_moment(ctx.host)
    if at is None:
        return None, None  # never this machine's clock minus another node's uptime
    up = _uptime(ctx)
    if up is None:
        return None, None
    return float(round(at - up)), "proc/uptime at the capture's time"


def read_identity(ctx: ReadContext) -> tuple[str | None, str | None]:
    """(hostname, machine_id) as ``read_system`` reads them: what tells agentd's persisted
    state whose it is, before the first collection."""
    return ctx.text(HOSTNAME) or None, _machine_id(ctx)


def read_system(ctx: ReadContext) -> SystemInfo:
    """Never raises; absent files leave their fields None."""
    booted_at, boot_source = boot_time(ctx)
    cpu: dict[str, str] = {}
    raw = ctx.raw(CPUINFO, max_bytes=CPUINFO_MAX_BYTES)
    if raw is not None:
        cpu = parse_cpuinfo(raw.decode("utf-8", "replace"))

    arch = ctx.text(ARCH) or None
    if arch is None and ctx.host.is_live:
        arch = os.uname().machine
    if arch is None:
        arch = _recorded_machine(ctx)
    if arch is None:
        arch = arch_from_cpuinfo(cpu)
    vendor = cpu.get("vendor_id") or None  # x86 only; arm64 has "CPU implementer"
    family = _int(cpu.get("cpu family")) if vendor else None
    model = _int(cpu.get("model")) if vendor else None

    modules_text = ctx.text(PROC_MODULES, max_bytes=MODULES_MAX_BYTES)
    hostname, machine_id = read_identity(ctx)
    return SystemInfo(
        hostname=hostname,
        machine_id=machine_id,
        arch=arch,
        cpu_vendor=vendor,
        cpu_family=family,
        cpu_model=model,
        numa_nodes=_numa_nodes(ctx),
        virtualization=_virtualization(ctx, cpu.get("flags", "").split()),
        loaded_modules=parse_proc_modules(modules_text) if modules_text else (),
        booted_at=booted_at,
        boot_time_source=boot_source,
    )
