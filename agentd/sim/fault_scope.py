"""Where each fault kind shows, what agentd reports for it, and how it clears: what
``agentd simulate --list`` prints, and the note a fault that shows nothing gets.

Every kind changes the tree of every profile it can target, but agentd judges only what
matters on that node: the RoCE QoS chain of a *compute* RoCE port, the NVLink fabric of
a node that has one. ``pfc_off`` on h100-ib changes the storage NIC's PFC and nothing is
judged there; ``SCOPES`` says so. A kind missing here shows on every profile.

How a kind clears is derived from the kind itself (agentd.sim.fault_kinds): a kernel log
fault appends lines that stay (the log only grows), a counter fault leaves the counters
advanced (a rate or flap window has to pass), anything else is restored at once.
tests/sim/test_fault_scope.py holds this table to what agentd reports on each profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from agentd.sim import effects_kmsg as K
from agentd.sim.fault_kinds import KINDS, Kind, spec_form
from agentd.sim.profiles import PROFILES, Profile


@dataclass(frozen=True)
class Where:
    """Which profiles a kind shows on: a predicate and how to say it."""

    words: str
    shows_on: Callable[[Profile], bool]


def _any(p: Profile) -> bool:
    return True


def _roce_compute(p: Profile) -> bool:
    return any(h.compute and h.link_layer == "Ethernet" for h in p.hcas)


def _ethernet(p: Profile) -> bool:
    return any(h.link_layer == "Ethernet" for h in p.hcas)


def _nvlink(p: Profile) -> bool:
    return p.nvlinks_per_gpu > 0


def _rack(p: Profile) -> bool:
    return p.rack_nvlink


def _c2c(p: Profile) -> bool:
    return p.c2c_links_per_gpu > 0


def _nvswitch_board(p: Profile) -> bool:
    return p.nvlinks_per_gpu > 0 and not p.rack_nvlink


ANY = Where("every profile", _any)
ETHERNET = Where("Ethernet RDMA ports, storage NICs too (the physical layer is judged on every port)", _ethernet)
ROCE = Where("RoCE compute ports (the QoS chain of storage NICs is not judged)", _roce_compute)
NVLINK = Where("GPUs with NVLink", _nvlink)
RACK = Where("a rack NVLink domain (GB200 NVL)", _rack)
C2C = Where("Grace (NVLink-C2C)", _c2c)
NVSWITCH = Where("NVSwitches on the board (HGX: the fabric manager runs there)", _nvswitch_board)


@dataclass(frozen=True)
class Scope:
    where: Where
    code: str  # the finding agentd reports
    severity: str  # ... at this severity ("ok": a fact, shown by `agentd check --all` and /checks)
    note: str = ""
    needs: str = ""  # configuration beyond the defaults it needs to show
    instead: tuple[str, ...] = ()  # codes that show in its place on some profiles (the note says where)

    @property
    def finding(self) -> str:
        return f"{self.code} {self.severity}" + (f" ({self.note})" if self.note else "")


SCOPES: dict[str, Scope] = {
    "port_down": Scope(ANY, "ib.port.down", "critical"),
    "rate_degraded": Scope(ANY, "ib.port.rate_degraded", "critical"),
    "flapping": Scope(ANY, "ib.port.flapping", "critical"),
    "peermem_gone": Scope(ANY, "gdr.path", "ok", "DMA-BUF keeps GDR: a fact, shown with --all; gdr.unavailable critical where the GPU "
                          "driver is the proprietary module, which has no DMA-BUF (pcie-4gpu)", instead=("gdr.unavailable",)),
    "dmabuf_only": Scope(ANY, "gdr.path", "ok", "a fact, shown with --all"),
    "no_gdr": Scope(ANY, "gdr.unavailable", "critical"),
    "pcie_downtrained": Scope(ANY, "pcie.link.downtrained", "warning"),
    "acs_on": Scope(ANY, "pcie.acs.redirect", "critical"),
    "aer_uncorrectable": Scope(ANY, "pcie.aer.nonfatal", "warning", "=fatal: pcie.aer.fatal critical"),
    "aer_correctable": Scope(ANY, "pcie.aer.correctable", "warning"),
    "pcie_replay": Scope(ANY, "gpu.pcie.replay", "warning"),
    "mtu_mismatch": Scope(ROCE, "mtu.mismatch", "critical"),
    "ecn_off": Scope(ROCE, "roce.ecn.disabled", "critical"),
    "pfc_off": Scope(ROCE, "roce.pfc.disabled", "critical"),
    "pause_storm": Scope(ROCE, "roce.pfc.pause_storm", "critical"),
    "pause_on": Scope(ROCE, "roce.pause.global", "warning"),
    "tclass_override": Scope(ROCE, "roce.qos.tclass_override", "warning"),
    "trust_pcp": Scope(ROCE, "roce.qos.trust_mismatch", "warning"),
    "dscp_map_lossy": Scope(ROCE, "roce.qos.lossy", "critical"),
    "nccl_tc_mismatch": Scope(ROCE, "roce.qos.lossy", "critical"),
    "roce_lossy_traffic": Scope(ROCE, "roce.qos.lossy_traffic", "critical"),
    "nvlink_down": Scope(NVLINK, "nvlink.link.down", "critical"),
    "nvlink_errors": Scope(NVLINK, "nvlink.link.errors", "warning"),
    "gpu_lost": Scope(ANY, "gpu.lost", "critical"),
    "gpu_removed": Scope(ANY, "inventory.gpu.missing", "critical", "against the baseline the daemon saved"),
    "nic_removed": Scope(ANY, "inventory.hca.missing", "critical", "against the baseline the daemon saved"),
    "counter_reset": Scope(ANY, "ib.counter.reset", "warning"),
    "counter_saturated": Scope(ANY, "ib.counter.saturated", "warning"),
    "unreadable_file": Scope(ANY, "probe.failed", "warning"),
    "garbage_file": Scope(ANY, "probe.failed", "warning"),
    "nvml_hang": Scope(ANY, "probe.failed", "warning", "agentd.data.stale critical while it hangs"),
    "nvml_init_error": Scope(ANY, "nvml.blind", "critical"),
    "ethtool_failure": Scope(ANY, "probe.failed", "warning"),
    "fabric_incomplete": Scope(NVLINK, "nvlink.fabric.incomplete", "critical"),
    "fabric_status": Scope(NVLINK, "nvlink.fabric.incomplete", "critical"),
    "fabric_unassigned": Scope(RACK, "nvlink.fabric.unassigned", "critical"),
    "fabric_health": Scope(RACK, "nvlink.fabric.unhealthy", "critical"),
    "fabric_domain_split": Scope(RACK, "nvlink.domain.split", "critical"),
    "nvlink_slow": Scope(NVLINK, "nvlink.link.slow", "warning"),
    "c2c_down": Scope(C2C, "nvlink.c2c.down", "critical"),
    "fm_down": Scope(NVSWITCH, "fabric.manager.down", "critical"),
    "imex_down": Scope(RACK, "fabric.imex.down", "critical", needs="[fabric] imex = true"),
    "xid": Scope(ANY, "gpu.xid", "critical", "XID 79; application XIDs 13, 43 are only counted"),
    "fell_off_bus_multiline": Scope(ANY, "gpu.off_bus", "critical"),
    "mlx5_cmd_timeout": Scope(ANY, "hca.firmware", "warning"),
    "module_hot": Scope(ANY, "optics.module.temperature", "critical", "the HCA's hwmon module sensor above its crit"),
    "rx_power_low": Scope(ETHERNET, "optics.rx_power.low", "critical", "a RoCE port's module EEPROM: InfiniBand ports have none in the kernel"),
    "fec_errors": Scope(ETHERNET, "optics.fec.pre_fec_ber", "warning", "optics.fec.uncorrectable beside it"),
    "link_down_reason": Scope(ETHERNET, "ib.port.down", "critical", "the message names the PHY's reason"),
    "mlx5_access_reg": Scope(ANY, "collect.device.backed_off", "ok", "a fact: the HCA's firmware-backed reads stop for the boot"),
}
_DEFAULT = Scope(ANY, "?", "?", "see docs/fault-matrix.md")


def scope(kind: str) -> Scope:
    return SCOPES.get(kind, _DEFAULT)


def profiles_shown(kind: str) -> list[str]:
    """The profiles on which agentd reports the kind (by default configuration, but ``needs``)."""
    where = scope(kind).where
    return [name for name, p in PROFILES.items() if where.shows_on(p)]


def holds_after_clear(kind: Kind) -> bool:
    """Whether clearing leaves what raised the finding in place (the kernel log only grows)."""
    return kind.advancing is K.the_log


def clears(kind: Kind) -> str:
    """How a kind's finding goes away after ``--clear-fault``, derived from what clearing leaves."""
    if holds_after_clear(kind):
        return ("the log keeps its lines: the finding stays for kernel.hold_s (one-off events) or until kernel.window_s "
                "has passed (repeat rules), or until the node reboots")
    if kind.advancing is not None:
        return ("what it changed is restored, so its finding goes at the next collection of that data; the counters "
                "it advanced stay advanced (as on a real node): a rate or flap finding they raise goes once its window has passed them")
    return "at the next collection of what it changed (restored), a few seconds; the slow tier's data (modules, PCIe) up to slow_s"


