"""Configuration: pydantic models loaded from TOML plus ``AGENTD_*`` environment overrides.

Every model forbids unknown keys, so a typo is an error with its key path, not a silently
ignored setting. ``load_config`` raises ``ConfigError`` whose message lists every problem
as ``key.path: reason``.

Environment overrides: ``AGENTD_<SECTION>__<KEY>=value`` (double underscore between
levels), e.g. ``AGENTD_LISTEN=0.0.0.0:9478``, ``AGENTD_EXPECT__GPUS=8``,
``AGENTD_HCA__COMPUTE='["mlx5_0","mlx5_1"]'``. Values are read as TOML scalars or arrays
when they parse as such, otherwise as plain strings.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from agentd.base.atomic import NotRegularFile, read_regular
from agentd.base.jsontypes import JsonObject, JsonValue
from agentd.base.ncclvars import validate_var

DEFAULT_CONFIG_PATH = Path("/etc/agentd/agentd.toml")
ENV_PREFIX = "AGENTD_"
# A config file is a few KiB; more is not a config file (a symlink to /dev/zero or a log).
MAX_CONFIG_BYTES = 1 << 20


class ConfigError(Exception):
    """A configuration that cannot be used; the message names each key and reason."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


# Fields of the node's fingerprint that [expect] versions may pin (agentd.judging.fingerprint).
VERSION_FIELDS = ("hca_fw", "mlx5_core", "rdma_core", "nvidia_driver", "vbios", "kernel")


class Expectations(Section):
    """What the node should have. Unset values are inferred (docs/operator-guide.md, 'Expectations and roles')."""

    gpus: int | None = Field(None, ge=0, le=64, description="Number of GPUs the node must have.")
    hca_ports: int | None = Field(None, ge=0, le=256, description="Number of ACTIVE compute HCA ports the node must have.")
    rate_gbps: float | None = Field(None, gt=0, description="Expected rate of every compute port, Gb/s (400 for NDR/400GbE).")
    width: int | None = Field(None, ge=1, le=16, description="Expected lane width of every compute port (4 for 4X).")
    roce_mtu: int = Field(9000, ge=576, le=65535, description="Netdev MTU expected on RoCE compute interfaces.")
    ipoib_mtu: int | None = Field(None, ge=576, le=65535, description="Netdev MTU expected on IPoIB interfaces; unset: reported, not judged.")
    nvlinks_per_gpu: int | None = Field(None, ge=0, le=64, description="Active NVLinks per GPU; unset: every link NVML reports as supported must be up.")
    gpu_nic_path: Literal["PIX", "PXB", "PHB", "NODE", "SYS"] | None = Field(
        None,
        description="Worst acceptable path from each GPU to its nearest compute NIC; unset: SYS is a warning only when the node has a closer layout for other GPUs.",
    )
    versions: dict[str, str] = Field(
        default_factory=dict,
        description="Software and firmware versions the node must run: field -> '>=VERSION' (minimum) or 'VERSION' / '==VERSION' (exact). Fields: hca_fw, mlx5_core, rdma_core, nvidia_driver, vbios, kernel. A node that differs gets version.below_minimum or version.mismatch (warnings).",
    )

    @field_validator("versions")
    @classmethod
    def _version_fields(cls, v: dict[str, str]) -> dict[str, str]:
        for field, spec in v.items():
            if field not in VERSION_FIELDS:
                raise ValueError(f"unknown version field {field!r}; one of {', '.join(VERSION_FIELDS)}")
            wanted = spec.strip().removeprefix(">=").removeprefix("==").strip()
            if not wanted or any(c.isspace() for c in wanted):
                raise ValueError(f"{field}: {spec!r} is not '>=VERSION', '==VERSION' or 'VERSION'")
        return v


class FabricSettings(Section):
    """The node's role in an NVLink fabric (docs/topology.md): what agentd expects of the
    NVLink domain, the fabric manager and IMEX. Nothing here is required by default."""

    multi_node: Literal["auto", "yes", "no"] = Field(
        "auto",
        description="Whether the node's GPUs belong to a multi-node NVLink domain (GB200/GB300 NVL racks), where the fabric must give them a non-zero clique id and cluster UUID. auto: yes when the GPUs report fabric state but no NVSwitch is on the node's own PCI bus (the switches are in the rack's switch trays); HGX boards, whose NVSwitches are local, are single-node domains.",
    )
    fabric_manager: Literal["auto", "required", "off"] = Field(
        "auto",
        description="nv-fabricmanager must run: auto where NVSwitches are on the node's own PCI bus (HGX/DGX A100, H100, H200, B200), required always, off never. Judged only when the node's process table is visible (a container needs the host's /proc).",
    )
    imex: bool = Field(
        False,
        description="nvidia-imex must run (multi-node NVLink jobs that share GPU memory across nodes need it). Set it on nodes whose role is a multi-node NVLink domain; never checked by default.",
    )
    nvlink_speed_mb_s: int | None = Field(
        None,
        ge=1,
        description="Expected speed of every active NVLink, MB/s (26562 on H100, 53125 on GB200); unset: the fastest link of the node's GPUs, so one slow link stands out.",
    )


