"""Kernel log events judged: real published kernel log lines (tests/fixtures/kmsg, sources
in tests/fixtures/SOURCES.md) read by the kernel log reader, recognised by the catalogue
and judged by the kernel check, as the daemon does."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.config import AgentConfig
from agentd.host.fs import HostRoot, ReadContext
from agentd.host.kernel_log import KernelLogSource
from agentd.judging.checks import CheckInput, run_checks
from agentd.judging.checks.kernel import check_events
from agentd.model import Gpu, Hca, KernelLog, NodeSnapshot
from tests.support.paths import FIXTURES

KMSG = FIXTURES / "kmsg"
DAY = 86400.0


def read_log(tmp_path: Path, text: str, uptime: float | None = None) -> KernelLog:
    (tmp_path / "dev").mkdir(exist_ok=True)
    (tmp_path / "dev/kmsg").write_text(text)
    if uptime is not None:
        (tmp_path / "proc").mkdir(exist_ok=True)
        (tmp_path / "proc/uptime").write_text(f"{uptime} 0\n")
    src = KernelLogSource(HostRoot(tmp_path, "offline", "test"))
    with ReadContext(src.host, "kernel") as ctx:
        return src.poll(ctx, keep_s=30 * DAY, max_events=5000)


GPUS = {"0000:01:00.0": 0, "0000:05:00.0": 1, "0000:29:00.0": 2, "0000:b3:00.0": 3, "0000:38:00.0": 4, "0000:9b:00.0": 5, "0000:10:1c.0": 6}


def judge(log: KernelLog, *, at: float | None = None, config: AgentConfig | None = None, hcas: tuple[Hca, ...] = ()) -> set[tuple[str, str, str]]:
    when = at if at is not None else max((e.at for e in log.events), default=0.0) + 1
    snap = NodeSnapshot(taken_at=when, host_root="/x", gpus=tuple(Gpu(index=i, pci_bus_id=b) for b, i in GPUS.items()), hcas=hcas, kernel=log)
    return {(f.code, f.severity, f.subject) for f in check_events(CheckInput(snapshot=snap, history=(), config=config or AgentConfig()))}


def fixture(tmp_path: Path, name: str) -> KernelLog:
    return read_log(tmp_path, (KMSG / name).read_text())


def test_gpus_off_the_bus_in_every_form_are_critical_and_named(tmp_path):
    found = judge(fixture(tmp_path, "off_bus.txt"))
    assert ("gpu.xid", "critical", "gpu1") in found  # Xid 79 with pid/name
    assert ("gpu.xid", "critical", "gpu0") in found  # Xid 79 without
    assert {("gpu.off_bus", "critical", g) for g in ("gpu2", "gpu3")} <= found  # no Xid line printed; gpu3's over several lines


def test_node_fault_xids_are_judged_and_application_xids_are_not(tmp_path):
    found = judge(fixture(tmp_path, "xid.txt"))
    assert ("gpu.xid", "critical", "gpu5") in found  # 119 GSP RPC timeout
    assert ("gpu.xid", "critical", "gpu0") in found  # 95 uncontained ECC
    assert ("gpu.xid", "warning", "gpu6") in found  # 63 row remapping: reset to apply
    assert not {f for f in found if f[2] == "gpu4"}  # 13 and 43 on gpu4: the application's fault


def test_application_xids_alone_never_degrade_a_node(tmp_path):
    text = "".join(line + "\n" for line in (KMSG / "xid.txt").read_text().splitlines() if "): 13," in line or "): 43," in line or "): 31," in line or "): 45," in line)
    log = read_log(tmp_path, text)
    assert log.events and {e.code for e in log.events} <= {"13", "31", "43", "45"}
    assert judge(log) == set()
    assert all(c.count > 0 for c in log.counts)  # still counted (agentd_kernel_events_total)


@pytest.mark.parametrize("name", ["boot.txt", "boot-kmsg.txt", "peermem.txt", "sxid.txt"])
def test_normal_and_one_off_messages_make_no_finding(tmp_path, name):
    assert judge(fixture(tmp_path, name)) == set()


def test_mlx5_health_is_critical_and_names_the_hca(tmp_path):
    log = fixture(tmp_path, "mlx5.txt")
    hca = Hca(name="mlx5_4", pci_bus_id="0000:41:00.0")
    found = judge(log, hcas=(hca,))
    assert ("hca.firmware", "critical", "mlx5_4") in found
    assert ("hca.firmware", "warning", "0000:01:00.0") in found  # insufficient slot power
    # one command timeout is not a finding (repeated rule)
    assert not {f for f in found if f[2] == "0000:03:00.0"}


def test_a_fatal_aer_error_is_critical(tmp_path):
    found = judge(fixture(tmp_path, "aer.txt"))
    assert ("pcie.aer.fatal", "critical", "0000:00:03.0") in found
    assert not {f for f in found if f[0] == "pcie.aer.correctable"}  # a few corrected errors are routine


def _timeouts(n: int) -> str:
    line = "mlx5_core 0000:03:00.0: wait_func:964:(pid 112): ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource"
    return "".join(f"4,{i + 1},{(i + 1) * 1000000},-;{line}\n" for i in range(n))


def test_repeated_rules_need_their_count_within_the_window(tmp_path):
    one, five = tmp_path / "one", tmp_path / "five"
    one.mkdir()
    five.mkdir()
    assert judge(read_log(one, _timeouts(1))) == set()
    log = read_log(five, _timeouts(5))
    assert ("hca.firmware", "warning", "0000:03:00.0") in judge(log)
    # the same events judged once the window has passed: nothing
    assert judge(log, at=log.events[-1].at + AgentConfig().kernel.window_s + 1) == set()


def test_a_critical_event_holds_for_hold_s_then_clears(tmp_path):
    log = read_log(tmp_path, "4,1,1000000,-;NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.\n")
    at = log.events[0].at
    cfg = AgentConfig()
    assert ("gpu.xid", "critical", "gpu0") in judge(log, at=at + cfg.kernel.window_s * 2)  # past the window, within the hold
    assert judge(log, at=at + cfg.kernel.hold_s + 1) == set()
    short = AgentConfig.model_validate({"kernel": {"hold_s": 10}})
    assert judge(log, at=at + 11, config=short) == set()


def test_record_times_are_dated_by_the_recorded_uptime(tmp_path):
    # an XID 79 printed 2 days before the capture: past the one-day hold
    log = read_log(tmp_path, "4,1,1000000,-;NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.\n", uptime=1 + 2 * DAY)
    snap_at = log.events[0].at + 2 * DAY
    assert judge(log, at=snap_at) == set()


def test_an_unreadable_log_is_a_fact_not_a_sick_node():
    log = KernelLog(available=False, asked=True, source="/dev/kmsg", error="/dev/kmsg: Operation not permitted")
    snap = NodeSnapshot(taken_at=1.0, host_root="/", kernel=log)
    found = [f for f in run_checks(CheckInput(snapshot=snap, history=(), config=AgentConfig())) if f.code.startswith("kernel.")]
    assert [(f.code, f.severity) for f in found] == [("kernel.log.unreadable", "ok")]
    assert check_events(CheckInput(snapshot=snap.model_copy(update={"kernel": KernelLog(asked=False)}), history=(), config=AgentConfig())) == []


def test_aer_lines_of_a_function_with_counters_are_judged_by_the_counters_once_they_cover_it(tmp_path):
    from agentd.model import PciDevice, PcieAer

    log = fixture(tmp_path, "aer.txt")
    fatal = next(e for e in log.events if e.code == "fatal")
    dev = PciDevice(bdf=fatal.device, class_code=0x060400, aer=PcieAer())
    snap = NodeSnapshot(taken_at=fatal.at + 10, host_root="/x", pci=(dev,), kernel=log)
    codes = lambda hist: {f.code for f in check_events(CheckInput(snapshot=snap, history=hist, config=AgentConfig()))}  # noqa: E731
    # no reading before the error (it was in the ring buffer at start, or `agentd check`): the line judges
    assert "pcie.aer.fatal" in codes(())
    assert "pcie.aer.fatal" in codes((snap.model_copy(update={"taken_at": fatal.at + 1}),))
    # a reading before it: the counters' rise is in the history; pcie_errors judges, not this check
    assert "pcie.aer.fatal" not in codes((snap.model_copy(update={"taken_at": fatal.at - 1}),))
