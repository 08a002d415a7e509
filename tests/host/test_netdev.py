"""read_netdevs against the real upstream sysfs trees and small hand-built trees."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import agentd.host.fs as fs
from agentd.host.fs import HostRoot, ReadContext
from agentd.host.netdev import read_netdevs
from tests.support.fixtures import SYSFS_TREES, flattened_copy


def _read(root: Path, **kw):
    ctx = ReadContext(HostRoot.at(root), "netdev")
    return read_netdevs(ctx, **kw), ctx


def _by_name(netdevs):
    return {n.name: n for n in netdevs}


def _file_int(path: Path) -> int:
    return int(path.read_text().strip())


@pytest.mark.parametrize("flattened", [False, True], ids=["as-is", "flattened"])
def test_procfs_eth0(flattened, tmp_path):
    src = SYSFS_TREES / "procfs-fixtures"
    root = flattened_copy(src, tmp_path / "r") if flattened else src
    assert (src / "sys/class/net/eth0/device").is_symlink()
    netdevs, ctx = _read(root)
    assert ctx.errors == []
    (eth0,) = netdevs
    d = root / "sys/class/net/eth0"
    assert eth0.name == "eth0"
    assert (eth0.ifindex, eth0.type, eth0.mtu) == (2, 1, 1500)
    assert (eth0.operstate, eth0.carrier, eth0.speed_mbps) == ("up", True, 1000)
    assert (eth0.carrier_changes, eth0.carrier_up_count, eth0.carrier_down_count) == (2, 1, 1)
    assert eth0.address == "01:01:01:01:01:01"
    assert eth0.link_layer == "Ethernet"
    assert eth0.pfc is None and eth0.ethtool is None
    # ECN per priority, exactly as the files say
    assert eth0.ecn is not None
    for side, got in (("roce_np", eth0.ecn.np), ("roce_rp", eth0.ecn.rp)):
        files = {int(p.name): _file_int(p) == 1 for p in (d / "ecn" / side / "enable").iterdir()}
        assert got == files
    assert eth0.ecn.np == {0: True, 1: True, 2: False, 3: True, 4: True, 5: False, 6: True, 7: True}
    assert eth0.ecn.rp == {0: True, 1: True, 2: False, 3: True, 4: True, 5: False, 6: True, 7: False}
    if not flattened:  # device -> ../../../devices/pci0000:00/0000:00:1f.6/
        assert (eth0.pci_bus_id, eth0.is_virtual) == ("0000:00:1f.6", False)
    else:  # the flattened link is a plain file: no PCI id, but no exception either
        assert eth0.pci_bus_id is None


def test_node_exporter_as_is():
    root = SYSFS_TREES / "node-exporter-fixtures"
    assert (root / "sys/class/net/eth0").is_symlink()
    netdevs, ctx = _read(root)
    assert ctx.errors == []
    # bonding_masters is a plain file: skipped
    assert [n.name for n in netdevs] == ["bond0", "dmz", "eth0", "int"]
    n = _by_name(netdevs)
    bond0 = n["bond0"]
    assert (bond0.speed_mbps, bond0.is_virtual, bond0.pci_bus_id) == (None, True, None)  # speed -1
    assert bond0.bond_slaves == ()  # empty bonding/slaves
    assert (bond0.mtu, bond0.operstate, bond0.carrier, bond0.ifindex) == (1500, "up", True, 2)
    assert n["dmz"].bond_slaves == ("eth0", "eth4")
    assert n["int"].bond_slaves == ("eth5", "eth1")
    assert n["dmz"].speed_mbps == 1000
    # eth0 is a link into devices/pci0000:00/0000:00:03.0/0000:03:00.0/net/eth0 without a
    # device link in the fixture: the PCI function comes from the path
    eth0 = n["eth0"]
    assert (eth0.pci_bus_id, eth0.is_virtual) == ("0000:03:00.0", False)
    assert (eth0.mtu, eth0.speed_mbps, eth0.type) == (
        _file_int(root / "sys/class/net/eth0/mtu"), _file_int(root / "sys/class/net/eth0/speed"), 1)
    assert all(x.ecn is None for x in netdevs)  # no ecn dirs


def test_node_exporter_flattened(tmp_path):
    netdevs, ctx = _read(flattened_copy(SYSFS_TREES / "node-exporter-fixtures", tmp_path / "r"))
    assert ctx.errors == []
    assert [n.name for n in netdevs] == ["bond0", "dmz", "int"]  # flattened eth0 link is a file


def test_gpud_has_no_class_net():
    netdevs, ctx = _read(SYSFS_TREES / "gpud-h100-ndr")
    assert netdevs == ()
    assert [(e.path, e.kind) for e in ctx.errors] == [("sys/class/net", "missing")]


# ---------------------------------------------------------------------------
# hand-built trees


def _w(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _ln(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


def _iface(d: Path, *, ifindex: int, mtu: int = 9000, operstate: str = "up", speed: str = "400000") -> None:
    for name, value in (("ifindex", ifindex), ("type", 1), ("mtu", mtu), ("operstate", operstate),
                        ("carrier", 1), ("speed", speed), ("address", "b8:3f:d2:2a:1a:1c"),
                        ("carrier_changes", 4), ("carrier_up_count", 2), ("carrier_down_count", 2)):
        _w(d / name, f"{value}\n")


def _node(root: Path) -> None:
    fn = "devices/pci0000:00/0000:00:01.0/0000:1b:00.0"
    pf = root / "sys" / fn / "net/ens1f0np0"
    _iface(pf, ifindex=4)
    _ln(pf / "device", "../../../0000:1b:00.0")
    _ln(pf / "master", "../../../../../virtual/net/bond0")
    for side in ("roce_np", "roce_rp"):
        for prio in range(8):
            _w(pf / f"ecn/{side}/enable/{prio}", "1\n" if prio == 3 else "0\n")
    _ln(root / "sys/class/net/ens1f0np0", f"../../{fn}/net/ens1f0np0")
    bond = root / "sys/devices/virtual/net/bond0"
    _iface(bond, ifindex=9, speed="-1")
    _w(bond / "bonding/slaves", "ens1f0np0\n")
    _ln(root / "sys/class/net/bond0", "../../devices/virtual/net/bond0")
    lo = root / "sys/devices/virtual/net/lo"
    _iface(lo, ifindex=1, mtu=65536, operstate="unknown")
    _ln(root / "sys/class/net/lo", "../../devices/virtual/net/lo")
    _w(root / "sys/class/net/bonding_masters", "bond0\n")


def test_hand_built_node(tmp_path):
    _node(tmp_path)
    netdevs, ctx = _read(tmp_path)
    assert ctx.errors == []
    assert [n.name for n in netdevs] == ["bond0", "ens1f0np0", "lo"]
    n = _by_name(netdevs)
    pf = n["ens1f0np0"]
    assert (pf.pci_bus_id, pf.is_virtual, pf.master, pf.mtu, pf.speed_mbps) == (
        "0000:1b:00.0", False, "bond0", 9000, 400000)
    assert pf.ecn is not None
    assert pf.ecn.np == pf.ecn.rp == {p: p == 3 for p in range(8)}
    bond = n["bond0"]
    assert (bond.is_virtual, bond.pci_bus_id, bond.bond_slaves, bond.speed_mbps, bond.ecn) == (
        True, None, ("ens1f0np0",), None, None)
    assert (n["lo"].is_virtual, n["lo"].operstate, n["lo"].mtu) == (True, "unknown", 65536)


def test_ecn_can_be_skipped(tmp_path):
    _node(tmp_path)
    netdevs, _ = _read(tmp_path, ecn=False)
    assert all(n.ecn is None for n in netdevs)


def test_einval_carrier_and_speed_are_unknown_not_errors(tmp_path, monkeypatch):
    """A down link answers EINVAL for carrier and speed."""
    _node(tmp_path)
    real = fs.read_bounded

    def fake(path, max_bytes=fs.MAX_ATTR_BYTES):
        if str(path).endswith(("ens1f0np0/carrier", "ens1f0np0/speed")):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(path, max_bytes)

    monkeypatch.setattr(fs, "read_bounded", fake)
    netdevs, ctx = _read(tmp_path)
    assert ctx.errors == []
    pf = _by_name(netdevs)["ens1f0np0"]
    assert (pf.carrier, pf.speed_mbps, pf.mtu) == (None, None, 9000)


def test_bad_files_are_errors_and_the_rest_is_read(tmp_path):
    _node(tmp_path)
    pf = tmp_path / "sys/devices/pci0000:00/0000:00:01.0/0000:1b:00.0/net/ens1f0np0"
    (pf / "mtu").write_text("jumbo\n")
    (pf / "ecn/roce_np/enable/5").write_text("2\n")
    (tmp_path / "sys/devices/virtual/net/bond0/operstate").unlink()
    netdevs, ctx = _read(tmp_path)
    assert sorted((e.path, e.kind) for e in ctx.errors) == [
        ("sys/class/net/bond0/operstate", "missing"),
        ("sys/class/net/ens1f0np0/ecn/roce_np/enable/5", "unparsable"),
        ("sys/class/net/ens1f0np0/mtu", "unparsable"),
    ]
    n = _by_name(netdevs)
    assert n["ens1f0np0"].mtu is None and n["ens1f0np0"].ifindex == 4
    assert n["ens1f0np0"].ecn.np == {p: p == 3 for p in range(8) if p != 5}
    assert n["bond0"].operstate is None and n["bond0"].bond_slaves == ("ens1f0np0",)
    assert n["lo"].mtu == 65536


def test_escaping_link_is_an_error(tmp_path):
    _node(tmp_path)
    _ln(tmp_path / "sys/class/net/evil", "/proc/self")
    netdevs, ctx = _read(tmp_path)
    assert [n.name for n in netdevs] == ["bond0", "ens1f0np0", "lo"]
    assert [(e.path, e.kind) for e in ctx.errors] == [("sys/class/net/evil", "escape")]
