"""Host identity: hostname, architecture, CPU, NUMA nodes, virtualization, loaded modules."""

from __future__ import annotations

import os
import re

from agentd.host.fs import ReadContext
from agentd.model import NumaNode, SystemInfo

HOSTNAME = "proc/sys/kernel/hostname"
ARCH = "proc/sys/kernel/arch"  # Linux >= 6.1
CPUINFO = "proc/cpuinfo"
NODES = "sys/devices/system/node"
PROC_MODULES = "proc/modules"
HYPERVISOR_TYPE = "sys/hypervisor/type"  # Xen guests
DMI_SYS_VENDOR = "sys/class/dmi/id/sys_vendor"
# The first processor block holds everything we need; 256 KiB covers it with room to spare.
CPUINFO_MAX_BYTES = 256 * 1024
MODULES_MAX_BYTES = 1024 * 1024

_NODE_DIR = re.compile(r"^node(\d+)$")
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


def read_system(ctx: ReadContext) -> SystemInfo:
    """Never raises; absent files leave their fields None."""
    arch = ctx.text(ARCH) or None
    if arch is None and ctx.host.is_live:
        arch = os.uname().machine

    cpu: dict[str, str] = {}
    raw = ctx.raw(CPUINFO, max_bytes=CPUINFO_MAX_BYTES)
    if raw is not None:
        cpu = parse_cpuinfo(raw.decode("utf-8", "replace"))
    vendor = cpu.get("vendor_id") or None  # x86 only; arm64 has "CPU implementer"
    family = _int(cpu.get("cpu family")) if vendor else None
    model = _int(cpu.get("model")) if vendor else None

    modules_text = ctx.text(PROC_MODULES, max_bytes=MODULES_MAX_BYTES)
    return SystemInfo(
        hostname=ctx.text(HOSTNAME) or None,
        arch=arch,
        cpu_vendor=vendor,
        cpu_family=family,
        cpu_model=model,
        numa_nodes=_numa_nodes(ctx),
        virtualization=_virtualization(ctx, cpu.get("flags", "").split()),
        loaded_modules=parse_proc_modules(modules_text) if modules_text else (),
    )
