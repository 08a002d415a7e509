"""When the node booted (``SystemInfo.booted_at``): from the root's proc/stat btime, its
proc/uptime on a live root, a capture's recorded time; never this machine's clock for a
root that is not live. The simulator writes both files and can move the boot."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from agentd import sim
from agentd.base import recorded
from agentd.cli import main
from agentd.host.fs import HostRoot, ReadContext
from agentd.host.system import STAT_MAX_BYTES, boot_time, parse_btime, parse_uptime, read_system
from tests.support.paths import FIXTURES

FIXTURE = FIXTURES / "proc/procfs-stat"
FIXTURE_BTIME = 1418183276  # the btime line of that real /proc/stat


def _root(tmp: Path, files: dict[str, bytes], *, mode: str = "auto", manifest: dict | None = None) -> HostRoot:
    for rel, data in files.items():
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    if manifest is not None:
        (tmp / recorded.MANIFEST).parent.mkdir(parents=True, exist_ok=True)
        (tmp / recorded.MANIFEST).write_text(json.dumps(manifest))
    return HostRoot.at(tmp, mode)


def _capture_manifest(created: str, source_mode: str) -> dict:
    return recorded.manifest("capture", agentd_version="0", created=created, extra={"source": {"mode": source_mode}})


def test_btime_of_a_real_proc_stat(tmp_path):
    assert parse_btime(FIXTURE.read_bytes()) == FIXTURE_BTIME
    ctx = ReadContext(_root(tmp_path, {"proc/stat": FIXTURE.read_bytes()}), "system")
    info = read_system(ctx)
    assert (info.booted_at, info.boot_time_source) == (float(FIXTURE_BTIME), "proc/stat btime")
    assert ctx.errors == []


def test_btime_wins_over_uptime_and_survives_bytes_that_are_not_utf8(tmp_path):
    data = b"cpu  1 2 3\xff\xfe\nbtime 1700000000\nprocesses 3\n"
    ctx = ReadContext(_root(tmp_path, {"proc/stat": data, "proc/uptime": b"10.00 20.00\n"}, mode="live"), "system")
    assert boot_time(ctx) == (1700000000.0, "proc/stat btime")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff\xfe\x00garbage\n",
        b"btime\n",
        b"btime -5\n",
        b"btime 0\n",
        b"btime 12abc\n",
        b"btime 99999999999999999999999999\n",  # past the year 9999
        b"btime 1e9\n",
        b"xbtime 1700000000\n",
        b"cpu 1\nintr " + b"0 " * (STAT_MAX_BYTES // 2) + b"\nbtime 1700000000\n",  # past the read bound
    ],
    ids=["empty", "binary", "no-value", "negative", "zero", "not-digits", "huge", "float", "other-key", "beyond-bound"],
)
def test_a_proc_stat_without_a_usable_btime_gives_none_without_raising(tmp_path, data):
    ctx = ReadContext(_root(tmp_path, {"proc/stat": data}), "system")
    info = read_system(ctx)
    assert (info.booted_at, info.boot_time_source) == (None, None)
    assert all(e.kind == "unparsable" and e.path == "proc/stat" for e in ctx.errors)
    assert bool(ctx.errors) == bool(data)  # an empty file says nothing; a file without btime is reported


def test_absent_proc_stat_is_none_and_no_error(tmp_path):
    ctx = ReadContext(_root(tmp_path, {}), "system")
    assert boot_time(ctx) == (None, None) and ctx.errors == []


def test_a_fifo_is_not_waited_on(tmp_path):
    (tmp_path / "proc").mkdir()
    os.mkfifo(tmp_path / "proc/stat")
    ctx = ReadContext(HostRoot.at(tmp_path), "system")
    assert boot_time(ctx) == (None, None)


def test_parse_uptime():
    assert parse_uptime("350735.47 234388.90") == 350735.47
    for bad in ("", "abc 1", "-1.00 2", "nan 1", "inf 1", "1e300 1"):
        assert parse_uptime(bad) is None, bad


def test_a_live_root_without_btime_falls_back_to_its_uptime(tmp_path, monkeypatch):
    host = _root(tmp_path, {"proc/uptime": b"3600.40 7000.00\n"}, mode="live")
    assert host.is_live
    monkeypatch.setattr("agentd.host.system.time.time", lambda: 1_700_003_600.0)
    info = read_system(ReadContext(host, "system"))
    assert (info.booted_at, info.boot_time_source) == (1_700_000_000.0, "proc/uptime")


def test_a_root_that_is_not_live_never_uses_this_machines_clock(tmp_path, monkeypatch):
    """A copied tree with an uptime but nothing that says when it was read: unknown."""
    monkeypatch.setattr("agentd.host.system.time.time", lambda: pytest.fail("read the local clock"))
    host = _root(tmp_path, {"proc/uptime": b"3600.00 7000.00\n"})
    assert not host.is_live
    ctx = ReadContext(host, "system")
    assert boot_time(ctx) == (None, None)


def test_a_capture_of_a_live_node_without_btime_dates_the_boot_by_its_own_time(tmp_path):
    host = _root(tmp_path, {"proc/uptime": b"3600.00 7000.00\n"}, manifest=_capture_manifest("2023-11-14T23:13:20+00:00", "live"))
    assert host.mode == "offline"
    assert boot_time(ReadContext(host, "system")) == (1_700_000_000.0, "proc/uptime at the capture's time")


@pytest.mark.parametrize("source_mode, created", [("offline", "2023-11-14T23:13:20+00:00"), ("live", "yesterday"), ("live", "2023-11-14T23:13:20")])
def test_a_recording_whose_time_is_not_when_its_uptime_was_read_says_nothing(tmp_path, source_mode, created):
    """A capture of a capture carries the uptime of another moment; a time without a zone
    or not a time at all dates nothing."""
    host = _root(tmp_path, {"proc/uptime": b"3600.00 7000.00\n"}, manifest=_capture_manifest(created, source_mode))
    assert boot_time(ReadContext(host, "system")) == (None, None)


def test_this_machine():
    info = read_system(ReadContext(HostRoot.at("/"), "system"))
    if Path("/proc/stat").is_file():
        assert info.boot_time_source in ("proc/stat btime", "proc/uptime")
        assert info.booted_at is not None and 0 < info.booted_at <= time.time()


@pytest.mark.tree
def test_a_simulated_node_booted_three_days_before_its_build(tmp_path):
    t0 = time.time()
    root = sim.build_tree("h100-ib", tmp_path / "node")
    t1 = time.time()
    info = read_system(ReadContext(HostRoot.at(root), "system"))
    assert info.boot_time_source == "proc/stat btime" and info.booted_at is not None
    assert int(t0 - sim.BOOTED_AGO_S) - 1 <= info.booted_at <= t1 - sim.BOOTED_AGO_S
    uptime = parse_uptime((root / "proc/uptime").read_text())
    assert uptime is not None and abs(uptime - sim.BOOTED_AGO_S) < 2 + (t1 - t0)


@pytest.mark.tree
def test_set_boot_time_moves_the_boot_of_an_existing_tree(tmp_path):
    root = sim.build_tree("pcie-4gpu", tmp_path / "node", booted_ago_s=0)
    host = HostRoot.at(root)
    boot_id = (root / "proc/sys/kernel/random/boot_id").read_text()
    sim.set_boot_time(root, 1_700_000_000.5)
    assert read_system(ReadContext(host, "system")).booted_at == 1_700_000_000.0
    assert (root / "proc/sys/kernel/random/boot_id").read_text() == boot_id
    sim.set_boot_time(root, 1_600_000_000, reboot=True)
    assert read_system(ReadContext(host, "system")).booted_at == 1_600_000_000.0
    assert (root / "proc/sys/kernel/random/boot_id").read_text() != boot_id
    assert (root / "dev/kmsg").read_bytes() == b""


@pytest.mark.tree
def test_set_boot_time_refuses_what_is_not_a_simulator_root(tmp_path):
    with pytest.raises(ValueError, match="not a simulator root"):
        sim.set_boot_time(tmp_path, 1_700_000_000)
    root = sim.build_tree("pcie-4gpu", tmp_path / "node")
    with pytest.raises(ValueError):
        sim.set_boot_time(root, float("nan"))


@pytest.mark.tree
def test_simulate_booted_ago(tmp_path, capsys):
    out = tmp_path / "node"
    assert main(["simulate", "--profile", "pcie-4gpu", "--out", str(out), "--booted-ago", "120"]) == 0
    up = parse_uptime((out / "proc/uptime").read_text())
    assert up is not None and 120 <= up < 125
    assert main(["simulate", "--out", str(out), "--booted-ago", "86400"]) == 0
    info = read_system(ReadContext(HostRoot.at(out), "system"))
    assert info.booted_at is not None and 86400 - 5 < time.time() - info.booted_at < 86400 + 5
    capsys.readouterr()


@pytest.mark.tree
def test_a_kernel_fault_on_a_node_up_for_days_is_dated_now(tmp_path):
    """Records the simulator appends are stamped at the node's uptime now (never before
    the uptime its tree was built with), so a reader that dates them
    (agentd.host.kernel_log) sees them as just logged."""
    root = sim.build_tree("h100-ib", tmp_path / "node", faults=["xid"])
    uptime = parse_uptime((root / "proc/uptime").read_text())
    first = (root / "dev/kmsg").read_text().splitlines()[0]
    assert uptime is not None and int(first.split(",")[2]) / 1e6 >= uptime


@pytest.mark.tree
def test_a_capture_keeps_the_boot_time(tmp_path, capsys):
    root = sim.build_tree("pcie-4gpu", tmp_path / "node")
    sim.set_boot_time(root, 1_700_000_000)
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(f'[paths]\nbaseline = "{tmp_path / "baseline.json"}"\nstate_dir = "{tmp_path}"\n')
    for redact in ((), ("--redact",)):
        out = tmp_path / f"node{len(redact)}.tar.gz"
        assert main(["capture", "--config", str(cfg), "--host-root", str(root), "--out", str(out), *redact]) == 0
        capsys.readouterr()
        assert main(["inspect", "--config", str(cfg), "--host-root", str(out), "--format", "json"]) == 0
        system = json.loads(capsys.readouterr().out)["system"]
        assert (system["booted_at"], system["boot_time_source"]) == (1_700_000_000.0, "proc/stat btime")
    assert main(["inspect", "--config", str(cfg), "--host-root", str(out)]) == 0
    assert "booted 2023-11-14T22:13:20Z (proc/stat btime)" in capsys.readouterr().out
