"""Whole-reader property: garbage written into the files of a simulated node never makes a
reader raise. ``collect_once`` returns a NodeSnapshot, every probe reports ok (a reader
exception would show as a failed probe), and the snapshot serialises.

Each example rewrites a few files of one shared tree and restores them afterwards, so the
tree is built once per module. These run a full collection per example: they take a
fraction of the profile's example budget.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from agentd.base.escape import json_text, printable
from agentd.collection.collector import collect_once
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot
from agentd.model import NodeSnapshot
from agentd.views import inspect_view
from tests.support import service_snapshots as fixtures

build = pytest.importorskip("agentd.sim.build")
PROFILE = settings.get_profile("agentd")  # registered in conftest.py
BUDGET = PROFILE.max_examples


def _files(root: Path) -> list[str]:
    out = []
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = Path(dirpath, n)
            if not p.is_symlink() and p.name not in ("simulation.json", "manifest.json"):
                out.append(str(p.relative_to(root)))
    return sorted(out)


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str]]]:
    out = {}
    for profile in ("pcie-4gpu", "h100-roce"):
        root = build.build_tree(profile, tmp_path_factory.mktemp(profile) / "root")
        out[profile] = (root, _files(root))
    return out


garbage = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=80).map(str.encode),
    st.sampled_from([b"", b"\n", b"N/A\n", b"-1\n", b"0x\n", b"18446744073709551616\n", b"\0\0\0", b"\xff\xfe\xfd", b"4: ACTIVE\n", b"400 Gb/sec (4X NDR)\n", b"{}", b"null", b"[]"]),
    st.sampled_from(["²\n", "٣\n", "9" * 4301 + "\n", "[" * 5000, "x: ²\n", "4: ²\n"]).map(str.encode),  # past isdigit/int()/nesting limits
    st.integers(-(2**70), 2**70).map(lambda n: f"{n}\n".encode()),
    st.tuples(st.binary(min_size=1, max_size=8), st.integers(1, 20000)).map(lambda t: t[0] * t[1]),  # large, past the read caps
)


def corrupt_and_collect(root: Path, files: list[str], edits: list[tuple[int, bytes | None]]) -> NodeSnapshot:
    saved: dict[Path, bytes] = {}
    try:
        for idx, data in edits:
            p = root / files[idx % len(files)]
            if p not in saved:
                saved[p] = p.read_bytes()
            if data is None:
                p.unlink(missing_ok=True)
            else:
                p.write_bytes(data)
        return collect_once(HostRoot.at(root), AgentConfig(host_root=root))
    finally:
        for p, data in saved.items():
            p.write_bytes(data)


def check(snap: NodeSnapshot) -> None:
    assert isinstance(snap, NodeSnapshot)
    failed = {p.name: p.error for p in snap.probes if not p.ok}
    assert not failed, f"a reader raised: {failed}"
    snap.model_dump_json()


edits = st.lists(st.tuples(st.integers(0, 10**6), st.none() | garbage), min_size=1, max_size=6)


@pytest.mark.tree
@settings(PROFILE, max_examples=max(10, BUDGET // 4))
@given(edits)
def test_garbage_files_pcie_node(trees: dict, edit_list: list[tuple[int, bytes | None]]) -> None:
    root, files = trees["pcie-4gpu"]
    check(corrupt_and_collect(root, files, edit_list))


@settings(PROFILE, max_examples=max(5, BUDGET // 10))
@given(edits)
def test_garbage_files_roce_node(trees: dict, edit_list: list[tuple[int, bytes | None]]) -> None:
    """The RoCE profile adds mlnx_qos (dcb), ECN and GID tables to the garbage targets."""
    root, files = trees["h100-roce"]
    check(corrupt_and_collect(root, files, edit_list))


@given(st.sampled_from(["ethtool", "dcb", "nvml.json", "ports/1/rate", "ports/1/state", "gids/", "cpuinfo", "modules", "osrelease", "/class", "/mtu"]), garbage)
@settings(PROFILE, max_examples=max(10, BUDGET // 4))
def test_garbage_in_each_parsed_file_kind(trees: dict, kind: str, data: bytes) -> None:
    """Aim the garbage at each parser's input, not only at random files."""
    root, files = trees["h100-roce"]
    targets = [i for i, f in enumerate(files) if kind in f]
    assert targets, kind
    check(corrupt_and_collect(root, files, [(targets[len(data) % len(targets)], data)]))


def test_trees_are_restored(trees: dict) -> None:
    for root, _files in trees.values():
        snap = collect_once(HostRoot.at(root), AgentConfig(host_root=root))
        check(snap)
        assert snap.read_errors == ()


