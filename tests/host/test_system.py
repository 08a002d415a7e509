"""Host identity from small trees with real /proc/cpuinfo shapes."""

from __future__ import annotations

import pytest

from agentd.host.fs import HostRoot, ReadContext
from agentd.host.system import parse_cpuinfo, parse_proc_modules, read_system, virtualization_from_dmi
from tests.support.fixtures import context_over

# First block of /proc/cpuinfo on a Sapphire Rapids host (DGX H100: Xeon Platinum 8480C).
INTEL_SPR = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480C
stepping\t: 8
microcode\t: 0x2b000461
cpu MHz\t\t: 2000.000
cache size\t: 107520 KB
physical id\t: 0
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc
bugs\t\t: spectre_v1 spectre_v2
address sizes\t: 46 bits physical, 57 bits virtual

processor\t: 1
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 999
"""

# An AMD EPYC (Genoa) guest on KVM: note the hypervisor flag.
AMD_KVM = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9654 96-Core Processor
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep hypervisor lahf_lm cmp_legacy
"""

# arm64 (NVIDIA Grace, Neoverse V2): no vendor_id, CPU implementer instead.
ARM64_GRACE = """processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd4f
CPU revision\t: 0

processor\t: 1
"""

PROC_MODULES = """nvidia_peermem 16384 0 - Live 0x0000000000000000 (POE)
nvidia_uvm 1540096 0 - Live 0x0000000000000000 (POE)
nvidia 56782848 121 nvidia_uvm,nvidia_peermem, Live 0x0000000000000000 (POE)
mlx5_ib 458752 0 - Live 0x0000000000000000 (OE)
ib_core 434176 9 nvidia_peermem,mlx5_ib, Live 0x0000000000000000 (OE)
"""


def test_parse_cpuinfo_first_block_only():
    cpu = parse_cpuinfo(INTEL_SPR)
    assert (cpu["vendor_id"], cpu["cpu family"], cpu["model"]) == ("GenuineIntel", "6", "143")
    assert cpu["model name"] == "Intel(R) Xeon(R) Platinum 8480C"


def test_bare_metal_intel_two_numa_nodes(tmp_path):
    ctx = context_over(
        tmp_path,
        {
            "proc/sys/kernel/hostname": "dgx-h100-017\n",
            "proc/sys/kernel/arch": "x86_64\n",
            "proc/cpuinfo": INTEL_SPR,
            "proc/modules": PROC_MODULES,
            "sys/devices/system/node/node0/cpulist": "0-55,112-167\n",
            "sys/devices/system/node/node0/cpumap": "000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff,ffffffff\n",
            "sys/devices/system/node/node1/cpulist": "56-111,168-223\n",
            "sys/devices/system/node/node1/cpumap": "ffffff00,00000000,0000ffff,ffffffff,ff000000,00000000,00000000\n",
            "sys/devices/system/node/possible": "0-1\n",
            "sys/devices/system/node/has_cpu": "0-1\n",
        },
    )
    info = read_system(ctx)
    assert info.hostname == "dgx-h100-017"
    assert info.arch == "x86_64"
    assert (info.cpu_vendor, info.cpu_family, info.cpu_model) == ("GenuineIntel", 6, 143)
    assert [n.node for n in info.numa_nodes] == [0, 1]
    assert info.numa_nodes[0].cpulist == "0-55,112-167"
    assert info.numa_nodes[1].cpumap.startswith("ffffff00,")
    assert info.virtualization is None
    assert info.loaded_modules == ("nvidia_peermem", "nvidia_uvm", "nvidia", "mlx5_ib", "ib_core")
    assert ctx.errors == []


def test_numa_nodes_sorted_numerically(tmp_path):
    files = {f"sys/devices/system/node/node{n}/cpulist": f"{n}\n" for n in (0, 2, 10, 1)}
    info = read_system(context_over(tmp_path, files))
    assert [n.node for n in info.numa_nodes] == [0, 1, 2, 10]
    assert info.numa_nodes[3].cpumap is None


@pytest.mark.parametrize(
    "vendor, expected",
    [
        ("QEMU\n", "qemu"),
        ("KVM\n", "kvm"),
        ("Microsoft Corporation\n", "hyperv"),
        ("Amazon EC2\n", "kvm"),
        ("Google\n", "kvm"),
        ("VMware, Inc.\n", "vmware"),
        ("Supermicro\n", "unknown"),
    ],
)
def test_virtualization_from_dmi_when_hypervisor_flag(tmp_path, vendor, expected):
    info = read_system(context_over(tmp_path, {"proc/cpuinfo": AMD_KVM, "sys/class/dmi/id/sys_vendor": vendor}))
    assert info.virtualization == expected
    assert (info.cpu_vendor, info.cpu_family, info.cpu_model) == ("AuthenticAMD", 25, 17)


def test_xen_hypervisor_type_wins(tmp_path):
    info = read_system(context_over(tmp_path, {"proc/cpuinfo": AMD_KVM, "sys/hypervisor/type": "xen\n", "sys/class/dmi/id/sys_vendor": "Xen\n"}))
    assert info.virtualization == "xen"


def test_hypervisor_flag_without_dmi_is_unknown_not_bare_metal(tmp_path):
    assert read_system(context_over(tmp_path, {"proc/cpuinfo": AMD_KVM})).virtualization == "unknown"


def test_dmi_without_hypervisor_flag_is_bare_metal(tmp_path):
    # EC2 *.metal instances report "Amazon EC2" in DMI too.
    info = read_system(context_over(tmp_path, {"proc/cpuinfo": INTEL_SPR, "sys/class/dmi/id/sys_vendor": "Amazon EC2\n"}))
    assert info.virtualization is None


def test_arm64_leaves_vendor_family_model_none(tmp_path):
    info = read_system(context_over(tmp_path, {"proc/cpuinfo": ARM64_GRACE, "proc/sys/kernel/arch": "aarch64\n"}))
    assert info.arch == "aarch64"
    assert (info.cpu_vendor, info.cpu_family, info.cpu_model) == (None, None, None)
    assert info.virtualization is None


def test_non_live_root_without_arch_file_has_no_arch(tmp_path):
    ctx = ReadContext(HostRoot.at(tmp_path), "system")
    info = read_system(ctx)
    assert info.arch is None and info.hostname is None and info.numa_nodes == () and info.loaded_modules == ()
    assert ctx.errors == []


def test_garbage_does_not_raise(tmp_path):
    ctx = context_over(tmp_path, {"proc/modules": "\n\n"})
    (tmp_path / "proc/cpuinfo").write_bytes(b"\xff\xfe vendor_id\t: GenuineIntel\ncpu family\t: six\n")
    info = read_system(ctx)
    assert info.cpu_family is None
    assert info.loaded_modules == ()


def test_helpers():
    assert parse_proc_modules(PROC_MODULES)[0] == "nvidia_peermem"
    assert virtualization_from_dmi("innotek GmbH") == "oracle"


def test_live_root():
    ctx = ReadContext(HostRoot.at("/"), "system")
    info = read_system(ctx)
    assert info.arch  # proc/sys/kernel/arch or os.uname() on a live root
    assert info.hostname
