"""Issue 37's classes of kernel events, through the reader and the kernel check: real
published lines (tests/fixtures/kmsg, provenance in tests/fixtures/SOURCES.md), and where
none is published, lines made from the driver's own format string (said where so).

Each test reads a log with agentd.host.kernel_log (the catalogue's ``wants`` filter and
context as in the daemon) and judges it with the kernel check on a node whose GPUs and
HCAs have the bus ids the lines name."""

from __future__ import annotations

from pathlib import Path

from agentd.config import AgentConfig
from agentd.host.fs import HostRoot, ReadContext
from agentd.host.kernel_log import KernelLogSource
from agentd.judging.checks import CheckInput
from agentd.judging.checks.kernel import check_events
from agentd.model import Finding, Gpu, Hca, KernelLog, NodeSnapshot
from tests.support import efa_log

KMSG = Path(__file__).parents[2] / "fixtures" / "kmsg"
DAY = 86400.0
GPUS = {"0000:9b:00.0": 5, "0009:01:00.0": 0, "0019:01:00.0": 1, "0008:01:00.0": 2, "0000:38:00.0": 4}
HCAS = (Hca(name="mlx5_0", pci_bus_id="0000:00:00.0"), Hca(name="mlx5_1", pci_bus_id="0000:08:00.2"),
        Hca(name="mlx5_2", pci_bus_id="0000:06:00.0"), Hca(name="mlx5_3", pci_bus_id="0004:01:00.1"),
        Hca(name="rdmap0s6", pci_bus_id=efa_log.BDF))

# Xid 154 lines made from the driver's format string (no published line names these two
# actions): open-gpu-kernel-modules @ df1c9a3de2be, src/nvidia/src/kernel/gpu/gpu.c:7258
# "GPU recovery action changed from 0x%x (%s) to 0x%x (%s)" with _gpuRecoveryActionName's
# names (gpu.c:7126-7139), in an Xid line as kern_gpu_error_cont_ga100.c's examples print it.
TO_REBOOT = "NVRM: Xid (PCI:0000:9b:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
RESET_DONE = "NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"


def lines_of(name: str, numbers: range | list[int] | None = None) -> list[str]:
    """The messages of a fixture's records (all, or those numbered ``numbers`` from 1)."""
    msgs = [line.split(";", 1)[1] for line in (KMSG / name).read_text().splitlines() if ";" in line and not line.startswith(" ")]
    return msgs if numbers is None else [msgs[i - 1] for i in numbers]


def read(tmp_path: Path, messages: list[str], *, start_s: float = 1.0, step_s: float = 1.0, uptime: float | None = None) -> KernelLog:
    """``messages`` as consecutive records of a recorded log, read by a fresh source."""
    root = tmp_path / f"root{len(list(tmp_path.iterdir()))}"
    (root / "dev").mkdir(parents=True)
    usec = [int((start_s + i * step_s) * 1e6) for i in range(len(messages))]
    (root / "dev/kmsg").write_text("".join(f"4,{i + 1},{u},-;{m}\n" for i, (m, u) in enumerate(zip(messages, usec, strict=True))))
    if uptime is not None:
        (root / "proc").mkdir()
        (root / "proc/uptime").write_text(f"{uptime} 0\n")
    src = KernelLogSource(HostRoot(root, "offline", "test"))
    with ReadContext(src.host, "kernel") as ctx:
        return src.poll(ctx, keep_s=30 * DAY, max_events=5000)


def judged(log: KernelLog, *, after_s: float = 1.0, config: AgentConfig | None = None) -> list[Finding]:
    at = max((e.at for e in log.events), default=0.0) + after_s
    snap = NodeSnapshot(taken_at=at, host_root="/x", gpus=tuple(Gpu(index=i, pci_bus_id=b) for b, i in GPUS.items()), hcas=HCAS, kernel=log)
    return check_events(CheckInput(snapshot=snap, history=(), config=config or AgentConfig()))


