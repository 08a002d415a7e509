"""A coverage pass on real kernel log lines agentd had not seen (tests/fixtures/kmsg/
nvidia_more.txt, mlx5_more.txt, pcie_more.txt; sources in tests/fixtures/SOURCES.md), read
by the kernel log reader and judged by the kernel check on a node whose GPUs and HCAs have
the bus ids the lines name. Each class here was missed, or counted twice, before: the
authority for what the line means is cited with the catalogue entry
(agentd/host/kernel_catalog.py). Where no published line exists (said where so), the line is
made from the driver's format string."""

from __future__ import annotations

from agentd.config import AgentConfig
from agentd.judging.checks import CheckInput
from agentd.judging.checks.kernel import check_events
from agentd.model import Finding, Gpu, Hca, KernelLog, NodeSnapshot
from tests.judging.checks.test_kernel_event_classes import lines_of, read

GPUS = {"0000:91:00.0": 0, "0000:cb:00.0": 1, "0000:0a:00.0": 2, "0000:98:00.0": 3, "0000:02:00.0": 4, "0000:61:00.0": 5}
HCAS = (Hca(name="mlx5_0", pci_bus_id="0000:0d:00.0"), Hca(name="mlx5_1", pci_bus_id="0000:5e:00.0"),
        Hca(name="mlx5_2", pci_bus_id="0000:06:00.0"), Hca(name="mlx5_3", pci_bus_id="400f:01:00.0"),
        Hca(name="mlx5_4", pci_bus_id="0000:08:00.1"), Hca(name="mlx5_5", pci_bus_id="0000:01:00.0"))


def judged(log: KernelLog, *, after_s: float = 1.0) -> list[Finding]:
    at = max((e.at for e in log.events), default=0.0) + after_s
    snap = NodeSnapshot(taken_at=at, host_root="/x", gpus=tuple(Gpu(index=i, pci_bus_id=b) for b, i in GPUS.items()), hcas=HCAS, kernel=log)
    return check_events(CheckInput(snapshot=snap, history=(), config=AgentConfig()))


def triples(findings: list[Finding]) -> set[tuple[str, str, str]]:
    return {(f.code, f.severity, f.subject) for f in findings}


def events(log: KernelLog) -> list[tuple[str, str, str | None]]:
    return [(e.kind, e.code, e.device) for e in log.events]


# NVIDIA ------------------------------------------------------------------------------------

def test_sxid_severity_and_data_lines_are_details_of_the_sxid_counted(tmp_path):
    """A DGX's Xid 79 and the NVSwitch SXid 20034 storm after it (leptonai/gpud's SXid
    README): nvswitch.c _nvswitch_dump_error_entry prints "Severity %d Engine instance %02d
    Sub-engine instance %02d" and "Data {...}" after each hardware SXid: one SXid each."""
    log = read(tmp_path, lines_of("nvidia_more.txt", list(range(1, 14))))
    assert [e for e in events(log) if e[0] == "sxid"] == [
        ("sxid", "20034", "0000:06:00.0"), ("sxid", "20034", "0000:05:00.0"),
        ("sxid", "20034", "0000:07:00.0"), ("sxid", "20034", "0000:05:00.0")]
    assert triples(judged(log)) == {("gpu.xid", "critical", "gpu0"), ("nvswitch.sxid", "critical", "0000:06:00.0"),
                                    ("nvswitch.sxid", "critical", "0000:05:00.0"), ("nvswitch.sxid", "critical", "0000:07:00.0")}
    # an unlisted SXid's record lines alone never reach its repeated rule (3)
    dump = lines_of("nvidia_more.txt", [8, 9, 12, 13])  # Severity/Data lines of two switches
    assert read(tmp_path, dump).events == ()


def test_a_gpu_the_driver_could_not_initialise_is_named(tmp_path):
    """"RmInitAdapter failed!" and "rm_init_adapter failed, device minor number N"
    (NVIDIA/gpu-operator#1146, open-gpu-kernel-modules#789): the GPU is unusable, as after a
    failed probe."""
    log = read(tmp_path, lines_of("nvidia_more.txt", [52, 53, 54, 55, 56]))
    assert [e for e in events(log) if e[1] == "probe_failed"] == [
        ("nvrm", "probe_failed", "0000:0a:00.0"), ("nvrm", "probe_failed", "0000:0a:00.0"),
        ("nvrm", "probe_failed", "0000:98:00.0"), ("nvrm", "probe_failed", "0000:98:00.0")]
    found = judged(log)
    assert triples(found) == {("gpu.driver_error", "warning", "gpu2"), ("gpu.driver_error", "warning", "gpu3")}
    assert all("failed to initialise a GPU" in f.message for f in found)


