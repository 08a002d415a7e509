"""read_infiniband against the real upstream sysfs trees and small hand-built trees."""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

import pytest

import agentd.host.fs as fs
from agentd.collection.collector import IB_PARTS, PROBE_TIERS, Collector
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot, ReadContext
from agentd.host.infiniband import PARTS, TCLASS_MAX_BYTES, parse_tclass, read_infiniband
from agentd.model import TclassOverride
from tests.support.fixtures import SYSFS_TREES, TREES, flattened_copy, writable_copy
from tests.support.ib_oracles import roce_v2_gid_index


def _root(tree: str, flattened: bool, tmp_path: Path) -> Path:
    """The vendored tree as-is (real symlinks), or a copy with its links flattened into files."""
    src = SYSFS_TREES / tree
    return flattened_copy(src, tmp_path / tree) if flattened else src


def _read(root: Path, parts=PARTS):
    ctx = ReadContext(HostRoot.at(root), "infiniband")
    return read_infiniband(ctx, parts), ctx


def _by_name(hcas):
    return {h.name: h for h in hcas}


def _ints(d: Path, skip=()) -> dict[str, int]:
    out = {}
    if d.is_dir():
        for f in d.iterdir():
            text = f.read_text().strip()
            if f.name not in skip and re.fullmatch(r"\d+", text):
                out[f.name] = int(text)
    return out


# ---------------------------------------------------------------------------
# the real trees


@pytest.mark.parametrize("flattened", [False, True], ids=["as-is", "flattened"])
@pytest.mark.parametrize("tree", TREES)
def test_every_tree_matches_its_files(tree, flattened, tmp_path):
    root = _root(tree, flattened, tmp_path)
    hcas, ctx = _read(root)
    assert ctx.errors == []
    class_dir = root / "sys/class/infiniband"
    assert sorted(h.name for h in hcas) == sorted(p.name for p in class_dir.iterdir())
    for hca in hcas:
        hdir = class_dir / hca.name
        if (hdir / "hca_type").exists():
            assert hca.hca_type == (hdir / "hca_type").read_text().strip()
        assert hca.fw_ver == (hdir / "fw_ver").read_text().strip()
        assert [p.port for p in hca.ports] == sorted(int(p.name) for p in (hdir / "ports").iterdir())
        for port in hca.ports:
            pdir = hdir / "ports" / str(port.port)
            rate = (pdir / "rate").read_text().strip()
            m = re.fullmatch(r"(\d+) Gb/sec \((\d+)X(?: (\w+))?\)", rate)
            assert m, rate
            assert port.rate_raw == rate
            assert (port.rate_gbps, port.width, port.generation) == (float(m[1]), int(m[2]), m[3])
            sid, sname = (pdir / "state").read_text().strip().split(": ")
            assert (port.state_id, port.state) == (int(sid), sname)
            pid, pname = (pdir / "phys_state").read_text().strip().split(": ")
            assert (port.phys_state_id, port.phys_state) == (int(pid), pname)
            assert port.link_layer == (pdir / "link_layer").read_text().strip()
            expected = _ints(pdir / "counters")
            expected.update({k: v for k, v in _ints(pdir / "counters_ext").items() if k not in expected})
            assert port.counters == expected
            assert port.hw_counters == _ints(pdir / "hw_counters", skip={"lifespan"})
            assert "lifespan" not in port.hw_counters


