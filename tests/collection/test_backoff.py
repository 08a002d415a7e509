"""Back-off: a device whose firmware fails the commands agentd's reads cause is not read
that way again for the rest of the boot; a Fabric Manager limited PF is never started on
(issue 36). Through the collector on a simulated node, a recorder seeing every read."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from agentd import sim
from agentd.base.ids import bus_id_label
from agentd.collection.backoff import ReadWindow, back_offs
from agentd.collection.collector import Collector
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot
from agentd.judging.judge import judge
from agentd.judging.roles import hca_roles
from agentd.model import KernelEvent
from tests.support import efa_log, service_snapshots
from tests.support.rdma_families import build
from tests.support.read_spy import ReadSpy

ACCESS_REG = ("mlx5_core 0000:49:00.0: mlx5_cmd_out_err:838:(pid 1441871): ACCESS_REG(0x805) op_mod(0x1) failed, "
              "status bad operation(0x2), syndrome (0x305684), err(-22)")  # tests/fixtures/kmsg/mlx5.txt record 7, bus id of mlx5_2


def _collector(root: Path, spy: ReadSpy) -> Collector:
    host = dataclasses.replace(HostRoot.at(root), recorder=spy)
    return Collector(host, AgentConfig.model_validate({"host_root": str(root)}))


def _counter_reads(spy: ReadSpy, root: Path, hca: str) -> list[str]:
    ports = str(root / "sys/class/infiniband" / hca / "ports")
    return [p for p in spy.read if p.startswith(ports) and ("/counters" in p or "/hw_counters" in p)]


@pytest.mark.tree
def test_a_firmware_failure_right_after_a_counter_read_stops_those_reads_for_the_boot(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    bdf = os.readlink(root / "sys/class/infiniband/mlx5_2").split("/")[-3]
    spy = ReadSpy()
    c = _collector(root, spy)
    c.run_sync()  # the first collection; the kernel log's first read is history
    assert _counter_reads(spy, root, "mlx5_2")

    c.run_sync(["ib_counters"])  # agentd reads the counters ...
    sim.apply_fault(root, "mlx5_access_reg@mlx5_2")  # ... and the firmware refuses: the log says so
    c.run_sync(["kernel"])

    spy.read.clear()
    c.run_sync()
    c.run_sync()
    assert _counter_reads(spy, root, "mlx5_2") == []  # never again this boot
    assert _counter_reads(spy, root, "mlx5_1")  # the others still are
    assert any(p.endswith("mlx5_2/ports/1/state") for p in spy.read)  # what costs nothing still is
    snap = c.snapshot()
    assert [(b.pci_bus_id, b.reads, b.reason) for b in snap.backed_off] == [(bdf, "firmware", "kernel_log")]
    assert "ACCESS_REG(0x805) op_mod(0x1) failed" in snap.backed_off[0].evidence
    assert snap.hca("mlx5_2").ports[0].counters == {} and snap.hca("mlx5_2").ports[0].is_active

    config = AgentConfig.model_validate({"host_root": str(root)})
    j = judge(snap, (), config, None)
    fact = [f for f in j.findings if f.code == "collect.device.backed_off"]
    assert [(f.severity, f.subject) for f in fact] == [("ok", bdf)]
    assert "ACCESS_REG(0x805)" in fact[0].message and j.status == "ok"
    assert "mlx5_2" in hca_roles(snap, config.hca).compute  # still judged by what it still reads

    metrics = service_snapshots.state(snap=snap).metrics_bytes().decode()
    assert f'agentd_collect_backed_off_info{{pci_bus_id="{bus_id_label(bdf)}",reads="firmware",reason="kernel_log"}} 1' in metrics


@pytest.mark.tree
def test_failures_that_go_on_while_only_the_link_is_read_widen_it_and_the_netdev_gives_the_state(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    spy = ReadSpy()
    c = _collector(root, spy)
    c.run_sync()
    c.run_sync(["ib_counters"])
    sim.apply_fault(root, "mlx5_access_reg@mlx5_2")
    c.run_sync(["kernel"])
    c.run_sync(["ib"])  # counters stopped; the port's state is still read ...
    sim.apply_fault(root, "mlx5_access_reg@mlx5_2")  # ... and still the firmware refuses
    c.run_sync(["kernel"])

    spy.read.clear()
    c.run_sync()
    port_files = str(root / "sys/class/infiniband/mlx5_2/ports/1/")
    assert [p for p in spy.read if p.startswith(port_files) and p.rsplit("/", 1)[1] in ("state", "phys_state", "rate")] == []
    snap = c.snapshot()
    assert [b.reads for b in snap.backed_off] == ["link"]
    port = snap.hca("mlx5_2").ports[0]
    assert (port.state, port.state_from) == ("ACTIVE", port.netdev) and port.netdev is not None
    j = judge(snap, (), AgentConfig.model_validate({"host_root": str(root)}), None)
    assert j.status == "ok", [(f.code, f.subject) for f in j.findings if f.severity != "ok"]


@pytest.mark.tree
def test_a_failure_of_another_command_or_long_after_the_read_is_not_agentds_doing(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    c = _collector(root, ReadSpy())
    c.run_sync()
    sim.apply_fault(root, "mlx5_cmd_timeout@mlx5_2")  # ENABLE_HCA: the driver's own command
    c.run_sync()
    assert c.snapshot().backed_off == ()


@pytest.mark.tree
def test_a_limited_pf_is_never_read_and_never_compute(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    target = os.readlink(root / "sys/class/infiniband/mlx5_5")
    fn = (root / "sys/class/infiniband" / target).resolve().parent.parent
    # The LPF's VPD carries the vendor field SMDL=SW_MNG (Fabric Manager user guide, HGX
    # B200/B300): here in a VPD-R resource's V0 keyword (PCI VPD format: large resource
    # tags 0x82 identifier and 0x90 read-only fields, the end tag 0x78).
    (fn / "vpd").write_bytes(_vpd([(b"PN", b"MCX750500B-0D00"), (b"V0", b"SMDL=SW_MNG")]))
    spy = ReadSpy()
    c = _collector(root, spy)
    c.run_sync()
    assert _counter_reads(spy, root, "mlx5_5") == []  # not even the first time
    snap = c.snapshot()
    assert [(b.pci_bus_id, b.reason) for b in snap.backed_off] == [(fn.name, "limited_pf")]
    roles = hca_roles(snap, AgentConfig().hca)
    assert "mlx5_5" not in roles.compute and len(roles.compute) == 7


def _vpd(fields: list[tuple[bytes, bytes]]) -> bytes:
    ident = b"NVIDIA ConnectX-7"
    ro = b"".join(k + bytes([len(v)]) + v for k, v in fields) + b"RV\x01\x00"
    return b"\x82" + len(ident).to_bytes(2, "little") + ident + b"\x90" + len(ro).to_bytes(2, "little") + ro + b"\x78"


def _event(seq: int, at: float, device: str, detail: str = ACCESS_REG, code: str = "cmd_failed", kind: str = "mlx5") -> KernelEvent:
    return KernelEvent(seq=seq, at=at, kind=kind, code=code, device=device, detail=detail)


def test_matching_needs_the_device_the_window_and_a_command_agentds_reads_issue():
    bdf = "0000:49:00.0"
    windows = [ReadWindow("ib_counters", "firmware", 100.0, 100.5), ReadWindow("ib", "link", 200.0, 200.1)]
    read = frozenset({bdf})
    assert [(b.reads, b.since) for b in back_offs([_event(1, 101.0, bdf)], windows, read, {})] == [("firmware", 101.0)]
    assert [b.reads for b in back_offs([_event(1, 201.0, bdf)], windows, read, {})] == ["link"]
    assert back_offs([_event(1, 150.0, bdf)], windows, read, {}) == []  # long after any read
    assert back_offs([_event(1, 101.0, "0000:99:00.0")], windows, read, {}) == []  # a device agentd does not read
    enable = "mlx5_core 0000:49:00.0: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource"
    assert back_offs([_event(1, 101.0, bdf, enable, "cmd_timeout")], windows, read, {}) == []
    skipped = [ReadWindow("ib_counters", "firmware", 100.0, 100.5, frozenset({bdf}))]
    assert back_offs([_event(1, 101.0, bdf)], skipped, read, {}) == []  # that run did not read it


def test_efa_failures_of_get_stats_after_a_counter_read_back_off_and_a_jobs_commands_do_not():
    """EFA's only command agentd's reads issue is GET_STATS (its port hw_counters); its port
    state and rate cost no command, so a failure in a link read's window is not agentd's."""
    bdf = efa_log.BDF
    windows = [ReadWindow("ib_counters", "firmware", 100.0, 100.5), ReadWindow("ib", "link", 200.0, 200.1)]
    read = frozenset({bdf})

    def efa(line: str, code: str, at: float = 101.0) -> list[KernelEvent]:
        return [_event(1, at, bdf, line, code, kind="efa")]

    for line, code in ((efa_log.GET_STATS_FAILED, "cmd_failed"), (efa_log.GET_STATS_TIMEOUT, "cmd_timeout"),
                       (efa_log.GET_STATS_NOT_SUBMITTED, "cmd_failed")):
        backed = back_offs(efa(line, code), windows, read, {})
        assert [(b.pci_bus_id, b.reads, b.reason) for b in backed] == [(bdf, "firmware", "kernel_log")], line
        assert "GET_STATS" in backed[0].evidence
    assert back_offs(efa(efa_log.CREATE_QP_FAILED, "cmd_failed"), windows, read, {}) == []  # a job's QP
    assert back_offs(efa(efa_log.CREATE_QP_NO_MSIX, "cmd_timeout"), windows, read, {}) == []
    assert back_offs(efa(efa_log.QUEUE_CLOSED, "admin_queue_closed"), windows, read, {}) == []  # names no command
    assert back_offs(efa(efa_log.GET_STATS_FAILED, "cmd_failed", at=201.0), windows, read, {}) == []  # only the link was read


def test_an_efa_function_whose_get_stats_fails_right_after_a_counter_read_is_not_read_again(tmp_path):
    """Through the collector on the EFA layout (tests/fixtures/rdma-families/efa.json): the
    failure's lines follow agentd's read of the port hw_counters in the kernel log."""
    root = tmp_path / "root"
    build(root, "efa")
    (root / "dev").mkdir()
    kmsg = root / "dev/kmsg"
    kmsg.write_text("")
    spy = ReadSpy()
    c = _collector(root, spy)
    c.run_sync()  # the first collection; the kernel log's first read is history
    assert _counter_reads(spy, root, "rdmap0s6")

    c.run_sync(["ib_counters"])  # agentd reads the counters: GET_STATS ...
    lines = (efa_log.GET_STATS_TIMEOUT, efa_log.GET_STATS_FAILED, efa_log.GET_STATS_CALLER)  # ... which the device never completes
    kmsg.write_text("".join(f"3,{seq},{seq * 1_000_000},-;{line}\n" for seq, line in enumerate(lines, 1)))
    c.run_sync(["kernel"])

    spy.read.clear()
    c.run_sync()
    assert _counter_reads(spy, root, "rdmap0s6") == []  # never again this boot
    assert _counter_reads(spy, root, "rdmap0s7")  # the other adapter still is
    snap = c.snapshot()
    assert [(b.pci_bus_id, b.reads, b.reason) for b in snap.backed_off] == [(efa_log.BDF, "firmware", "kernel_log")]
    assert "GET_STATS(13)" in snap.backed_off[0].evidence
    j = judge(snap, (), AgentConfig.model_validate({"host_root": str(root)}), None)
    assert {(f.code, f.severity, f.subject) for f in j.findings if f.code in ("hca.firmware", "collect.device.backed_off")} == {
        ("hca.firmware", "critical", "rdmap0s6"), ("collect.device.backed_off", "ok", efa_log.BDF)}


@pytest.mark.tree
def test_the_temperatures_of_a_device_agentd_backed_off_from_are_not_read(tmp_path):
    """mlx5's hwmon sensors are MTMP register reads (issue 38's reader): the same gate stops
    them with the counters, while the other HCAs' sensors are still read."""
    root = sim.build_tree("h100-ib", tmp_path / "root")
    target = os.readlink(root / "sys/class/infiniband/mlx5_5")
    fn = (root / "sys/class/infiniband" / target).resolve().parent.parent
    other = (root / "sys/class/infiniband" / os.readlink(root / "sys/class/infiniband/mlx5_4")).resolve().parent.parent
    (fn / "vpd").write_bytes(_vpd([(b"PN", b"MCX750500B-0D00"), (b"V0", b"SMDL=SW_MNG")]))
    spy = ReadSpy()
    c = _collector(root, spy)
    c.run_sync()
    hwmon = [p for p in spy.read if "/hwmon" in p]
    pci = root / "sys/bus/pci/devices"
    assert any(p.startswith(f"{pci / other.name}/") for p in hwmon)  # the sensors are read ...
    assert not any(p.startswith(f"{pci / fn.name}/") for p in hwmon)  # ... but not the limited PF's
    assert c.snapshot().hca("mlx5_5").temperatures == ()