def test_nvidia_lines_judged_as_the_catalogue_says(tmp_path):
    """The whole file: application Xids are info, node faults critical, a contained ECC
    error a warning, GSP heartbeat and NVLink training lines only counted."""
    found = triples(judged(read(tmp_path, lines_of("nvidia_more.txt"))))
    assert {("gpu.xid", "critical", "gpu0"), ("gpu.driver_error", "warning", "gpu2"), ("gpu.driver_error", "warning", "gpu3")} <= found
    assert ("gpu.xid", "critical", "gpu1") in found  # Xid 109 (RESET_GPU) after three Xid 13
    assert ("gpu.xid", "critical", "gpu5") in found  # Xid 119 "Timeout waiting for RPC from GSP!" (older wording)
    assert ("gpu.xid", "critical", "0019:01:00.0") in found  # Xid 149 "NETIR Fatal"
    assert ("gpu.xid", "warning", "0000:00:08.0") in found  # Xid 94 "Contained: SM (0x1)"
    assert {f for f in found if f[2] in ("0000:dc:00.0", "0000:00:05.0", "0000:00:07.0")} == {
        ("gpu.xid", "info", "0000:dc:00.0"), ("gpu.xid", "info", "0000:00:05.0"), ("gpu.xid", "info", "0000:00:07.0")}
    assert not {f for f in found if f[2] in ("0018:01:00.0", "0000:01:00.0", "0008:01:00.0") and f[1] != "info"}  # Nonfatal NVLink5 once
    # "GPU6 ... Heartbeat timed out" (no bus id) and the NVLink Rx-detect lines are counted only
    assert {f for f in found if f[0] == "gpu.driver_error"} == {("gpu.driver_error", "warning", "gpu2"), ("gpu.driver_error", "warning", "gpu3")}


# mlx5 --------------------------------------------------------------------------------------

def test_an_mlx5_command_with_no_completion_is_one_timeout(tmp_path):
    """cmd.c: wait_func_handle_exec_timeout's "cmd[0]: DESTROY_RMP(0x90e) No done completion"
    then wait_func's "DESTROY_RMP(0x90e) timeout. Will cause a leak ..." (netdev, 2022): one
    command timeout; a "No done completion" alone (the kernel commit 485d65e13571's example)
    is one too."""
    log = read(tmp_path, lines_of("mlx5_more.txt", [23, 24, 25, 26, 27, 28]))
    assert [e for e in events(log) if e[1].endswith("cmd_timeout")] == [("mlx5", "cmd_timeout", "400f:01:00.0")]
    assert ("hca.firmware", "critical", "mlx5_3") in triples(judged(log))  # Fatal error 1, PCI slot is unavailable
    alone = read(tmp_path, lines_of("mlx5_more.txt", [14]) * 3)
    assert triples(judged(alone)) == {("hca.firmware", "warning", "mlx5_2")}  # three timeouts: the repeated rule


def test_an_mlx5_command_recovered_after_timeout_is_not_a_timeout(tmp_path):
    """cmd.c wait_func_handle_exec_timeout: "cmd[%d]: %s(0x%x) recovered after timeout" (the
    completion was found on the command EQ; the line is made from the format string with
    mlx5_core_warn's "%s:%d:(pid %d): " prefix): counted, never a timeout."""
    recovered = "mlx5_core 0000:06:00.0: wait_func_handle_exec_timeout:1113:(pid 3122): cmd[0]: CREATE_CQ(0x400) recovered after timeout"
    log = read(tmp_path, [recovered] * 3)
    assert events(log) == [("mlx5", "cmd_recovered", "0000:06:00.0")] * 3
    assert judged(log) == []


def test_mlx5e_tx_timeout_detected_is_a_tx_timeout_of_its_hca(tmp_path):
    """en_main.c mlx5e_tx_timeout: netdev_err "TX timeout detected" (the kernel commit
    918fc3855a65's example); its "TX timeout on queue: ..." line is a detail."""
    log = read(tmp_path, lines_of("mlx5_more.txt", [29, 30]))
    assert events(log)[0] == ("mlx5", "tx_timeout", "0000:08:00.1")
    three = read(tmp_path, lines_of("mlx5_more.txt", [29, 30]) * 3)
    assert triples(judged(three)) == {("hca.firmware", "warning", "mlx5_4")}


def test_an_older_kernels_health_syndrome_line_is_a_syndrome(tmp_path):
    """Older health.c printed "synd 0x%x: %s" with dev_err, without print_health_info's
    prefix (charmplusplus/charm#2635)."""
    log = read(tmp_path, lines_of("mlx5_more.txt", [9, 10, 11, 12, 13]))
    assert ("mlx5", "fw_syndrome", "0000:5e:00.0") in events(log)
    found = judged(log)
    assert triples(found) == {("hca.firmware", "critical", "mlx5_1")}
    assert "health syndrome" in found[0].message