def test_gpud_h100():
    root = SYSFS_TREES / "gpud-h100-ndr"
    hcas, ctx = _read(root)
    # natural order: numbering gaps (no mlx5_2/3) and the bond after the numbered ones
    assert [h.name for h in hcas] == [
        "mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9", "mlx5_bond_0"]
    # gpud files have no trailing newline
    assert not (root / "sys/class/infiniband/mlx5_0/ports/1/rate").read_bytes().endswith(b"\n")
    h = _by_name(hcas)
    p = h["mlx5_0"].ports[0]
    assert (h["mlx5_0"].hca_type, h["mlx5_0"].fw_ver, h["mlx5_0"].board_id) == ("MT4129", "28.41.1000", "MT_0000000838")
    assert (p.state, p.state_id, p.phys_state, p.phys_state_id) == ("ACTIVE", 4, "LinkUp", 5)
    assert (p.rate_raw, p.rate_gbps, p.width, p.generation) == ("400 Gb/sec (4X NDR)", 400.0, 4, "NDR")
    assert p.link_layer == "InfiniBand" and p.is_active
    assert p.counters["port_rcv_data"] == 230539874932483
    assert p.counters["port_xmit_data"] == 230442669431839
    assert p.counters["port_xmit_wait"] == 2489603687
    assert p.counters["excessive_buffer_overrun_errors"] == 15
    assert p.counters["port_rcv_errors"] == 14
    assert p.hw_counters["rx_write_requests"] == 3809045607
    assert p.hw_counters["roce_adp_retrans"] == 3
    assert len(p.counters) == 21 and len(p.hw_counters) == 25
    bond = h["mlx5_bond_0"]
    bp = bond.ports[0]
    assert (bond.hca_type, bond.fw_ver) == ("MT41692", "32.38.3056")
    assert (bp.rate_gbps, bp.width, bp.generation, bp.link_layer) == (200.0, 2, "NDR", "Ethernet")
    # no device links, no gids, no class/net in this fixture
    assert all(x.pci_bus_id is None and x.numa_node is None and x.driver is None for x in hcas)
    assert all(pt.gids == () and pt.netdev is None for x in hcas for pt in x.ports)


@pytest.mark.parametrize("flattened", [False, True], ids=["as-is", "flattened"])
def test_procfs_fixture(flattened, tmp_path):
    hcas, ctx = _read(_root("procfs-fixtures", flattened, tmp_path))
    assert ctx.errors == []
    h = _by_name(hcas)
    assert list(h) == ["hfi1_0", "mlx4_0", "mlx5_0"]
    hfi = h["hfi1_0"]
    assert hfi.hca_type is None  # no hca_type file for Omni-Path
    assert (hfi.ports[0].rate_gbps, hfi.ports[0].width, hfi.ports[0].generation) == (100.0, 4, "EDR")
    assert hfi.ports[0].counters["port_rcv_data"] == 345091702026
    assert hfi.ports[0].hw_counters == {}
    mlx4 = h["mlx4_0"]
    assert [(p.port, p.rate_gbps, p.generation, p.link_layer) for p in mlx4.ports] == [
        (1, 40.0, "QDR", "InfiniBand"), (2, 40.0, "QDR", "InfiniBand")]
    assert mlx4.ports[0].counters["port_xmit_wait"] == 3599
    mlx5 = h["mlx5_0"]
    p = mlx5.ports[0]
    assert mlx5.node_guid == "0a7f:bc12:45ef:d23b"
    assert (p.rate_gbps, p.width, p.generation) == (25.0, 1, "EDR")
    # the fixture's phys_state quirk "4: ACTIVE" is kept as printed, not renamed by number
    assert (p.phys_state_id, p.phys_state) == (4, "ACTIVE")
    assert (p.state_id, p.state) == (4, "ACTIVE")
    assert p.counters["port_xmit_data"] == 2880761508848
    assert p.hw_counters["duplicate_request"] == 41
    assert p.hw_counters["req_cqe_error"] == 3481
    assert "lifespan" not in p.hw_counters


@pytest.mark.parametrize("flattened", [False, True], ids=["as-is", "flattened"])
def test_node_exporter_fixture(flattened, tmp_path):
    hcas, ctx = _read(_root("node-exporter-fixtures", flattened, tmp_path))
    assert ctx.errors == []  # "N/A (no PMA)" counters are skipped, not errors
    h = _by_name(hcas)
    i40 = h["i40iw0"].ports[0]
    assert (i40.rate_raw, i40.rate_gbps, i40.width, i40.generation) == ("10 Gb/sec (4X)", 10.0, 4, None)
    assert i40.counters == {}
    p1 = h["mlx4_0"].ports[0]
    assert p1.counters["port_xmit_wait"] == 4294967295  # saturated 32-bit PMA counter, stored raw
    assert p1.counters["port_rcv_data_64"] == 4631917  # counters_ext merged in
    assert p1.counters["port_unicast_xmit_packets"] == 61239
    assert p1.counters["port_rcv_data"] == 4631917


