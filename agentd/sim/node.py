"""Kernel, modules, NUMA, CPU and NVML facts of a simulated node.

- ``proc/sys/kernel/{osrelease,hostname,arch}``, ``proc/version``;
- ``proc/cpuinfo``: only the first few processors (two per socket), enough for
  vendor_id / cpu family / model / physical id; the real file of a 224-CPU node is
  several hundred KiB and readers only need its first block. No ``hypervisor`` flag
  (bare metal). Grace (aarch64) profiles get the arm64 kernel's block (``CPU implementer``,
  ``CPU part`` 0xd4f = Neoverse V2), which has no socket or core id lines;
- ``proc/<pid>/comm`` for the profile's process table (Profile.processes: systemd as pid
  1, nv-fabricmanager on NVSwitch profiles, nvidia-imex on gb200-nvl);
- ``sys/devices/system/node/{online,possible}`` and ``node<N>/{cpulist,cpumap}``;
- ``proc/modules`` and ``sys/module/<m>/{initstate,refcnt[,version]}``;
  ``sys/module/nvidia_peermem/version`` exists when peermem is loaded (the file NCCL
  checks); the nvidia line carries taint ``(OE)`` for the open module and ``(POE)`` for
  the proprietary one; ``sys/module/mlx5_core/version`` is MLNX_OFED's version
  (Profile.ofed_version; the inbox driver has no such file);
- ``usr/lib/<arch>-linux-gnu/libibverbs.so.1`` -> ``libibverbs.so.1.14.<rdma-core>``
  (Profile.rdma_core; the target is a stand-in of 16 bytes, an ELF64 ident), on profiles
  with HCAs;
- ``etc/nccl.conf`` with ``NCCL_IB_TC`` (Profile.nccl_ib_tc, RoCE profiles), as NCCL
  reads it (KEY=VALUE lines, ``#`` comments);
- ``proc/driver/nvidia/version`` in the open or proprietary module's wording;
- ``.agentd/nvml.json``: what NVML would answer (schema in agentd.sim).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from agentd.base.jsontypes import JsonObject
from agentd.sim.profiles import Profile
from agentd.sim.tree import cpumask, parse_cpulist, symlink, write_attr, write_bytes

DRIVER_DATE = "Thu Jun 27 20:37:02 UTC 2024"
GCC_LINE = "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) "
CPU_MODEL_NAME = "Intel(R) Xeon(R) Platinum 8480+"
# A Grace (Neoverse V2) core as an arm64 kernel prints it: a real GB200 tray's
# /proc/cpuinfo (linux-serial list, "Re: arm64: csdlock at early boot due to slow serial
# (?)", Breno Leitao, 2025-07-03; see tests/fixtures/SOURCES.md).
GRACE_BOGOMIPS = "2000.00"
GRACE_FEATURES = "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm sb paca pacg dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svebf16 i8mm bf16 dgh bti"
CPU_FLAGS = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc arch_perfmon pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf pni pclmulqdq dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch avx512f avx512dq avx512_bf16 amx_bf16 amx_tile amx_int8"

# (name, size, users) in /proc/modules order (most recently loaded first).
BASE_MODULES = [
    ("nvidia_uvm", 4956160, []),
    ("nvidia_drm", 122880, []),
    ("nvidia_modeset", 1605632, ["nvidia_drm"]),
    ("mlx5_ib", 462848, []),
    ("ib_uverbs", 200704, ["mlx5_ib"]),
    ("ib_core", 491520, ["mlx5_ib", "ib_uverbs"]),
    ("mlx5_core", 2285568, ["mlx5_ib"]),
    ("mlxfw", 36864, ["mlx5_core"]),
    ("igb", 290816, []),
]


def driver_version_text(profile: Profile, open_module: bool) -> str:
    v = profile.driver_version
    if open_module:
        first = f"NVRM version: NVIDIA UNIX Open Kernel Module for {profile.arch}  {v}  Release Build  (dvs-builder@U16-I3-B03-4-3)  {DRIVER_DATE}"
    else:
        first = f"NVRM version: NVIDIA UNIX {profile.arch} Kernel Module  {v}  {DRIVER_DATE}"
    return f"{first}\n{GCC_LINE}\n"


def modules_text(peermem: bool, open_module: bool) -> str:
    mods = list(BASE_MODULES)
    nvidia_users = ["nvidia_uvm", "nvidia_modeset"]
    if peermem:
        mods.insert(0, ("nvidia_peermem", 16384, []))
        nvidia_users.insert(0, "nvidia_peermem")
        mods = [(n, s, u + ["nvidia_peermem"] if n == "ib_core" else u) for n, s, u in mods]
    mods.append(("nvidia", 54571008, nvidia_users))
    lines = []
    for name, size, users in mods:
        used = "".join(f"{u}," for u in users) or "-"
        taint = " (OE)" if name.startswith("nvidia") else ""
        if name == "nvidia" and not open_module:
            taint = " (POE)"
        lines.append(f"{name} {size} {len(users)} {used} Live 0x0000000000000000{taint}")
    return "\n".join(lines) + "\n"


def module_names(peermem: bool) -> list[str]:
    return [m for m, _, _ in BASE_MODULES] + ["nvidia"] + (["nvidia_peermem"] if peermem else [])


def write_modules(root: Path, profile: Profile, *, peermem: bool, open_module: bool) -> None:
    write_attr(root / "proc/modules", modules_text(peermem, open_module), newline=False)
    write_attr(root / "proc/driver/nvidia/version", driver_version_text(profile, open_module), newline=False)
    for m in module_names(peermem):
        d = root / "sys/module" / m
        write_attr(d / "initstate", "live")
        write_attr(d / "refcnt", 0)
        if m in ("nvidia", "nvidia_peermem"):
            write_attr(d / "version", profile.driver_version)
        if m == "mlx5_core" and profile.ofed_version and profile.hcas:
            write_attr(d / "version", profile.ofed_version)


# e_ident of an ELF64 little-endian object (x86_64 and aarch64 alike): the start of the
# real library, enough for a stand-in nothing loads.
ELF64_IDENT = b"\x7fELF\x02\x01\x01" + bytes(9)
NCCL_CONF = "etc/nccl.conf"


def libibverbs_dir(profile: Profile) -> str:
    return f"usr/lib/{profile.arch}-linux-gnu"


def write_rdma_core(root: Path, profile: Profile) -> None:
    if not (profile.rdma_core and profile.hcas):
        return
    d = root / libibverbs_dir(profile)
    target = d / f"libibverbs.so.1.14.{profile.rdma_core}"
    write_bytes(target, ELF64_IDENT)
    symlink(d / "libibverbs.so.1", target)


def nccl_conf_text(ib_tc: int) -> str:
    """etc/nccl.conf as a site writes it: a comment, then NCCL_IB_TC."""
    return f"# RoCE: traffic class {ib_tc} = DSCP {ib_tc >> 2} (priority {ib_tc >> 5} in the default dscp2prio map)\nNCCL_IB_TC={ib_tc}\n"


def _grace_block(cpu: int) -> str:
    return (
        f"processor\t: {cpu}\nBogoMIPS\t: {GRACE_BOGOMIPS}\nFeatures\t: {GRACE_FEATURES}\nCPU implementer\t: 0x41\n"
        "CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd4f\nCPU revision\t: 0\n"
    )


def write_cpuinfo(root: Path, profile: Profile) -> None:
    blocks = []
    for socket, cpulist in enumerate(profile.numa_cpulists):
        for core, cpu in enumerate(parse_cpulist(cpulist)[:2]):
            if profile.cpu == "grace":
                blocks.append(_grace_block(cpu))
                continue
            blocks.append(
                f"processor\t: {cpu}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
                f"model name\t: {CPU_MODEL_NAME}\nstepping\t: 8\ncpu MHz\t\t: 2000.000\n"
                f"physical id\t: {socket}\ncore id\t\t: {core}\nflags\t\t: {CPU_FLAGS}\n"
            )
    blocks.sort(key=lambda b: int(b.split("\n")[0].split(":")[1]))
    write_attr(root / "proc/cpuinfo", "\n".join(blocks) + "\n", newline=False)


# The fabric's identity for the rack a gb200-nvl tray is in. The clique id is the one a
# published GB200 `nvidia-smi -q` Fabric block shows (CliqueId : 32766).
CLIQUE_ID = 32766
HEALTHY_FABRIC = {
    "summary": "healthy",
    "degraded_bandwidth": False,
    "route_recovery": False,
    "route_unhealthy": False,
    "access_timeout_recovery": False,
    "incorrect_configuration": "none",
    "partition_assigned": True,
    "gfm_connected": True,
    "mask": None,
}


def cluster_uuid(profile: Profile) -> str:
    """The NVLink domain's cluster UUID: uuid5 of the profile name (lowercase 8-4-4-4-12)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"agentd-sim/{profile.name}"))