@pytest.mark.parametrize(
    "kind,data",
    [
        pytest.param("ethtool", "NIC statistics:\n     rx_packets: ²\n", id="ethtool-superscript"),
        pytest.param("dcb", "PFC configuration:\n  priority ²\n  enabled 1\n", id="mlnx_qos-superscript"),
        pytest.param("osrelease", "9" * 4301 + ".1.0\n", id="osrelease-over-digit-limit"),
        pytest.param("nvml.json", "[" * 100_000, id="nvml-deep-nesting"),
        pytest.param("nvml.json", '{"cuda_driver_version": ' + "9" * 4301 + "}", id="nvml-int-over-digit-limit"),
        pytest.param("ports/1/state", "9" * 4301 + ": ACTIVE\n", id="ib-state-over-digit-limit"),
        pytest.param("ports/1/rate", "400 Gb/sec (" + "9" * 4301 + "X NDR)\n", id="ib-rate-over-digit-limit"),
    ],
)
def test_parser_limits_do_not_fail_a_probe(trees: dict, kind: str, data: str) -> None:
    """Text past isdigit()/int()/nesting limits is one unparsable value, not a failed probe
    (which would lose every netdev's or GPU's data)."""
    root, files = trees["h100-roce"]
    target = next(i for i, f in enumerate(files) if kind in f)
    snap = corrupt_and_collect(root, files, [(target, data.encode())])
    check(snap)
    tail = "/".join(files[target].split("/")[-4:])  # sysfs class entries are links to devices/
    assert any(e.path.endswith(tail) and e.kind == "unparsable" for e in snap.read_errors), snap.read_errors


@pytest.mark.parametrize("name", ["²", "٣", "01", "9" * 30])
def test_odd_port_and_gid_names_are_skipped(trees: dict, name: str) -> None:
    """ports/<name> and gids/<name> that are not plain ASCII numbers (isdigit() admits '²',
    which int() refuses) are not ports or slots: skipped, the HCA keeps its real ports."""
    root, _ = trees["h100-roce"]
    before = collect_once(HostRoot.at(root), AgentConfig(host_root=root))
    ports = Path(os.path.realpath(root / "sys/class/infiniband" / before.hcas[0].name / "ports"))
    made = [ports / name, ports / "1" / "gids" / name]
    try:
        made[0].mkdir()
        made[1].write_text("fe80:0000:0000:0000:0000:0000:0000:0001\n")
        snap = collect_once(HostRoot.at(root), AgentConfig(host_root=root))
    finally:
        made[1].unlink(missing_ok=True)
        made[0].rmdir()
    check(snap)
    assert snap.hcas == before.hcas


# -- names that are not UTF-8, or odd bytes ------------------------------------------------
# The kernel takes any byte in a netdev name but '/', ':' and whitespace (RDMA names and
# counter file names can carry odd bytes too); a name enters the model losslessly and every
# output escapes it (issue 12 item 1). Each example adds one entry named ``name`` at one
# place of the RoCE tree, collects, renders every output, and removes the entry.

odd_name = st.one_of(
    st.binary(min_size=1, max_size=15),
    st.sampled_from([b"v\xffx", b"\xff", b"\xed\xa0\x80", b"\xc3", b"mlx5_8:1,mlx5_9", b"a\\xffb", b'q"}\n', b"\\udcff", b"-", b"\xef\xbf\xbd"]),
).filter(lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b".."))
PLACES = ("netdev", "hca", "pci", "counter", "hw_counter", "port", "gid", "ndev", "ecn")