class HcaSelection(Section):
    """Which RDMA devices carry GPU traffic (compute) and which serve storage/management."""

    compute: list[str] = Field(
        default_factory=list,
        description="Glob patterns of compute HCAs (e.g. 'mlx5_[0-7]'). Empty: the largest group of HCAs with the same model and link layer.",
    )
    exclude: list[str] = Field(default_factory=list, description="Glob patterns never treated as compute (storage, management, BlueField bonds). An excluded HCA is still read and reported (as a non-compute device); to stop reading a device at all, name it in collect.ignore.")


class CollectSettings(Section):
    """What agentd reads. Unlike hca.exclude, which only keeps an HCA out of the compute
    role (it is still read, reported and judged as non-compute), collect.ignore stops
    every read of a device: no reader opens anything of it (RDMA attributes and counters,
    netdev attributes, ethtool statistics, DCB, PCI config space, AER, hwmon), and the only
    thing reported about it is the fact collect.device.ignored. NVML is not gated (a GPU is
    not a NIC)."""

    ignore: list[str] = Field(
        default_factory=list,
        description="Glob patterns of devices agentd never reads: RDMA device names ('mlx5_1[01]'), netdev names ('ens5f*') and PCI bus ids ('0000:05:00.*'). A match on any name of a PCI function (its RDMA device, a netdev or its bus id) ignores the function with everything of it. For devices whose reads harm them (Fabric Manager limited PFs log ACCESS_REG failures on every counter read) or hang.",
    )

    @field_validator("ignore")
    @classmethod
    def _patterns(cls, v: list[str]) -> list[str]:
        for p in v:
            if not p.strip() or any(c.isspace() or not c.isprintable() for c in p):
                raise ValueError(f"{p!r} is not a device name glob (no spaces or control characters)")
        return v


class Intervals(Section):
    fast_s: float = Field(2.0, gt=0, le=3600, description="Port state, netdev state, kernel modules.")
    medium_s: float = Field(10.0, gt=0, le=3600, description="Counters, ethtool statistics, NVML.")
    slow_s: float = Field(30.0, gt=0, le=86400, description="PCI tree and config space, GID tables, HCA inventory and port netdevs, system info.")
    stale_after: float = Field(3.0, ge=1.5, le=100, description="A probe's data is stale (agentd.data.stale, critical: /health 503) when its last success is older than this many of its own tier's intervals: 3 x 2 s for the fast probes, 3 x 30 s for the slow ones, at the defaults.")
    event_debounce_s: float = Field(0.5, ge=0, le=60, description="udev events within this window trigger one re-collection.")
    link_event_debounce_s: float = Field(0.02, ge=0, le=10, description="rtnetlink link changes within this window trigger one fast-tier collection (events.rtnetlink).")
    check_rate_window_s: float = Field(2.0, ge=0, le=60, description="`agentd check`: seconds between the two collections used for counter rates (0: one collection, no rates).")


class EventSettings(Section):
    """Kernel notifications that trigger collections between the scheduled ones."""

    rtnetlink: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Watch rtnetlink link notifications: a carrier or operstate change of an RDMA port's netdev (RoCE) or an IPoIB netdev collects the fast tier at once. auto: on a live host root only; on: any root (the notifications are always the running kernel's: for tests and benchmarks on a simulated root); off: the fast-tier poll only.",
    )
    kmsg: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Watch the kernel log: a new /dev/kmsg record (it is pollable) reads the kernel log at once, so an XID reaches /health without waiting for the fast-tier poll. auto: on a live host root only; on: any root (a simulated or recorded root's dev/kmsg file is watched with inotify); off: the fast-tier poll only.",
    )


class Timeouts(Section):
    probe_s: float = Field(5.0, gt=0, le=300, description="Limit for one sysfs/ethtool probe run.")
    nvml_s: float = Field(5.0, gt=0, le=300, description="Limit for one NVML probe run.")


class CounterThreshold(Section):
    per_s: float = Field(..., ge=0, description="Rate above which the finding is raised (events per second).")
    severity: Literal["warning", "critical"] = "warning"


def _default_counter_thresholds() -> dict[str, CounterThreshold]:
    # Defaults from published practice (NVSentinel NIC design, gpud); docs/config.md [thresholds].
    return {
        "symbol_error": CounterThreshold(per_s=120 / 3600, severity="critical"),
        "link_error_recovery": CounterThreshold(per_s=0.0, severity="warning"),
        "port_rcv_errors": CounterThreshold(per_s=1.0, severity="warning"),
        "excessive_buffer_overrun_errors": CounterThreshold(per_s=0.0, severity="critical"),
        "local_link_integrity_errors": CounterThreshold(per_s=0.0, severity="critical"),
        "port_xmit_discards": CounterThreshold(per_s=100.0, severity="warning"),
        "local_ack_timeout_err": CounterThreshold(per_s=1.0, severity="warning"),
        "rnr_nak_retry_err": CounterThreshold(per_s=0.0, severity="critical"),
        "out_of_sequence": CounterThreshold(per_s=100.0, severity="warning"),
        # AWS EFA port hw_counters (drivers/infiniband/hw/efa/efa_verbs.c port stats):
        # NVSentinel EFADegradationCheck, aws/eks-node-monitoring-agent efa.go.
        "rx_drops": CounterThreshold(per_s=100.0, severity="warning"),
        "rdma_read_wr_err": CounterThreshold(per_s=100.0, severity="warning"),
        "rdma_write_wr_err": CounterThreshold(per_s=100.0, severity="warning"),
        "unresponsive_remote_events": CounterThreshold(per_s=1.0, severity="warning"),
        "impaired_remote_conn_events": CounterThreshold(per_s=1.0, severity="warning"),
        "retrans_pkts": CounterThreshold(per_s=1000.0, severity="warning"),
    }


