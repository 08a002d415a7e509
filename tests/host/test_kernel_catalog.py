"""Kernel log lines -> events -> policy, over real published kernel log lines
(tests/fixtures/kmsg, provenance in tests/fixtures/SOURCES.md)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from agentd.host.kernel_catalog import CONTEXT_RECORDS, DETAIL_CHARS, Extracted, Extractor
from agentd.judging.kernel_policy import XID_CATALOGUE, EventPolicy, event_policy
from tests.support import efa_log
from tests.support.paths import FIXTURES

KMSG = FIXTURES / "kmsg"
_ESCAPE_RE = re.compile(r"\\x([0-9a-fA-F]{2})")


def records(text: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A small /dev/kmsg record splitter for these tests: "prio,seq,usec,flags;message",
    then continuation lines " KEY=VALUE"; the kernel's \\xNN escapes undone."""
    message: str | None = None
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith(" "):
            key, _, value = line[1:].partition("=")
            fields[key] = value
            continue
        if message is not None:
            yield message, fields
        _prefix, _, body = line.partition(";")
        message = _ESCAPE_RE.sub(lambda m: chr(int(m.group(1), 16)), body)
        fields = {}
    if message is not None:
        yield message, fields


def extract(name: str) -> list[tuple[int, Extracted]]:
    """(record number from 1, event) for every record of a fixture that gives an event."""
    ex = Extractor()
    out = []
    for i, (message, fields) in enumerate(records((KMSG / name).read_text(encoding="utf-8")), 1):
        event = ex.feed(message, fields)
        if event is not None:
            out.append((i, event))
    return out


def triples(name: str) -> list[tuple[int, str, str, str | None]]:
    return [(i, e.kind, e.code, e.device) for i, e in extract(name)]


def test_xid_lines_in_every_form():
    assert triples("xid.txt") == [
        (1, "xid", "13", "0000:38:00.0"),
        (2, "xid", "13", "0000:38:00.0"),
        (3, "xid", "13", "0000:38:00.0"),
        (4, "xid", "43", "0000:38:00.0"),
        # 5-18: "GPU at PCI", the board serial, the GSP RPC history table, a stack dump: nothing
        (7, "xid", "119", "0000:9b:00.0"),
        (19, "xid", "119", "0000:9b:00.0"),
        (20, "nvrm", "other", "0000:9b:00.0"),  # "Rate limiting GSP RPC error prints for GPU at PCI:0000:9b:00"
        (21, "xid", "119", "0000:9b:00.0"),
        (22, "xid", "119", "0000:9b:00.0"),
        (23, "xid", "149", "0009:01:00.0"),
        (24, "xid", "154", "0009:01:00.0"),
        (25, "xid", "154", "0019:01:00.0"),
        (26, "xid", "145", "0008:01:00.0"),
        (27, "xid", "94", "0000:01:00.0"),  # "PCI:0000:01:00 GPU-I:05": a MIG instance of that GPU
        (28, "xid", "94", "0000:01:00.0"),
        (29, "xid", "95", "0000:01:00.0"),
        (30, "xid", "63", "0000:10:1c.0"),
    ]


def test_xid_policies_node_faults_and_application_errors():
    by_code = {e.code: event_policy(e.kind, e.code) for _, e in extract("xid.txt")}
    for app_error in ("13", "43", "154"):
        assert by_code[app_error].rule == "count", app_error
    assert by_code["119"] == EventPolicy("critical", "once", 1, by_code["119"].title, by_code["119"].remediation, until="reset")
    assert by_code["95"].severity == "critical"
    assert (by_code["94"].severity, by_code["94"].rule) == ("warning", "once")
    assert (by_code["63"].severity, by_code["63"].rule) == ("warning", "once")
    assert (by_code["145"].severity, by_code["145"].rule, by_code["145"].threshold) == ("warning", "repeated", 3)
    assert by_code["119"].title.startswith("Xid 119")


@pytest.mark.parametrize("xid", [46, 48, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143])
def test_node_fault_xids_are_critical_once(xid):
    policy = event_policy("xid", str(xid))
    assert (policy.severity, policy.rule) == ("critical", "once")
    assert policy.remediation


@pytest.mark.parametrize("xid", [8, 11, 13, 31, 32, 43, 45, 68, 69, 154])
def test_application_xids_never_degrade_the_node(xid):
    assert event_policy("xid", str(xid)).rule == "count"


