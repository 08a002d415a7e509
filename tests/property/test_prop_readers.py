"""Whole-reader property: garbage written into the files of a simulated node never makes a
reader raise. ``collect_once`` returns a NodeSnapshot, every probe reports ok (a reader
exception would show as a failed probe), and the snapshot serialises.

Each example rewrites a few files of one shared tree and restores them afterwards, so the
tree is built once per module. These run a full collection per example: they take a
fraction of the profile's example budget.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.collection.collector import collect_once
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot
from agentd.model import NodeSnapshot

build = pytest.importorskip("agentd.sim.build")
PROFILE = settings.get_profile("agentd")  # registered in conftest.py
BUDGET = PROFILE.max_examples


def _files(root: Path) -> list[str]:
    out = []
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = Path(dirpath, n)
            if not p.is_symlink() and p.name != "profile.json":
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
