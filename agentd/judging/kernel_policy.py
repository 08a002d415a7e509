"""How much a kernel event matters: the severity catalogue, as data.

Keyed by agentd.host.kernel_catalog's (kind, code). A rule says when a finding fires:
"once" (one event is enough), "repeated" (``threshold`` events within the check's window),
"count" (never a finding; the event is only counted in the metrics).

XID (``XID_CATALOGUE``): NVIDIA's XID catalogue for Ampere and newer GPUs,
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (sheet "Catalog":
code, mnemonic, description, immediate and investigatory resolution buckets), as
machine-read by leptonai/gpud (components/accelerator/nvidia/xid/catalog_generated.go at
4a8de33a3f02, Apache-2.0; generated 2025-10-29); codes the catalogue marks "Unused" are left
out. Severity follows NVIDIA's immediate resolution bucket:

- RESET_GPU, RESTART_BM, RESTART_VM, WORKFLOW_XID_48 (DBE): the node must act ->
  critical, once (46, 48, 62, 64, 79, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158).
  RESET_GPU ones hold until the GPU is seen reset, RESTART_BM ones until the node reboots
  (``EventPolicy.until``; the check says how).
- RESTART_APP, IGNORE, CHECK_APP, CHECK_UVM, UPDATE_SWFW, WORKFLOW_XID_45 and XID_154
  (informational about another Xid): the application failed, the node did not -> count,
  shown as info (13, 31, 43, 45, 68, ...); these must never degrade the node.
- The line's own words decide where it has them (``policy_of``): an NVLink5 Xid (or an
  Xid newer than the table) that says "Fatal" is critical once; an Xid 154 is the
  recovery action it names (GPU Reset Required, Drain and Reset: critical until reset;
  Node Reboot Required: critical until reboot; Drain P2P, Recover IMEX Domain: warning;
  None: info, and the GPU's reset).
- CHECK_MECHANICALS (54, auxiliary power), CONTACT_SUPPORT -> warning, once.
- WORKFLOW_NVLINK_ERR (74, Hopper NVLink): NVIDIA's workflow decodes the register bits; most
  say "hardware, check the link" -> critical, once (the finding's remediation names the workflow).
- WORKFLOW_NVLINK5_ERR (144-150, Blackwell NVLink): the same Xid is printed "Fatal" or
  "Nonfatal" per unit and NVIDIA resolves most non-fatal ones with IGNORE; the code alone
  cannot tell them apart -> warning, repeated (3).
Deliberate departures, where the bucket alone would mislead an operator:
- 63 (row remap event, IGNORE): warning once: the remap takes effect only after a GPU reset
  (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt), which someone has to schedule.
- 92 (high single-bit ECC rate, IGNORE/CONTACT_SUPPORT): warning once.
- 94 (contained ECC error, RESTART_APP): warning once: the application was killed and the
  affected row is remapped at the next reset; the node keeps serving.
- 162-172 have no bucket in the catalogue yet: 164/165 (power smoothing lifetime low /
  exhausted) and 168 (reduced memory capacity) warning once; 167 (PCIe fatal timeout) and
  169 (SEC2 halt, like 62) critical once; the rest (informational, or details of an Xid 48)
  count.
- Unknown XIDs (newer than this table): warning, repeated (3): a driver newer than the
  catalogue reports them, so they are worth a look but not a drain on one event.

SXID (NVSwitch): the SXids leptonai/gpud lists from NVIDIA's Fabric Manager user guide
(docs.nvidia.com/datacenter/tesla/pdf/fabric-manager-user-guide.pdf, "NVSwitch errors";
gpud components/accelerator/nvidia/sxid/sxid.go): "always fatal" critical once,
"potentially fatal" warning once, listed non-fatal ones (single-bit ECC, ...) count,
unknown ones warning repeated (3); non-fatal listed ones count (info). An SXid whose line
says "Fatal" is critical once, listed or not.

mlx5 (ConnectX firmware/driver, following NVIDIA NVSentinel's NIC syslog detection design,
docs.nvidia.com/nvsentinel/components/nic-health-monitor/syslog-detection-and-correlation):
health compromised / unrecoverable / fatal error critical once; page-management and
QP-reset command timeouts (NVSentinel: the function is unusable), health recovery aborted,
PCI slot unavailable critical once; other firmware command timeouts warning repeated (3), a
command "recovered after timeout" (its completion was found: cmd.c) counts only;
a failed probe, slot power, module temperature, cable errors warning once; the rest count.

efa (AWS EFA's admin queue, drivers/infiniband/hw/efa/efa_com.c), measured against mlx5's:
a command the device did not complete critical once, because the driver closes the admin
queue after every such timeout (clear_bit(EFA_AQ_STATE_RUNNING_BIT) in both wait paths)
and nothing reopens it until the driver is loaded again: no QP, CQ, MR or AH can be made and
no statistics read, the function is unusable (mlx5's page-management timeout, critical for
that reason); the admin queue closed critical once (mlx5's health compromised); a command
the device failed, or that could not be submitted, counts only, as mlx5's failed commands
do: most are a job's request the device refused at its limits (CREATE_QP, REG_MR), which
says nothing of the node; a GET_STATS of agentd's that fails backs agentd off instead
(agentd.collection.backoff). The rest count.

PCIe AER: fatal critical once; non-fatal warning repeated (3); corrected warning repeated
(100 in the window), info below it: corrected errors are routine on a healthy link, a
storm is not. PCIe recovery: a failed recovery or subordinate reset critical once; DPC
containment, a hotplug link down, a link that did not come back warning once.

gpu_off_bus (and NV_ERR_GPU_IS_LOST) critical once until reboot; NV_ERR_RESET_REQUIRED
critical once until reset; a GPU the driver could not initialise (the probe routine, or
RmInitAdapter, failed) warning once; peermem invalid context warning repeated (3), a load failure
(unknown symbols) warning once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from agentd.model import KernelEvent, Severity

Rule = Literal["once", "repeated", "count"]
# How long a one-off critical event holds: until the GPU is seen reset (or the node
# reboots), until the node reboots, or kernel.hold_s.
Until = Literal["reset", "reboot"]


@dataclass(frozen=True)
class EventPolicy:
    severity: Severity  # what a finding says when the rule fires ("info" for counted events worth showing)
    rule: Rule  # once | repeated (threshold events within the window) | count (never judged)
    threshold: int = 1
    title: str = ""
    remediation: str = ""
    until: Until | None = None  # a one-off critical event that holds until a reset or reboot
    below: Severity | None = None  # a repeated rule below its threshold: the events shown at this severity (info)


# code: (mnemonic, description, immediate resolution, investigatory resolution)
XID_CATALOGUE: Mapping[int, tuple[str, str, str, str]] = {
    8: ("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP", "CONTACT_SUPPORT"),
    11: ("ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "Invalid or corrupted push buffer stream", "RESTART_APP", "CHECK_APP/CUDA"),
    13: ("ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY", "Graphics Engine Exception", "RESTART_APP", "WORKFLOW_XID_13"),
    25: ("ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "Invalid or illegal push buffer stream", "RESTART_APP", "CHECK_APP/CUDA"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP", "WORKFLOW_XID_31"),
    32: ("ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", "RESTART_APP", "CHECK_APP/CUDA"),
    37: ("ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "Driver firmware error", "IGNORE", "CHECK_APP/CUDA"),
    38: ("ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error", "IGNORE", "CONTACT_SUPPORT"),
    39: ("ROBUST_CHANNEL_CE0_ERROR", "Copy Engine Exception", "RESTART_APP", "CONTACT_SUPPORT"),
    40: ("ROBUST_CHANNEL_CE1_ERROR", "Copy Engine Exception", "RESTART_APP", "CONTACT_SUPPORT"),
    41: ("ROBUST_CHANNEL_CE2_ERROR", "Copy Engine Exception", "RESTART_APP", "CONTACT_SUPPORT"),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE", "CONTACT_SUPPORT"),
    44: ("ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Graphics Engine fault during context switch", "IGNORE", "CONTACT_SUPPORT"),
    45: (
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda applications and hitting a DBE",
        "WORKFLOW_XID_45",
        "Solo: RESTART_FM Not Solo: IGNORE (follow other Xid)",
    ),
    46: ("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "RESET_GPU", "CONTACT_SUPPORT"),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48", "WORKFLOW_XID_48"),
    54: ("SILENT_RUNNING_PWR_REDUCED_CLOCKING", "Auxiliary power is not connected to the GPU board", "CHECK_MECHANICALS", "CONTACT_SUPPORT"),
    60: ("ROBUST_CHANNEL_SEC2_ERROR", "Video processor exception", "RESTART_APP", "INVESTIGATE_SW"),
    62: ("PMU_HALT_ERROR", "Internal micro-controller halt (newer drivers)", "RESET_GPU", "CONTACT_SUPPORT"),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE", "IGNORE"),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU", "CONTACT_SUPPORT"),
    66: ("ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "Illegal access by driver", "IGNORE", "INVESTIGATE_SW"),
    67: ("ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "Illegal access by driver", "IGNORE", "CONTACT_SUPPORT"),
    68: ("ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", "RESTART_APP", "CONTACT_SUPPORT"),
    69: ("ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP", "CHECK_APP/CUDA"),
    70: ("ROBUST_CHANNEL_CE3_ERROR", "CE3: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    71: ("ROBUST_CHANNEL_CE4_ERROR", "CE4: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    72: ("ROBUST_CHANNEL_CE5_ERROR", "CE5: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    74: ("NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR", "CONTACT_SUPPORT"),
    75: ("ROBUST_CHANNEL_CE6_ERROR", "CE6: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    76: ("ROBUST_CHANNEL_CE7_ERROR", "CE7: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    77: ("ROBUST_CHANNEL_CE8_ERROR", "CE8: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    78: ("VGPU_START_ERROR", "vGPU Start Error", "UPDATE_SWFW", "UPDATE_SWFW"),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM", "CONTACT_SUPPORT"),
    80: ("PBDMA_PUSHBUFFER_CRC_MISMATCH", "Corrupted data sent to GPU", "RESTART_APP", "CHECK_APP/CUDA"),
    82: ("ROBUST_CHANNEL_NVJPG0_ERROR", "NVJPG0 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    83: ("ROBUST_CHANNEL_NVDEC1_ERROR", "NVDEC1 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    84: ("ROBUST_CHANNEL_NVDEC2_ERROR", "NVDEC2 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    85: ("ROBUST_CHANNEL_CE9_ERROR", "CE9: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    86: ("ROBUST_CHANNEL_OFA0_ERROR", "OFA Exception", "RESTART_APP", "CONTACT_SUPPORT"),
    88: ("ROBUST_CHANNEL_NVDEC3_ERROR", "NVDEC3 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    89: ("ROBUST_CHANNEL_NVDEC4_ERROR", "NVDEC4 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE", "CONTACT_SUPPORT"),
    93: ("INFOROM_ERASE_LIMIT_EXCEEDED", "Non-fatal violation of provisioned InfoROM wear limit", "IGNORE", "CONTACT_SUPPORT"),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", "RESTART_APP", "IGNORE (sympathetic)"),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU", "IGNORE (sympathetic)"),
    96: ("ROBUST_CHANNEL_NVDEC5_ERROR", "NVDEC5 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    97: ("ROBUST_CHANNEL_NVDEC6_ERROR", "NVDEC6 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    98: ("ROBUST_CHANNEL_NVDEC7_ERROR", "NVDEC7 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    99: ("ROBUST_CHANNEL_NVJPG1_ERROR", "NVJPG1 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    100: ("ROBUST_CHANNEL_NVJPG2_ERROR", "NVJPG2 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    101: ("ROBUST_CHANNEL_NVJPG3_ERROR", "NVJPG3 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    102: ("ROBUST_CHANNEL_NVJPG4_ERROR", "NVJPG4 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    103: ("ROBUST_CHANNEL_NVJPG5_ERROR", "NVJPG5 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    104: ("ROBUST_CHANNEL_NVJPG6_ERROR", "NVJPG6 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    105: ("ROBUST_CHANNEL_NVJPG7_ERROR", "NVJPG7 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    106: ("SMBPBI_TEST_MESSAGE", "SMBPBI Test Message", "IGNORE", "IGNORE"),
    107: ("SMBPBI_TEST_MESSAGE_SILENT", "SMBPBI Test Message Silent", "IGNORE", "IGNORE"),
    109: ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", "RESET_GPU", "CONTACT_SUPPORT"),
    110: ("SEC_FAULT_ERROR", "Security Fault Error", "RESET_GPU", "INVESTIGATE_SW"),
    119: ("GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU", "INVESTIGATE_SW"),
    120: ("GSP_ERROR", "GSP Error", "RESET_GPU", "INVESTIGATE_SW"),
    121: ("C2C_ERROR", "C2C Error", "IGNORE", "CONTACT_SUPPORT"),
    126: ("ROBUST_CHANNEL_CE10_ERROR", "CE10: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    127: ("ROBUST_CHANNEL_CE11_ERROR", "CE11: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    128: ("ROBUST_CHANNEL_CE12_ERROR", "CE12: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    129: ("ROBUST_CHANNEL_CE13_ERROR", "CE13: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    130: ("ROBUST_CHANNEL_CE14_ERROR", "CE14: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    131: ("ROBUST_CHANNEL_CE15_ERROR", "CE15: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    132: ("ROBUST_CHANNEL_CE16_ERROR", "CE16: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    133: ("ROBUST_CHANNEL_CE17_ERROR", "CE17: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    134: ("ROBUST_CHANNEL_CE18_ERROR", "CE18: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    135: ("ROBUST_CHANNEL_CE19_ERROR", "CE19: Unknown Error", "RESTART_APP", "CONTACT_SUPPORT"),
    136: ("ALI_TRAINING_FAIL", "Link Training Failed", "RESET_GPU", "INVESTIGATE_LINK_SI"),
    137: ("NVLINK_PRIV_ERR", "NVLink Privilege Error", "IGNORE", "XID_137_FLOW"),
    139: ("ROBUST_CHANNEL_OFA1_ERROR", "OFA1 Error", "RESTART_APP", "CONTACT_SUPPORT"),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", "RESET_GPU", "CONTACT_SUPPORT"),
    141: ("ROBUST_CHANNEL_FAST_PATH_ERROR", "CUDA Fast Path Error", "IGNORE", "CONTACT_SUPPORT"),
    142: ("ROBUST_CHANNEL_NVENC3_ERROR", "NVENC3 Error", "CONTACT_SUPPORT", ""),
    143: ("GPU_INIT_ERROR", "GPU Initialization Error", "RESET_GPU", "CONTACT_SUPPORT"),
    144: ("NVLINK_SAW_ERROR", "NVLINK: SAW Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    145: ("NVLINK_RLW_ERROR", "NVLINK: RLW Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    146: ("NVLINK_TLW_ERROR", "NVLINK: TLW Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    147: ("NVLINK_TREX_ERROR", "NVLINK: TREX Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    148: ("NVLINK_NVLPW_CTRL_ERROR", "NVLINK: NVLPW_CTRL Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    149: ("NVLINK_NETIR_ERROR", "NVLINK: NETIR Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    150: ("NVLINK_MSE_ERROR", "NVLINK: MSE Error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
    151: ("ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Key rotation Error", "RESTART_VM", "CONTACT_SUPPORT"),
    152: ("ROBUST_CHANNEL_DLA_SMMU_ERROR", "DLA SMMU Error", "IGNORE", "CONTACT_SUPPORT"),
    153: ("ROBUST_CHANNEL_DLA_TIMEOUT", "DLA timeout Error", "IGNORE", "CONTACT_SUPPORT"),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", "XID_154", "N/A Informational only regarding another Xid"),
    155: ("NVLINK_SW_DEFINED_ERROR", "NVLINK: SW Defined Error", "RESET_GPU", "INVESTIGATE_SW_USER"),
    156: ("RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event", "RESET_GPU", "IGNORE"),
    157: ("RESOURCE_RETIREMENT_FAILURE", "Resource Retirement Failure", "IGNORE", "CONTACT_SUPPORT"),
    158: ("GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", "RESET_GPU", "CONTACT_SUPPORT"),
    159: ("ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHI Non-Data Error", "CHECK_UVM", "SYMPATHETIC_REPORT_SOLO"),
    160: ("CHANNEL_RETIREMENT_EVENT", "Channel Retirement Event", "IGNORE", "INVESTIGATE_SW"),
    161: ("CHANNEL_RETIREMENT_FAILURE", "Channel Retirement Failure", "IGNORE", "INVESTIGATE_SW"),
    162: ("PSHC_REENGAGED", "Power Smoothing HW Circuitry capability reengaged", "", ""),
    163: ("PSHC_DISENGAGED", "Power Smoothing HW Circuitry capability disengaged", "", ""),
    164: ("PSHC_LOW_LIFETIME", "Power Smoothing HW Circuitry low lifetime reached", "", ""),
    165: ("PSHC_ZERO_LIFETIME", "Power Smoothing HW Circuitry lifetime exhausted", "", ""),
    166: ("NVLINK_SECURE_CRYPTO_ERR", "CC traffic seen prior to link properly being configured for encrypted traffic", "", ""),
    167: ("PCIE_FATAL_TIMEOUT", "PCIE_FATAL_TIMEOUT", "", ""),
    168: ("REDUCED_GPU_MEMORY_CAPACITY", "Errors found in WPR (write protected region)", "", ""),
    169: ("SEC2_HALT_ERROR", "Internal micro-controller halt", "", ""),
    170: ("NVLINK_SECURE_OTHER", "Interrupt seen in CC mode", "", ""),
    171: ("UNCORRECTABLE_DRAM_ERROR", "Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM", "", ""),
    172: ("UNCORRECTABLE_SRAM_ERROR", "Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM", "", ""),
}

_REMEDIATION_BY_BUCKET: Mapping[str, str] = {
    "RESET_GPU": "Drain the GPU's jobs and reset the GPU (nvidia-smi -r, or reboot); contact NVIDIA support if it recurs",
    "RESTART_BM": "Drain the node and power-cycle it; if the GPU stays missing, reseat or replace it",
    "RESTART_VM": "Drain the node and restart the VM",
    "WORKFLOW_XID_48": "Drain the GPU's jobs and reset the GPU to retire the failed memory; replace it if DBEs recur",
    "WORKFLOW_NVLINK_ERR": "Check the NVLink (nvidia-smi nvlink -s / -e) and follow NVIDIA's WORKFLOW_NVLINK_ERR; reset the GPU",
    "WORKFLOW_NVLINK5_ERR": "Check the NVLink ports (nvidia-smi nvlink -s) and follow NVIDIA's WORKFLOW_NVLINK5_ERR",
    "CHECK_MECHANICALS": "Check the GPU's auxiliary power cables and seating",
    "CONTACT_SUPPORT": "Collect nvidia-bug-report.sh and contact NVIDIA support",
}
_APP_REMEDIATION = "Application-level GPU error: restart the application; the node needs no action"
# How long a bucket's one-off critical event holds (EventPolicy.until)
_UNTIL_BY_BUCKET: Mapping[str, Until] = {"RESET_GPU": "reset", "RESTART_BM": "reboot"}

_CRITICAL_BUCKETS = frozenset({"RESET_GPU", "RESTART_BM", "RESTART_VM", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR"})
_WARNING_ONCE_BUCKETS = frozenset({"CHECK_MECHANICALS", "CONTACT_SUPPORT"})

_XID_OVERRIDES: Mapping[int, tuple[Severity, Rule, int, str]] = {
    63: ("warning", "once", 1, "Reset the GPU when convenient to activate the remapped memory row"),
    92: ("warning", "once", 1, "Watch the GPU's ECC counters (nvidia-smi -q -d ECC); contact support if the rate stays high"),
    94: ("warning", "once", 1, "Contained memory error: the affected application was stopped; reset the GPU when convenient to remap the row"),
    164: ("warning", "once", 1, "Power smoothing circuitry nears end of life: plan a GPU replacement"),
    165: ("warning", "once", 1, "Power smoothing circuitry exhausted: plan a GPU replacement"),
    167: ("critical", "once", 1, _REMEDIATION_BY_BUCKET["RESET_GPU"]),
    168: ("warning", "once", 1, "GPU memory capacity reduced: reset the GPU; contact support if it persists"),
    169: ("critical", "once", 1, _REMEDIATION_BY_BUCKET["RESET_GPU"]),
}

UNKNOWN_XID = EventPolicy("warning", "repeated", 3, "Xid not in NVIDIA's catalogue", "Look the Xid up in the current NVIDIA Xid catalogue for the installed driver")


def xid_policy(xid: int) -> EventPolicy:
    entry = XID_CATALOGUE.get(xid)
    if entry is None:
        return UNKNOWN_XID
    mnemonic, description, bucket, _investigatory = entry
    title = f"Xid {xid}: {description}"
    override = _XID_OVERRIDES.get(xid)
    if override is not None:
        severity, rule, threshold, remediation = override
        until: Until | None = "reset" if severity == "critical" and remediation == _REMEDIATION_BY_BUCKET["RESET_GPU"] else None
        return EventPolicy(severity, rule, threshold, title, remediation, until=until)
    if bucket in _CRITICAL_BUCKETS:
        return EventPolicy("critical", "once", 1, title, _REMEDIATION_BY_BUCKET[bucket], until=_UNTIL_BY_BUCKET.get(bucket))
    if bucket == "WORKFLOW_NVLINK5_ERR":
        return EventPolicy("warning", "repeated", 3, title, _REMEDIATION_BY_BUCKET[bucket])
    if bucket in _WARNING_ONCE_BUCKETS:
        return EventPolicy("warning", "once", 1, title, _REMEDIATION_BY_BUCKET[bucket])
    return EventPolicy("info", "count", 1, title, _APP_REMEDIATION)


# SXid -> (always fatal, potentially fatal, name): from gpud's catalogue of the Fabric
# Manager guide's table (see the module docstring).
SXID_CATALOGUE: Mapping[int, tuple[bool, bool, str]] = {
    10002: (False, True, "Host_priv_timeout"),
    10003: (True, True, "Host_unhandled_interrupt"),
    10004: (False, True, "Host_thermal_event_start"),
    10005: (False, True, "Host_thermal_event_end"),
    11001: (False, True, "ingress invalid command"),
    11004: (False, False, "Ingress invalid ACL"),
    11012: (False, False, "Single bit ECC errors"),
    11021: (False, False, "Single bit ECC errors"),
    11022: (False, False, "Single bit ECC errors"),
    11023: (False, False, "Single bit ECC errors"),
    12021: (False, False, "Single bit ECC errors"),
    12023: (False, False, "Single bit ECC errors"),
    12028: (False, False, "egress nonposted PRIV error"),
    15008: (False, False, "Single bit ECC errors"),
    15011: (False, False, "Single bit ECC errors"),
    19049: (False, False, "Single bit ECC errors"),
    19055: (False, False, "Single bit ECC errors"),
    19057: (False, False, "Single bit ECC errors"),
    19059: (False, False, "Single bit ECC errors"),
    19062: (False, False, "Single bit ECC errors"),
    19065: (False, False, "Single bit ECC errors"),
    19068: (False, False, "Single bit ECC errors"),
    19071: (False, False, "Single bit ECC errors"),
    19084: (False, False, "AN1 Heartbeat Timeout Error"),
    20001: (False, False, "TX Replay Error"),
    20009: (False, False, "RX Short Error Rate"),
    20012: (False, False, "Broken/inconsistent connection"),
    22013: (False, False, "Minion Link DLREQ interrupt"),
    24001: (False, False, "Single bit ECC errors"),
    24002: (False, False, "Single bit ECC errors"),
    24003: (False, False, "Single bit ECC errors"),
    24004: (False, True, "sourcetrack TCEN0 crumbstore DBE"),
}
_SXID_REMEDIATION = "Check the NVSwitch fabric (nvidia-smi nvlink -s, Fabric Manager log); follow the Fabric Manager guide for this SXid"


def sxid_policy(code: str) -> EventPolicy:
    entry = SXID_CATALOGUE.get(int(code)) if code.isdigit() else None
    if entry is None:
        return EventPolicy("warning", "repeated", 3, f"NVSwitch SXid {code}", _SXID_REMEDIATION)
    always, potential, name = entry
    title = f"NVSwitch SXid {code}: {name}"
    if always:
        return EventPolicy("critical", "once", 1, title, _SXID_REMEDIATION)
    if potential:
        return EventPolicy("warning", "once", 1, title, _SXID_REMEDIATION)
    return EventPolicy("info", "count", 1, title, "Non-fatal SXid: counted and shown; the fabric needs no action unless it repeats")


_COUNT = EventPolicy("ok", "count", 1)
_NIC_FW = "Collect mlxfwdump/sysinfo-snapshot, reset the HCA (mlxfwreset) or reboot; replace it if it recurs"
_EFA_ADMIN = ("Drain the node; `dmesg | grep efa` names the command; the admin queue stays closed until the efa driver "
              "is reloaded (`modprobe -r efa && modprobe efa`, nothing using it) or the instance is stopped and started; "
              "if it recurs, report the instance to AWS")
_PCIE_RECOVERY = "Drain the node; `dmesg | grep -iE 'aer|dpc|pciehp'` names the port and device; reseat or replace the device, riser or cable; reboot to bring the device back"

_POLICIES: Mapping[tuple[str, str], EventPolicy] = {
    ("gpu_off_bus", "off_bus"): EventPolicy("critical", "once", 1, "GPU has fallen off the bus", _REMEDIATION_BY_BUCKET["RESTART_BM"], until="reboot"),
    ("gpu_off_bus", "gpu_is_lost"): EventPolicy("critical", "once", 1, "GPU lost from the bus (NV_ERR_GPU_IS_LOST)", _REMEDIATION_BY_BUCKET["RESTART_BM"], until="reboot"),
    ("nvrm", "reset_required"): EventPolicy("critical", "once", 1, "NVIDIA driver: the GPU needs a reset (NV_ERR_RESET_REQUIRED)", _REMEDIATION_BY_BUCKET["RESET_GPU"], until="reset"),
    ("nvrm", "probe_failed"): EventPolicy("warning", "once", 1, "NVIDIA driver failed to initialise a GPU", "Check dmesg for the GPU the driver could not probe; reseat or replace it"),
    ("peermem", "invalid_context"): EventPolicy(
        "warning", "repeated", 3, "nvidia-peermem: invalid context", "GPUDirect RDMA memory was freed under an active registration; check the nvidia-peermem and driver versions"
    ),
    ("peermem", "load_failed"): EventPolicy(
        "warning", "once", 1, "GPUDirect RDMA module failed to load (unknown or mismatched symbols)",
        "The peer-memory module was built against another NVIDIA driver or MLNX_OFED: rebuild it (DKMS) for the running ones, or use nvidia-peermem / DMA-BUF",
    ),
    ("mlx5", "fatal_cmd_timeout"): EventPolicy("critical", "once", 1, "HCA firmware does not answer page-management or QP-reset commands (the function is unusable)", _NIC_FW),
    ("mlx5", "recovery_aborted"): EventPolicy("critical", "once", 1, "HCA health recovery aborted (PCI reads failing)", _NIC_FW),
    ("mlx5", "slot_unavailable"): EventPolicy("critical", "once", 1, "HCA no longer answers on PCIe (PCI slot unavailable)", "Drain and reboot; check the slot, riser and the HCA's power; replace the HCA if it recurs"),
    ("mlx5", "probe_failed"): EventPolicy("warning", "once", 1, "HCA function failed to probe", "dmesg | grep mlx5_core for the error code; update the firmware or driver, reload mlx5_core or reboot"),
    ("mlx5", "health_compromised"): EventPolicy("critical", "once", 1, "HCA health compromised (firmware stopped responding)", _NIC_FW),
    ("mlx5", "unrecoverable"): EventPolicy("critical", "once", 1, "HCA unrecoverable hardware error", _NIC_FW),
    ("mlx5", "fatal_error"): EventPolicy("critical", "once", 1, "HCA fatal error", _NIC_FW),
    ("mlx5", "fw_syndrome"): EventPolicy("warning", "once", 1, "HCA firmware health syndrome", _NIC_FW),
    ("mlx5", "cmd_timeout"): EventPolicy("warning", "repeated", 3, "HCA firmware command timeouts", _NIC_FW),
    ("mlx5", "slot_power"): EventPolicy("warning", "once", 1, "HCA detects insufficient PCIe slot power", "Check the slot's power budget and riser; move the HCA to a full-power slot"),
    ("mlx5", "module_temp"): EventPolicy("warning", "once", 1, "HCA port module high temperature", "Check airflow and the transceiver; replace the module if it keeps overheating"),
    ("mlx5", "cable"): EventPolicy("warning", "once", 1, "HCA port module / cable error", "Reseat or replace the cable / transceiver"),
    ("mlx5", "high_temp"): EventPolicy("warning", "once", 1, "HCA high temperature", "Check the node's airflow and fans"),
    ("mlx5", "tx_timeout"): EventPolicy("warning", "repeated", 3, "HCA transmit queue timeouts", "Check the port and the HCA firmware; reset the interface if it repeats"),
    ("efa", "cmd_timeout"): EventPolicy("critical", "once", 1, "EFA device did not complete an admin command (the driver closed its admin queue)", _EFA_ADMIN),
    ("efa", "admin_queue_closed"): EventPolicy("critical", "once", 1, "EFA admin queue closed (no QP, CQ, MR or statistics until the driver is reloaded)", _EFA_ADMIN),
    ("aer", "fatal"): EventPolicy("critical", "once", 1, "PCIe uncorrected fatal error", "Drain the node; check the device and its slot/riser, reseat or replace; reboot to recover the link"),
    ("aer", "nonfatal"): EventPolicy("warning", "repeated", 3, "PCIe uncorrected non-fatal errors", "Check the device and its slot/riser; reseat or replace if they continue"),
    ("aer", "corrected"): EventPolicy("warning", "repeated", 100, "PCIe corrected error storm", "Check the link (lspci -vv LnkSta, AER counters) and reseat the device or riser", below="info"),
    ("pcie", "dpc"): EventPolicy("warning", "once", 1, "PCIe Downstream Port Containment: the link was reset after an uncorrectable error", "dmesg names the source; a repeat or a failed recovery means the device, riser or slot"),
    ("pcie", "recovery_failed"): EventPolicy("critical", "once", 1, "PCIe error recovery failed", _PCIE_RECOVERY),
    ("pcie", "reset_failed"): EventPolicy("critical", "once", 1, "PCIe reset of the devices below a port failed", _PCIE_RECOVERY),
    ("pcie", "link_down"): EventPolicy("warning", "once", 1, "PCIe hotplug slot link down", "The device below the slot dropped off the link: check it is back (lspci), reseat it if not"),
    ("pcie", "link_inactive"): EventPolicy("warning", "once", 1, "PCIe link did not come back after a reset (Data Link Layer Link Active not set)", "Check the device below the port (lspci -vv LnkSta); reseat it, or reboot"),
}

# Xid 154 names the recovery action the driver now wants for the GPU: the line decides.
_ACTION_REMEDIATION = "Follow the recovery action the driver names (nvidia-smi -q -d RECOVERY_ACTION, or NVML nvmlDeviceGetGpuRecoveryAction)"
_RECOVERY_POLICIES: Mapping[str, EventPolicy] = {
    "gpu_reset": EventPolicy("critical", "once", 1, "GPU reset required", _REMEDIATION_BY_BUCKET["RESET_GPU"], until="reset"),
    "node_reboot": EventPolicy("critical", "once", 1, "node reboot required", _REMEDIATION_BY_BUCKET["RESTART_BM"], until="reboot"),
    "drain_and_reset": EventPolicy("critical", "once", 1, "drain and reset the GPU", "Let running jobs finish, schedule no new ones, then reset the GPU (nvidia-smi -r)", until="reset"),
    "drain_p2p": EventPolicy("warning", "once", 1, "drain peer-to-peer (NVLink) traffic", _ACTION_REMEDIATION),
    "recover_imex_domain": EventPolicy("warning", "once", 1, "recover the IMEX domain", "Restart the IMEX domain (nvidia-imex) the GPU belongs to; multi-node NVLink memory is unavailable until then"),
    "unknown": EventPolicy("warning", "once", 1, "an unknown recovery action", _ACTION_REMEDIATION),
    "none": EventPolicy("info", "count", 1, "no recovery action needed (the GPU was reset)", "None: the driver says the GPU needs nothing"),
}


def policy_of(e: KernelEvent) -> EventPolicy:
    """The policy for one event: the catalogue's for its kind and code, decided by the
    line's own words where it has them. An NVLink5 XID (or an XID newer than the table) or
    an SXID that says "Fatal" is critical once; "Non-fatal" keeps the table's rule. An Xid
    154 is the recovery action it names."""
    pol = event_policy(e.kind, e.code)
    if e.kind == "xid" and e.code == "154" and e.action is not None:
        action = _RECOVERY_POLICIES.get(e.action, _RECOVERY_POLICIES["unknown"])
        return replace(action, title=f"{pol.title}: {action.title}")
    if e.fatal and e.kind in ("xid", "sxid") and pol.severity != "critical":
        entry = XID_CATALOGUE.get(int(e.code)) if e.code.isdigit() else None
        fatal_ok = e.kind == "sxid" or pol is UNKNOWN_XID or (entry is not None and entry[2] == "WORKFLOW_NVLINK5_ERR")
        if fatal_ok:
            return replace(pol, severity="critical", rule="once", threshold=1, title=f"{pol.title} (Fatal)", below=None)
    return pol


def is_reset(e: KernelEvent) -> bool:
    """Whether the event says its GPU was reset: Xid 154 with the recovery action back to
    None (the driver clears the action it asked for once the GPU is reset)."""
    return e.kind == "xid" and e.code == "154" and e.action == "none"


def event_policy(kind: str, code: str) -> EventPolicy:
    """The policy for an event; "count" for anything the catalogue does not name."""
    if kind == "xid":
        return xid_policy(int(code)) if code.isdigit() else UNKNOWN_XID
    if kind == "sxid":
        return sxid_policy(code)
    return _POLICIES.get((kind, code), _COUNT)