def triples(findings: list[Finding]) -> set[tuple[str, str, str]]:
    return {(f.code, f.severity, f.subject) for f in findings}


# 1. the line's own words -----------------------------------------------------------------

def test_fatal_and_nonfatal_words_decide_nvlink5_and_sxid_severity(tmp_path):
    found = triples(judged(read(tmp_path, [*lines_of("xid.txt", [23, 26]), *lines_of("sxid.txt", [1, 3])])))
    assert ("gpu.xid", "critical", "gpu0") in found  # Xid 149 "NETIR_LINK_EVT  Fatal": critical on one line
    assert not {f for f in found if f[2] == "gpu2"}  # Xid 145 "RLW_SRC_TRACK Nonfatal" once: the table's repeated rule
    assert ("nvswitch.sxid", "critical", "0000:00:00.0") in found  # SXid 20034 (not in the table) "Fatal": not 3 repeats
    assert ("nvswitch.sxid", "info", "0000:05:00.0") in found  # 12028 "Non-fatal": shown, never judged


def test_xid_154_is_the_recovery_action_it_names(tmp_path):
    found = triples(judged(read(tmp_path, lines_of("xid.txt", [24, 25]) + [TO_REBOOT])))
    assert ("gpu.xid", "critical", "gpu0") in found  # "to 0x4 (Drain and Reset)"
    assert ("gpu.xid", "critical", "gpu1") in found  # "to 0x1 (GPU Reset Required)"
    assert ("gpu.xid", "critical", "gpu5") in found  # "to 0x2 (Node Reboot Required)" (format string)
    msg = next(f.message for f in judged(read(tmp_path, [TO_REBOOT])))
    assert "XID 154" in msg and "node reboot required" in msg


# 2. driver assertions ----------------------------------------------------------------------

def test_rm_assertions_gpu_lost_and_reset_required(tmp_path):
    found = triples(judged(read(tmp_path, lines_of("nvrm_assert.txt"))))
    assert ("gpu.off_bus", "critical", "node") in found  # NV_ERR_GPU_IS_LOST: no GPU named
    assert ("gpu.driver_error", "critical", "node") in found  # NV_ERR_RESET_REQUIRED
    # the GPU the driver named just before ("NVRM: GPU at PCI:0000:9b:00: GPU-...") is the subject
    named = triples(judged(read(tmp_path, lines_of("xid.txt", [5]) + lines_of("nvrm_assert.txt", [1, 6]))))
    assert {("gpu.off_bus", "critical", "gpu5"), ("gpu.driver_error", "critical", "gpu5")} <= named


# 3. module names -------------------------------------------------------------------------

def test_legacy_nv_peer_mem_load_failure_means_no_gpudirect_through_it(tmp_path):
    found = judged(read(tmp_path, lines_of("peermem_legacy.txt")))
    assert triples(found) == {("gdr.peermem_error", "warning", "node")}
    assert "failed to load" in found[0].message and "x8" in found[0].message  # every unknown / mismatched symbol line


# 4. mlx5 ---------------------------------------------------------------------------------

def test_mlx5_page_and_qp_reset_timeouts_probe_failures(tmp_path):
    found = triples(judged(read(tmp_path, lines_of("mlx5_fatal.txt"))))
    assert ("hca.firmware", "critical", "mlx5_0") in found  # 2RST_QP(0x50a) timeout
    assert ("hca.firmware", "critical", "mlx5_1") in found  # MANAGE_PAGES(0x108) timeout
    assert ("hca.firmware", "warning", "mlx5_2") in found  # probe_one: mlx5_init_one failed / probe of ... failed
    # QUERY_VPORT_COUNTER and DESTROY_QP timeouts (2 on mlx5_0) are the repeated rule's, below its 3
    assert [f for f in judged(read(tmp_path, lines_of("mlx5_fatal.txt", [3, 4])))] == []
    # the driver core's wording since Linux 6.10, from its format string (drivers/base/dd.c
    # call_driver_probe: dev_err(dev, "probe with driver %s failed with error %d\n", ...))
    newer = "mlx5_core 0000:06:00.0: probe with driver mlx5_core failed with error -110"
    assert triples(judged(read(tmp_path, [newer]))) == {("hca.firmware", "warning", "mlx5_2")}