def nvml_data(profile: Profile) -> JsonObject:
    """What NVML answers. NVSwitch profiles (HGX H100): links to the local NVSwitches,
    fabric State/Status only (driver 535/550 nvidia-smi shows no clique or health there).
    rack_nvlink profiles (GB200 NVL): links to the rack's switch trays (remote bus id
    unknown to the node), the fabric's cluster UUID, clique id and health, and C2C links."""
    nvsw = profile.nvswitch_bdfs
    rack = profile.rack_nvlink
    gpus = []
    for index, bdf in enumerate(profile.gpu_bdfs):
        links = []
        # 18 links spread 5/4/4/5 over the four NVSwitches (HGX H100 baseboard).
        owners = [k for k, n in enumerate((5, 4, 4, 5)) for _ in range(n)]
        for link in range(profile.nvlinks_per_gpu):
            links.append(
                {
                    "link": link,
                    "state": "up",
                    "remote_pci_bus_id": nvsw[owners[link] % len(nvsw)] if nvsw else None,
                    "remote_type": "nvswitch" if nvsw or rack else "gpu",
                    "version": profile.nvlink_version,
                    "errors": {"crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0},
                    "speed_mb_s": profile.nvlink_speed_mb_s,
                }
            )
        gpus.append(
            {
                "index": index,
                "pci_bus_id": bdf,
                "name": profile.gpu_name,
                "uuid": "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"agentd-sim/{profile.name}/{bdf}")),
                "nvlinks": links,
                "fabric_state": "completed" if profile.has_fabric else None,
                "fabric_status": "success" if profile.has_fabric else None,
                "fabric_cluster_uuid": cluster_uuid(profile) if rack else None,
                "fabric_clique_id": CLIQUE_ID if rack else None,
                "fabric_health": dict(HEALTHY_FABRIC) if rack else None,
                "c2c_links": [{"link": i, "state": "up", "max_bw_mb_s": profile.c2c_max_bw_mb_s} for i in range(profile.c2c_links_per_gpu)],
                "pcie_replay_errors": 0,
                "error": None,
            }
        )
        if profile.vbios_version:
            gpus[-1]["vbios_version"] = profile.vbios_version
    return {"driver_version": profile.driver_version, "cuda_driver_version": profile.cuda_driver_version, "gpus": gpus}


def write_nvml(root: Path, data: JsonObject) -> None:
    write_attr(root / ".agentd/nvml.json", json.dumps(data, indent=2))


KMSG = "dev/kmsg"
BOOT_ID = "proc/sys/kernel/random/boot_id"


def write_log(root: Path, boot_id: str) -> None:
    """A new boot: its boot id and an empty kernel log."""
    (root / KMSG).parent.mkdir(parents=True, exist_ok=True)
    (root / KMSG).write_bytes(b"")
    write_attr(root / BOOT_ID, boot_id)


def write_node(root: Path, profile: Profile) -> None:
    k = root / "proc/sys/kernel"
    write_attr(k / "osrelease", profile.kernel_release)
    write_attr(k / "hostname", profile.hostname)
    write_attr(k / "arch", profile.arch)
    builder = "bos02-arm64-040" if profile.arch == "aarch64" else "lcy02-amd64-051"
    gcc = f"{profile.arch}-linux-gnu-gcc-12"
    write_attr(root / "proc/version", f"Linux version {profile.kernel_release} (buildd@{builder}) ({gcc} (Ubuntu 12.3.0-1ubuntu1~22.04) 12.3.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #24-Ubuntu SMP PREEMPT_DYNAMIC Fri Jun 14 09:38:28 UTC 2024")
    write_cpuinfo(root, profile)
    nodes = root / "sys/devices/system/node"
    n = len(profile.numa_cpulists)
    write_attr(nodes / "online", f"0-{n - 1}" if n > 1 else "0")
    write_attr(nodes / "possible", f"0-{n - 1}" if n > 1 else "0")
    for i, cpulist in enumerate(profile.numa_cpulists):
        write_attr(nodes / f"node{i}/cpulist", cpulist)
        write_attr(nodes / f"node{i}/cpumap", cpumask(cpulist, profile.nr_cpus))
    write_modules(root, profile, peermem=profile.peermem, open_module=profile.open_module)
    write_rdma_core(root, profile)
    if profile.nccl_ib_tc is not None:
        write_attr(root / NCCL_CONF, nccl_conf_text(profile.nccl_ib_tc), newline=False)
    write_nvml(root, nvml_data(profile))
    write_processes(root, profile)


def write_processes(root: Path, profile: Profile) -> None:
    for pid, comm in profile.processes():
        # the kernel keeps TASK_COMM_LEN - 1 = 15 bytes of a name: nv-fabricmanage
        write_attr(root / f"proc/{pid}/comm", comm[:15])