class Thresholds(Section):
    counters: dict[str, CounterThreshold] = Field(
        default_factory=_default_counter_thresholds,
        description="IB counter (counters/ or hw_counters/ name) -> rate threshold and severity. Replaces the defaults as a whole when given.",
    )
    flap_count: int = Field(3, ge=1, description="Down->up cycles (or link_downed increments) within flap_window_s that make a port flapping.")
    flap_window_s: float = Field(12 * 3600.0, gt=0, description="Window for flap counting.")
    pause_storm_per_s: float = Field(1000.0, ge=0, description="PFC pause frames per second per priority above which roce.pfc.pause_storm is raised.")
    nvlink_error_per_s: float = Field(0.0, ge=0, description="NVLink CRC/replay/recovery errors per second above which nvlink.link.errors is raised.")
    pcie_aer_correctable_max: int = Field(100, ge=1, description="Corrected PCIe errors (AER TOTAL_ERR_COR) one PCI function may add within rate_window_s before pcie.aer.correctable is raised (a warning). Corrected errors are routine: the link recovered them.")
    gpu_pcie_replay_per_min: float = Field(8.0, ge=0, description="NVML PCIe replays per minute of a GPU, measured over rate_window_s, above which gpu.pcie.replay is raised (a warning); 8 is DCGM's DCGM_LIMIT_MAX_PCIREPLAY_RATE.")
    pcie_retrain_window_s: float = Field(600.0, gt=0, le=86400, description="Window within which a change of an HCA's or bridge's current PCIe link speed/width is reported as pcie.link.retrained (the warning clears this long after the link is stable).")
    history_size: int = Field(720, ge=2, le=100000, description="Snapshots kept in memory for rates and flap detection.")
    rate_window_s: float = Field(600.0, gt=0, le=86400, description="Window over which IB and NVLink error counter rates are measured (the oldest snapshot inside it is the reference).")
    roce_lossy_min_bytes_per_s: float = Field(125e6, ge=0, description="RDMA transmit rate of a RoCE port (bytes/s, over short_rate_window_s) above which agentd checks which priority carries it: roce.qos.lossy_traffic when most of it is counted on priorities without PFC.")
    short_rate_window_s: float = Field(60.0, gt=0, le=86400, description="Window for PFC pause-storm and CNP rates, so a storm clears within about this long after it stops.")


class KernelSettings(Section):
    enabled: bool = Field(True, description="Read the kernel log (/dev/kmsg on a live node, ROOT/dev/kmsg in a recording) for XIDs, GPUs off the bus, mlx5 firmware and PCIe AER events.")
    window_s: float = Field(3600.0, gt=0, le=7 * 86400, description="Window for events that count only when repeated (corrected AER errors, mlx5 command timeouts): a finding needs its threshold of them within this long.")
    hold_s: float = Field(86400.0, gt=0, le=30 * 86400, description="How long one event that is a node fault on its own (XID 79, an uncontained ECC error, a fatal AER error, mlx5 health compromised) keeps its finding. A reboot (new boot id) starts over.")
    reset_hold_s: float = Field(
        0.0, ge=0, le=365 * 86400,
        description="How long an event that needs a GPU reset or a node reboot (XID 79 or 95, an Xid 154 that names a reset or reboot, a GPU off the bus, NV_ERR_RESET_REQUIRED) keeps its finding when agentd sees neither: 0, until the GPU is seen reset (Xid 154 back to None) or the node reboots. `agentd run --simulate` sets 30 s so a cleared fault visibly recovers.",
    )  # fmt: skip
    max_events: int = Field(2048, ge=16, le=100000, description="Recent events kept in memory (and in the restart cursor), the oldest going first; the latest event of each kind, code and device is kept however old.")