def test_mlx5_through_a_failed_pcie_recovery(tmp_path):
    """A ConnectX whose DPC recovery took longer than the kernel waited (linux-pci, 2025)."""
    found = triples(judged(read(tmp_path, lines_of("mlx5_pcie.txt"))))
    assert ("hca.firmware", "critical", "mlx5_3") in found  # Fatal error, PCI slot 1 is unavailable, health recovery aborted
    assert ("pcie.dpc.contained", "warning", "0004:00:00.0") in found
    assert ("pcie.recovery.failed", "critical", "0004:00:00.0") in found  # subordinate reset failed, recovery failed
    assert ("pcie.hotplug.link_down", "warning", "0004:00:00.0") in found
    assert not {f for f in found if f[0].startswith("pcie.aer")}  # the Bus Error line is the DPC event's detail
    msg = next(f.message for f in judged(read(tmp_path, lines_of("mlx5_pcie.txt"))) if f.subject == "mlx5_3")
    assert "PCI slot unavailable" in msg and "recovery aborted" in msg


def test_an_efa_admin_queue_the_driver_closed_is_critical_for_its_hca(tmp_path):
    """EFA's admin-queue lines (tests/support/efa_log, from efa_com.c's format strings): a
    command the device never completed closes the queue (critical, as an mlx5 whose
    page-management commands time out); failed commands are counted, never judged."""
    timeout = judged(read(tmp_path, [efa_log.GET_STATS_TIMEOUT, efa_log.GET_STATS_FAILED, efa_log.GET_STATS_CALLER]))
    assert triples(timeout) == {("hca.firmware", "critical", "rdmap0s6")}
    assert "did not complete an admin command" in timeout[0].message and "GET_STATS(13)" in timeout[0].message
    assert triples(judged(read(tmp_path, [efa_log.QUEUE_CLOSED, efa_log.GET_STATS_NOT_SUBMITTED]))) == {("hca.firmware", "critical", "rdmap0s6")}
    assert judged(read(tmp_path, [efa_log.CREATE_QP_FAILED] * 10)) == []  # a job's CREATE_QP refused: counted, not judged (as mlx5's)


# 5. PCIe error recovery ----------------------------------------------------------------------

def test_pcie_recovery_in_both_dpc_wordings(tmp_path):
    found = triples(judged(read(tmp_path, lines_of("pcie_recovery.txt"))))
    assert ("pcie.aer.correctable", "info", "0000:00:1c.0") in found  # a "PCIe Bus Error" line with no header: counted
    # a surprise removal below 0000:00:01.4 (old wording "status:0x1f01 source:0x0000")
    assert {("pcie.dpc.contained", "warning", "0000:00:01.4"), ("pcie.recovery.failed", "critical", "0000:00:01.4"),
            ("pcie.link.inactive", "warning", "0000:00:01.4"), ("pcie.hotplug.link_down", "warning", "0000:00:01.4")} <= found
    assert ("pcie.dpc.contained", "warning", "0015:01:00.0") in found  # new wording "ERR_FATAL received from 0015:01:00.0"
    assert ("pcie.dpc.contained", "warning", "0000:02:00.0") in found  # "source:0x0200": the requester id
    assert not {f for f in found if f[2] == "0015:00:00.0"}  # "device recovery successful", "Link Down/Up ignored"
    assert not {f for f in found if f[0] == "pcie.aer.fatal"}  # the fatal Bus Error after a DPC line is its detail


def test_a_bus_error_line_right_after_its_header_is_not_counted_again(tmp_path):
    log = read(tmp_path, lines_of("aer.txt", [5, 6, 7, 8, 9, 10, 11, 12]))  # header, then port and endpoint lines
    assert [(e.kind, e.code, e.device) for e in log.events] == [("aer", "corrected", "0000:03:00.0")]