def test_xid_catalogue_holds_nvidias_buckets():
    assert XID_CATALOGUE[79][0] == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert XID_CATALOGUE[79][2] == "RESTART_BM"
    assert XID_CATALOGUE[13][2] == "RESTART_APP"
    assert 1 not in XID_CATALOGUE  # "Unused" codes are left out


def test_unknown_xid_is_a_repeated_warning():
    policy = event_policy("xid", "999")
    assert (policy.severity, policy.rule, policy.threshold) == ("warning", "repeated", 3)
    assert event_policy("xid", "not-a-number").rule == "repeated"


def test_off_bus_in_every_form():
    assert triples("off_bus.txt") == [
        (1, "gpu_off_bus", "off_bus", "0000:01:00.0"),  # "NVRM: GPU at 0000:01:00.0 has fallen off the bus."
        (2, "nvrm", "other", "0000:01:00.0"),  # "os_pci_init_handle: invalid context!" right after it
        (3, "gpu_off_bus", "off_bus", "0000:b3:00.0"),  # three lines in one record
        (4, "nvrm", "probe_failed", None),
        # 5: "loading NVIDIA UNIX Open Kernel Module": nothing
        (6, "xid", "79", "0000:05:00.0"),  # an Xid 79 that says "fallen off the bus": one event
        (7, "xid", "79", "0000:01:00.0"),
        (8, "gpu_off_bus", "off_bus", "0000:29:00.0"),
    ]
    for _, e in extract("off_bus.txt"):
        if e.kind in ("gpu_off_bus", "xid"):
            assert event_policy(e.kind, e.code).severity == "critical"


THREE_LINES = (
    "NVRM: The NVIDIA GPU 0000:b3:00.0",
    "NVRM: (PCI ID: 10de:26b5) installed in this system has",
    "NVRM: fallen off the bus and is not responding to commands.",
)


def test_off_bus_split_over_records_is_attributed_to_the_gpu_named_before():
    """The three lines of NVSentinel issue #155 as three records (a log shipper splits them)."""
    ex = Extractor()
    assert ex.feed(THREE_LINES[0]) is None
    assert ex.feed(THREE_LINES[1]) is None
    event = ex.feed(THREE_LINES[2])
    assert event is not None
    assert (event.kind, event.code, event.device) == ("gpu_off_bus", "off_bus", "0000:b3:00.0")


def test_off_bus_after_gpu_at_pci_header_names_that_gpu():
    ex = Extractor()
    ex.feed("NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d")
    ex.feed("NVRM: GPU Board Serial Number: 1650124014249")
    event = ex.feed(THREE_LINES[2])
    assert event is not None and event.device == "0000:9b:00.0"


def test_gpu_context_is_bounded():
    ex = Extractor()
    ex.feed(THREE_LINES[0])
    for _ in range(CONTEXT_RECORDS):
        ex.feed("clocksource: Long readout interval, skipping watchdog check: cs_nsec: 1584036171 wd_nsec: 1584036160")
    event = ex.feed(THREE_LINES[2])
    assert event is not None and event.kind == "gpu_off_bus"
    assert event.device is None  # too far back to be sure


def test_off_bus_line_right_after_its_xid_79_is_not_a_second_event():
    ex = Extractor()
    first = ex.feed("NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.")
    assert first is not None and (first.kind, first.code) == ("xid", "79")
    assert ex.feed("NVRM: GPU at 0000:01:00.0 has fallen off the bus.") is None
    other_gpu = ex.feed("NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.")
    assert other_gpu is not None and other_gpu.device == "0000:29:00.0"


def test_sxid():
    assert triples("sxid.txt") == [
        (1, "sxid", "12028", "0000:05:00.0"),
        (2, "sxid", "12028", "0000:05:00.0"),
        (3, "sxid", "20034", "0000:00:00.0"),
        # 4: the "Data {...}" repeat of an SXid; 5-7: "nvidia-nvswitch2: open": nothing
    ]
    assert event_policy("sxid", "12028").rule == "count"  # non-fatal in the Fabric Manager guide
    assert (event_policy("sxid", "10003").severity, event_policy("sxid", "10003").rule) == ("critical", "once")
    assert event_policy("sxid", "20034").rule == "repeated"


