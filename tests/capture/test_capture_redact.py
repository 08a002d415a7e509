"""``agentd capture --redact``'s Redactor on real shapes: the vendored sysfs fixture trees
and simulated nodes, redacted file by file into a new tree that agentd then reads.

The kernel log and identity files added to the simulated trees below are test records
(labelled ``redact-test``), not a driver's wording: they only carry values to be redacted.
"""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path
from typing import Any

import pytest

from agentd import sim
from agentd.capture.redact import Redactor
from agentd.collection.collector import collect_once
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot
from agentd.judging.judge import judge
from tests.support.fixtures import FIXTURES

KEY = b"k" * 32
SYSFS = FIXTURES / "sysfs"
HOST = "sim-h100-roce-01"
MACHINE_ID = "4c0f1d2e3a5b46789abcdef012345678"
BOOT_ID = "9f8e7d6c-5b4a-4321-8fed-cba987654321"

MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$|^[0-9a-f]{2}(:[0-9a-f]{2}){19}$")
GUID_RE = re.compile(r"^[0-9a-f]{4}(:[0-9a-f]{4}){3}$")
GID_RE = re.compile(r"^[0-9a-f]{4}(:[0-9a-f]{4}){7}$")
UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def files_of(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            p = Path(dirpath, n)
            if not p.is_symlink():
                out[str(p.relative_to(root))] = p.read_bytes()
    return out


def redact_tree(src: Path, dst: Path, r: Redactor) -> dict[str, bytes]:
    """Every file of ``src`` redacted into ``dst``; symlinks and directories as they are."""
    for dirpath, dirs, names in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for n in [*dirs, *names]:
            p = Path(dirpath, n)
            if p.is_symlink():
                os.symlink(os.readlink(p), dst / rel / n)
        for n in names:
            p = Path(dirpath, n)
            if not p.is_symlink():
                (dst / rel / n).write_bytes(r.redact(str(rel / n), p.read_bytes()))
    return files_of(dst)


def identity_files(root: Path, hostname: str) -> None:
    """What a captured node has beside the simulator's tree: machine-id, boot id, a log."""
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/machine-id").write_text(MACHINE_ID + "\n")
    (root / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/random/boot_id").write_text(BOOT_ID + "\n")
    mac = next(p for p in sorted(root.rglob("address")) if "net/ens" in str(p)).read_text().strip()
    (root / "dev").mkdir(exist_ok=True)
    (root / "dev/kmsg").write_text(
        f"6,100,5000,-;redact-test: 0000:5a:00.0 {mac} on {hostname} at 10.1.2.3 boot {BOOT_ID}\n"
        f" DEVICE=+pci:0000:5a:00.0\n6,101,5001,-;redact-test: {hostname}.cluster.example 22:14:26 ::1 127.0.0.1\n"
    )
    state = root / ".agentd/state"
    state.mkdir(parents=True, exist_ok=True)
    nvml = json.loads((root / ".agentd/nvml.json").read_text())
    gpus = [{"index": g["index"], "pci_bus_id": g["pci_bus_id"], "name": g["name"], "uuid": g["uuid"]} for g in nvml["gpus"]]
    (state / "baseline.json").write_text(json.dumps({"version": 1, "taken_at": 1.0, "hostname": hostname, "machine_id": MACHINE_ID, "gpus": gpus}))


def identities(files: dict[str, bytes]) -> set[str]:
    """The identifying values in a tree, as its readers see them."""
    out: set[str] = {HOST, MACHINE_ID, BOOT_ID}
    for rel, data in files.items():
        text = data.decode("utf-8", "replace").strip()
        if rel.endswith(("/address", "/node_guid", "/sys_image_guid")) and text and set(text) - {"0", "f", ":"}:
            out.add(text)
        if "/gids/" in rel and text.strip("0:"):
            out.add(text[20:])  # interface id or ::ffff: IPv4
        if rel.endswith("nvml.json"):
            out |= {g["uuid"] for g in json.loads(data)["gpus"]}
    return out


@pytest.fixture(scope="module")
def roce(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Redactor]:
    base = tmp_path_factory.mktemp("redact")
    src = sim.build_tree("h100-roce", base / "src")
    identity_files(src, HOST)
    r = Redactor(KEY, hostnames=[HOST])
    redact_tree(src, base / "dst", r)
    return src, base / "dst", r


@pytest.mark.tree
def test_no_identity_survives_anywhere(roce: tuple[Path, Path, Redactor]) -> None:
    src, dst, r = roce
    before = identities(files_of(src))
    assert len(before) > 30  # MACs, GUIDs, GIDs, GPU UUIDs, hostname, machine-id, boot id
    blob = b"\n".join(files_of(dst).values()).lower()
    left = sorted(v for v in before if v.lower().encode() in blob)
    assert left == []
    assert b"10.1.2.3" not in blob
    s = r.summary()
    assert s["mac"] >= 9 and s["guid"] >= 8 and s["uuid"] >= 10 and s["hostname"] == 1 and s["ipv4"] >= 8


def test_formats_stay_valid_for_their_readers(roce: tuple[Path, Path, Redactor]) -> None:
    _src, dst, _r = roce
    out = files_of(dst)
    for rel, data in out.items():
        text = data.decode("utf-8", "replace").strip()
        if rel.endswith("/address"):
            assert MAC_RE.match(text), (rel, text)
        if rel.endswith(("/node_guid", "/sys_image_guid")):
            assert GUID_RE.match(text), (rel, text)
        if "/gids/" in rel:
            assert GID_RE.match(text), (rel, text)
    assert all(UUID_RE.match(g["uuid"]) for g in json.loads(out[".agentd/nvml.json"])["gpus"])
    assert re.fullmatch(r"[0-9a-f]{32}\n", out["etc/machine-id"].decode())
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\n", out["proc/sys/kernel/random/boot_id"].decode())
    kmsg = out["dev/kmsg"].decode()
    assert "0000:5a:00.0" in kmsg and "DEVICE=+pci:0000:5a:00.0" in kmsg  # bus ids are topology
    assert "22:14:26 ::1 127.0.0.1" in kmsg
    assert re.fullmatch(r"node-[0-9a-f]{8}\n", out["proc/sys/kernel/hostname"].decode())
    host = out["proc/sys/kernel/hostname"].decode().strip()
    assert f"{host}.cluster.example" in kmsg and f"on {host} at" in kmsg  # the short name as a word
    baseline = json.loads(out[".agentd/state/baseline.json"])
    assert baseline["hostname"] == host and baseline["machine_id"] == out["etc/machine-id"].decode().strip()


def test_same_value_same_replacement_everywhere(roce: tuple[Path, Path, Redactor]) -> None:
    src, dst, _r = roce
    a, b = files_of(src), files_of(dst)
    for rel in a:
        if not rel.endswith("/node_guid"):
            continue
        hca = rel.rpartition("/")[0]
        guid_a, guid_b = a[rel].decode().strip(), b[rel].decode().strip()
        assert guid_a != guid_b and b[f"{hca}/sys_image_guid"].decode().strip() == guid_b
        # the RoCE v1 GID is the EUI-64 of the MAC, which is in the node GUID: all three still agree
        mac_a = next(a[k] for k in a if k.startswith(hca.rpartition("/infiniband")[0] + "/net/") and k.endswith("/address"))
        mac_b = next(b[k] for k in b if k.startswith(hca.rpartition("/infiniband")[0] + "/net/") and k.endswith("/address"))
        assert mac_a != mac_b
        m = bytes(int(x, 16) for x in mac_b.decode().strip().split(":"))
        assert guid_b.replace(":", "") == (m[:3] + b"\x03\x00" + m[3:]).hex()
        eui = (bytes([m[0] ^ 2]) + m[1:3] + b"\xff\xfe" + m[3:]).hex()
        assert b[f"{hca}/ports/1/gids/0"].decode().strip() == "fe80:0000:0000:0000:" + ":".join(eui[i:i + 4] for i in range(0, 16, 4))
    uuids_a = [g["uuid"] for g in json.loads(a[".agentd/nvml.json"])["gpus"]]
    uuids_b = [g["uuid"] for g in json.loads(b[".agentd/nvml.json"])["gpus"]]
    assert [g["uuid"] for g in json.loads(b[".agentd/state/baseline.json"])["gpus"]] == uuids_b
    assert len(set(uuids_b)) == len(uuids_a) and not set(uuids_a) & set(uuids_b)
    assert b["dev/kmsg"].decode().count(b["proc/sys/kernel/random/boot_id"].decode().strip()) == 1


def _dump(snap: Any) -> dict[str, Any]:
    d = snap.model_dump(mode="json")
    for k in ("host_root", "taken_at", "host_mode_reason", "probes", "collection_seconds"):
        d.pop(k, None)
    for n in d.get("netdevs", []):  # a module's serial is mapped inside its EEPROM pages (test_module_serial_is_mapped_inside_its_pages)
        for k in ("serial", "pages"):
            (n.get("module") or {}).pop(k, None)
    return d


def test_readers_see_the_same_node_modulo_the_mapping(roce: tuple[Path, Path, Redactor]) -> None:
    src, dst, r = roce
    cfg = AgentConfig(timeouts={"nvml_s": 1})
    before, after = collect_once(HostRoot.at(src), cfg), collect_once(HostRoot.at(dst), cfg)
    assert after.system.hostname != before.system.hostname
    assert [h.node_guid for h in after.hcas] != [h.node_guid for h in before.hcas]
    # Redacting the original snapshot's JSON with the same Redactor gives the redacted
    # tree's snapshot: every value mapped the same way, everything else equal.
    mapped = json.loads(r.redact_text(json.dumps(_dump(before))))
    assert mapped == _dump(after)
    assert [(p.state, p.rate_gbps) for h in after.hcas for p in h.ports] == [(p.state, p.rate_gbps) for h in before.hcas for p in h.ports]
    assert [g.pci_bus_id for g in after.gpus] == [g.pci_bus_id for g in before.gpus]
    fa, fb = judge(before, (), cfg, None).findings, judge(after, (), cfg, None).findings
    assert [(f.code, f.severity, f.subject) for f in fa] == [(f.code, f.severity, f.subject) for f in fb]


def test_module_serial_is_mapped_inside_its_pages(roce: tuple[Path, Path, Redactor]) -> None:
    """The recorded ethtool netlink answers carry each module's EEPROM pages: its vendor
    serial (CMIS upper page 00h bytes 166-181) is mapped in place, the same width, and the
    pages still decode to the same module otherwise."""
    src, dst, r = roce
    cfg = AgentConfig(timeouts={"nvml_s": 1})
    before = {n.name: n.module for n in collect_once(HostRoot.at(src), cfg).netdevs if n.module is not None}
    after = {n.name: n.module for n in collect_once(HostRoot.at(dst), cfg).netdevs if n.module is not None}
    assert before and set(after) == set(before)
    blob = b"\n".join(files_of(dst).values())
    for name, m in before.items():
        got = after[name]
        assert m is not None and got is not None and m.serial and got.serial
        assert got.serial != m.serial and len(got.serial) == len(m.serial)
        assert m.serial.encode() not in blob and m.serial.encode().hex().encode() not in blob
        assert got.model_copy(update={"serial": None, "pages": ()}) == m.model_copy(update={"serial": None, "pages": ()})
    assert len({m.serial for m in after.values() if m is not None}) == len(after)  # distinct serials stay distinct


@pytest.mark.tree
def test_ib_guid_in_node_guid_and_gid_maps_alike(tmp_path: Path) -> None:
    src = sim.build_tree("h100-ib", tmp_path / "src")
    r = Redactor(KEY, hostnames=["sim-h100-ib-01"])
    a, b = files_of(src), redact_tree(src, tmp_path / "dst", r)
    pairs = 0
    for rel in a:
        if rel.endswith("/ports/1/gids/0") and a[rel].startswith(b"fe80:"):
            guid_a = a[rel].decode().strip()[20:]
            for other in (k for k in a if k.endswith(("/node_guid", "/sys_image_guid")) and a[k].decode().strip() == guid_a):
                assert b[rel].decode().strip() == "fe80:0000:0000:0000:" + b[other].decode().strip()
                assert b[other] != a[other]
                pairs += 1
    assert pairs  # the simulator's IB port GUID is its node GUID
    cfg = AgentConfig(timeouts={"nvml_s": 1})
    sa, sb = collect_once(HostRoot.at(src), cfg), collect_once(HostRoot.at(tmp_path / "dst"), cfg)
    assert json.loads(r.redact_text(json.dumps(_dump(sa)))) == _dump(sb)


@pytest.mark.parametrize("tree", ["gpud-h100-ndr", "node-exporter-fixtures", "procfs-fixtures"])
def test_vendored_real_trees(tree: str, tmp_path: Path) -> None:
    src = SYSFS / tree
    r = Redactor(KEY)
    a, b = files_of(src), redact_tree(src, tmp_path / "dst", r)
    assert a.keys() == b.keys()
    for rel, data in a.items():
        text = data.decode("utf-8", "replace").strip()
        if rel.endswith(("/address", "/node_guid")) and set(text) - {"0", "f", ":"}:
            new = b[rel].decode().strip()
            assert new != text and len(new) == len(text) and (MAC_RE.match(new) or GUID_RE.match(new)), (rel, new)
        elif rel.endswith(("/broadcast", "/board_id", "/fw_ver", "/rate", "/state")):
            assert b[rel] == data
    cfg = AgentConfig(timeouts={"nvml_s": 1})
    sa, sb = collect_once(HostRoot.at(src), cfg), collect_once(HostRoot.at(tmp_path / "dst"), cfg)
    assert json.loads(r.redact_text(json.dumps(_dump(sa)))) == _dump(sb)


def test_deterministic_under_a_key_unlinkable_across_keys(roce: tuple[Path, Path, Redactor]) -> None:
    src, dst, _r = roce
    guid = next(p for p in sorted(src.rglob("node_guid")))
    rel, data = str(guid.relative_to(src)), guid.read_bytes()
    assert Redactor(KEY, [HOST]).redact(rel, data) == (dst / rel).read_bytes()
    assert Redactor(b"other", [HOST]).redact(rel, data) not in (data, (dst / rel).read_bytes())
    assert Redactor().redact(rel, data) != Redactor().redact(rel, data)  # a random key each


def test_values_without_identity_are_kept() -> None:
    r = Redactor(KEY, ["gpu01.example.org"])
    kept = [
        ("sys/class/net/lo/address", b"00:00:00:00:00:00\n"),
        ("sys/class/net/eth0/broadcast", b"ff:ff:ff:ff:ff:ff\n"),
        ("sys/class/infiniband/mlx5_0/ports/1/gids/5", b"0000:0000:0000:0000:0000:0000:0000:0000\n"),
        ("sys/class/infiniband/mlx5_0/board_id", b"MT_0000000838\n"),
        ("sys/class/infiniband/mlx5_0/fw_ver", b"28.39.1002\n"),
        ("proc/net/x", b"0.0.0.0 127.0.0.1 255.255.255.0 224.0.0.251 localhost\n"),
        ("sys/class/dmi/id/product_serial", b"To Be Filled By O.E.M.\n"),
    ]
    for path, data in kept:
        assert r.redact(path, data) == data, path
    gid = r.redact("sys/class/infiniband/mlx5_0/ports/1/gids/0", b"fe80:0000:0000:0000:0a7f:bc12:45ef:d23b\n")
    assert gid.startswith(b"fe80:0000:0000:0000:") and gid != b"fe80:0000:0000:0000:0a7f:bc12:45ef:d23b\n"
    v2 = r.redact("sys/class/infiniband/mlx5_0/ports/1/gids/3", b"0000:0000:0000:0000:0000:ffff:c0a8:0a01\n")
    assert v2.startswith(b"0000:0000:0000:0000:0000:ffff:c0a8:") and v2 != b"0000:0000:0000:0000:0000:ffff:c0a8:0a01\n"
    low = int(v2.decode().strip()[-4:], 16)
    assert r.redact_text("192.168.10.1") == f"192.168.{low >> 8}.{low & 0xFF}"  # the IPv4 in the RoCE v2 GID, mapped alike
    site = r.redact("sys/class/infiniband/mlx5_0/ports/1/gids/0", b"fec0:0000:0000:0001:0a7f:bc12:45ef:d23b\n")
    assert not site.startswith(b"fec0:0000:0000:0001") and site[20:] == gid[20:]  # a site prefix is identity
    assert r.redact_text("host gpu01 and gpu01.example.org, not gpu011") == "host {0} and {0}.invalid, not gpu011".format(r.redact_text("gpu01"))


def test_serials_keep_their_shape() -> None:
    r = Redactor(KEY)
    nvml = {"gpus": [{"index": 0, "serial": "1650923012345", "uuid": "GPU-8b8b67a3-eade-53a4-85d1-c51666496150", "pci_bus_id": "0000:18:00.0"}]}
    out = json.loads(r.redact(".agentd/nvml.json", json.dumps(nvml).encode()))
    g = out["gpus"][0]
    assert re.fullmatch(r"[0-9]{13}", g["serial"]) and g["serial"] != "1650923012345"
    assert UUID_RE.match(g["uuid"]) and g["uuid"] != nvml["gpus"][0]["uuid"] and g["pci_bus_id"] == "0000:18:00.0"
    dmi = r.redact("sys/devices/virtual/dmi/id/product_serial", b"S4XY12345\n")
    assert re.fullmatch(rb"[A-Z][0-9][A-Z]{2}[0-9]{5}\n", dmi) and dmi != b"S4XY12345\n"
    uuid = r.redact("sys/class/dmi/id/product_uuid", b"4C4C4544-0042-3510-8052-B4C04F4E4B32\n")
    assert re.fullmatch(rb"[0-9A-F]{8}-[0-9A-F]{4}-3[0-9A-F]{3}-[89AB][0-9A-F]{3}-[0-9A-F]{12}\n", uuid)  # version 3 kept
    assert uuid != b"4C4C4544-0042-3510-8052-B4C04F4E4B32\n"
    assert r.summary()["serial"] == 2


def _with_dsn(cfg: bytes, dsn: int) -> bytes:
    """``cfg`` with a Device Serial Number capability appended to its extended list."""
    buf = bytearray(cfg)
    off = 0x100
    while (nxt := (struct.unpack_from("<I", buf, off)[0] >> 20) & 0xFFC) >= 0x100:
        off = nxt
    header = struct.unpack_from("<I", buf, off)[0]
    struct.pack_into("<I", buf, off, (header & 0xFFFFF) | (0x400 << 20))
    struct.pack_into("<IIII", buf, 0x400, 0x00010003, dsn & 0xFFFFFFFF, dsn >> 32, 0)
    return bytes(buf)


def test_pci_device_serial_number_maps_as_the_guid(roce: tuple[Path, Path, Redactor]) -> None:
    src, _dst, _r = roce
    guid_file = next(p for p in sorted(src.rglob("node_guid")))
    guid = int(guid_file.read_text().strip().replace(":", ""), 16)
    dev = guid_file.parents[2]
    cfg = (dev / "config").read_bytes()
    assert len(cfg) == 4096
    r = Redactor(KEY)
    out = r.redact(str((dev / "config").relative_to(src)), _with_dsn(cfg, guid))
    lo, hi = struct.unpack_from("<II", out, 0x404)
    new_guid = r.redact("x/node_guid", guid_file.read_bytes()).decode().strip().replace(":", "")
    assert f"{(hi << 32) | lo:016x}" == new_guid != f"{guid:016x}"
    assert out[:0x400] == _with_dsn(cfg, guid)[:0x400] and out[0x40c:] == _with_dsn(cfg, guid)[0x40c:]
    assert r.redact(str((dev / "config").relative_to(src)), cfg) == cfg  # no DSN: untouched
    assert r.redact("sys/bus/pci/devices/0000:18:00.0/config", cfg[:64]) == cfg[:64]
    loop = bytearray(cfg)
    struct.pack_into("<I", loop, 0x100, 0x10000001)  # points at itself
    assert r.redact("sys/bus/pci/devices/0000:18:00.0/config", bytes(loop)) == bytes(loop)


@pytest.mark.parametrize(
    "path,data",
    [
        ("sys/class/net/eth0/address", b""),
        ("sys/class/net/eth0/ifalias", b"\xff\xfe a0:88:c2:45:5f:43 \x80\x81"),
        ("dev/kmsg", b"6,1,2,-;\xff\xfe" * 1000 + b"gpu01 10.0.0.1\n"),
        (".agentd/nvml.json", b"{" * 100000),
        (".agentd/nvml.json", b'{"serial": 5, "hostname": ["gpu01"], "uuid": null}'),
        (".agentd/uname.json", b"\xff\xfe not json"),
        ("sys/bus/pci/devices/0000:18:00.0/config", b"\xff" * 4096),
        ("sys/bus/pci/devices/0000:18:00.0/config", b""),
        ("sys/class/dmi/id/board_serial", b"\xff\xfe\n"),
        ("sys/class/net/eth0/phys_switch_id", b"zz\x00"),
        ("proc/sys/kernel/hostname", b"\xff\n"),
        ("proc/sys/kernel/hostname", b"gpu02.\n"),
        ("proc/sys/kernel/hostname", b"a b.c\n"),
        ("some/blob", bytes(range(256)) * 64),
        pytest.param("proc/x", (b"a0:88:c2:45:5f:43 fe80::1:2:3 ::: 1:2:3:4:5:6:7:8:9 999.1.1.1 " * 40000), marks=pytest.mark.slow),
    ],
)
def test_hostile_input_never_raises(path: str, data: bytes) -> None:
    r = Redactor(KEY, ["gpu01", "\u00e9t\u00e9"])
    out = r.redact(path, data)
    assert isinstance(out, bytes)
    assert (out == b"") == (data == b"")
    if b"a0:88:c2:45:5f:43" in data and b"\0" not in data:
        assert b"a0:88:c2:45:5f:43" not in out