# Codes whose findings are normal while a node comes up: ports still training, the
# fabric and its manager registering, the GPU driver and its modules loading, DCB and MTU
# set by boot-time services (and so the RoCE QoS chain: trust mode, DSCP map, the global
# tclass a udev rule or if-up script writes, global pause; not roce.qos.lossy_traffic, which is measured; and
# config.drift, the same settings seen by [enforce]). Within lifecycle.boot_grace_s of boot they are withheld
# ("boot_grace"); a fault of another kind (an XID, a lost GPU, a PCIe error) still counts.
DEFAULT_BOOT_GRACE_CODES = (
    "ib.port.down", "ib.port.unreadable", "ib.ports.count", "ib.port.rate_degraded", "ib.port.width_degraded",
    "nvml.blind", "nvlink.link.down", "nvlink.fabric.incomplete", "gdr.unavailable", "gdr.peermem.unregistered",
    "inventory.hca.missing", "inventory.port.missing", "mtu.mismatch", "mtu.ipoib", "roce.ecn.disabled", "roce.pfc.disabled",
    "nvlink.fabric.unassigned", "fabric.manager.down", "fabric.imex.down",
    "roce.qos.lossy", "roce.qos.ecn_off", "roce.qos.priority_mismatch", "roce.qos.trust_mismatch", "roce.qos.tclass_override",
    "roce.pause.global", "config.drift",
)  # fmt: skip


class FindingPolicy(Section):
    """How one finding code (or glob, or check name) lives: when it starts to count and how long it sticks."""

    mode: Literal["enforce", "observe"] = Field("enforce", description="observe: collected and shown (/checks, metrics, logs) but never counted toward /health, the Slurm wrapper, NFD health labels or NCCL files.")
    raise_after_s: float = Field(0.0, ge=0, le=7 * 86400, description="Seconds the condition must hold before it counts; until then it is shown as pending (withheld).")
    raise_after_collections: int = Field(1, ge=1, le=100000, description="Collections in a row that must see the condition before it counts (both this and raise_after_s must hold).")
    clear_after_s: float = Field(0.0, ge=0, le=30 * 86400, description="Seconds the condition must be gone before its finding clears (sticky): until then it keeps counting, with clears_at.")


class LifecycleSettings(Section):
    """When findings count and how long they stick (docs/operator-guide.md, "Health lifecycle")."""

    boot_grace_s: float = Field(0.0, ge=0, le=86400, description="For this long after the node booted (its boot time, not agentd's start) findings of boot_grace_codes are withheld as boot_grace, and link flaps are not counted. 0: off.")
    boot_grace_codes: list[str] = Field(default_factory=lambda: list(DEFAULT_BOOT_GRACE_CODES), description="Finding codes (globs) that are normal while a node boots.")
    observe: list[str] = Field(default_factory=list, description="Finding codes or check names (globs: 'pcie.aer.*', 'pcie_errors.check_retrained') in observe mode: shown, never counted toward health.")
    findings: dict[str, FindingPolicy] = Field(default_factory=dict, description="Finding code, glob or check name -> policy (mode, raise_after_s, raise_after_collections, clear_after_s). The most specific key wins: an exact code, else the longest matching glob.")


class RoceSettings(Section):
    priority: int = Field(3, ge=0, le=7, description="The lossless priority RDMA traffic uses (PFC and ECN must be on for it).")
    require_pfc: bool = Field(True, description="Judge PFC when its configuration is readable.")
    require_ecn: bool = Field(True, description="Judge ECN (np and rp) for the RoCE priority.")


# The files agentd keeps in paths.state_dir, by what they hold (their modules name them from
# here: agentd.outputs.history_store, kernel_cursor, maintenance; agentd.ncclbench.run_history).
STATE_DIR_FILES: dict[str, str] = {
    "history": "history.json",
    "kernel_cursor": "kernel-cursor.json",
    "maintenance": "maintenance.json",
    "bench": "bench-nccl.json",
}