def test_mlx5():
    assert triples("mlx5.txt") == [
        (1, "mlx5", "cmd_timeout", "0000:03:00.0"),
        (2, "mlx5", "health_compromised", "0000:41:00.0"),
        (3, "mlx5", "unrecoverable", "0000:41:00.0"),
        (4, "mlx5", "tx_timeout", None),  # NETDEV WATCHDOG names the netdev, not the device
        (5, "mlx5", "slot_power", "0000:01:00.0"),
        (6, "mlx5", "module_temp", "0000:5c:00.0"),
        (7, "mlx5", "cmd_failed", "0000:d2:00.0"),
        (8, "mlx5", "module_unplugged", "0000:63:00.1"),
        (9, "mlx5", "cmd_failed", "0000:d2:00.0"),
        (10, "mlx5", "slot_power", "0000:5c:00.0"),
        (11, "mlx5", "module_temp", None),
    ]
    sev = {code: event_policy("mlx5", code) for code in ("health_compromised", "unrecoverable", "cmd_timeout", "slot_power", "module_temp", "cable", "cmd_failed", "other")}
    assert (sev["health_compromised"].severity, sev["health_compromised"].rule) == ("critical", "once")
    assert (sev["unrecoverable"].severity, sev["unrecoverable"].rule) == ("critical", "once")
    assert (sev["cmd_timeout"].severity, sev["cmd_timeout"].rule, sev["cmd_timeout"].threshold) == ("warning", "repeated", 3)
    for code in ("slot_power", "module_temp", "cable"):
        assert (sev[code].severity, sev[code].rule) == ("warning", "once")
    assert sev["cmd_failed"].rule == "count" and sev["other"].rule == "count"


# AWS EFA's admin-queue lines (tests/support/efa_log: made from efa_com.c's format strings)
EFA_LINES = (
    (efa_log.GET_STATS_TIMEOUT, "cmd_timeout"),
    (efa_log.CREATE_QP_NO_MSIX, "cmd_timeout"),
    (efa_log.POLLING_TIMEOUT, "cmd_timeout"),
    (efa_log.GET_STATS_FAILED, "cmd_failed"),
    (efa_log.GET_STATS_CALLER, "other"),  # the caller's own line (efa_com_get_stats)
    (efa_log.QUEUE_CLOSED, "admin_queue_closed"),
    (efa_log.GET_STATS_NOT_SUBMITTED, "cmd_failed"),
    (efa_log.COMP_CTX_NULL, "admin_queue_closed"),
    (efa_log.UNKNOWN_FAILED, "cmd_failed"),
)


def test_efa_admin_queue_lines_name_their_function():
    ex = Extractor()
    found = []
    for line, _ in EFA_LINES:
        assert ex.wants(line.encode())
        event = ex.feed(line)
        assert event is not None, line
        found.append((event.kind, event.code, event.device))
    assert found == [("efa", code, efa_log.BDF) for _, code in EFA_LINES]
    # ordinary lines of the driver (efa_main.c ibdev_info, dev_info), and ENA's admin queue
    # (the same wording, another driver) are nothing
    assert ex.feed("efa 0000:00:06.0 efa_0: IB device registered") is None
    assert ex.feed("efa 0000:00:06.0: Setup irq:0x00000000d2e1f0a3 vector:34 name:efa-mgmnt@pci:0000:00:06.0") is None
    assert ex.feed("ena 0000:00:05.0 eth0: Admin queue is closed") is None
    timeout, closed, failed = (event_policy("efa", c) for c in ("cmd_timeout", "admin_queue_closed", "cmd_failed"))
    # the driver closes the admin queue after a timeout: the function is unusable, as an mlx5
    # whose page-management commands time out (critical), not as mlx5's other timeouts
    assert (timeout.severity, timeout.rule) == (closed.severity, closed.rule) == ("critical", "once")
    assert (timeout.severity, timeout.rule) == (event_policy("mlx5", "fatal_cmd_timeout").severity, event_policy("mlx5", "fatal_cmd_timeout").rule)
    assert failed == event_policy("mlx5", "cmd_failed")  # a refused command counts, as mlx5's: mostly a job's request at the device's limits
    assert event_policy("efa", "other").rule == "count"


def test_device_from_record_fields_when_the_text_names_none():
    text = "4,1,1000,-;NETDEV WATCHDOG: eth0 (mlx5_core): transmit queue timed out\n SUBSYSTEM=pci\n DEVICE=+pci:0000:5a:00.0\n"
    ((message, fields),) = list(records(text))
    assert fields == {"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:5a:00.0"}
    event = Extractor().feed(message, fields)
    assert event is not None and (event.code, event.device) == ("tx_timeout", "0000:5a:00.0")
    event = Extractor().feed(message, {"DEVICE": "+usb:1-2"})
    assert event is not None and event.device is None