def test_parts_not_asked_for_are_not_read():
    hcas, ctx = _read(SYSFS_TREES / "gpud-h100-ndr", ("link",))
    assert all(p.counters == {} and p.hw_counters == {} for h in hcas for p in h.ports)
    assert all(h.fw_ver is None and h.hca_type is None for h in hcas)
    assert all(p.state == "ACTIVE" and p.rate_gbps is not None for h in hcas for p in h.ports)
    full, ctx_full = _read(SYSFS_TREES / "gpud-h100-ndr")
    assert ctx.files_read < ctx_full.files_read
    assert [h.name for h in hcas] == [h.name for h in full]


def test_unknown_part_is_refused(tmp_path):
    with pytest.raises(ValueError, match="state"):
        _read(tmp_path, ("link", "state"))


# ---------------------------------------------------------------------------
# one bad file never hides the rest


def test_garbage_counter_is_an_error_and_the_rest_is_read(tmp_path):
    root = writable_copy(SYSFS_TREES / "gpud-h100-ndr", tmp_path / "r")
    pdir = root / "sys/class/infiniband/mlx5_4/ports/1"
    (pdir / "counters/symbol_error").write_text("garbage\n")
    (pdir / "rate").write_text("fast")
    (root / "sys/class/infiniband/mlx5_6/ports/1/state").unlink()
    hcas, ctx = _read(root)
    errs = {(e.path, e.kind) for e in ctx.errors}
    assert errs == {
        ("sys/class/infiniband/mlx5_4/ports/1/counters/symbol_error", "unparsable"),
        ("sys/class/infiniband/mlx5_4/ports/1/rate", "unparsable"),
        ("sys/class/infiniband/mlx5_6/ports/1/state", "missing"),
    }
    h = _by_name(hcas)
    assert len(hcas) == 9
    p4 = h["mlx5_4"].ports[0]
    assert "symbol_error" not in p4.counters and len(p4.counters) == 20
    assert p4.counters["port_rcv_data"] == 230539874932483
    assert (p4.rate_raw, p4.rate_gbps, p4.state, p4.link_layer) == ("fast", None, "ACTIVE", "InfiniBand")
    p6 = h["mlx5_6"].ports[0]
    assert p6.state is None and p6.phys_state == "LinkUp" and p6.rate_gbps == 400.0


@pytest.mark.parametrize("err", [errno.EIO, errno.EACCES])
def test_unreadable_counter_is_an_error_and_the_rest_is_read(err, monkeypatch):
    real = fs.read_bounded
    bad = ("mlx5_5/ports/1/counters/port_rcv_data", "mlx5_5/ports/1/hw_counters/out_of_buffer")

    def fake(path, max_bytes=fs.MAX_ATTR_BYTES):
        if str(path).endswith(bad):
            raise OSError(err, os.strerror(err))
        return real(path, max_bytes)

    monkeypatch.setattr(fs, "read_bounded", fake)
    hcas, ctx = _read(SYSFS_TREES / "gpud-h100-ndr")
    assert sorted((e.path, e.kind) for e in ctx.errors) == [
        ("sys/class/infiniband/mlx5_5/ports/1/counters/port_rcv_data", "unreadable"),
        ("sys/class/infiniband/mlx5_5/ports/1/hw_counters/out_of_buffer", "unreadable"),
    ]
    assert all(e.source == "infiniband" for e in ctx.errors)
    p = _by_name(hcas)["mlx5_5"].ports[0]
    assert "port_rcv_data" not in p.counters and p.counters["port_xmit_data"] == 230442669431839
    assert "out_of_buffer" not in p.hw_counters and p.hw_counters["rx_write_requests"] == 3809045607
    assert p.state == "ACTIVE" and _by_name(hcas)["mlx5_5"].fw_ver == "28.41.1000"


# ---------------------------------------------------------------------------
# hand-built trees: device links, GID tables, port netdevs