class Paths(Section):
    """Where agentd writes. Each file needs a path of its own, compared after resolving
    symlinks, `..` and relative paths: two settings naming one file, a setting on one of
    the files agentd keeps in state_dir (its history, kernel cursor, maintenance and
    benchmark files), or a file where another path needs a directory are refused."""

    nccl_env: Path = Field(Path("/etc/nccl.env"), description="Sourceable NCCL env file (bash/sh).")
    nccl_conf: Path = Field(Path("/etc/nccl.conf"), description="NCCL's own KEY=VALUE file; written only when nccl.write_conf is true.")
    nccl_topo: Path = Field(Path("/etc/nccl/topo.xml"), description="NCCL topology XML.")
    baseline: Path = Field(Path("/var/lib/agentd/baseline.json"), description="First healthy inventory, for inventory.*.missing.")
    state_dir: Path = Field(Path("/var/lib/agentd"), description="agentd's own state: history.json (counter history, flaps, finding episodes), kernel-cursor.json (where it stopped reading the kernel log), maintenance.json, NCCL benchmark runs, and agentd.lock, held by the running daemon (a second one on the same directory exits 3). The inventory baseline is paths.baseline.")
    nfd_features: Path | None = Field(None, description="node-feature-discovery features.d file to write (unset: not written).")

    @model_validator(mode="after")
    def _distinct(self) -> "Paths":
        """Every file agentd writes has a path of its own, compared after resolving symlinks
        and relative paths: two settings naming one file would have each write overwrite
        the other's (nccl.env holding the topology XML, the baseline holding nccl.env), and
        a file may not sit where a directory of another path is."""
        problems = path_clashes(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self


def path_clashes(paths: Paths) -> list[str]:
    """Problems with ``paths``: two settings (or a setting and a file agentd keeps in
    ``state_dir``) that resolve to one file, a file that is ``state_dir`` itself, and a file
    whose path another setting uses as a directory."""
    state_dir = paths.state_dir
    named: list[tuple[str, Path]] = [(f"paths.{key}", p) for key in Paths.model_fields if key != "state_dir"
                                     if (p := getattr(paths, key)) is not None]
    named += [(f"paths.state_dir's {name}", state_dir / name) for name in STATE_DIR_FILES.values()]
    real = {label: os.path.realpath(p) for label, p in named}
    real_dir = os.path.realpath(state_dir)
    problems: list[str] = []
    seen: dict[str, str] = {}
    for label, r in real.items():  # one problem per setting, the first found
        below = next((other for other, o in [("paths.state_dir", real_dir), *real.items()] if o.startswith(r.rstrip("/") + "/")), None)
        if r in seen:
            problems.append(f"{seen[r]} and {label} are the same file ({r}): each file agentd writes needs a path of its own")
        elif r == real_dir:
            problems.append(f"{label} is paths.state_dir ({r}), a directory")
        elif below is not None:
            problems.append(f"{label} ({r}) is a file, but {below} is below it")
        seen.setdefault(r, label)
    return problems


# The [nccl] settings that become one NCCL variable each (agentd.nccl.env writes them).
NCCL_SETTING_VARS: dict[str, str] = {
    "socket_ifname": "NCCL_SOCKET_IFNAME",
    "ib_tc": "NCCL_IB_TC",
    "ib_sl": "NCCL_IB_SL",
    "cross_nic": "NCCL_CROSS_NIC",
    "net_plugin": "NCCL_NET_PLUGIN",
}


def nccl_setting_value(field: str, value: object) -> str:
    """The value the NCCL variable of setting ``field`` gets: ``socket_ifname`` is an exact
    match (``=eth0``) unless it says otherwise (``^`` to exclude, ``=`` already)."""
    text = str(value)
    if field == "socket_ifname" and text[:1] not in ("=", "^"):
        return "=" + text
    return text


class NcclSettings(Section):
    enabled: bool = Field(True, description="Render and write the NCCL env file and topology XML.")
    write_conf: bool = Field(False, description="Also write nccl.conf, which NCCL reads by itself for every job on the node.")
    write_topo: bool = Field(True, description="Write the topology XML and point NCCL_TOPO_FILE at it.")
    restore_drift: bool = Field(True, description="Rewrite a managed file someone edited (drift is always reported).")
    socket_ifname: str | None = Field(None, description="Bootstrap interface for NCCL_SOCKET_IFNAME (exact match); unset: not written, NCCL chooses.")
    ib_tc: int | None = Field(None, ge=0, le=255, description="NCCL_IB_TC (fabric-wide; same on all nodes).")
    ib_sl: int | None = Field(None, ge=0, le=15, description="NCCL_IB_SL (fabric-wide).")
    cross_nic: Literal[0, 1, 2] | None = Field(None, description="NCCL_CROSS_NIC (fabric-wide).")
    net_plugin: str | None = Field(None, description="NCCL_NET_PLUGIN.")
    overrides: dict[str, str] = Field(default_factory=dict, description="Operator-set NCCL_* variables, validated against what NCCL accepts.")
    profile: str | None = Field(None, description="Name of a profile in nccl.profiles to apply on top of overrides.")
    profiles: dict[str, dict[str, str]] = Field(default_factory=dict, description="Named sets of NCCL_* overrides (e.g. 'training', 'inference').")

    @field_validator(*NCCL_SETTING_VARS)
    @classmethod
    def _nccl_setting(cls, v: object, info: ValidationInfo) -> object:
        """Refused at load and reload, as overrides are: a value the renderer would refuse
        later would hold back nccl.env (and nccl.conf) on every publish instead."""
        if v is None or v == "":  # unset ("" too: not written)
            return v
        field = info.field_name or ""
        problems = validate_var(NCCL_SETTING_VARS[field], nccl_setting_value(field, v))
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @field_validator("overrides")
    @classmethod
    def _nccl_overrides(cls, v: dict[str, str]) -> dict[str, str]:
        return _validated_nccl_vars(v)

    @field_validator("profiles")
    @classmethod
    def _nccl_profiles(cls, v: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for name, variables in v.items():
            try:
                _validated_nccl_vars(variables)
            except ValueError as e:
                raise ValueError(f"profile {name!r}: {e}") from None
        return v

    @model_validator(mode="after")
    def _profile_exists(self) -> "NcclSettings":
        if self.profile is not None and self.profile not in self.profiles:
            raise ValueError(f"profile {self.profile!r} is not defined in nccl.profiles")
        return self


def _validated_nccl_vars(v: dict[str, str]) -> dict[str, str]:
    """Reject at load/reload time what NCCL would misread, instead of blocking renders later."""
    problems: list[str] = []
    for key, value in v.items():
        if not re.fullmatch(r"NCCL_[A-Z0-9_]+", key):
            problems.append(f"{key!r} is not an NCCL_* variable name")
            continue
        problems.extend(validate_var(key, str(value)))
    if problems:
        raise ValueError("; ".join(problems))
    return v


class WebSettings(Section):
    config_file: Path | None = Field(None, description="exporter-toolkit web config (tls_server_config, basic_auth_users), as node_exporter --web.config.file.")
    max_request_bytes: int = Field(8192, ge=1024, le=1 << 20, description="Largest request (line + headers) accepted.")
    header_timeout_s: float = Field(10.0, gt=0, le=300, description="A connection whose request headers are not complete this long after it opened (or after the request's first byte), or whose TLS handshake takes longer, is closed.")
    write_timeout_s: float = Field(30.0, gt=0, le=600, description="A response that makes no progress (the client does not read) for this long is aborted.")
    idle_timeout_s: float = Field(75.0, gt=0, le=3600, description="A keep-alive connection without a new request for this long is closed.")


class BenchSettings(Section):
    enabled: bool = Field(False, description="Let the daemon run `agentd bench nccl` on a schedule (opt-in).")
    interval_s: float = Field(24 * 3600.0, ge=60, description="Seconds between scheduled runs.")
    idle_only: bool = Field(True, description="Only run when no process uses the GPUs.")
    time_limit_s: float = Field(600.0, gt=0, le=7200, description="Hard limit for one run.")
    nccl_tests_dir: Path | None = Field(None, description="Directory with all_reduce_perf etc.; unset: search PATH.")
    min_busbw_gbps: dict[str, float] = Field(default_factory=dict, description="op -> minimum acceptable bus bandwidth (GB/s) at the largest size.")


class OpticsSettings(Section):
    """The physical layer read from the stock kernel (issue 38): NIC temperatures (hwmon),
    Ethernet link state and FEC counters (ethtool netlink), module EEPROMs."""

    enabled: bool = Field(True, description="Read HCA temperatures (mlx5 hwmon), the link-down reason, link-down counter and FEC statistics of Ethernet ports (ethtool netlink), and their modules' EEPROM (temperature, voltage, per-lane power and bias, the module's own thresholds). Temperatures and EEPROM pages are firmware register reads on mlx5: slow tier.")
    link_tool: Literal["off", "mstlink", "mlxlink"] = Field("off", description="Opt-in: run this tool (mstflint's mstlink or MFT's mlxlink) in the slow tier for each InfiniBand HCA port, whose module the kernel does not expose (IPoIB has no module EEPROM op): effective and raw BER, the firmware's link-down counter, module temperature and Rx power. One bounded run per port, no shell.")
    link_tool_timeout_s: float = Field(30.0, gt=0, le=300, description="Limit for one link_tool run (the tool reads several firmware registers; its process group is killed at the limit).")
    temperature_margin_c: float = Field(5.0, ge=0, le=50, description="A NIC ASIC or module sensor within this many degrees C of its critical threshold (hwmon tempN_crit) is a warning (nic.temperature.high); at or above it, critical. A module's own EEPROM thresholds are used instead where it has them (optics.module.temperature).")
    pre_fec_ber_max: float = Field(1e-5, gt=0, lt=1, description="Pre-FEC bit error rate of an Ethernet port above which optics.fec.pre_fec_ber is raised (a warning), measured over thresholds.rate_window_s. RS(544,514) FEC corrects up to about 2.4e-4 (IEEE 802.3 clause 119); healthy links read 1e-9 to 1e-7.")
    link_ber_max: float = Field(1e-12, gt=0, lt=1, description="Effective (post-FEC) BER that link_tool reports for an InfiniBand port above which optics.link.effective_ber is raised (a warning).")


class MetricsDetail(Section):
    """Per-item series that /metrics folds by default (docs/metrics.md, series budget)."""

    nvlink_per_link: bool = Field(False, description="Export every NVLink's state, remote end, speed and error counters (agentd_nvlink_link_errors_total; 18 links x 4 kinds per H100), and every GPU's fabric health conditions and slowest link. Off: per-GPU error totals and link counts, and per-link state and remote end only for links that are not up; fabric health and link speed counted per node, named per GPU only where a condition is set or a link is slow.")
    ib_counters_per_port: bool = Field(False, description="Export the HCA counters agentd has no named metric for per port (agentd_ib_port_hw_counters_total). Off: summed over the node's ports per counter (agentd_ib_hw_counters_total).")
    pcie_bridges: bool = Field(False, description="Export link speed/width, the ACS flag and the AER error totals of every PCIe bridge above a GPU, HCA or NVSwitch. Off: a bridge's link series only when it runs below its own maximum, its ACS flag only when redirect is on, AER totals summed over the bridges (agentd_pcie_aer_bridge_errors_total).")
    roce_every_priority: bool = Field(False, description="Export the RoCE per-priority counters (pause frames and time, bytes, packets) for all 8 priorities. Off: roce.priority (the lossless class) on its own, the other seven summed as priority=\"other\".")
    optics_detail: bool = Field(False, description="Export every HCA temperature sensor (with its critical and highest temperature), every Ethernet module (identity, temperature, supply voltage, its own alarm/warning thresholds), every module lane's Rx/Tx power and bias, the PHY's link-down events and corrected FEC blocks. Off: the node's hottest HCA sensor and hottest module, and per Ethernet port its weakest lit lane's Rx power, uncorrectable FEC blocks and corrected bits (the pre-FEC BER). The findings judge every sensor, module and lane either way.")


# The node settings `[enforce]` may keep right (docs/enforce.md), in the order a plan
# lists them: a module first, then per netdev, then per RDMA port.
Knob = Literal["peermem", "mtu", "pfc", "ecn", "trust", "dscp2prio", "tclass", "pause"]
KNOBS: tuple[Knob, ...] = ("peermem", "mtu", "pfc", "ecn", "trust", "dscp2prio", "tclass", "pause")


class EnforceSettings(Section):
    """Keeping the node's fabric configuration right (docs/enforce.md): what the checks
    expect is the desired state; only the knobs named here are ever changed."""

    mode: Literal["off", "plan", "apply"] = Field(
        "plan",
        description="off: no plan, no drift findings, `agentd enforce apply` refuses. plan: the daemon reports drift (config.drift findings, agentd_enforce_* metrics) for the named knobs and changes nothing; `agentd enforce apply` applies them when run by hand. apply: the daemon also applies them, one change at a time, but only in a safe window (maintenance, boot grace before the first healthy collection, or idle GPUs when when_gpus_idle).",
    )
    knobs: list[Knob] = Field(
        default_factory=list,
        description="Settings agentd may change: peermem (load nvidia_peermem where DMA-BUF cannot carry GPUDirect RDMA), mtu (expect.roce_mtu / expect.ipoib_mtu), pfc (PFC on roce.priority), ecn (ECN np and rp on roce.priority), trust (DSCP trust where RDMA traffic is DSCP-marked), dscp2prio (the marked DSCP to roce.priority), tclass (clear mlx5's global traffic class override), pause (global pause off on RoCE ports). Empty: nothing is ever changed.",
    )
    netdevs: list[str] = Field(
        default_factory=list,
        description="Glob patterns of netdevs the netdev knobs also cover, beside the compute RoCE and IPoIB netdevs agentd finds (nodes and tests without RDMA devices).",
    )
    modprobe: Path = Field(Path("/sbin/modprobe"), description="The modprobe the peermem knob runs (`modprobe nvidia_peermem`; rollback `modprobe -r nvidia_peermem`).")
    interval_s: float = Field(300.0, ge=1, le=86400, description="The daemon applies at most one change per knob per this many seconds.")
    max_attempts: int = Field(3, ge=1, le=100, description="Attempts per setting within one boot; one that still differs after this many is enforce.stuck and left alone until the next boot or `agentd enforce status --reset`.")
    when_gpus_idle: bool = Field(False, description="Also apply while no process holds a GPU (/proc/*/fd on /dev/nvidia*), outside maintenance and boot grace.")
    change_timeout_s: float = Field(10.0, gt=0, le=300, description="Limit for one change (a netlink answer, a sysfs write, modprobe).")

    @field_validator("knobs")
    @classmethod
    def _unique_knobs(cls, v: list[Knob]) -> list[Knob]:
        return sorted(set(v), key=KNOBS.index)


class AgentConfig(Section):
    host_root: Path = Field(Path("/"), description="Root of the host filesystem (sysfs under host_root/sys); '/' on a node, the mount point in a container.")
    host_mode: Literal["auto", "live", "offline", "simulated"] = Field("auto", description="Which kernel answers for host_root. auto: live when its boot id is the running kernel's ('/', a container's /host), offline for a capture or a copied tree (recorded answers only), simulated for a simulator tree (docs/capture.md).")
    listen: str = Field("127.0.0.1:9478", description="HOST:PORT of the HTTP server; loopback by default.")
    log_format: Literal["auto", "json", "console"] = Field("auto", description="auto: JSON when stderr is not a TTY.")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    expect: Expectations = Field(default_factory=Expectations)
    fabric: FabricSettings = Field(default_factory=FabricSettings)
    hca: HcaSelection = Field(default_factory=HcaSelection)
    collect: CollectSettings = Field(default_factory=CollectSettings)
    intervals: Intervals = Field(default_factory=Intervals)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    roce: RoceSettings = Field(default_factory=RoceSettings)
    kernel: KernelSettings = Field(default_factory=KernelSettings)
    lifecycle: LifecycleSettings = Field(default_factory=LifecycleSettings)
    paths: Paths = Field(default_factory=Paths)
    nccl: NcclSettings = Field(default_factory=NcclSettings)
    web: WebSettings = Field(default_factory=WebSettings)
    bench: BenchSettings = Field(default_factory=BenchSettings)
    metrics: MetricsDetail = Field(default_factory=MetricsDetail)
    optics: OpticsSettings = Field(default_factory=OpticsSettings)
    events: EventSettings = Field(default_factory=EventSettings)
    enforce: EnforceSettings = Field(default_factory=EnforceSettings)

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        host, sep, port = v.rpartition(":")
        ok = sep and host and 0 < len(port) <= 5 and port.isascii() and port.isdecimal()
        if not ok or not 0 < int(port) < 65536:
            raise ValueError("must be HOST:PORT with a port in 1-65535 (e.g. 127.0.0.1:9478, [::1]:9478)")
        return v


def host_visible_path(path: Path, host_root: Path) -> str:
    """The path as processes on the node see it. In a container whose host root is /host,
    agentd writes /host/etc/nccl/topo.xml, which the node's jobs open as
    /etc/nccl/topo.xml: that is what NCCL_TOPO_FILE must say."""
    root = str(host_root).rstrip("/")
    p = str(path)
    if root and p.startswith(root + "/"):
        return p[len(root) :]
    return p


MAX_SHOWN_INPUT = 120  # characters of an offending value quoted in an error message


def _one_line(s: str) -> str:
    """s with every non-printable character (newline, CR, ESC, U+2028...) escaped, so a
    key or value from a file cannot split a message line or forge one in a log."""
    return s if s.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def _key_part(p: str | int) -> str:
    """A key as written, or repr'd when it holds anything but printable characters."""
    s = str(p)
    return s if s and s.isprintable() else repr(s)


def _format_validation_error(err: ValidationError, origin: str) -> str:
    lines = [f"invalid configuration ({_one_line(origin)}):"]
    for e in err.errors():
        loc = ".".join(_key_part(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        got = ""
        if e["type"] not in ("extra_forbidden", "missing") and not isinstance(e.get("input"), dict):
            shown = repr(e["input"])
            if len(shown) > MAX_SHOWN_INPUT:
                shown = shown[:MAX_SHOWN_INPUT] + "..."
            got = f" (got {shown})"
        lines.append(_one_line(f"  {loc}: {msg}{got}"))
    return "\n".join(lines)


def _parse_env_value(raw: str) -> JsonValue:
    """A TOML scalar or array when ``raw`` parses as one, else the string itself. Raises
    ValueError/RecursionError when it is TOML past tomllib's limits (an integer of more
    than 4300 digits, nesting deeper than the recursion limit)."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def env_overrides(environ: dict[str, str] | os._Environ[str]) -> JsonObject:
    """Turn AGENTD_A__B=v into {"a": {"b": v}}."""
    tree: JsonObject = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name == "AGENTD_CONFIG":
            continue
        parts = [p.lower() for p in name[len(ENV_PREFIX):].split("__")]
        node = tree
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"invalid configuration (environment): {_one_line(name)}: conflicts with another AGENTD_ variable")
        try:
            node[parts[-1]] = _parse_env_value(raw)
        except (ValueError, RecursionError) as e:
            raise ConfigError(f"invalid configuration (environment): {_one_line(name)}: {_toml_limit(e)}") from None
    return tree


def _toml_limit(e: ValueError | RecursionError) -> str:
    """What tomllib's non-TOMLDecodeError failures mean (int() digit limit, deep nesting)."""
    if isinstance(e, RecursionError):
        return "nested too deeply"
    # "Exceeds the limit (4300 digits) for integer string conversion: value has N digits"
    # (the rest of CPython's message is advice for programmers)
    return f"cannot be read: {_one_line(str(e).split(';')[0])}"


def _merge(base: JsonObject, over: JsonObject) -> JsonObject:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def load_config(
    path: Path | str | None = None,
    environ: dict[str, str] | None = None,
    *,
    overrides: JsonObject | None = None,
) -> AgentConfig:
    """Load a config file (missing default path is fine; a missing explicit path is an error),
    apply AGENTD_* environment overrides, then explicit overrides (CLI flags)."""
    env = os.environ if environ is None else environ
    explicit = path is not None or "AGENTD_CONFIG" in env
    cfg_path = Path(path) if path is not None else Path(env.get("AGENTD_CONFIG", DEFAULT_CONFIG_PATH))
    data: JsonObject = {}
    origin = str(cfg_path)
    try:
        # O_NONBLOCK, fstat, then a capped read: a FIFO or a device (/dev/zero) at the path
        # is refused at once instead of a read that waits or never ends
        raw = read_regular(cfg_path, MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(f"config file {cfg_path} is larger than {MAX_CONFIG_BYTES} bytes")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        if explicit:
            raise ConfigError(f"config file {cfg_path} does not exist") from None
        origin = "defaults"
    except NotRegularFile as e:
        raise ConfigError(f"config file {e}") from None
    except OSError as e:
        raise ConfigError(f"config file {cfg_path} cannot be read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {cfg_path} is not UTF-8 text") from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {cfg_path} is not valid TOML: {e}") from None
        except (ValueError, RecursionError) as e:  # past tomllib's limits: int digits, nesting
            raise ConfigError(f"config file {cfg_path} is not usable TOML: {_toml_limit(e)}") from None
    env_tree = env_overrides(env)
    if env_tree:
        data = _merge(data, env_tree)
        origin += " + AGENTD_* environment"
    if overrides:
        data = _merge(data, overrides)
        origin += " + command line"
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_validation_error(e, origin)) from None
