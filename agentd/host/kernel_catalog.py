"""Kernel log messages -> events: which GPU, NIC or PCIe fault a /dev/kmsg record reports.

Extraction only (no judgement, no I/O): what kind of fault a line reports, its code and the
PCI device it is about. How much a kind/code matters is agentd.judging.kernel_policy's
business. The wording matched is the drivers' own, as published in real logs (see
tests/fixtures/kmsg and tests/fixtures/SOURCES.md):

- NVRM (nvidia.ko): ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., <text>`` (the bus id
  without a function, sometimes without ``PCI:``, pid/name optional or ``'<unknown>'``).
  "Fallen off the bus" also comes without an Xid: ``NVRM: GPU 0000:29:00.0: GPU has fallen
  off the bus.``, ``NVRM: GPU at 0000:01:00.0 has fallen off the bus.`` and the three-line
  ``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``NVRM: (PCI ID: ...) installed in this system has``
  / ``NVRM: fallen off the bus and is not responding to commands.`` (one record with
  embedded newlines, or several records once a log shipper splits it). A line without a bus
  id is attributed to the GPU the driver named within the last ``CONTEXT_RECORDS`` records
  (``NVRM: GPU at PCI:0000:9b:00: GPU-<uuid>`` heads the driver's multi-line reports).
  An Xid 79 is one event (kind "xid", code "79"); an off-bus line for the same GPU within
  ``CONTEXT_RECORDS`` records after it is the same fault and gives nothing. What the line
  itself says beside its code is kept with the event: the unit's "Fatal" / "Nonfatal" of
  an NVLink5 Xid, the recovery action an Xid 154 names (``GPU recovery action changed from
  0x%x (%s) to 0x%x (%s)``, gpu.c). RM assertions carry a status: ``[NV_ERR_GPU_IS_LOST]``
  is a GPU off the bus, ``[NV_ERR_RESET_REQUIRED]`` a GPU that needs a reset (nvassert.c,
  nvstatuscodes.h). A GPU the driver could not bring up: "The NVIDIA probe routine failed",
  ``NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)`` and its
  ``rm_init_adapter failed`` line.
- nvidia-nvswitch: ``nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, ...`` (its
  "Fatal" / "Non-fatal" kept). The driver follows a hardware SXid with ``..., Severity 1
  Engine instance 62 Sub-engine instance 00`` and ``..., Data {0x.., 0x..}``: those lines
  are not counted again.
- nvidia-peermem: ``nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context``;
  the module loader's ``nvidia_peermem: Unknown symbol ...`` and MLNX_OFED's legacy
  ``nv_peer_mem: disagrees about version of symbol ...`` (load failures).
- mlx5_core: ``mlx5_core 0000:5a:00.0: <func>:<line>:(pid N): <text>`` (device from the
  prefix, or from the driver core's ``mlx5_core: probe of <bdf> failed``, else from the
  record's ``DEVICE=+pci:...``): page-management and QP-reset command timeouts, "health
  recovery flow aborted", "PCI slot [N] is unavailable", a failed probe, a command with "No
  done completion" (its "timeout. Will cause a leak" line after it is the same timeout; one
  "recovered after timeout" is none), mlx5e's "TX timeout detected", ...
- efa (AWS EFA, drivers/infiniband/hw/efa): admin-queue command failures, as ibdev_err
  prints them, ``efa 0000:00:06.0 rdmap0s6: <text>`` (``__ibdev_printk``,
  drivers/infiniband/core/device.c: the PCI driver, the function, then the RDMA device;
  the device from the function in the prefix, else from the record's ``DEVICE=+pci:...``):
  a command the device did not complete (the driver then closes the admin queue), the
  admin queue closed, a command the device failed or that could not be submitted.
- PCIe AER (drivers/pci/pcie/aer.c). Counted from the root port's "error received" line
  (``AER: [Multiple ]Corrected error received: 0000:01:00.0``, ``... id=00e5`` on kernels
  before 4.19, ``Correctable error message received from 0000:06:00.0`` on 6.x), one per
  error message the root port took in, named after its source device. The "PCIe Bus Error:
  severity=..." lines that follow (within ``CONTEXT_RECORDS``) are details of the same
  message, printed once for every device that logged it (the port and the endpoint), so
  they give nothing. One with no header before it (firmware-first APEI/GHES platforms, a
  log that dropped the header's KERN_INFO line) is an error of the device that printed it.
  Firmware-first platforms may print a CPER record instead (``{1}[Hardware Error]:  Error
  0, type: recoverable``, ``section_type: PCIe error``, ``device_id: 0000:5e:00.0``): one
  error of the device it names, of the section's severity.
- PCIe error recovery (dpc.c, err.c, pciehp_ctrl.c, pci.c): DPC containment in both
  wordings (``containment event, status:%#06x source:%#06x``; since 6.17 ``..., ERR_FATAL
  received from <bdf>``), named after its source (the port when none; the port's Bus
  Error lines after it are its details), "AER: device recovery failed", "AER: subordinate
  device reset failed", ``pciehp: Slot(N): Link Down`` (not "Link Down/Up ignored") and
  "Data Link Layer Link Active not set in N msec", each for the port that printed it
  (older kernels: "AER: Device recovery failed", "link reset at upstream device <bdf>
  failed").
  "AER: device recovery successful" gives nothing.

Lines from these drivers that match no known pattern but say something went wrong (an
error word: error, fail, timeout, invalid, ...) are events with code "other"; their
ordinary informational lines (module load, firmware version, link up) and every unrelated
line give None. ``Extractor.wants`` says from a record's bytes whether any of this can be
in it, so the reader parses and feeds only those (a flood of other lines costs a header).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from agentd.base.ids import normalize_bdf

MAX_MATCH_CHARS = 4096  # a line is matched on its head only: a 1 MB record costs nothing
DETAIL_CHARS = 200
CONTEXT_RECORDS = 8  # how many records a GPU named by the driver stays the subject


@dataclass(frozen=True)
class Extracted:
    kind: str  # "xid" | "sxid" | "gpu_off_bus" | "nvrm" | "peermem" | "mlx5" | "efa" | "aer" | "pcie"
    code: str
    device: str | None  # PCI bus id, sysfs spelling "dddd:bb:dd.f"; None when unnamed
    detail: str  # the message, one line, at most DETAIL_CHARS
    fatal: bool | None = None  # the line's own "Fatal" (True) / "Non-fatal" (False) word
    action: str | None = None  # the recovery action an Xid 154 names (RECOVERY_ACTIONS)


# A bus id as the drivers print it: with or without domain, with or without function.
_LOOSE_BDF = r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_LOOSE_BDF_RE = re.compile(r"(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.([0-7]))?")

_XID_RE = re.compile(r"NVRM: Xid \(([^)]{0,64})\): (\d{1,6})\b")
# NVLink5 XIDs (144-150) print the unit's severity: "NETIR_LINK_EVT  Fatal   XC0 ...",
# "RLW_SRC_TRACK Nonfatal XC1 ..." (leptonai/gpud's kmsg tests, tests/fixtures/kmsg/xid.txt)
_FATAL_WORD_RE = re.compile(r"\b(Fatal|Nonfatal|Non-fatal)\b")
# Xid 154: "GPU recovery action changed from 0x%x (%s) to 0x%x (%s)" (open-gpu-kernel-modules
# src/nvidia/src/kernel/gpu/gpu.c, _gpuRefreshRecoveryActionInLock); the numbers are
# NV2080_CTRL_GPU_RECOVERY_ACTION (ctrl2080gpu.h), the names _gpuRecoveryActionName's.
_RECOVERY_ACTION_RE = re.compile(r"GPU recovery action changed from 0x[0-9a-fA-F]+ \([^)]*\) to 0x([0-9a-fA-F]+) \(")
RECOVERY_ACTIONS: dict[int, str] = {0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p", 4: "drain_and_reset", 5: "recover_imex_domain"}
# An RM status in an NVRM assertion: "... Assertion failed: GPU lost from the bus
# [NV_ERR_GPU_IS_LOST] (0x0000000F) returned from ..." (nvassert.c prints nvstatusToString,
# nvstatuscodes.h's text and name)
_NV_ERR_RE = re.compile(r"\[(NV_ERR_GPU_IS_LOST|NV_ERR_RESET_REQUIRED)\]")
_XID_ANY_RE = re.compile(r"NVRM: Xid\b")
_NVRM_RE = re.compile(r"^\s*NVRM:")
_THE_GPU_RE = re.compile(rf"NVRM: The NVIDIA GPU ({_LOOSE_BDF})\b")
_NVRM_GPU_BDF_RE = re.compile(rf"NVRM: GPU (?:at )?(?:PCI:)?({_LOOSE_BDF})\b")
_ANY_PCI_RE = re.compile(rf"PCI:({_LOOSE_BDF})\b")
_OFF_BUS_RE = re.compile(r"fallen off the bus", re.IGNORECASE)
# The driver could not bring a GPU up: nv.c's "The NVIDIA probe routine failed for %d
# device(s)", and the RM's initialisation failures, "NVRM: GPU 0000:0a:00.0: RmInitAdapter
# failed! (0x24:0x72:1568)" (osinit.c RmInitAdapter) with "... rm_init_adapter failed, device
# minor number 5" (nv.c; older drivers "rm_init_adapter failed for device bearing minor
# number 0" or "rm_init_adapter(0) failed") after it
_PROBE_FAILED_RE = re.compile(r"NVRM: The NVIDIA probe routine failed|RmInitAdapter failed!|rm_init_adapter(?:\(\d+\))? failed")

# The driver prints a hardware SXid's record after its message as two more SXid lines,
# "Severity %d Engine instance %02d Sub-engine instance %02d" and "Data {0x%08x, ...}"
# (open-gpu-kernel-modules src/common/nvswitch/kernel/nvswitch.c, _nvswitch_dump_error_entry):
# details of the SXid already counted, not more of it.
_SXID_RE = re.compile(r"nvidia-nvswitch\d*: SXid \(([^)]{0,64})\): (\d{1,6})\b(?:, (Fatal|Non-fatal|Nonfatal|Data|Severity \d+ Engine instance)\b)?")
_NVSWITCH_RE = re.compile(r"^\s*nvidia-nvswitch\d*:")

# nvidia-peermem's own lines ("nvidia-peermem nv_get_p2p_free_callback:127 ERROR ..."), the
# module loader's for it ("nvidia_peermem: Unknown symbol ...") and MLNX_OFED's legacy
# nv_peer_mem ("nv_peer_mem: disagrees about version of symbol ...", its own errors "nv_mem
# <function>:<line> ...": Mellanox/nv_peer_memory nv_peer_mem.c, DRV_NAME "nv_mem")
_PEERMEM_RE = re.compile(r"^\s*(?:nvidia[-_]peermem\b|nv_peer_mem\b|nv_mem \w+:\d+ )")
_PEERMEM_INVALID_CTX_RE = re.compile(r"detected invalid context")
# kernel/module/main.c: "%s: Unknown symbol %s (err %d)", "%s: disagrees about version of symbol %s"
_MODULE_LOAD_FAILED_RE = re.compile(r"Unknown symbol|disagrees about version of symbol")

_MLX5_RE = re.compile(r"^\s*mlx5_|\(mlx5_core\)")
_MLX5_DEV_RE = re.compile(r"^\s*mlx5_core ([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\b")
# The driver core's "mlx5_core: probe of 0000:06:00.0 failed with error -22" (before Linux
# 6.10: drivers/base/dd.c pr_warn) names the function after the driver.
_PROBE_OF_RE = re.compile(r"\bprobe of ([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) failed")
# First match wins: the more specific health lines before the generic ones. Each pattern
# comes with words (lower case) every line it matches contains: a cheap look first, the
# regular expression only then (an ACCESS_REG storm is tens of thousands of lines a second).
_MLX5_CODES: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...] = (
    # the function is unusable: its page management or QP reset commands get no answer
    # (wait_func's "<CMD>(0x...) timeout. Will cause a leak of a command resource")
    # (cmd.c wait_func_handle_exec_timeout first says "cmd[%d]: %s(0x%x) No done completion",
    # then wait_func the "timeout. Will cause a leak" line: one timeout, see Extractor._mlx5)
    ("fatal_cmd_timeout", ("timeout", "no done completion"), re.compile(r"\b(?:MANAGE_PAGES|QUERY_PAGES|2RST_QP)\(0x[0-9a-fA-F]+\) (?:timeout|No done completion)")),
    # health.c: "health recovery flow aborted, PCI reads still not working" (and "..., PCI channel offline")
    ("recovery_aborted", ("recovery flow aborted",), re.compile(r"health recovery flow aborted")),
    # health.c print_health_info: the health buffer reads all ones (the device left the bus)
    ("slot_unavailable", ("is unavailable",), re.compile(r"PCI slot (?:\d+ )?is unavailable")),
    # main.c probe_one/init_one, drivers/base/dd.c (both wordings)
    ("probe_failed", ("failed with error",), re.compile(r"\bprobe of \S+ failed with error|probe with driver \S+ failed with error|mlx5_(?:init|load)_one failed with error code")),
    ("health_compromised", ("health compromised",), re.compile(r"health compromised", re.IGNORECASE)),
    ("unrecoverable", ("unrecoverable",), re.compile(r"unrecoverable", re.IGNORECASE)),
    ("fatal_error", ("fatal error",), re.compile(r"Fatal error (?:\d+ )?detected")),
    # health.c print_health_info; older kernels printed its lines with dev_err, without the
    # "print_health_info:<line>:(pid 0): " prefix ("mlx5_core 0000:5e:00.0: synd 0x7: irisc not responding")
    ("fw_syndrome", ("health", "synd 0x"), re.compile(r"Health issue observed|print_health_info:.*(?:synd 0x|assert_var)|^\s*mlx5_core \S+: synd 0x[0-9a-fA-F]+: ")),
    # cmd.c wait_func_handle_exec_timeout: "cmd[%d]: %s(0x%x) recovered after timeout" (the
    # completion was found by polling the command EQ: the command completed) is not a timeout
    ("cmd_recovered", ("recovered after timeout",), re.compile(r"\(0x[0-9a-fA-F]+\) recovered after timeout")),
    ("cmd_timeout", ("leak of a command resource", "no done completion"), re.compile(r"leak of a command resource|\(0x[0-9a-fA-F]+\) No done completion")),
    ("slot_power", ("insufficient power",), re.compile(r"insufficient power on the PCIe slot")),
    ("module_temp", ("port module event",), re.compile(r"Port module event.*High Temperature", re.IGNORECASE)),
    ("cable", ("port module event",), re.compile(r"Port module event.*Cable error|Port module event\[error\]")),
    ("module_unplugged", ("port module event",), re.compile(r"Port module event.*Cable unplugged")),
    ("high_temp", ("high temperature on sensors",), re.compile(r"High temperature on sensors")),
    # the stack's "NETDEV WATCHDOG: eth0 (mlx5_core): transmit queue 3 timed out" and mlx5e's
    # own (en_main.c mlx5e_tx_timeout: netdev_err "TX timeout detected"); its per-queue "TX
    # timeout on queue: %d, SQ: ..." lines after it are details (counted as "other")
    ("tx_timeout", ("timed out", "tx timeout detected"), re.compile(r"transmit queue \d* ?timed out|: TX timeout detected")),
    ("cmd_failed", ("mlx5_cmd_out_err",), re.compile(r"mlx5_cmd_out_err:.*\bfailed\b")),
)

# One mlx5 command timeout in two lines (cmd.c): wait_func_handle_exec_timeout's "cmd[0]:
# DESTROY_RMP(0x90e) No done completion", then wait_func's "DESTROY_RMP(0x90e) timeout. Will
# cause a leak of a command resource" for the same command: the second is not counted again.
_MLX5_NO_DONE_RE = re.compile(r"\b(\w+\(0x[0-9a-fA-F]+\)) No done completion")
_MLX5_LEAK_RE = re.compile(r"\b(\w+\(0x[0-9a-fA-F]+\)) timeout\. Will cause a leak")

# AWS EFA (drivers/infiniband/hw/efa). Its admin-queue lines are ibdev_err_ratelimited, which
# __ibdev_printk (drivers/infiniband/core/device.c) prints as "%s %s %s: " of the PCI driver
# ("efa", its pci_driver name), the function and the RDMA device ("efa_0", or the name udev
# gave it, "rdmap0s6"); efa_main.c's own dev_err lines have "efa <bdf>: ".
_EFA_RE = re.compile(r"^\s*efa [0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7][\s:]")
_EFA_DEV_RE = re.compile(r"^\s*efa ([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\b")
# The wordings of drivers/infiniband/hw/efa/efa_com.c (torvalds/linux; the same since the
# driver came in 5.2, where they were plain ibdev_err; the 2025 patch "RDMA/efa: Extend admin
# timeout error print" changes only the "(ctx 0x%p, ..." tail of the first two to
# "(id: %d, ..."), each with the words (lower case) every line it matches contains:
_EFA_CODES: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...] = (
    # efa_com_wait_and_process_admin_cq_interrupts: "The device didn't send any completion for
    # admin cmd %s(%d) status %d (ctx 0x%p, ...)" and "The device sent a completion but the
    # driver didn't receive any MSI-X interrupt for admin cmd %s(%d) status %d (ctx: 0x%p, ...)";
    # efa_com_wait_and_process_admin_cq_polling: "Wait for completion (polling) timeout". Each
    # is followed by clear_bit(EFA_AQ_STATE_RUNNING_BIT): the driver closes the admin queue.
    ("cmd_timeout", ("completion",), re.compile(
        r"The device didn't send any completion for admin cmd"
        r"|The device sent a completion but the driver didn't receive any MSI-X interrupt for admin cmd"
        r"|Wait for completion \(polling\) timeout")),
    # efa_com_submit_admin_cmd: "Admin queue is closed" (every command after the queue was
    # closed); efa_com_handle_single_admin_completion: "comp_ctx is NULL. Changing the admin
    # queue running state" (it closes it)
    ("admin_queue_closed", ("admin queue",), re.compile(r"Admin queue is closed|comp_ctx is NULL\. Changing the admin queue running state")),
    # efa_com_cmd_exec: "Failed to process command %s (opcode %u) comp_status %d err %d" (the
    # device answered with an error status, or the wait above failed) and "Failed to submit
    # command %s (opcode %u) err %ld"; %s is efa_com_cmd_str's name (GET_STATS, CREATE_QP, ...)
    ("cmd_failed", ("failed to",), re.compile(r"Failed to (?:process|submit) command .{1,40}? \(opcode \d+\)")),
)

# Lines of the PCIe port services (drivers/pci/pcie) about a link's error recovery.
_PCIE_RE = re.compile(r"AER|PCIe Bus Error|DPC|pciehp|Link Active not set|link reset at upstream device")
# aer.c aer_print_error: "PCIe Bus Error: severity=%s, type=%s, (%s)" (before 4.19 ", id=%04x(%s)")
_BUS_ERROR_RE = re.compile(r"PCIe Bus Error: severity=(Corrected|Correctable|Uncorrected \(Non-Fatal\)|Uncorrectable \(Non-Fatal\)|Uncorrected \(Fatal\)|Uncorrectable \(Fatal\))")
# dpc.c dpc_process_error: "containment event, status:%#06x source:%#06x" (until 6.16), and
# since "containment event, status:%#06x, %s received from %04x:%02x:%02x.%d" or
# "containment event, status:%#06x: <reason> detected"
_DPC_RE = re.compile(r"DPC: containment event, status:0x[0-9a-fA-F]+(?: source:0x([0-9a-fA-F]{1,4})|, ERR_(?:NON)?FATAL received from (" + _LOOSE_BDF + r")|:)")
# err.c pcie_do_recovery (dev_fmt "AER: "): "device recovery failed", "subordinate device
# reset failed"; "device recovery successful" is not a fault. Older kernels printed the first
# as pci_info(dev, "AER: Device recovery failed\n") and a failed reset from reset_link as
# pci_printk(KERN_DEBUG, dev, "link reset at upstream device %s failed\n", ...), which
# /dev/kmsg keeps whatever the console level
_RECOVERY_FAILED_RE = re.compile(r"AER: [Dd]evice recovery failed")
_RESET_FAILED_RE = re.compile(r"AER: subordinate device reset failed|link reset at upstream device \S+ failed")
# pciehp_ctrl.c: "Slot(%s): Link Down" ("Link Down/Up ignored" when DPC recovered the link)
_LINK_DOWN_RE = re.compile(r"pciehp: Slot\([^)]*\): Link Down(?!/)")
# pci.c pcie_wait_for_link_delay: "Data Link Layer Link Active not set in %d msec"
_DLL_INACTIVE_RE = re.compile(r"Data Link Layer Link Active not set in \d+ msec")

# Firmware-first platforms (APEI GHES) report a PCIe error as a CPER record the kernel prints
# line by line (drivers/firmware/efi/cper.c): cper_estatus_print_section's "%sError %d, type:
# %s" (the section's severity, cper_severity_str: recoverable, fatal, corrected, info) and
# "%ssection_type: %s" ("PCIe error"), then cper_print_pcie's "%sdevice_id:
# %04x:%02x:%02x.%x" among the section's fields, each line after the "{N}[Hardware Error]: "
# prefix. No "PCIe Bus Error: severity=" line follows: pci_print_aer (aer.c, cper_print_aer
# before 5.x) prints only "aer_status: ...", the error names and "aer_layer=...". The
# section's severity is the AER one ghes_handle_aer takes (cper_severity_to_aer: recoverable
# is non-fatal, fatal fatal, the rest correctable).
_CPER_SECTION_RE = re.compile(r"\[Hardware Error\]:\s+Error \d+, type: (recoverable|fatal|corrected|info)\b")
_CPER_PCIE_RE = re.compile(r"\[Hardware Error\]:\s+section_type: PCIe error")
_CPER_DEVICE_RE = re.compile(r"\[Hardware Error\]:\s+device_id: ([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s*$")
_CPER_AER_CODES = {"recoverable": "nonfatal", "fatal": "fatal", "corrected": "corrected", "info": "corrected"}

_AER_RECEIVED_RE = re.compile(
    r"AER: (?:Multiple )?"
    r"(Corrected|Correctable|Uncorrected \(Non-Fatal\)|Uncorrectable \(Non-Fatal\)"
    r"|Uncorrected \(Fatal\)|Uncorrectable \(Fatal\)) error (?:message )?received"
    r"(?::| from) (?:(" + _LOOSE_BDF + r")|id=([0-9a-fA-F]{1,4}))"
)
_DEV_PREFIX_RE = re.compile(r"^\s*\S+ ([0-9a-fA-F]{4,8}):[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b")

# Every driver name or wording ``feed`` looks for, as bytes: what ``wants`` lets through.
_WANTED_RE = re.compile(rb"NVRM|nvswitch|peer_?mem|nv_mem |AER|PCIe Bus Error|DPC|pciehp|Link Active not set|link reset at upstream|\[Hardware Error\]|mlx5|efa [0-9a-fA-F]{4}")

_ERRORISH_RE = re.compile(
    r"\b(?:error|errors|fail|failed|failure|fatal|timeout|timed out|invalid|unable|lost|"
    r"not responding|exception|corrupt\w*)\b",
    re.IGNORECASE,
)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]+")


def _bdf(text: str | None, domain: str | None = None) -> str | None:
    """A driver's bus id in any of its spellings -> ``dddd:bb:dd.f`` (function 0 when the
    driver leaves it out, as NVRM does; ``domain`` when it leaves that out)."""
    if not text:
        return None
    s = text.strip()
    if s.upper().startswith("PCI:"):
        s = s[4:]
    m = _LOOSE_BDF_RE.fullmatch(s)
    if m is None:
        return None
    dom, bus, dev, fn = m.groups()
    return normalize_bdf(f"{dom or domain or '0000'}:{bus}:{dev}.{fn or '0'}")


def _field_device(fields: Mapping[str, str] | None) -> str | None:
    """``DEVICE=+pci:0000:5a:00.0`` of a /dev/kmsg record -> ``0000:5a:00.0``."""
    if not fields:
        return None
    dev = fields.get("DEVICE", "")
    if not isinstance(dev, str) or not dev.startswith("+pci:"):
        return None
    return normalize_bdf(dev[5:])


def _detail(message: str) -> str:
    return _CONTROL_RE.sub(" ", message[: DETAIL_CHARS * 4]).strip()[:DETAIL_CHARS]


def _requester(rid: int, domain: str | None) -> str | None:
    """A PCIe requester id (bus << 8 | device << 3 | function) as a bus id."""
    return normalize_bdf(f"{domain or '0000'}:{rid >> 8:02x}:{(rid >> 3) & 0x1F:02x}.{rid & 7}")


def _coded(kind: str, codes: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...], text: str, device: str | None) -> Extracted | None:
    """A NIC driver's line by its catalogue (the first code whose words and pattern match),
    "other" when it only says something went wrong, else None."""
    low = text.lower()
    for code, words, pattern in codes:
        if any(w in low for w in words) and pattern.search(text):
            return Extracted(kind, code, device, _detail(text))
    if _ERRORISH_RE.search(text):
        return Extracted(kind, "other", device, _detail(text))
    return None


def _aer_code(severity: str) -> str:
    if "Fatal" not in severity:
        return "corrected"
    return "nonfatal" if "Non-Fatal" in severity else "fatal"


class Extractor:
    """Stateful across records (the driver prints some faults over several lines), pure.

    Feed it the records of one boot in order; the state is the GPU the NVIDIA driver named
    last (for off-bus lines that name none) and the last Xid 79, each forgotten after
    ``CONTEXT_RECORDS`` records."""

    def __init__(self) -> None:
        self._gpu: str | None = None
        self._gpu_ttl = 0
        self._xid79: str | None = None
        self._xid79_ttl = 0
        self._aer_ttl = 0  # records a root port's "error received" header covers
        self._cper_severity: str | None = None  # the severity of the CPER section being printed
        self._cper_ttl = 0  # records its "device_id" line may still come in
        self._mlx5_no_done: tuple[str | None, str] | None = None  # (function, command) of the last "No done completion"
        self._mlx5_ttl = 0

    def wants(self, record: bytes) -> bool:
        """Whether a raw record can hold a line this catalogue recognises (a cheap look at
        its bytes; the records it skips are not fed, and do not age the context)."""
        return _WANTED_RE.search(record, 0, MAX_MATCH_CHARS + 64) is not None

    def feed(self, message: str, fields: Mapping[str, str] | None = None) -> Extracted | None:
        if self._gpu_ttl > 0:
            self._gpu_ttl -= 1
            if self._gpu_ttl == 0:
                self._gpu = None
        if self._xid79_ttl > 0:
            self._xid79_ttl -= 1
            if self._xid79_ttl == 0:
                self._xid79 = None
        if self._aer_ttl > 0:
            self._aer_ttl -= 1
        if self._cper_ttl > 0:
            self._cper_ttl -= 1
        if self._mlx5_ttl > 0:
            self._mlx5_ttl -= 1
            if self._mlx5_ttl == 0:
                self._mlx5_no_done = None
        text = message[:MAX_MATCH_CHARS]
        if "NVRM" in text and _NVRM_RE.match(text):
            return self._nvrm(text, fields)
        if "nvswitch" in text and _NVSWITCH_RE.match(text):
            return self._nvswitch(text, fields)
        if "mem" in text and _PEERMEM_RE.match(text):
            return self._peermem(text, fields)
        if "[Hardware Error]" in text:
            return self._cper(text)
        efa = "efa " in text and _EFA_RE.match(text) is not None
        if _PCIE_RE.search(text):
            found = self._pcie(text, fields)
            if found is not None or ("mlx5" not in text and not efa):
                return found
        if "mlx5" in text and _MLX5_RE.search(text):
            return self._mlx5(text, fields)
        if efa:
            return self._efa(text, fields)
        return None

    def _remember_gpu(self, bdf: str | None) -> None:
        if bdf is not None:
            self._gpu = bdf
            self._gpu_ttl = CONTEXT_RECORDS + 1

    def _nvrm(self, text: str, fields: Mapping[str, str] | None) -> Extracted | None:
        detail = _detail(text)
        m = _XID_RE.search(text)
        if m is not None:
            # "PCI:0000:01:00", "0000:03:00", "PCI:0000:01:00 GPU-I:05" (a MIG instance)
            device = _bdf((m.group(1).split() or [""])[0]) or _field_device(fields)
            self._remember_gpu(device)
            code = str(int(m.group(2)))
            if code == "79":
                self._xid79 = device
                self._xid79_ttl = CONTEXT_RECORDS + 1
            rest = text[m.end() :]
            word = _FATAL_WORD_RE.search(rest)
            action = _RECOVERY_ACTION_RE.search(rest) if code == "154" else None
            return Extracted(
                "xid", code, device, detail,
                fatal=None if word is None else word.group(1) == "Fatal",
                action=None if action is None else RECOVERY_ACTIONS.get(int(action.group(1), 16), "unknown"),
            )  # fmt: skip
        if _XID_ANY_RE.search(text):  # an Xid line we cannot read: counted, not lost
            return Extracted("nvrm", "other", _field_device(fields), detail)
        status = _NV_ERR_RE.search(text)
        if status is not None:  # an RM assertion that the GPU is lost, or needs a reset
            named = _NVRM_GPU_BDF_RE.search(text) or _ANY_PCI_RE.search(text)
            device = (_bdf(named.group(1)) if named else None) or self._gpu or _field_device(fields)
            if status.group(1) == "NV_ERR_RESET_REQUIRED":
                return Extracted("nvrm", "reset_required", device, detail)
            if device is not None and device == self._xid79:
                return None  # the Xid 79 already reported it
            return Extracted("gpu_off_bus", "gpu_is_lost", device, detail)
        named = _NVRM_GPU_BDF_RE.search(text) or _THE_GPU_RE.search(text)
        device = _bdf(named.group(1)) if named else None
        if device is None:
            pci = _ANY_PCI_RE.search(text)
            device = _bdf(pci.group(1)) if pci else None
        if _OFF_BUS_RE.search(text):
            device = device or self._gpu or _field_device(fields)
            self._remember_gpu(device)
            if device is not None and device == self._xid79:
                return None  # the Xid 79 already reported it
            return Extracted("gpu_off_bus", "off_bus", device, detail)
        if named is not None:
            self._remember_gpu(device)
        if _PROBE_FAILED_RE.search(text):
            return Extracted("nvrm", "probe_failed", device or _field_device(fields), detail)
        if _ERRORISH_RE.search(text):
            return Extracted("nvrm", "other", device or self._gpu or _field_device(fields), detail)
        return None

    def _nvswitch(self, text: str, fields: Mapping[str, str] | None) -> Extracted | None:
        m = _SXID_RE.search(text)
        if m is not None:
            word = m.group(3)
            if word is not None and word.startswith(("Data", "Severity")):
                return None  # the record dump of an SXid already counted
            device = _bdf(m.group(1)) or _field_device(fields)
            return Extracted("sxid", str(int(m.group(2))), device, _detail(text), fatal=None if word is None else word == "Fatal")
        if _ERRORISH_RE.search(text):
            return Extracted("sxid", "other", _field_device(fields), _detail(text))
        return None

    def _peermem(self, text: str, fields: Mapping[str, str] | None) -> Extracted | None:
        if _PEERMEM_INVALID_CTX_RE.search(text):
            return Extracted("peermem", "invalid_context", _field_device(fields), _detail(text))
        if _MODULE_LOAD_FAILED_RE.search(text):  # the module did not load: no GPUDirect through it
            return Extracted("peermem", "load_failed", None, _detail(text))
        if _ERRORISH_RE.search(text):
            return Extracted("peermem", "other", _field_device(fields), _detail(text))
        return None

    def _mlx5(self, text: str, fields: Mapping[str, str] | None) -> Extracted | None:
        m = _MLX5_DEV_RE.match(text) or _PROBE_OF_RE.search(text)
        device = normalize_bdf(m.group(1)) if m else _field_device(fields)
        if "No done completion" in text and (cmd := _MLX5_NO_DONE_RE.search(text)) is not None:
            self._mlx5_no_done, self._mlx5_ttl = (device, cmd.group(1)), CONTEXT_RECORDS + 1
        elif (self._mlx5_no_done is not None and "leak" in text and (cmd := _MLX5_LEAK_RE.search(text)) is not None
              and self._mlx5_no_done == (device, cmd.group(1))):
            self._mlx5_no_done = None
            return None  # the timeout its "No done completion" line counted
        return _coded("mlx5", _MLX5_CODES, text, device)

    def _efa(self, text: str, fields: Mapping[str, str] | None) -> Extracted | None:
        m = _EFA_DEV_RE.match(text)
        return _coded("efa", _EFA_CODES, text, normalize_bdf(m.group(1)) if m else _field_device(fields))

    def _cper(self, text: str) -> Extracted | None:
        """A firmware-first PCIe error: its CPER section's severity, then (a few records
        later, other lines between) the device it names: one AER event for that device."""
        section = _CPER_SECTION_RE.search(text)
        if section is not None:
            self._cper_severity, self._cper_ttl = section.group(1), 0
        elif self._cper_severity is not None and _CPER_PCIE_RE.search(text):
            self._cper_ttl = CONTEXT_RECORDS + 1
        elif self._cper_ttl > 0 and self._cper_severity is not None and (dev := _CPER_DEVICE_RE.search(text)) is not None:
            code = _CPER_AER_CODES[self._cper_severity]
            self._cper_severity, self._cper_ttl = None, 0
            return Extracted("aer", code, normalize_bdf(dev.group(1)), _detail(text))
        return None

    def _pcie(self, text: str, fields: Mapping[str, str] | None) -> Extracted | None:
        """AER errors (counted once: from the root port's header, or from the device's own
        "PCIe Bus Error" line when no header came just before it) and the port services'
        recovery: DPC containment, a recovery or reset that failed, a hotplug link down,
        a link that did not come back."""
        prefix = _DEV_PREFIX_RE.match(text)
        printer = _bdf(prefix.group(0).split()[-1]) if prefix else _field_device(fields)
        domain = printer.split(":")[0] if printer else None
        m = _AER_RECEIVED_RE.search(text)
        if m is not None:
            self._aer_ttl = CONTEXT_RECORDS + 1  # the "PCIe Bus Error" lines after it are its details
            if m.group(2):
                device = _bdf(m.group(2), domain)
            else:  # requester id: bus << 8 | device << 3 | function (before Linux 4.19)
                device = _requester(int(m.group(3), 16), domain)
            return Extracted("aer", _aer_code(m.group(1)), device, _detail(text))
        bus_error = _BUS_ERROR_RE.search(text)
        if bus_error is not None:
            if self._aer_ttl > 0:
                return None  # a detail of the error its header counted
            # no header: firmware-first (APEI/GHES) platforms, or a log that dropped the
            # header's KERN_INFO line: one event for the device that printed it
            return Extracted("aer", _aer_code(bus_error.group(1)), printer, _detail(text))
        dpc = _DPC_RE.search(text)
        if dpc is not None:
            self._aer_ttl = CONTEXT_RECORDS + 1  # the port's own error lines after it are its details
            source = _bdf(dpc.group(2), domain) if dpc.group(2) else None
            if dpc.group(1) and int(dpc.group(1), 16):
                source = _requester(int(dpc.group(1), 16), domain)
            return Extracted("pcie", "dpc", source or printer, _detail(text))
        for code, pattern in (("recovery_failed", _RECOVERY_FAILED_RE), ("reset_failed", _RESET_FAILED_RE),
                              ("link_down", _LINK_DOWN_RE), ("link_inactive", _DLL_INACTIVE_RE)):
            if pattern.search(text):
                return Extracted("pcie", code, printer, _detail(text))
        return None