# 6. counted events are visible (info), never judged -------------------------------------------

def test_application_xids_and_corrected_errors_are_info_with_count_and_last_time(tmp_path):
    found = judged(read(tmp_path, lines_of("xid.txt", [1, 2, 3, 4]) + lines_of("aer.txt", [1])))
    by = {(f.code, f.subject): f for f in found}
    xid = by[("gpu.xid", "gpu4")]
    assert xid.severity == "info" and "XID 13" in xid.message and "x3" in xid.message and "XID 43" in xid.message
    assert "latest at 19" in xid.message or "latest at 20" in xid.message  # the time of the latest, in UTC
    assert by[("pcie.aer.correctable", "0000:00:1c.5")].severity == "info"
    assert {f.severity for f in found} == {"info"}
    # they stay shown for kernel.window_s after the latest, then go
    log = read(tmp_path, lines_of("xid.txt", [1]))
    assert judged(log, after_s=AgentConfig().kernel.window_s + 1) == []


def test_info_never_hides_a_worse_event_of_the_same_gpu(tmp_path):
    found = judged(read(tmp_path, lines_of("xid.txt", [1]) + ["NVRM: Xid (PCI:0000:38:00): 79, GPU has fallen off the bus."]))
    (f,) = [f for f in found if f.code == "gpu.xid"]
    assert f.severity == "critical" and "XID 79" in f.message and "XID 13" in f.message


# 7. holds until the reset or the reboot ---------------------------------------------------------

def test_an_event_that_needs_a_reboot_holds_past_hold_s(tmp_path):
    log = read(tmp_path, lines_of("off_bus.txt", [7]))  # Xid 79 (RESTART_BM)
    cfg = AgentConfig()
    assert ("gpu.xid", "critical", "gpu0") not in triples(judged(log, after_s=1))  # 0000:01:00.0 is no GPU here: by bus id
    assert ("gpu.xid", "critical", "0000:01:00.0") in triples(judged(log, after_s=cfg.kernel.hold_s * 3))
    bounded = AgentConfig.model_validate({"kernel": {"reset_hold_s": 30}})
    assert judged(log, after_s=31, config=bounded) == []  # the demo's short hold


def test_an_event_that_needs_a_reset_holds_until_the_gpu_is_seen_reset(tmp_path):
    xid95 = "NVRM: Xid (PCI:0000:9b:00): 95, pid=7062, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No"  # xid.txt 29, on gpu5's bus
    held = read(tmp_path, [xid95])
    assert ("gpu.xid", "critical", "gpu5") in triples(judged(held, after_s=AgentConfig().kernel.hold_s * 2))
    reset = read(tmp_path, [xid95, RESET_DONE.format(bus="0000:9b:00")])
    assert triples(judged(reset, after_s=AgentConfig().kernel.hold_s * 2)) == set()  # past its window, the 154 is gone too
    shown = triples(judged(reset))
    assert shown == {("gpu.xid", "info", "gpu5")}  # the reset itself (Xid 154 -> None) is shown, the 95 no longer held
    # a reset of another GPU ends nothing here
    other = read(tmp_path, [xid95, RESET_DONE.format(bus="0009:01:00")])
    assert ("gpu.xid", "critical", "gpu5") in triples(judged(other, after_s=AgentConfig().kernel.hold_s * 2))


def test_benign_fixtures_stay_quiet(tmp_path):
    """Nothing that was quiet becomes loud: a real boot, nvswitch opens, a successful PCIe
    recovery give no warning or critical (info at most)."""
    for name in ("boot.txt", "boot-kmsg.txt"):
        assert {f.severity for f in judged(read(tmp_path, lines_of(name)))} <= {"info"}, name
    assert judged(read(tmp_path, lines_of("pcie_recovery.txt", [16, 17, 19, 20, 21, 22, 23, 24, 25]))) == []
