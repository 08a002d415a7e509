"""PCIe AER statistics reader (agentd.host.pcie_errors): real upstream sysfs files, hostile
files, which functions are read, and the pci_errors probe merged into the snapshot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd import sim
from agentd.collection.collector import Collector, probes_in
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot, ReadContext
from agentd.host.pcie_errors import AER_MAX_BYTES, parse_aer, read_aer, read_pcie_errors, watched
from agentd.model import AerCounts
from tests.support.check_snapshots import node
from tests.support.fixtures import SYSFS_TREES

NODE_EXPORTER = SYSFS_TREES / "node-exporter-fixtures"
PROCFS = SYSFS_TREES / "procfs-fixtures"
COR_NAMES = ["RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF"]


def ctx_at(root: Path) -> ReadContext:
    return ReadContext(HostRoot.at(root), "pci_errors")


# ---------------------------------------------------------------------------
# real files


def test_node_exporter_fixture_all_zero():
    ctx = ctx_at(NODE_EXPORTER)
    aer = read_aer(ctx, "sys/bus/pci/devices/0000:45:00.0")
    assert ctx.errors == []
    assert aer is not None and aer.correctable is not None and aer.nonfatal is not None and aer.fatal is not None
    assert aer.correctable.total == 0 and list(aer.correctable.by_type) == COR_NAMES
    assert aer.fatal.total == 0 and len(aer.fatal.by_type) == 18 and aer.fatal.by_type["PoisonTLPBlocked"] == 0
    assert aer.nonfatal.total == 0 and "CmpltTO" in aer.nonfatal.by_type


def test_procfs_fixture_counts_and_its_mislabelled_total():
    # procfs' fixture holds counts 1..48; its aer_dev_nonfatal ends "TOTAL_ERR_FATAL 48",
    # which the kernel never prints there (aer.c: "TOTAL_ERR_NONFATAL"): not taken.
    ctx = ctx_at(PROCFS)
    aer = read_aer(ctx, "sys/devices/pci0000:00/0000:00:1f.6")
    assert aer is not None and aer.correctable is not None and aer.fatal is not None
    assert aer.correctable.total == 9 and aer.correctable.by_type["BadTLP"] == 2 and aer.correctable.by_type["HeaderOF"] == 8
    assert aer.fatal.total == 28 and aer.fatal.by_type["Undefined"] == 10
    assert aer.nonfatal is None
    assert [(e.path, e.kind) for e in ctx.errors] == [("sys/devices/pci0000:00/0000:00:1f.6/aer_dev_nonfatal", "unparsable")]
    assert "TOTAL_ERR_NONFATAL" in ctx.errors[0].detail


def test_no_aer_files_is_unknown_not_zero():
    ctx = ctx_at(PROCFS)
    assert read_aer(ctx, "sys/bus/pci/devices/0000:00:02.1") is None  # the root port has no aer_dev_* files in the tree
    assert ctx.errors == []


def test_one_file_absent_leaves_that_severity_unknown(tmp_path):
    d = tmp_path / "dev"
    d.mkdir()
    (d / "aer_dev_correctable").write_text("RxErr 3\nBadTLP 0\nTOTAL_ERR_COR 3\n")
    ctx = ctx_at(tmp_path)
    aer = read_aer(ctx, "dev")
    assert aer is not None and aer.correctable == AerCounts(total=3, by_type={"RxErr": 3, "BadTLP": 0})
    assert aer.nonfatal is None and aer.fatal is None and ctx.errors == []


# ---------------------------------------------------------------------------
# the format


def test_unnamed_bits_and_u64_counts():
    text = "RxErr 0\ndev_cor_errs_bit[9] 2\nTOTAL_ERR_COR 18446744073709551615\n"
    c = parse_aer(text, "TOTAL_ERR_COR")
    assert c.total == 2**64 - 1 and c.by_type == {"RxErr": 0, "dev_cor_errs_bit[9]": 2}


@pytest.mark.parametrize("text, why", [
    ("", "empty"),
    ("\n", "not '<name> <count>'"),
    ("RxErr 1\n", "last line is 'RxErr'"),
    ("RxErr 1\nTOTAL_ERR_FATAL 1\n", "expected TOTAL_ERR_COR"),
    ("RxErr -1\nTOTAL_ERR_COR 0\n", "line 1"),
    ("RxErr 18446744073709551616\nTOTAL_ERR_COR 0\n", "line 1"),
    ("RxErr 1\nRxErr 2\nTOTAL_ERR_COR 3\n", "twice"),
    ("TOTAL_ERR_COR 1\nTOTAL_ERR_COR 1\n", "before the last line"),
    ("RxErr  1\nTOTAL_ERR_COR 1\n", "line 1"),
    ("Rx Err 1\nTOTAL_ERR_COR 1\n", "line 1"),
    ("RxErr \u0661\nTOTAL_ERR_COR 1\n", "line 1"),
    ("RxErr 1\nTOTAL_ERR_COR 1\n\n", "before the last line"),
])
def test_not_the_abi_is_a_value_error(text, why):
    with pytest.raises(ValueError, match=why):
        parse_aer(text, "TOTAL_ERR_COR")


@given(st.text(max_size=300))
def test_any_text_parses_or_is_a_value_error(text):
    try:
        c = parse_aer(text, "TOTAL_ERR_COR")
    except ValueError:
        return
    assert 0 <= c.total < 2**64 and text.rstrip("\n").splitlines()[-1] == f"TOTAL_ERR_COR {c.total}"


@pytest.mark.parametrize("content, detail", [
    (b"", "empty"),
    (b"\xde\xad\xbe\xef TOTAL_ERR_COR 1\n", "not ASCII"),
    (b"RxErr 0\x00\nTOTAL_ERR_COR 0\n", "line 1"),
    (b"RxErr 0\n" * (AER_MAX_BYTES // 8 + 1) + b"TOTAL_ERR_COR 0\n", "longer than"),
])
def test_hostile_files_are_read_errors(tmp_path, content, detail):
    d = tmp_path / "dev"
    d.mkdir()
    (d / "aer_dev_correctable").write_bytes(content)
    ctx = ctx_at(tmp_path)
    aer = read_aer(ctx, "dev")
    assert aer is not None and aer.correctable is None
    assert [(e.path, e.kind) for e in ctx.errors] == [("dev/aer_dev_correctable", "unparsable")]
    assert detail in ctx.errors[0].detail


def test_fifo_and_directory_are_read_errors_not_hangs(tmp_path):
    d = tmp_path / "dev"
    d.mkdir()
    os.mkfifo(d / "aer_dev_correctable")
    (d / "aer_dev_fatal").mkdir()
    ctx = ctx_at(tmp_path)
    aer = read_aer(ctx, "dev")
    assert aer is not None and aer.correctable is None and aer.fatal is None
    assert sorted(e.path for e in ctx.errors) == ["dev/aer_dev_correctable", "dev/aer_dev_fatal"]


# ---------------------------------------------------------------------------
# which functions


def test_watched_functions_are_gpus_hcas_and_their_bridges():
    snap = node(gpus=2)
    hcas = [h.pci_bus_id for h in snap.hcas if h.pci_bus_id]
    w = watched(snap.pci, hcas)
    gpus = {d.bdf for d in snap.pci if d.is_gpu}
    assert {b for b, link in w.items() if not link} == gpus  # GPU links are not re-read
    expected = gpus | set(hcas) | {p for d in snap.pci if d.bdf in gpus | set(hcas) for p in d.parent_chain}
    assert set(w) == expected


@pytest.mark.tree
def test_simulated_node_reads_aer_and_links(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    c = Collector(HostRoot.at(root), AgentConfig(host_root=root))
    c.run_sync()
    snap = c.snapshot()
    assert c.outputs["pci_errors"].errors == ()
    with_aer = [d for d in snap.pci if d.aer is not None]
    gpus = [d for d in snap.pci if d.is_gpu]
    assert gpus and all(d.aer is not None and d.aer.fatal is not None and d.aer.fatal.total == 0 for d in gpus)
    assert all(snap.pci_device(h.pci_bus_id).aer is not None for h in snap.hcas if h.pci_bus_id)  # type: ignore[union-attr]
    assert not any(d.is_nvswitch for d in with_aer)  # only GPUs, HCAs and their bridges
    assert all(g.pcie_replay_errors == 0 for g in snap.nvml.gpus)


@pytest.mark.tree
def test_medium_probe_sees_a_counter_and_a_nic_retrain_without_the_slow_pci_probe(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    c = Collector(HostRoot.at(root), AgentConfig(host_root=root))
    c.run_sync()
    nic = next(h.pci_bus_id for h in c.snapshot().hcas if h.name == "mlx5_1")
    pci_before = c.outputs["pci"].data
    sim.apply_fault(root, "aer_correctable@mlx5_1=7")
    sim.apply_fault(root, "pcie_downtrained@mlx5_1=width")
    c.run_sync(probes_in(["medium"]))
    assert c.outputs["pci"].data is pci_before  # the slow tree was not read again
    d = c.snapshot().pci_device(nic)
    assert d is not None and d.aer is not None and d.aer.correctable is not None
    assert d.aer.correctable.total == 7 and d.aer.correctable.by_type["BadTLP"] == 7
    assert d.current_link_width == 8


def test_reader_over_a_vanished_device_reports_nothing_known(tmp_path):
    snap = node(gpus=1)
    out = read_pcie_errors(ctx_at(tmp_path), snap.pci, [h.pci_bus_id for h in snap.hcas if h.pci_bus_id])
    assert out and all(r.aer is None and r.current_link_speed is None and r.current_link_width is None for r in out)


def test_parse_aer_memo_keeps_short_texts_only():
    """Alike files parse once (the same frozen record); a long odd file parses every time
    and is never kept, so a hostile tree cannot grow the memo past its bound."""
    from agentd.host import pcie_errors

    short = "RxErr 0\nBadTLP 0\nTOTAL_ERR_COR 0\n"
    assert parse_aer(short, "TOTAL_ERR_COR") is parse_aer(short, "TOTAL_ERR_COR")
    names = [f"Bit{i}" for i in range(120)]
    long = "".join(f"{n} {i}\n" for i, n in enumerate(names)) + f"TOTAL_ERR_COR {sum(range(120))}\n"
    assert len(long) > pcie_errors.AER_MEMO_MAX_BYTES
    before = pcie_errors._parse_aer_memo.cache_info().currsize
    c = parse_aer(long, "TOTAL_ERR_COR")
    assert c.total == sum(range(120)) and len(c.by_type) == 120
    assert pcie_errors._parse_aer_memo.cache_info().currsize == before
    assert parse_aer(long, "TOTAL_ERR_COR") is not c