LL = "fe80:0000:0000:0000:1e34:daff:fe5a:1b2c"
V4 = "0000:0000:0000:0000:0000:ffff:0a00:0105"
V4B = "0000:0000:0000:0000:0000:ffff:0a00:0207"
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"
V1, V2 = "IB/RoCE v1", "RoCE v2"


def _w(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _ln(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


def _port(pdir: Path, *, link_layer: str, rate: str = "400 Gb/sec (4X NDR)", state: str = "4: ACTIVE") -> None:
    _w(pdir / "state", state + "\n")
    _w(pdir / "phys_state", "5: LinkUp\n")
    _w(pdir / "rate", rate + "\n")
    _w(pdir / "link_layer", link_layer + "\n")
    _w(pdir / "lid", "0x1f\n")
    _w(pdir / "sm_lid", "0x1\n")


def _gid_table(pdir: Path, table: list[tuple[str, str, str]]) -> None:
    for i, (gid, gtype, ndev) in enumerate(table):
        _w(pdir / f"gids/{i}", gid + "\n")
        _w(pdir / f"gid_attrs/types/{i}", gtype + "\n" if gtype else "")
        _w(pdir / f"gid_attrs/ndevs/{i}", ndev + "\n" if ndev else "")


def _roce_node(root: Path) -> None:
    """A ConnectX RoCE function at 0000:1b:00.0 the way the kernel links it."""
    fn = root / "sys/devices/pci0000:00/0000:00:01.0/0000:1b:00.0"
    _w(fn / "numa_node", "1\n")
    _ln(fn / "driver", "../../../../bus/pci/drivers/mlx5_core")  # dangling, like the fixtures
    _w(fn / "net/ens1f0np0/dev_port", "0\n")
    dev = fn / "infiniband/mlx5_0"
    _w(dev / "hca_type", "MT4129\n")
    _w(dev / "fw_ver", "28.39.1002\n")
    _w(dev / "node_guid", "a088:c203:00e3:142a\n")
    _ln(dev / "device", "../../../0000:1b:00.0")
    _port(dev / "ports/1", link_layer="Ethernet")
    _gid_table(dev / "ports/1", [
        (LL, V1, "ens1f0np0"), (LL, V2, "ens1f0np0"),
        (ZERO, "", ""), (ZERO, "", ""),
        (V4, V1, "ens1f0np0"), (V4, V2, "ens1f0np0"),  # types/4,5 will fail with EINVAL
        (ZERO, "", ""), (V4B, V1, "ens1f0np0"),  # gids/7 will fail with EINVAL (empty slot)
        (V4B, V1, "ens1f0np0"), (V4B, V2, "ens1f0np0"),
    ])
    _ln(root / "sys/class/infiniband/mlx5_0", "../../devices/pci0000:00/0000:00:01.0/0000:1b:00.0/infiniband/mlx5_0")


def _recording(monkeypatch, einval: tuple[str, ...] = ()) -> list[str]:
    real = fs.read_bounded
    opened: list[str] = []

    def fake(path, max_bytes=fs.MAX_ATTR_BYTES):
        opened.append(str(path))
        if str(path).endswith(einval):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(path, max_bytes)

    monkeypatch.setattr(fs, "read_bounded", fake)
    return opened


def test_roce_gid_table(tmp_path, monkeypatch):
    _roce_node(tmp_path)
    einval = ("ports/1/gid_attrs/types/4", "ports/1/gid_attrs/types/5", "ports/1/gids/7")
    opened = _recording(monkeypatch, einval)
    (hca,), ctx = _read(tmp_path)
    assert ctx.errors == []  # EINVAL means "empty", never an error
    assert (hca.pci_bus_id, hca.numa_node, hca.driver) == ("0000:1b:00.0", 1, "mlx5_core")
    assert (hca.hca_type, hca.node_guid) == ("MT4129", "a088:c203:00e3:142a")
    port = hca.ports[0]
    assert (port.lid, port.sm_lid) == (0x1F, 1)
    assert [(g.index, g.gid, g.type, g.netdev) for g in port.gids] == [
        (0, LL, V1, "ens1f0np0"),
        (1, LL, V2, "ens1f0np0"),
        (4, V4, None, "ens1f0np0"),  # type unreadable: kept, but never chosen
        (5, V4, None, "ens1f0np0"),
        (8, V4B, V1, "ens1f0np0"),
        (9, V4B, V2, "ens1f0np0"),
    ]
    assert roce_v2_gid_index(port.gids) == 9
    assert port.netdev == "ens1f0np0"
    # the EINVAL paths really ran
    assert any(p.endswith("gid_attrs/types/4") for p in opened)
    assert any(p.endswith("ports/1/gids/7") for p in opened)
    # attributes of empty slots are never opened
    for i in (2, 3, 6, 7):
        assert not any(p.endswith((f"gid_attrs/types/{i}", f"gid_attrs/ndevs/{i}")) for p in opened)


def test_roce_netdev_without_gids(tmp_path, monkeypatch):
    _roce_node(tmp_path)
    opened = _recording(monkeypatch)
    (hca,), ctx = _read(tmp_path, ("inventory",))
    assert ctx.errors == [] and hca.ports[0].gids == ()
    assert hca.ports[0].netdev == "ens1f0np0"
    assert not any("/gids/" in p for p in opened)


def _ib_node(root: Path, *, device_link: bool) -> None:
    """A dual-port InfiniBand HCA at 0000:81:00.0 with two IPoIB netdevs."""
    fn = root / "sys/devices/pci0000:80/0000:80:02.0/0000:81:00.0"
    _w(fn / "numa_node", "-1\n")
    _w(fn / "net/ib0/dev_port", "0\n")
    _w(fn / "net/ib1/dev_id", "0x1\n")  # old driver: dev_id only
    dev = fn / "infiniband/mlx4_0"
    _w(dev / "hca_type", "MT4099\n")
    _w(dev / "fw_ver", "2.42.5000\n")
    if device_link:
        _ln(dev / "device", "../../../0000:81:00.0")
    for n in (1, 2):
        pdir = dev / f"ports/{n}"
        _port(pdir, link_layer="InfiniBand", rate="56 Gb/sec (4X FDR)")
        _gid_table(pdir, [(f"fe80:0000:0000:0000:0002:c903:0010:000{n}", "", ""), (ZERO, "", ""),
                          (f"fe80:0000:0000:0000:0002:c903:0010:00a{n}", "", "")])
    _ln(root / "sys/class/infiniband/mlx4_0", "../../devices/pci0000:80/0000:80:02.0/0000:81:00.0/infiniband/mlx4_0")


@pytest.mark.parametrize("device_link", [True, False])
def test_ib_ports_netdevs_and_pci(tmp_path, monkeypatch, device_link):
    _ib_node(tmp_path, device_link=device_link)
    opened = _recording(monkeypatch)
    (hca,), ctx = _read(tmp_path)
    assert ctx.errors == []
    # without a device link the BDF comes from the class entry's own path
    assert (hca.pci_bus_id, hca.numa_node) == ("0000:81:00.0", None)  # numa_node -1 -> None
    assert [(p.port, p.netdev, p.rate_gbps, p.generation) for p in hca.ports] == [
        (1, "ib0", 56.0, "FDR"), (2, "ib1", 56.0, "FDR")]
    # IB: the table is read up to the first empty slot (index 0 is the port GID)
    assert [[g.index for g in p.gids] for p in hca.ports] == [[0], [0]]
    assert hca.ports[0].gids[0].type is None
    assert not any(p.endswith("gids/2") for p in opened)


# The collector's IB probes (one per tier): together they open every file of a full read,
# each once (link_layer, which several parts need, aside), and their merge is a full read.


def _two_node_kinds(root: Path, node: str) -> None:
    if node == "roce":
        _roce_node(root)
        pdir = next(root.glob("sys/devices/**/ports/1"))
        _w(pdir / "counters/port_rcv_data", "7\n")
        _w(pdir / "sm_sl", "0\n")
        _w(pdir.parent.parent / "tc/1/traffic_class", "Global tclass=106\n")
    else:
        _ib_node(root, device_link=True)
        for pdir in root.glob("sys/devices/**/ports/*"):
            _w(pdir / "sm_sl", "3\n")


@pytest.mark.parametrize("node", ["roce", "ib"])
def test_ib_probes_read_each_file_once(tmp_path, monkeypatch, node):
    _two_node_kinds(tmp_path, node)
    opened = _recording(monkeypatch)
    sysfs = f"{tmp_path}/sys/"  # opening a root also reads its boot id and manifest (host mode)
    _read(tmp_path)
    everything = {p for p in opened if p.startswith(sysfs)}
    by_probe = {}
    for probe, parts in IB_PARTS.items():
        opened.clear()
        _read(tmp_path, parts)
        by_probe[probe] = [p for p in opened if p.startswith(sysfs) and not p.endswith("/link_layer")]
    assert set().union(*by_probe.values()) == {p for p in everything if not p.endswith("/link_layer")}
    seen = [p for files in by_probe.values() for p in files]
    assert sorted(seen) == sorted(set(seen))  # no file opened twice, within or across probes
    assert {PROBE_TIERS[p] for p in IB_PARTS} == {"fast", "medium", "slow"}
    assert any(p.endswith("/state") for p in by_probe["ib"]) and any(p.endswith("/fw_ver") for p in by_probe["ib_gids"])


@pytest.mark.parametrize("node", ["roce", "ib"])
def test_ib_probes_merge_into_a_full_read(tmp_path, node):
    _two_node_kinds(tmp_path, node)
    c = Collector(HostRoot.at(tmp_path), AgentConfig(host_root=tmp_path))
    c.run_sync(list(IB_PARTS))
    full, _ = _read(tmp_path)
    assert c.snapshot().hcas == full
    assert full[0].pci_bus_id and full[0].ports[0].netdev and full[0].ports[0].gids and full[0].ports[0].state
    assert full[0].ports[0].sm_sl is not None
    assert (full[0].ports[0].tclass is not None) == (node == "roce")  # IB node: no tc/ directory


def test_natural_order_and_escaping_entry(tmp_path):
    for name in ("mlx5_10", "mlx5_2", "mlx5_bond_0", "mlx5_1"):
        _port(tmp_path / f"sys/class/infiniband/{name}/ports/1", link_layer="InfiniBand")
    outside = tmp_path.parent / (tmp_path.name + "-outside")
    _port(outside / "ports/1", link_layer="InfiniBand")
    _ln(tmp_path / "sys/class/infiniband/mlx5_3", str(outside))
    try:
        hcas, ctx = _read(tmp_path)
    finally:
        shutil.rmtree(outside)
    assert [h.name for h in hcas] == ["mlx5_1", "mlx5_2", "mlx5_10", "mlx5_bond_0"]
    assert [(e.path, e.kind) for e in ctx.errors] == [("sys/class/infiniband/mlx5_3", "escape")]


def test_no_infiniband_class_is_empty(tmp_path):
    (tmp_path / "sys").mkdir()
    hcas, ctx = _read(tmp_path)
    assert hcas == () and ctx.errors == []


def test_sub_function_maps_to_its_pci_function(tmp_path):
    """mlx5 SFs live on the auxiliary bus below their PF: the PF is the PCI location."""
    sf = tmp_path / "sys/devices/pci0000:00/0000:00:01.0/0000:1b:00.0/mlx5_core.sf.2"
    dev = sf / "infiniband/mlx5_2"
    _port(dev / "ports/1", link_layer="Ethernet")
    _ln(dev / "device", "../../../mlx5_core.sf.2")
    _ln(tmp_path / "sys/class/infiniband/mlx5_2",
        "../../devices/pci0000:00/0000:00:01.0/0000:1b:00.0/mlx5_core.sf.2/infiniband/mlx5_2")
    (hca,), ctx = _read(tmp_path)
    assert ctx.errors == []
    assert (hca.name, hca.pci_bus_id, hca.numa_node) == ("mlx5_2", "0000:1b:00.0", None)


# ---------------------------------------------------------------------------
# QoS: sm_sl and MLNX_OFED's traffic class override (tc/<port>/traffic_class)

# Published values of the file: "Global tclass=106" (lshca's defaults; `cat
# /sys/class/infiniband/mlx5_2/tc/1/traffic_class` in a RoCE setup blog), "Global
# tclass=236" and "Global tclass=160" (NVIDIA NCCL issue comments). Rule lines follow
# mlx5_ib's traffic_class_show format strings ("src_ip=%pI4,", "dst_ip=%pI4/%d,",
# "dst_ip6=%pI6,", "tclass=%d\n").


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Global tclass=106\n", TclassOverride(global_tclass=106)),
        ("Global tclass=236\n", TclassOverride(global_tclass=236)),
        ("Global tclass=160\n", TclassOverride(global_tclass=160)),
        ("", TclassOverride()),  # OFED loaded, nothing set
        (
            "Global tclass=106\ndst_ip=10.0.0.0/24,tclass=96\nsrc_ip=10.0.0.5,dst_ip=10.0.1.0/24,tclass=104\n",
            TclassOverride(global_tclass=106, rules=("dst_ip=10.0.0.0/24,tclass=96", "src_ip=10.0.0.5,dst_ip=10.0.1.0/24,tclass=104")),
        ),
        ("dst_ip6=fe80:0000:0000:0000:1e34:daff:fe5a:1b2c,tclass=96\n", TclassOverride(rules=("dst_ip6=fe80:0000:0000:0000:1e34:daff:fe5a:1b2c,tclass=96",))),
    ],
)
def test_parse_tclass_shapes(text, expected):
    assert parse_tclass(text) == expected