def held_note(kind: str) -> str | None:
    """What `--clear-fault` of a kind whose finding outlives the clear says (None: it does not)."""
    k = KINDS[kind]
    if not holds_after_clear(k):
        return None
    return (f"{clears(k)}. A running agentd keeps reporting it until then (kernel.hold_s is a day by default, and an event "
            "that wants a GPU reset or a reboot holds until one is seen, kernel.reset_hold_s; `make demo` (demo/agentd.toml) "
            "holds for 30 s)")


def describe(kind: Kind) -> str:
    """The ``simulate --list`` entry of one kind: its spec, what it does, where it shows."""
    s = scope(kind.name)
    head = spec_form(kind)
    shown = ", ".join(profiles_shown(kind.name)) or "none"
    needs = f"; needs {s.needs}" if s.needs else ""
    return (f"{head}\n"
            f"    shows on: {shown} ({s.where.words}{needs})\n"
            f"    finding:  {s.finding}\n"
            f"    clears:   {clears(kind)}\n"
            f"    does:     {kind.help}")


def describe_all() -> str:
    return "\n".join(describe(k) for k in KINDS.values())


def unseen_note(kind: str, profile: str) -> str | None:
    """Why a kind applied to ``profile`` shows nothing there (None when it shows)."""
    if profile in profiles_shown(kind):
        return None
    shown = ", ".join(profiles_shown(kind)) or "no profile"
    return (f"{kind} changed the tree, but agentd judges nothing it changed on {profile}: it shows on "
            f"{scope(kind).where.words} ({shown})")