def test_aer_counts_each_error_once_named_after_its_source():
    assert triples("aer.txt") == [
        (1, "aer", "corrected", "0000:00:1c.5"),
        # 2-4: the same error's "PCIe Bus Error" and status lines
        (5, "aer", "corrected", "0000:03:00.0"),  # the endpoint, not the root port 0000:00:1d.0
        # 6-12: its "PCIe Bus Error" lines, from the port and again from the nvme endpoint
        (16, "aer", "corrected", "0000:00:1d.0"),  # "received: id=00e8" (requester id, before 4.19)
        (17, "aer", "nonfatal", "0000:00:00.0"),
        (24, "pcie", "recovery_failed", "0000:00:00.0"),  # "AER: device recovery failed": a fault of its own
        (27, "pcie", "recovery_failed", "0000:00:03.0"),
        (28, "aer", "fatal", "0000:00:03.0"),
        (34, "aer", "corrected", "0000:06:00.0"),  # "Correctable error message received from" (6.x)
        (35, "aer", "corrected", "0000:06:00.0"),  # "Multiple ...": a second message
        (39, "aer", "nonfatal", "0000:80:1b.4"),
    ]
    fatal, nonfatal, corrected = (event_policy("aer", c) for c in ("fatal", "nonfatal", "corrected"))
    assert (fatal.severity, fatal.rule) == ("critical", "once")
    assert (nonfatal.severity, nonfatal.rule) == ("warning", "repeated")
    assert (corrected.severity, corrected.rule) == ("warning", "repeated") and corrected.threshold >= 100


def test_peermem():
    events = extract("peermem.txt")
    assert [(e.kind, e.code) for _, e in events] == [("peermem", "invalid_context")] * 7  # the 8th line, "test", is nothing
    assert (event_policy("peermem", "invalid_context").severity, event_policy("peermem", "invalid_context").rule) == ("warning", "repeated")


@pytest.mark.parametrize("name", ["boot.txt", "boot-kmsg.txt"])
def test_normal_boot_gives_no_finding(name):
    """A real boot (NVRM module load, mlx5 probe with its E-Switch and MLX5E lines, nvswitch
    opens): nothing, or events that are only counted."""
    for _, e in extract(name):
        assert event_policy(e.kind, e.code).rule == "count", e


def test_boot_nvidia_and_mlx5_lines_are_not_events():
    boot = (KMSG / "boot.txt").read_text(encoding="utf-8")
    assert "NVRM: loading NVIDIA UNIX x86_64 Kernel Module" in boot and "mlx5_core 0000:41:00.1: E-Switch" in boot
    assert [(e.kind, e.code) for _, e in extract("boot.txt")] == [("mlx5", "module_unplugged")]


def test_detail_is_one_short_line():
    event = Extractor().feed("\n".join(THREE_LINES))
    assert event is not None and "\n" not in event.detail and len(event.detail) <= DETAIL_CHARS


@pytest.mark.parametrize(
    "message",
    [
        "",
        " ",
        "Xid (PCI:zzzz)",
        "NVRM: Xid (PCI:zzzz)",
        "NVRM: Xid (PCI:zzzz): 79, GPU has fallen off the bus.",
        "NVRM: Xid (" + "0" * 10_000,
        "NVRM: " + "x" * (1 << 20),
        "mlx5_core " + "\x00\xff\ud800" * 1000,
        "pcieport 0000:00:1c.5: AER: Corrected error received: id=zzzz",
        "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): ",
        "AER" * 100_000,
        "\\x0a\x1b[31mNVRM: fallen off the bus",
    ],
)
def test_hostile_input_never_raises(message):
    ex = Extractor()
    event = ex.feed(message, {"DEVICE": "+pci:zz"})
    ex.feed(message, None)
    if event is not None:
        assert len(event.detail) <= DETAIL_CHARS and "\n" not in event.detail
        assert event.device is None or re.fullmatch(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", event.device)


def test_unreadable_xid_is_counted_not_lost():
    event = Extractor().feed("NVRM: Xid (PCI:zzzz): 79, GPU has fallen off the bus.")
    assert event is not None and (event.kind, event.code, event.device) == ("xid", "79", None)
    event = Extractor().feed("NVRM: Xid (PCI:zzzz)")
    assert event is not None and (event.kind, event.code) == ("nvrm", "other")


def test_unknown_kinds_and_codes_are_only_counted():
    assert event_policy("nvrm", "other").rule == "count"
    assert event_policy("no-such-kind", "x").rule == "count"
    assert event_policy("gpu_off_bus", "off_bus").severity == "critical"