@pytest.mark.parametrize("text", ["Global tclass=256\n", "Global tclass=x\n", "106\n", "Global tclass=1\nGlobal tclass=2\n", "dst_ip=10.0.0.0/24\n"])
def test_parse_tclass_refuses_other_shapes(text):
    with pytest.raises(ValueError):
        parse_tclass(text)


def _tc_node(root: Path, tc: bytes | None) -> Path:
    _roce_node(root)
    dev = next(root.glob("sys/devices/**/infiniband/mlx5_0"))
    _w(dev / "ports/1/sm_sl", "0\n")
    if tc is not None:
        (dev / "tc/1").mkdir(parents=True)
        (dev / "tc/1/traffic_class").write_bytes(tc)
    return dev


def test_tclass_and_sm_sl_read_in_the_qos_part(tmp_path):
    _tc_node(tmp_path, b"Global tclass=106\n")
    (hca,), ctx = _read(tmp_path, ("qos",))
    assert ctx.errors == []
    port = hca.ports[0]
    assert (port.sm_sl, port.tclass) == (0, TclassOverride(global_tclass=106))
    assert port.gids == () and port.counters == {}  # only the part asked for
    (hca,), _ = _read(tmp_path, ("link",))
    assert (hca.ports[0].sm_sl, hca.ports[0].tclass) == (None, None)