def test_mlx5_lines_judged_as_the_catalogue_says(tmp_path):
    log = read(tmp_path, lines_of("mlx5_more.txt"))
    got = events(log)
    assert [e for e in got if e[1] == "cmd_timeout"] == [("mlx5", "cmd_timeout", "0000:06:00.0"), ("mlx5", "cmd_timeout", "400f:01:00.0")]
    assert {("mlx5", "fw_syndrome", "0000:5e:00.0"), ("mlx5", "tx_timeout", "0000:08:00.1")} <= set(got)
    found = triples(judged(log))
    assert ("hca.firmware", "critical", "mlx5_0") in found  # health compromised, firmware internal error
    assert ("hca.firmware", "critical", "0000:0d:00.2") in found  # another function of it (no HCA of that bus here)
    assert ("hca.firmware", "critical", "0000:00:00.1") in found  # health recovery flow aborted
    assert ("hca.firmware", "warning", "mlx5_5") in found  # mlx5_load_one failed / probe of ... failed
    assert not {f for f in found if f[2] == "0000:ab:00.0"}  # "Port: 1 Link INIT/ACTIVE"


# PCIe --------------------------------------------------------------------------------------

def test_older_kernels_failed_recovery_wording(tmp_path):
    """Before the "AER: " dev_fmt, err.c printed "AER: Device recovery failed" and
    reset_link's "link reset at upstream device %s failed" (KERN_DEBUG, kept in /dev/kmsg):
    a hot-plug loop on a 5.x kernel (linux-pci, 2022)."""
    found = triples(judged(read(tmp_path, lines_of("pcie_more.txt", list(range(10, 25))))))
    assert ("pcie.recovery.failed", "critical", "0000:89:02.0") in found
    assert {("pcie.dpc.contained", "warning", "0000:89:02.0"), ("pcie.hotplug.link_down", "warning", "0000:89:02.0"),
            ("pcie.link.inactive", "warning", "0000:89:02.0"), ("pcie.aer.correctable", "info", "0000:89:02.0")} <= found
    assert not {f for f in found if f[0] == "pcie.aer.fatal"}  # the fatal Bus Error after the DPC line is its detail


def test_a_firmware_first_pcie_error_is_counted_for_the_device_it_names(tmp_path):
    """APEI GHES: the CPER record's "Error 0, type: recoverable", "section_type: PCIe error"
    and "device_id: 0000:5e:00.0" (ovro-lwa/lwa-issues#117; an mce line among them): one
    non-fatal AER error of that device (ghes_handle_aer, cper_severity_to_aer)."""
    block = lines_of("pcie_more.txt", list(range(42, 54)))
    log = read(tmp_path, block)
    assert events(log) == [("aer", "nonfatal", "0000:5e:00.0")]  # not the "vendor_id: ..., device_id: 0xa808" line
    assert judged(log) == []  # one non-fatal error: the repeated rule's (3)
    assert triples(judged(read(tmp_path, block * 3))) == {("pcie.aer.nonfatal", "warning", "0000:5e:00.0")}


def test_pcie_lines_judged_as_the_catalogue_says(tmp_path):
    log = read(tmp_path, lines_of("pcie_more.txt"))
    assert ("aer", "nonfatal", "0000:5e:00.0") in events(log)  # firmware-first
    found = triples(judged(log))
    assert ("pcie.recovery.failed", "critical", "0000:89:02.0") in found
    assert ("pcie.aer.fatal", "critical", "0000:00:02.0") in found  # "Uncorrected (Fatal) error received: id=0010"
    assert ("gpu.xid", "critical", "gpu4") in found  # the GPU below it fell off the bus
    assert ("pcie.aer.correctable", "info", "0000:00:00.0") in found  # 6.x "Correctable error message received from"


def test_new_benign_lines_stay_quiet(tmp_path):
    """Module loads, GPU headers, link up, "Card not present", CPER headers, an SXid's own
    record lines, and mlx5 commands recovered after a timeout (three: once a warning) give
    no warning or critical."""
    recovered = "mlx5_core 0000:06:00.0: wait_func_handle_exec_timeout:1113:(pid 3122): cmd[0]: CREATE_CQ(0x400) recovered after timeout"
    benign = [*lines_of("nvidia_more.txt", [1, 2, 5, 8, 12, 33, 40, 41, 42]), *lines_of("mlx5_more.txt", [4, 17, 21, 22, 23]),
              *lines_of("pcie_more.txt", [15, 21, 42, 43, 51, 52, 53]), recovered, recovered, recovered]
    assert {f.severity for f in judged(read(tmp_path, benign))} <= {"info"}
