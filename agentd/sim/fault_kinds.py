"""The fault kinds: what each targets, what VALUE means, and its exact effect.

``KINDS`` maps a kind name to a ``Kind``; ``describe_kinds()`` renders the table for
``--help`` texts. The effects live in effects_link / effects_node; target forms are in
targets. "restored" below means clearing copies the original bytes back; "advanced"
means a counter that clearing leaves where it is (see agentd.sim.faults).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from agentd.sim import effects_kmsg as K
from agentd.sim import effects_link as L
from agentd.sim import effects_node as N
from agentd.sim import effects_optics as O
from agentd.sim import effects_qos as Q
from agentd.sim.node import KMSG
from agentd.sim.pcicfg import ACS_KERNEL_ENABLE
from agentd.sim.targets import Ctx, FaultValue, Restorable, Target

Apply = Callable[[Ctx, Target, FaultValue], None]
Paths = Callable[[Ctx, Target, FaultValue], Sequence[Restorable]]  # what clearing copies back
Advancing = Callable[[Ctx, Target, FaultValue], Sequence[str]]  # counters clearing leaves where they are


@dataclass(frozen=True)
class Kind:
    name: str
    target: str  # port | netdev | roce | ethtool | gpu | device | nic | file | gpus | none
    help: str
    apply: Apply
    restores: Paths
    value: Callable[[str], FaultValue] | None = None  # parses VALUE (ValueError if bad); None: takes none
    default: Callable[[Ctx, Target], FaultValue] | None = None
    value_help: str = ""
    advancing: Advancing | None = None
    on_clear: Callable[[Ctx, Target], None] | None = None
    links: bool = False  # target may carry ":LINK"
    port_files: tuple[str, ...] = ()  # file kinds: files of a port target
    fmt: Callable[[FaultValue], str] = str  # how a parsed value is written back into a spec

    def format_value(self, value: FaultValue) -> str | None:
        return None if value is None else self.fmt(value)


def _int(lo: int, hi: int) -> Callable[[str], int]:
    def parse(s: str) -> int:
        try:
            v = int(s, 0)
        except ValueError:
            raise ValueError(f"expected an integer, got {s!r}") from None
        if not lo <= v <= hi:
            raise ValueError(f"{v} is outside {lo}..{hi}")
        return v

    return parse


def _choice(*options: str) -> Callable[[str], str]:
    def parse(s: str) -> str:
        if s not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {s!r}")
        return s

    return parse


def _rate(s: str) -> str:
    if s == "width" or (s[:-1].isdigit() and s[-1] in "xX") or s.replace(".", "", 1).isdigit():
        return s
    raise ValueError(f"expected 'width', a lane count like '2X', or Gb/s like '200', got {s!r}")


def _status(s: str) -> str:
    if s.lower() == "success":
        raise ValueError("'success' is the healthy status, not a fault")
    return s


def _seconds(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise ValueError(f"expected seconds, got {s!r}") from None
    if not 0 < v <= 86400:
        raise ValueError(f"{v} is outside 0..86400 seconds")
    return v


def _const(v: FaultValue) -> Callable[[Ctx, Target], FaultValue]:
    return lambda ctx, t: v


def _none(ctx: Ctx, t: Target, v: FaultValue) -> list[str]:
    return []


_KINDS = [
    Kind("port_down", "port", "port state '1: DOWN', phys_state '3: Disabled' (or '2: Polling'), rate '40 Gb/sec (4X QDR)'; netdev operstate down, carrier 0, speed -1 (restored). link_downed, carrier_changes/down_count +1 (advanced; clearing adds carrier_changes/up_count +1)",
         L.port_down_apply, L.port_down_restores, _choice("disabled", "polling"), _const("disabled"), "disabled|polling", L.link_counters_advancing, L.port_down_on_clear),
    Kind("rate_degraded", "port", "port rate lowered ('200' -> '200 Gb/sec (4X HDR)', 'width' -> '200 Gb/sec (2X NDR)', '1X' -> '100 Gb/sec (1X NDR)'); netdev speed follows",
         L.rate_degraded_apply, L.rate_degraded_restores, _rate, _const("width"), "width|<N>X|<Gb/s>"),
    Kind("flapping", "port", "link_downed += N (8-bit, saturates at 255), netdev carrier_changes += 2N, carrier_up/down_count += N, RoCE link_down_events_phy += N; state stays ACTIVE (all advanced)",
         L.flapping_apply, _none, _int(1, 1000), _const(3), "N (default 3)", L.link_counters_advancing),
    Kind("peermem_gone", "none", "sys/module/nvidia_peermem removed and nvidia_peermem dropped from proc/modules",
         N.peermem_gone_apply, N.peermem_restores),
    Kind("dmabuf_only", "none", "peermem gone; proc/driver/nvidia/version says Open Kernel Module; kernel 6.x: GDR only via DMA-BUF",
         N.dmabuf_only_apply, N.gdr_restores),
    Kind("no_gdr", "none", "peermem gone and the proprietary module (version text without 'Open', taint POE): no GDR path",
         N.no_gdr_apply, N.gdr_restores),
    Kind("pcie_downtrained", "device", "current_link_speed one generation lower (32.0 -> 16.0 GT/s) and/or current_link_width halved (16 -> 8), on the device and the port above it (one link, two ends), sysfs and config Link Status. GPUs default to width: they lower their speed when idle, so speed alone is no fault signal",
         L.pcie_downtrained_apply, L.pcie_downtrained_restores, _choice("speed", "width", "both"), L.downtrain_default, "speed|width|both (default: width on a GPU, speed otherwise)"),
    Kind("acs_on", "device", "ACS Control of the bridge directly above the device (the switch downstream port above a GPU) set to VALUE (default 0x1d = SV|RR|CR|UF, what Linux enables; bit 2 RR = P2P Request Redirect)",
         L.acs_apply, L.acs_restores, _int(1, 0x7F), _const(ACS_KERNEL_ENABLE), "ACS control bits (default 0x1d)", fmt=lambda v: f"0x{v:02x}"),
    Kind("aer_uncorrectable", "device", "the device's AER statistics, and the root port's 'AER: ... error received' line in dev/kmsg: aer_dev_nonfatal (VALUE nonfatal, default: CmpltTO +1) or aer_dev_fatal (VALUE fatal: DLP +1), and its TOTAL_ERR_* line +1 (advanced)",
         L.aer_uncorrectable_apply, _none, _choice("nonfatal", "fatal"), _const("nonfatal"), "nonfatal|fatal", L.aer_advancing(None, KMSG)),
    Kind("aer_correctable", "device", "the device's aer_dev_correctable (and the root port's 'AER: Multiple Corrected error received' line in dev/kmsg): BadTLP += N (default 1000) and TOTAL_ERR_COR += N (advanced)",
         L.aer_correctable_apply, _none, _int(1, 10**12), _const(1000), "N corrected errors", L.aer_advancing("correctable", KMSG)),
    Kind("pcie_replay", "gpu", "nvml.json pcie_replay_errors of the GPU += N (default 1000; advanced)",
         N.pcie_replay_apply, _none, _int(1, 10**12), _const(1000), "N replays", N.nvml_file),
    Kind("mtu_mismatch", "netdev", "netdev mtu set to VALUE (default 1500; 9000 when it already is 1500)",
         L.mtu_apply, L.mtu_restores, _int(68, 65535), L.mtu_default, "MTU"),
    Kind("ecn_off", "roce", "ecn/roce_np/enable/<prio> and ecn/roce_rp/enable/<prio> = 0 (default prio: the profile's RoCE priority, 3)",
         L.ecn_apply, L.ecn_restores, _int(0, 7), lambda ctx, t: ctx.profile.roce_priority, "priority"),
    Kind("pfc_off", "roce", "the mlnx_qos stand-in (.agentd/dcb/<if>) shows PFC disabled on every priority (trust and DSCP map kept)",
         Q.pfc_off_apply, Q.dcb_restores),
    Kind("pause_storm", "roce", "ethtool rx_prio<p>_pause += N (default 10^7), rx_prio<p>_pause_duration += N/10, rx_prio<p>_pause_transition += N/2 for the RoCE priority; applying again adds more (advanced: a rate is seen between two collections)",
         L.pause_storm_apply, _none, _int(1, 10**15), _const(10**7), "N pause frames", L.ethtool_file),
    Kind("tclass_override", "roce", "the netdev's HCA's tc/1/traffic_class (MLNX_OFED mlx5_ib; empty when nothing is set) says 'Global tclass=VALUE' (default 0): every RDMA QP of the port sends with that traffic class, whatever NCCL_IB_TC says",
         Q.tclass_override_apply, Q.tclass_restores, _int(0, 255), _const(0), "traffic class (default 0)"),
    Kind("trust_pcp", "roce", "the mlnx_qos stand-in (.agentd/dcb/<if>) says 'Priority trust state: pcp' and has no dscp2prio table (PFC unchanged): the DSCP marking of RDMA traffic is ignored",
         Q.trust_pcp_apply, Q.dcb_restores),
    Kind("dscp_map_lossy", "roce", "the mlnx_qos stand-in's dscp2prio table maps the DSCP RDMA traffic is marked with (the profile's NCCL_IB_TC >> 2 = 26) to priority VALUE (default 0; not the RoCE priority), listed first in that priority's row as mlnx_qos shows a changed entry (PFC unchanged)",
         Q.dscp_map_lossy_apply, Q.dcb_restores, _int(0, 7), _const(0), "priority (default 0)"),
    Kind("pause_on", "roce", "the `ethtool -a` stand-in (.agentd/pause/<if>) says global pause RX and TX on (VALUE both, the default; rx or tx: only that one), as an mlx5 port has it before its PFC setup turns it off",
         Q.pause_on_apply, Q.pause_restores, _choice("rx", "tx", "both"), _const("both"), "rx|tx|both"),
    Kind("nccl_tc_mismatch", "none", "etc/nccl.conf says NCCL_IB_TC=VALUE (default 0; other lines kept; the file is created where the profile has none)",
         Q.nccl_tc_mismatch_apply, Q.nccl_conf_restores, _int(0, 255), _const(0), "traffic class (default 0)"),
    Kind("roce_lossy_traffic", "roce", "ethtool tx_prio0_bytes and tx_vport_rdma_unicast_bytes += N (default 10^11), the HCA port's counters/port_xmit_data += N/4 (4-byte words): RDMA traffic sent on priority 0, which has no PFC; applying again adds more (advanced, as pause_storm)",
         Q.roce_lossy_traffic_apply, _none, _int(1, 10**15), _const(10**11), "N bytes", Q.roce_lossy_advancing),
    Kind("nvlink_down", "gpu", "nvml.json link LINK of the GPU (VALUE or ':LINK' in the target, default 0) state 'down'",
         N.nvlink_down_apply, N.nvlink_down_restores, _int(0, 63), None, "link number", links=True),
    Kind("nvlink_errors", "gpu", "nvml.json link (':LINK', default 0) errors: crc_flit += N (default 1000), crc_data += N/100, replay += N/10 (advanced)",
         N.nvlink_errors_apply, _none, _int(1, 10**12), _const(1000), "N", N.nvml_file, links=True),
    Kind("gpu_lost", "gpu", "nvml.json GPU error 'GPU is lost' (still on PCI)",
         N.gpu_lost_apply, N.gpu_lost_restores),
    Kind("gpu_removed", "gpu", "GPU gone from PCI (device dir, bus/pci and driver links) and from nvml.json (later GPUs renumbered)",
         N.gpu_removed_apply, N.gpu_removed_restores),
    Kind("nic_removed", "nic", "HCA gone: PCI device dir (with infiniband/ and net/), bus/pci and driver links, class/infiniband and class/net links, its ethtool/dcb files",
         L.remove_paths_apply(L.nic_paths), L.nic_paths),
    Kind("counter_reset", "port", "every counters/* and hw_counters/* file of the port set to 0 (lifespan, a setting, kept); clearing restores the original values",
         L.counter_reset_apply, L.counter_reset_restores),
    Kind("counter_saturated", "port", "port_xmit_wait = 4294967295 (32-bit), link_downed = 255 (8-bit), symbol_error = 65535 (16-bit)",
         L.counter_saturated_apply, L.counter_saturated_restores),
    Kind("unreadable_file", "file", "the file replaced by a directory of the same name: read fails with EISDIR (root reads chmod-000 files, so permissions cannot do it); port target: its 'rate'",
         N.unreadable_apply, N.files_restores, port_files=("rate",)),
    Kind("garbage_file", "file", "non-UTF-8 garbage bytes written into the file; port target: its 'rate' and 'state'",
         N.garbage_apply, N.files_restores, port_files=("rate", "state")),
    Kind("nvml_hang", "none", "nvml.json hang_s = VALUE seconds (default 3600): every NVML call blocks that long",
         N.nvml_hang_apply, N.top_field("hang_s"), _seconds, _const(3600.0), "seconds", fmt=lambda v: f"{v:g}"),
    Kind("nvml_init_error", "none", "nvml.json init_error = VALUE (default 'Driver Not Loaded'): nvmlInit fails",
         N.nvml_init_error_apply, N.top_field("init_error"), str, _const("Driver Not Loaded"), "error text"),
    Kind("ethtool_failure", "ethtool", "the `ethtool -S` stand-in (.agentd/ethtool/<if>) holds garbage (default) or is missing",
         L.ethtool_failure_apply, L.ethtool_file, _choice("garbage", "missing"), _const("garbage"), "garbage|missing"),
    Kind("fabric_incomplete", "gpus", "nvml.json fabric_state 'in_progress' (or VALUE 'not_started') and fabric_status null on the GPU, or all GPUs when no target; profiles with an NVLink fabric only (NVSwitch, GB200 NVL)",
         N.fabric_apply, N.fabric_restores, _choice("in_progress", "not_started"), _const("in_progress"), "in_progress|not_started"),
    Kind("fabric_status", "gpus", "nvml.json fabric_state 'completed' with fabric_status VALUE (default 'Insufficient Resources') on the GPU, or all GPUs when no target; profiles with an NVLink fabric only",
         N.fabric_status_apply, N.fabric_restores, _status, _const("Insufficient Resources"), "status text"),
    Kind("fabric_unassigned", "gpus", "nvml.json fabric_clique_id 0 (VALUE clique), fabric_cluster_uuid all zeros (uuid) or both (default) on the GPU, or all GPUs when no target; GB200 NVL only",
         N.fabric_unassigned_apply, N.fabric_unassigned_restores, _choice(*N.UNASSIGNED), _const("both"), "clique|uuid|both"),
    Kind("fabric_health", "gpus", "nvml.json fabric_health of the GPU, or all GPUs when no target: VALUE degraded_bandwidth, route_recovery, route_unhealthy (default) or access_timeout_recovery sets that field true; incorrect_configuration sets it 'insufficient_nvlinks'; unhealthy / limited_capacity set summary; gfm_disconnected sets gfm_connected false. Nothing else changes; GB200 NVL only",
         N.fabric_health_apply, N.fabric_health_restores, _choice(*N.HEALTH_FAULTS), _const("route_unhealthy"), "|".join(N.HEALTH_FAULTS)),
    Kind("fabric_domain_split", "gpu", "nvml.json fabric_clique_id of the GPU + 1 (the cluster UUID kept): it is in another NVLink domain than the node's other GPUs; GB200 NVL only",
         N.fabric_split_apply, N.fabric_split_restores),
    Kind("nvlink_slow", "gpu", "nvml.json link (':LINK', default 0) speed_mb_s of the GPU set to VALUE MB/s (default half the profile's: 13281 on H100, 26562 on GB200); state stays up",
         N.nvlink_slow_apply, N.nvlink_slow_restores, _int(1, 10**7), N.nvlink_slow_default, "MB/s", links=True),
    Kind("c2c_down", "gpu", "nvml.json C2C link (':LINK', default 0) of the GPU state 'down'; Grace profiles (gb200-nvl) only",
         N.c2c_down_apply, N.c2c_down_restores, links=True),
    Kind("fm_down", "none", "the nv-fabricmanager process has exited: its proc/<pid> directory is removed; NVSwitch profiles only",
         N.process_down_apply("nv-fabricmanager"), N.process_restores("nv-fabricmanager")),
    Kind("imex_down", "none", "the nvidia-imex process has exited: its proc/<pid> directory is removed; gb200-nvl only (a finding only where [fabric] imex = true)",
         N.process_down_apply("nvidia-imex"), N.process_restores("nvidia-imex")),
    Kind("xid", "gpu", "dev/kmsg gets the driver's 'NVRM: Xid (PCI:dddd:bb:dd): VALUE, ...' line for the GPU (real wording per XID; default 79, fallen off the bus). The log only grows: clearing removes nothing, the finding goes when its hold has passed (79: until a reboot, bounded by kernel.reset_hold_s; 30 s in `agentd run --simulate`)",
         K.xid_apply, K.nothing_to_restore, K.xid_code, _const(79), "XID (13, 43, 63, 79, 94, 95, 119)", K.the_log),
    Kind("fell_off_bus_multiline", "gpu", "dev/kmsg gets the three-line 'The NVIDIA GPU ... has fallen off the bus and is not responding to commands.' record the driver prints without an Xid line (log only grows, as xid)",
         K.off_bus_multiline_apply, K.nothing_to_restore, advancing=K.the_log),
    # issue 38: the physical layer (agentd.sim.optics)
    Kind("module_hot", "port", "the HCA's hwmon module sensor (temp2_input, temp2_highest) reads VALUE degC (default 78: above its crit 70 and the module's own high alarm 75); a RoCE port's module EEPROM too: lower page temperature and its latched high alarm/warning flags (restored)",
         O.module_hot_apply, O.module_hot_restores, _int(-40, 150), _const(78), "degC (default 78)", O.module_file, O.module_hot_on_clear),
    Kind("rx_power_low", "roce", "the module EEPROM's page 11h (a QSFP28's lower page): lane VALUE (default 1) receives half the module's Rx power low alarm (0.04 mW, -14 dBm; a QSFP28's 0.023 mW) and its low alarm and low warning flags are latched (restored)",
         O.rx_power_low_apply, O.module_restores, _int(1, 4), _const(1), "lane 1-4 (default 1)", O.module_file, O.module_hot_on_clear),
    Kind("fec_errors", "roce", "ethtool rx_corrected_bits_phy += N (default 10^12), the FEC netlink answer's corrected blocks += N/100 and uncorrectable blocks += N/10^9 (at least 1): a pre-FEC BER far above the limit and frames lost; applying again adds more (advanced, as pause_storm)",
         O.fec_errors_apply, O.module_restores, _int(1, 10**15), _const(10**12), "N corrected bits", O.fec_advancing),
    Kind("link_down_reason", "roce", "port_down (Polling) and the ethtool netlink link state says why: ext-state VALUE (default no_cable; kernel enum ethtool_link_ext_state names), link 0, ext-down-cnt +1; clearing brings the link back and drops the reason (ext-down-cnt stays advanced)",
         O.link_down_reason_apply, L.port_down_restores, _choice(*O.EXT_STATES), _const("no_cable"), "|".join(O.EXT_STATES), O.link_down_reason_advancing, O.link_down_reason_on_clear),
    Kind("mlx5_cmd_timeout", "nic", "dev/kmsg gets VALUE (default 5) mlx5_core firmware command timeouts ('wait_func ... ENABLE_HCA(0x104) timeout. Will cause a leak of a command resource') for the HCA (log only grows, as xid)",
         K.mlx5_cmd_timeout_apply, K.nothing_to_restore, _int(1, 10000), _const(5), "N timeouts", K.the_log),
    Kind("mlx5_access_reg", "nic", "dev/kmsg gets VALUE (default 2) mlx5_core 'mlx5_cmd_out_err ... ACCESS_REG(0x805) op_mod(0x1) failed, status bad operation(0x2)' lines for the HCA: what a Fabric Manager limited PF logs for every counter read (log only grows, as xid)",
         K.mlx5_access_reg_apply, K.nothing_to_restore, _int(1, 10000), _const(2), "N failures", K.the_log),
]

KINDS: dict[str, Kind] = {k.name: k for k in _KINDS}


def spec_form(k: Kind) -> str:
    """How a spec of the kind is written: ``port_down[@port][=disabled|polling]``."""
    return k.name + ("" if k.target == "none" else f"[@{k.target}]") + (f"[={k.value_help}]" if k.value else "")


def describe_kinds() -> str:
    return "\n".join(f"{spec_form(k)}\n    {k.help}" for k in _KINDS)
