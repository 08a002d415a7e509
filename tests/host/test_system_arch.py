"""Architecture without proc/sys/kernel/arch (Linux < 6.1, roots that are not live):
told from real /proc/cpuinfo text (tests/fixtures/cpuinfo, see SOURCES.md)."""

from __future__ import annotations

import pytest

from agentd.host.system import arch_from_cpuinfo, parse_cpuinfo, read_system
from tests.support.fixtures import FIXTURES, context_over

CPUINFO = FIXTURES / "cpuinfo"
INTEL_SPR = "archspec-linux-unknown-sapphirerapids"
AMD_ZEN4 = "archspec-linux-rocky8.5-zen4"
ARM_NEOVERSE_V2 = "archspec-linux-rhel9-neoverse_v2"
POWER8NVL = "archspec-linux-centos7-power8le"
ARM32 = "procfs-arm7"
S390X = "procfs-s390x"


@pytest.mark.parametrize(
    "fixture, arch, vendor, family, model",
    [
        (INTEL_SPR, "x86_64", "GenuineIntel", 6, 143),
        (AMD_ZEN4, "x86_64", "AuthenticAMD", 25, 17),
        (ARM_NEOVERSE_V2, "aarch64", None, None, None),
        (POWER8NVL, "ppc64le", None, None, None),
        (S390X, "s390x", "IBM/S390", None, None),
        (ARM32, None, None, None, None),  # a 32-bit ARM kernel: not aarch64, and no guess
    ],
)
def test_arch_from_real_cpuinfo_without_kernel_arch_file(tmp_path, fixture, arch, vendor, family, model):
    ctx = context_over(tmp_path, {"proc/cpuinfo": (CPUINFO / fixture).read_text()})
    assert not ctx.host.is_live
    info = read_system(ctx)
    assert info.arch == arch
    assert (info.cpu_vendor, info.cpu_family, info.cpu_model) == (vendor, family, model)
    assert ctx.errors == []


def test_kernel_arch_file_wins_over_cpuinfo(tmp_path):
    ctx = context_over(tmp_path, {"proc/cpuinfo": (CPUINFO / POWER8NVL).read_text(), "proc/sys/kernel/arch": "ppc64\n"})
    assert read_system(ctx).arch == "ppc64"  # a big-endian POWER8 says so itself on Linux >= 6.1


def test_no_cpuinfo_no_arch(tmp_path):
    assert read_system(context_over(tmp_path, {"proc/sys/kernel/hostname": "n1\n"})).arch is None


@pytest.mark.parametrize(
    "text, arch",
    [
        # an x86 CPU without long mode: the kernel may be i386..i686, so no guess
        ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nflags\t\t: fpu vme pae\n", None),
        # Hygon and Zhaoxin are x86 as well: the layout decides, not the vendor
        ("processor\t: 0\nvendor_id\t: HygonGenuine\ncpu family\t: 24\nflags\t\t: fpu lm\n", "x86_64"),
        ("processor\t: 0\nvendor_id\t:   Shanghai  \ncpu family\t: 7\nflags\t\t: fpu lm\n", "x86_64"),
        # POWER7 cannot run little-endian Linux
        ("processor\t: 0\ncpu\t\t: POWER7 (architected), altivec supported\n", "ppc64"),
        ("processor\t: 0\ncpu\t\t: POWER10, altivec supported\n", "ppc64le"),
        ("", None),
    ],
)
def test_arch_from_cpuinfo_edges(text, arch):
    assert arch_from_cpuinfo(parse_cpuinfo(text)) == arch
