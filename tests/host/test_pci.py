"""PCI reader: real upstream sysfs fixtures, synthesized trees and config space images."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.host import pci
from agentd.host.fs import HostRoot, ReadContext
from agentd.host.pci import parse_config_space, parse_link_speed, read_pci, tree_position
from agentd.model import ReadError
from tests.support.fixtures import SYSFS_TREES, TREES, flattened_copy
from tests.support.pcitree import BRIDGE, GPU_3D, NIC_IB, NVME, PORT_TYPE_CODES, PciTree, config_space


def read(root: Path) -> tuple[tuple, ReadContext]:
    ctx = ReadContext(HostRoot.at(root), "pci")
    return read_pci(ctx), ctx


def by_bdf(devs) -> dict:
    return {d.bdf: d for d in devs}


# ---------------------------------------------------------------------------
# real fixtures


def test_procfs_fixture_tree():
    root = SYSFS_TREES / "procfs-fixtures"
    devs, ctx = read(root)
    assert ctx.errors == []
    assert [d.bdf for d in devs] == ["0000:00:02.1", "0000:01:00.0", "0000:a2:00.0"]
    d = by_bdf(devs)
    port = d["0000:00:02.1"]
    assert (port.class_code, port.vendor_id, port.device_id) == (0x060400, 0x1022, 0x1634)
    assert (port.subsystem_vendor_id, port.subsystem_device_id) == (0x17AA, 0x5095)
    assert port.is_bridge and not port.is_gpu
    assert port.numa_node is None  # sysfs says -1
    assert port.local_cpulist == "0-15"
    assert (port.current_link_width, port.max_link_width) == (4, 8)
    assert port.current_link_speed == "8.0 GT/s PCIe" and port.current_link_speed_gts == 8.0
    assert port.driver == "pcieport"
    assert (port.root_complex, port.parent_chain) == ("pci0000:00", ())
    nvme = d["0000:01:00.0"]
    assert nvme.class_code == 0x010802 and nvme.vendor_id == 0xC0A9
    assert nvme.parent_chain == ("0000:00:02.1",) and nvme.root_complex == "pci0000:00"
    assert nvme.driver == "nvme"
    nic = d["0000:a2:00.0"]
    assert nic.numa_node == 1 and nic.local_cpulist == "64-127"
    assert nic.max_link_speed_gts == 16.0 and nic.current_link_width == 8
    assert nic.driver == "ice"  # the link dangles: its target is not in the fixture
    assert not os.path.exists(root / "sys/devices/pci0000:a2/0000:a2:00.0/driver")
    assert (nic.root_complex, nic.parent_chain) == ("pci0000:a2", ())
    # No config files in the fixtures: port type and ACS unknown, and that is not an error.
    assert all(x.pcie_port_type is None and x.acs_ctrl is None for x in devs)
    assert ctx.files_read > 0


def test_node_exporter_fixture_tree():
    devs, ctx = read(SYSFS_TREES / "node-exporter-fixtures")
    assert ctx.errors == []
    d = by_bdf(devs)
    assert sorted(d) == ["0000:00:02.1", "0000:01:00.0", "0000:45:00.0"]
    nvme = d["0000:01:00.0"]
    assert (nvme.current_link_speed_gts, nvme.max_link_speed_gts) == (8.0, 16.0)
    assert nvme.max_link_speed == "16.0 GT/s PCIe"
    assert nvme.parent_chain == ("0000:00:02.1",)
    bridge = d["0000:00:02.1"]
    assert (bridge.current_link_width, bridge.max_link_width) == (4, 8)
    igb = d["0000:45:00.0"]
    assert igb.class_code == 0x020000 and (igb.vendor_id, igb.device_id) == (0x8086, 0x1521)
    assert igb.numa_node == 0 and igb.local_cpulist == "0-63,128-191"
    assert (igb.root_complex, igb.parent_chain) == ("pci0000:40", ("0000:40:01.3",))
    assert igb.driver == "igb" and igb.current_link_speed_gts == 5.0


@pytest.mark.parametrize("tree", ["procfs-fixtures", "node-exporter-fixtures"])
def test_fixture_values_match_the_files(tree):
    root = SYSFS_TREES / tree
    devs, _ = read(root)
    for dev in devs:
        d = root / "sys/bus/pci/devices" / dev.bdf
        assert dev.class_code == int((d / "class").read_text(), 16)
        assert dev.vendor_id == int((d / "vendor").read_text(), 16)
        for attr in ("current_link_width", "max_link_width"):
            if (d / attr).exists():
                assert getattr(dev, attr) == int((d / attr).read_text())


@pytest.mark.parametrize("flattened", [False, True], ids=["as-is", "flattened"])
@pytest.mark.parametrize("tree", TREES)
def test_reads_each_tree_without_raising(tree, flattened, tmp_path):
    src = SYSFS_TREES / tree  # flattened: links are regular files, not directories
    devs, ctx = read(flattened_copy(src, tmp_path / tree) if flattened else src)
    assert isinstance(devs, tuple)
    assert all(isinstance(e, ReadError) and e.source == "pci" for e in ctx.errors)


# ---------------------------------------------------------------------------
# synthesized trees


def test_config_space_from_a_tree(tmp_path):
    t = PciTree(tmp_path)
    t.add("0000:00:01.0", "pci0000:00", BRIDGE, port_type="root_port", acs_ctrl=0x001D, driver="pcieport")
    t.switch("0000:01:00.0", ["0000:02:00.0"], "0000:00:01.0")
    t.add("0000:03:00.0", "0000:02:00.0", GPU_3D, numa_node=1, cpulist="56-111", driver="nvidia")
    devs, ctx = read(tmp_path)
    assert ctx.errors == []
    d = by_bdf(devs)
    assert (d["0000:00:01.0"].pcie_port_type, d["0000:00:01.0"].acs_ctrl) == ("root_port", 0x001D)
    assert (d["0000:01:00.0"].pcie_port_type, d["0000:02:00.0"].pcie_port_type) == ("upstream", "downstream")
    gpu = d["0000:03:00.0"]
    assert gpu.pcie_port_type == "endpoint" and gpu.acs_ctrl is None and gpu.is_gpu
    assert gpu.parent_chain == ("0000:00:01.0", "0000:01:00.0", "0000:02:00.0")
    assert (gpu.numa_node, gpu.local_cpulist, gpu.driver) == (1, "56-111", "nvidia")


def test_non_root_config_and_eacces_are_silent(tmp_path, monkeypatch):
    t = PciTree(tmp_path, config_size=64)  # what a non-root reader gets
    t.add("0000:00:01.0", "pci0000:00", BRIDGE, acs_ctrl=0x1D)
    devs, ctx = read(tmp_path)
    assert ctx.errors == [] and devs[0].pcie_port_type is None and devs[0].acs_ctrl is None

    real = pci.read_bounded

    def deny_config(path, max_bytes=pci.CONFIG_LEGACY_BYTES):
        if Path(path).name == "config":
            raise PermissionError(13, "Permission denied")
        return real(path, max_bytes)

    monkeypatch.setattr(pci, "read_bounded", deny_config)
    PciTree(tmp_path / "b").add("0000:00:01.0", "pci0000:00", BRIDGE)
    devs, ctx = read(tmp_path / "b")
    assert ctx.errors == [] and devs[0].pcie_port_type is None


def test_missing_optional_attributes_are_none_not_errors(tmp_path):
    PciTree(tmp_path, config=False).add("0000:00:1f.0", "pci0000:00", 0x060100, numa_node=None, link=None)
    devs, ctx = read(tmp_path)
    assert ctx.errors == []
    dev = devs[0]
    assert dev.numa_node is None and dev.current_link_speed is None and dev.max_link_width is None
    assert dev.driver is None and dev.pcie_port_type is None


def test_unknown_link_values(tmp_path):
    t = PciTree(tmp_path, config=False)
    t.add("0000:00:01.0", "pci0000:00", BRIDGE, link=("Unknown", 0, "8 GT/s", 255))
    t.add("0000:00:02.0", "pci0000:00", BRIDGE, link=("Unknown speed", 255, "2.5 GT/s PCIe", 1))
    devs, ctx = read(tmp_path)
    assert ctx.errors == []
    a, b = devs
    assert a.current_link_speed == "Unknown" and a.current_link_speed_gts is None
    assert a.max_link_speed_gts == 8.0
    assert a.current_link_width == 0  # link down: kept, a check may judge it
    assert a.max_link_width is None  # 255: unknown
    assert b.current_link_speed_gts is None and b.current_link_width is None and b.max_link_speed_gts == 2.5


def test_bad_class_skips_the_device_and_records_why(tmp_path):
    t = PciTree(tmp_path, config=False)
    t.add("0000:00:01.0", "pci0000:00", BRIDGE)
    t.add("0000:00:02.0", "pci0000:00", BRIDGE)
    t.add("0000:00:03.0", "pci0000:00", BRIDGE)
    (tmp_path / "sys/devices/pci0000:00/0000:00:01.0/class").unlink()
    (tmp_path / "sys/devices/pci0000:00/0000:00:02.0/class").write_text("garbage\n")
    (tmp_path / "sys/devices/pci0000:00/0000:00:03.0/vendor").write_text("0xzz\n")
    devs, ctx = read(tmp_path)
    assert [d.bdf for d in devs] == ["0000:00:03.0"]
    assert devs[0].vendor_id is None
    kinds = sorted((e.kind, e.path.rsplit("/", 2)[-2]) for e in ctx.errors)
    assert kinds == [("missing", "0000:00:01.0"), ("unparsable", "0000:00:02.0"), ("unparsable", "0000:00:03.0")]


def test_escaping_and_foreign_entries(tmp_path):
    t = PciTree(tmp_path, config=False)
    t.add("0000:00:01.0", "pci0000:00", BRIDGE)
    os.symlink("../../../../../../../../etc", tmp_path / "sys/bus/pci/devices/0000:00:09.0")
    (tmp_path / "sys/bus/pci/devices/not-a-bdf").write_text("")
    devs, ctx = read(tmp_path)
    assert [d.bdf for d in devs] == ["0000:00:01.0"]
    assert sorted(e.kind for e in ctx.errors) == ["escape", "unparsable"]


def test_root_complex_behind_hyperv_and_vmd(tmp_path):
    t = PciTree(tmp_path, config=False)
    vmbus = "LNXSYSTM:00/LNXSYBUS:00/PNP0A03:00/device:07/VMBUS:01/00000001-0001-0000-3130-444532304235"
    t.root_complex("pci0001:00", under=vmbus)
    t.add("0001:00:00.0", "pci0001:00", GPU_3D)
    t.add("0000:64:00.5", "pci0000:64", 0x010400)  # Intel VMD controller
    t.root_complex("pci10000:00", under="pci0000:64/0000:64:00.5")
    t.add("10000:00:02.0", "pci10000:00", BRIDGE)
    t.add("10000:01:00.0", "10000:00:02.0", NVME)
    devs, ctx = read(tmp_path)
    assert ctx.errors == []
    assert [d.bdf for d in devs] == ["0000:64:00.5", "0001:00:00.0", "10000:00:02.0", "10000:01:00.0"]
    d = by_bdf(devs)
    assert (d["0001:00:00.0"].root_complex, d["0001:00:00.0"].parent_chain) == ("pci0001:00", ())
    assert (d["10000:01:00.0"].root_complex, d["10000:01:00.0"].parent_chain) == ("pci10000:00", ("10000:00:02.0",))
    assert tree_position("sys/devices/platform/foo") == (None, ())


@pytest.mark.parametrize(
    "text, gts",
    [("16.0 GT/s PCIe", 16.0), ("8 GT/s", 8.0), ("2.5 GT/s PCIe", 2.5), ("64.0 GT/s PCIe", 64.0),
     ("Unknown", None), ("Unknown speed", None), ("", None), (None, None), ("fast", None)],
)
def test_parse_link_speed(text, gts):
    assert parse_link_speed(text) == gts


# ---------------------------------------------------------------------------
# config space images


def test_root_port_with_acs():
    buf = config_space(class_code=BRIDGE, port_type="root_port", acs_ctrl=0x001D)
    assert len(buf) == 4096
    assert parse_config_space(buf) == ("root_port", 0x001D)
    assert parse_config_space(buf[:256]) == ("root_port", None)  # no extended space: ACS unknown
    assert parse_config_space(buf[:64]) == (None, None)  # non-root read


def test_downstream_port_and_endpoint():
    assert parse_config_space(config_space(class_code=BRIDGE, port_type="downstream")) == ("downstream", None)
    assert parse_config_space(config_space(class_code=BRIDGE, port_type="downstream", acs_ctrl=0)) == ("downstream", 0)
    assert parse_config_space(config_space(port_type="endpoint", size=256)) == ("endpoint", None)
    assert parse_config_space(config_space(port_type=None)) == (None, None)  # conventional PCI: no cap list


@pytest.mark.parametrize("name", sorted(PORT_TYPE_CODES))
def test_every_port_type(name):
    assert parse_config_space(config_space(port_type=name, size=256))[0] == name


def test_corrupt_capability_lists_terminate():
    buf = bytearray(config_space(class_code=BRIDGE, port_type="root_port", acs_ctrl=0x1D))
    loop = bytearray(buf)
    loop[0x51] = 0x40  # MSI -> PM -> MSI ...
    assert parse_config_space(bytes(loop)) == (None, 0x1D)
    ext_loop = bytearray(buf)
    struct.pack_into("<I", ext_loop, 0x100, 0x0001 | (0x100 << 20))  # AER -> AER ...
    assert parse_config_space(bytes(ext_loop)) == ("root_port", None)
    beyond = bytearray(buf[:256])
    beyond[0x51] = 0xFC  # next pointer at the very end of the buffer
    assert parse_config_space(bytes(beyond)) == (None, None)
    assert parse_config_space(b"\xff" * 4096) == (None, None)  # device gone: all ones
    assert parse_config_space(b"") == (None, None)
    assert parse_config_space(None) == (None, None)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096), st.lists(st.tuples(st.integers(0, 4095), st.integers(0, 255)), max_size=40))
def test_garbage_config_never_raises(noise, pokes):
    parse_config_space(noise)
    buf = bytearray(config_space(class_code=BRIDGE, port_type="downstream", acs_ctrl=0x5F))
    for off, val in pokes:
        buf[off] = val
    port, acs = parse_config_space(bytes(buf))
    assert port is None or port in PORT_TYPE_CODES
    assert acs is None or 0 <= acs <= 0xFFFF


def test_nvswitch_and_nics_read_back(tmp_path):
    t = PciTree(tmp_path)
    t.add("0000:00:01.0", "pci0000:00", BRIDGE)
    t.add("0000:01:00.0", "0000:00:01.0", 0x068000, vendor=0x10DE, device=0x22A3)
    t.add("0000:02:00.0", "pci0000:00", NIC_IB, vendor=0x15B3, device=0x1021, driver="mlx5_core")
    devs, _ = read(tmp_path)
    d = by_bdf(devs)
    assert d["0000:01:00.0"].is_nvswitch and not d["0000:01:00.0"].is_gpu
    assert d["0000:02:00.0"].class_code == NIC_IB and d["0000:02:00.0"].driver == "mlx5_core"
