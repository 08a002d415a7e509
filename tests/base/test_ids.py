"""agentd.base.ids: the one home of the PCI bus-id spellings and the PCI class codes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.base.ids import (
    BDF_RE,
    ROOT_COMPLEX_RE,
    Bdf,
    bdf_key,
    bus_id_label,
    is_bdf,
    nccl_walk_bdf,
    normalize_bdf,
    parse_bdf,
)
from agentd.model import PciDevice

# sysfs spelling: what the kernel names a function, and so what snapshots, baselines,
# finding subjects and NCCL's topology XML hold.
SYSFS = [
    "0000:1b:00.0",
    "0001:0a:1f.7",
    "ffff:ff:1f.7",
    "10000:e1:00.0",  # Intel VMD: domains from 0x10000
    "10001:00:02.0",
    "fffffff:00:00.0",
    "ffffffff:ff:ff.7",  # the widest domain (32 bits)
]
NOT_SYSFS = [
    "",
    "0000:1B:00.0",  # upper case: NVML's, never the kernel's
    "00000000:1b:00.0",  # NVML's zero-padded 8-digit domain
    "00010000:e1:00.0",
    "000:1b:00.0",  # 3-digit domain
    "100000000:00:00.0",  # 9 digits: wider than a PCI domain
    "0000:1b:00.8",  # function 8
    "0000:1b:0.0",
    "0000:1b:00",
    "0000:1b:00.0 ",
    "pci0000:00",
    "mlx5_0",
    "0000-1b-00.0",
    "0000:1g:00.0",
]


@pytest.mark.parametrize("text", SYSFS)
def test_sysfs_spelling_is_a_bus_id(text):
    assert is_bdf(text)
    assert BDF_RE.fullmatch(text)
    assert normalize_bdf(text) == text  # already canonical


@pytest.mark.parametrize("text", NOT_SYSFS)
def test_other_text_is_not_a_sysfs_bus_id(text):
    assert not is_bdf(text)


def test_is_bdf_of_none():
    assert not is_bdf(None)


@pytest.mark.parametrize(
    "raw, sysfs",
    [
        ("00000000:1B:00.0", "0000:1b:00.0"),  # NVML / nvidia-smi / dcgm-exporter
        (b"00000000:DB:00.0\0", "0000:db:00.0"),  # NVML's char[] with its NUL
        (b"00000000:DB:00.0\0\0\0\0", "0000:db:00.0"),
        (" 0000:3b:00.0\n", "0000:3b:00.0"),
        ("0000:3B:00.0", "0000:3b:00.0"),  # NVML legacy 4-digit form
        ("00000001:0A:1F.7", "0001:0a:1f.7"),
        ("00010000:E1:00.0", "10000:e1:00.0"),  # a VMD GPU as NVML names it
        ("10000:e1:00.0", "10000:e1:00.0"),
        ("0010000:e1:00.0", "10000:e1:00.0"),
        ("FFFFFFFF:FF:1F.7", "ffffffff:ff:1f.7"),
    ],
)
def test_normalize_any_spelling_to_sysfs(raw, sysfs):
    assert normalize_bdf(raw) == sysfs


@pytest.mark.parametrize(
    "raw",
    ["not a bus id", "", "000:1b:00.0", "100000000:1b:00.0", "0000:1b:00.8", "0000:1b:00", "1b:00.0",
     "fffffff:ffff:ff",  # NCCL's "not visible" NVLink target
     b"\xff\xfe", None],
)
def test_normalize_rejects_what_is_not_a_bus_id(raw):
    assert parse_bdf(raw) is None
    assert normalize_bdf(raw) is None


@pytest.mark.parametrize(
    "sysfs, label",
    [
        ("0000:1b:00.0", "00000000:1B:00.0"),
        ("10000:e1:00.0", "00010000:E1:00.0"),
        ("ffffffff:ff:1f.7", "FFFFFFFF:FF:1F.7"),
        (None, ""),
        ("", ""),
        ("garbage", "GARBAGE"),  # shown as given, never dropped
    ],
)
def test_bus_id_label_is_the_nvml_spelling(sysfs, label):
    assert bus_id_label(sysfs) == label


def test_bdf_key_sorts_by_value_across_domain_widths():
    ids = ["10000:00:00.0", "0000:1b:00.0", "ffff:00:00.0", "0000:02:00.0", "0001:00:00.0"]
    assert sorted(ids, key=bdf_key) == ["0000:02:00.0", "0000:1b:00.0", "0001:00:00.0", "ffff:00:00.0", "10000:00:00.0"]
    with pytest.raises(ValueError):
        bdf_key("mlx5_0")


@given(st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.integers(0, 7))
def test_every_bus_id_round_trips_through_every_spelling(domain, bus, device, function):
    b = Bdf(domain, bus, device, function)
    assert is_bdf(b.sysfs)
    assert parse_bdf(b.sysfs) == b
    assert parse_bdf(b.nvml) == b
    assert normalize_bdf(b.nvml) == b.sysfs
    assert bus_id_label(b.sysfs) == b.nvml
    assert bdf_key(b.sysfs) == b


@pytest.mark.parametrize(
    "name, ok",
    [("pci0000:00", True), ("pci10000:e0", True), ("pciffffffff:ff", True), ("pci0000:0", False),
     ("pci00000:00", False), ("0000:00:01.0", False), ("pci0000:00:01.0", False)],
)
def test_root_complex_names(name, ok):
    assert bool(ROOT_COMPLEX_RE.fullmatch(name)) is ok


@pytest.mark.parametrize(
    "component, ok",
    [
        ("0000:1b:00.0", True),
        ("0000:1B:00.0", True),  # NCCL's checkBDFFormat takes any hex digit in every place
        ("0000:1b:00.f", True),
        ("10000:e0:01.0", False),  # 13 characters: NCCL takes a VMD bridge for the root complex
        ("pci0000:00", False),
        ("0000:1b:00", False),
    ],
)
def test_nccl_walk_takes_only_4_digit_domains(component, ok):
    assert nccl_walk_bdf(component) is ok


@pytest.mark.parametrize(
    "class_code, gpu, bridge, nvswitch",
    [
        (0x030200, True, False, False),  # 3D controller (H100)
        (0x030000, True, False, False),  # VGA
        (0x060400, False, True, False),  # PCI bridge
        (0x068000, False, False, True),  # NVSwitch
        (0x020700, False, False, False),  # InfiniBand controller
    ],
)
def test_pci_class_codes(class_code, gpu, bridge, nvswitch):
    dev = PciDevice(bdf="0000:1b:00.0", class_code=class_code, vendor_id=0x10DE)
    assert (dev.is_gpu, dev.is_bridge, dev.is_nvswitch) == (gpu, bridge, nvswitch)
    assert not PciDevice(bdf="0000:1b:00.0", class_code=0x068000, vendor_id=0x8086).is_nvswitch