def _add_entry(root: Path, place: str, name: bytes) -> list[tuple[bytes, bytes | None]]:
    """Make the entry; returns what to undo: (path, None) to remove, (path, bytes) to restore."""
    r = os.fsencode(root)
    hca = os.fsencode(os.path.realpath(root / "sys/class/infiniband/mlx5_0"))
    port = hca + b"/ports/1"
    undo: list[tuple[bytes, bytes | None]] = []

    def link(at: bytes, like: bytes) -> None:
        os.symlink(os.readlink(like), at)
        undo.append((at, None))

    def file(at: bytes, data: bytes) -> None:
        undo.append((at, open(at, "rb").read() if os.path.lexists(at) else None))
        with open(at, "wb") as fh:
            fh.write(data)

    if place == "netdev":
        d = r + b"/sys/devices/virtual/net/" + name
        os.mkdir(d)
        undo.append((d, None))
        for attr in (b"mtu", b"operstate", b"type", b"flags", b"carrier", b"address"):
            file(d + b"/" + attr, open(r + b"/sys/devices/virtual/net/lo/" + attr, "rb").read())
        os.symlink(b"../../devices/virtual/net/" + name, r + b"/sys/class/net/" + name)
        undo.append((r + b"/sys/class/net/" + name, None))
        for tool in (b"ethtool", b"dcb"):  # the simulated node's answers, by netdev name
            file(r + b"/.agentd/" + tool + b"/" + name, open(r + b"/.agentd/" + tool + b"/ens1np0", "rb").read())
    elif place == "hca":
        link(r + b"/sys/class/infiniband/" + name, r + b"/sys/class/infiniband/mlx5_0")
    elif place == "pci":
        link(r + b"/sys/bus/pci/devices/" + name, r + b"/sys/bus/pci/devices/0000:00:01.0")
    elif place in ("counter", "hw_counter"):
        file(port + b"/" + place.encode() + b"s/" + name, b"7\n")
    elif place == "port":
        os.mkdir(hca + b"/ports/" + name)
        undo.append((hca + b"/ports/" + name, None))
    elif place == "gid":
        file(port + b"/gids/" + name, b"fe80:0000:0000:0000:0000:0000:0000:0001\n")
    elif place == "ndev":
        file(port + b"/gid_attrs/ndevs/0", name + b"\n")
    elif place == "ecn":
        ecn = os.fsencode(os.path.realpath(root / "sys/class/net/ens1np0")) + b"/ecn/roce_np/enable/"
        file(ecn + name, b"1\n")
    return undo


def _undo(undo: list[tuple[bytes, bytes | None]]) -> None:
    for path, data in reversed(undo):
        if data is not None:
            with open(path, "wb") as fh:
                fh.write(data)
        elif os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)
        else:
            os.unlink(path)


def check_outputs(snap: NodeSnapshot) -> dict[str, Any]:
    """Every output of the snapshot is valid UTF-8 and parses: the exposition, /topology,
    `agentd inspect --format json`. Returns the /topology document."""
    state = fixtures.state(snap=snap)
    for fam in text_string_to_metric_families(state.metrics_bytes().decode("utf-8")):
        for s in fam.samples:
            assert all(isinstance(v, str) for v in s.labels.values())
    json.loads(json_text(inspect_view(snap), indent=2).encode("ascii"))
    topo: dict[str, Any] = json.loads(state.topology_json().decode("utf-8"))
    return topo


@settings(PROFILE, max_examples=max(10, BUDGET // 8))
@given(st.sampled_from(PLACES), odd_name)
def test_odd_names_cost_no_probe_and_every_output_renders(trees: dict, place: str, name: bytes) -> None:
    root, _files = trees["h100-roce"]
    path = root / "sys/class/net" / os.fsdecode(name)
    assume(not (place == "netdev" and (os.path.lexists(path) or os.path.lexists(root / ".agentd/ethtool" / os.fsdecode(name)))))
    assume(not (place == "hca" and os.path.lexists(root / "sys/class/infiniband" / os.fsdecode(name))))
    assume(not (place == "pci" and os.path.lexists(root / "sys/bus/pci/devices" / os.fsdecode(name))))
    counters = Path(os.path.realpath(root / "sys/class/infiniband/mlx5_0")) / "ports/1/hw_counters"
    new_counter = not os.path.lexists(counters / os.fsdecode(name))
    undo = _add_entry(root, place, name)
    try:
        snap = collect_once(HostRoot.at(root), AgentConfig(host_root=root))
    finally:
        _undo(undo)
    failed = {p.name: p.error for p in snap.probes if not p.ok}
    assert not failed, f"a reader raised: {failed}"
    topo = check_outputs(snap)
    decoded = os.fsdecode(name)
    if place == "netdev":  # lossless in the model, escaped the same way in every output
        assert decoded in [n.name for n in snap.netdevs]
        assert printable(decoded) in [n["name"] for n in topo["netdevs"]]
    elif place == "hca":
        assert decoded in [h.name for h in snap.hcas]
        assert printable(decoded) in [h["name"] for h in topo["hcas"]]
    elif place == "ndev" and decoded.strip() == decoded:  # a name, read as one: no read error
        mlx5_0 = snap.hca("mlx5_0")
        assert mlx5_0 is not None and mlx5_0.ports[0].gids[0].netdev == decoded
        assert not [e for e in snap.read_errors if "ndevs" in e.path]
    elif place == "hw_counter" and new_counter:
        mlx5_0 = snap.hca("mlx5_0")
        assert mlx5_0 is not None and mlx5_0.ports[0].hw_counters.get(decoded) == 7