def test_inbox_driver_has_no_tclass_and_no_error(tmp_path):
    _tc_node(tmp_path, None)
    (hca,), ctx = _read(tmp_path, ("qos",))
    assert ctx.errors == [] and hca.ports[0].tclass is None and hca.ports[0].sm_sl == 0


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        (b"Global tclass=\xff\xfe\n", "not ASCII"),
        (b"Global tclass=106\n" * 400, "longer than"),
        (b"\x00\x01garbage\n", "not a traffic class line"),
    ],
)
def test_hostile_tclass_file_is_an_unparsable_error(tmp_path, data, detail):
    assert len(b"Global tclass=106\n" * 400) > TCLASS_MAX_BYTES
    _tc_node(tmp_path, data)
    (hca,), ctx = _read(tmp_path, ("qos",))
    assert hca.ports[0].tclass is None and hca.ports[0].sm_sl == 0
    assert [(e.path.endswith("tc/1/traffic_class"), e.kind) for e in ctx.errors] == [(True, "unparsable")]
    assert detail in ctx.errors[0].detail


def test_tclass_fifo_does_not_hang(tmp_path):
    dev = _tc_node(tmp_path, None)
    (dev / "tc/1").mkdir(parents=True)
    os.mkfifo(dev / "tc/1/traffic_class")
    (hca,), ctx = _read(tmp_path, ("qos",))
    assert hca.ports[0].tclass == TclassOverride()  # no writer: read as empty, at once
