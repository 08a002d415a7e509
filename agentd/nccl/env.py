"""Derive the NCCL environment from measurement and config, and render its file forms.

Policy (docs/nccl.md has the reasoning):
- ``NCCL_IB_HCA`` = ``=`` + exactly the healthy compute ports: compute role, state
  ACTIVE, link layer InfiniBand or Ethernet, and no *critical* finding on the port, its
  HCA, the HCA's PCI function or the port's netdev, and a plain device name
  (``agentd.base.ids.plain_device_name``: never NCCL list syntax such as
  ``mlx5_8:1,mlx5_9``, which would steer NCCL onto other devices). Warnings do not remove a port. With
  no healthy port the variable is left out (an empty or made-up list would make NCCL fall
  back to TCP sockets silently; the critical findings drain the node instead).
- ``NCCL_SOCKET_IFNAME``, ``NCCL_IB_TC``, ``NCCL_IB_SL``, ``NCCL_CROSS_NIC``,
  ``NCCL_NET_PLUGIN`` only from config (fabric-wide values; a node cannot measure them).
- ``NCCL_TOPO_FILE`` only when the topology XML is written (``topo_path``).
- Never by default: ``NCCL_IB_GID_INDEX``, ``NCCL_NET_GDR_LEVEL``, ``NCCL_ALGO``,
  ``NCCL_PROTO`` (NCCL chooses them better per node and per job).
- ``nccl.overrides`` then the selected ``nccl.profile`` last, each value validated; an
  invalid one is a blocking problem (the previous files stay in place).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

import agentd
from agentd.base.ids import plain_device_name
from agentd.base.ncclvars import VALUE_CHARS, advise_var, validate_var
from agentd.config import NCCL_SETTING_VARS, AgentConfig, nccl_setting_value
from agentd.judging.roles import HcaRoles, hca_roles
from agentd.model import Finding, Hca, IbPort, NodeSnapshot, Subject
from agentd.nccl.envmodel import EnvVar, NcclEnv, Source, clean_comment

USABLE_LINK_LAYERS = ("InfiniBand", "Ethernet")
# RDMA families NCCL uses only through a net plugin (agentd.base.rdma_family).
PLUGIN_FAMILIES = frozenset({"efa"})
NOT_SET_BY_DEFAULT = ("NCCL_IB_GID_INDEX", "NCCL_NET_GDR_LEVEL", "NCCL_ALGO", "NCCL_PROTO")
_SH_SAFE = re.compile(r"[A-Za-z0-9_.,:/@%+-]+")


def _relation(s: Subject, hca: Hca, port: IbPort) -> int | None:
    """How a subject relates to this port, closest first: 0 the port itself, 1 its HCA,
    2 the HCA's PCI function, 3 the port's netdev; None: unrelated. A critical finding
    about any of them takes the port out of NCCL_IB_HCA."""
    if s.kind == "port" and s.name == hca.name and s.port == port.port:
        return 0
    if s.kind == "hca" and s.name == hca.name:
        return 1
    if s.kind == "pci" and hca.pci_bus_id is not None and s.bus_id == hca.pci_bus_id:
        return 2
    if s.kind == "netdev" and port.netdev is not None and s.name == port.netdev:
        return 3
    return None


def port_verdicts(snapshot: NodeSnapshot, findings: Sequence[Finding], roles: HcaRoles) -> tuple[list[str], list[str]]:
    """(healthy compute ports "mlx5_0:1", left-out ports "mlx5_3:1 DOWN"), in NCCL order.
    Findings are related to ports by their typed subjects (``Finding.about``), never by text."""
    critical = [f for f in findings if f.severity == "critical" and f.withheld is None]  # withheld ones leave ports in
    healthy: list[str] = []
    left_out: list[str] = []
    odd_names = 0
    for name in roles.compute:
        hca = snapshot.hca(name)
        if hca is None:
            continue
        if not plain_device_name(name):
            # NCCL list syntax in a name (mlx5_8:1,mlx5_9) would select other devices;
            # the name itself is never written into an NCCL file, not even a comment.
            odd_names += 1
            continue
        for port in sorted(hca.ports, key=lambda p: p.port):
            label = f"{name}:{port.port}"
            hits = [(r, i) for i, f in enumerate(critical) if (r := _relation(f.about, hca, port)) is not None]
            code = critical[min(hits)[1]].code if hits else None
            if not port.is_active:
                left_out.append(f"{label} {port.state or 'state unknown'}")
            elif port.link_layer not in USABLE_LINK_LAYERS:
                left_out.append(f"{label} link layer {port.link_layer or 'unknown'}")
            elif code is not None:
                left_out.append(f"{label} critical {code}")
            else:
                healthy.append(label)
    if odd_names:
        left_out.append(f"{odd_names} RDMA device{'s' if odd_names > 1 else ''} whose name is not a plain device name")
    return healthy, left_out


def derive_env(
    snapshot: NodeSnapshot,
    findings: Sequence[Finding],
    config: AgentConfig,
    *,
    topo_path: str | None,
    roles: HcaRoles | None = None,
) -> NcclEnv:
    roles = roles if roles is not None else hca_roles(snapshot, config.hca)
    nccl = config.nccl
    env = NcclEnv(measured_at=snapshot.taken_at, host_root=snapshot.host_root, hca_selection=roles.source)
    known_hcas = [h.name for h in snapshot.hcas]

    healthy, left_out = port_verdicts(snapshot, findings, roles)
    tail = f"; left out: {', '.join(left_out)}" if left_out else ""
    plugin_only = [h for n in roles.compute if (h := snapshot.hca(n)) is not None and h.family in PLUGIN_FAMILIES]
    if plugin_only and len(plugin_only) == len(roles.compute):
        # NCCL's own IB transport cannot drive them (EFA has no RC QPs): NCCL reaches them
        # through its net plugin (aws-ofi-nccl with libfabric's efa provider), which picks
        # its devices itself. An NCCL_IB_HCA would steer nothing, or the wrong devices.
        env = env.with_omitted("NCCL_IB_HCA", f"the compute devices are {plugin_only[0].family.upper()} "
                               "(NCCL reaches them through its net plugin, not its IB transport): it does not apply")
    elif healthy:
        prov = f"measured: ACTIVE compute ports without critical findings ({roles.source} HCA roles){tail}"
        env = _set(env, "NCCL_IB_HCA", "=" + ",".join(healthy), "measured", prov, known_hcas)
    elif roles.compute:
        env = env.with_omitted(
            "NCCL_IB_HCA",
            f"no healthy compute port{tail}. Left unset: an empty or made-up list makes NCCL fall back to TCP"
            " sockets without an error; the critical findings mark the node for draining instead",
        )
    else:
        env = env.with_omitted("NCCL_IB_HCA", "no compute RDMA device on this node")

    if nccl.socket_ifname:
        value = nccl_setting_value("socket_ifname", nccl.socket_ifname)
        env = _set(env, "NCCL_SOCKET_IFNAME", value, "config", "config: nccl.socket_ifname", known_hcas)
        for name in value.lstrip("^=").split(","):
            nd = snapshot.netdev(name)
            if nd is None:
                env = env.with_note(f"nccl.socket_ifname: {name} is not a network interface on this node")
            elif nd.operstate not in ("up", "unknown"):
                env = env.with_note(f"nccl.socket_ifname: {name} is {nd.operstate or 'in an unknown state'}")
    if topo_path:
        env = _set(env, "NCCL_TOPO_FILE", topo_path, "measured", "measured: PCI tree from sysfs, written by agentd", known_hcas)
    for setting, key in NCCL_SETTING_VARS.items():
        configured = getattr(nccl, setting)
        if setting != "socket_ifname" and configured is not None:  # socket_ifname: above, with its notes
            env = _set(env, key, nccl_setting_value(setting, configured), "config", f"config: nccl.{setting}", known_hcas)

    for key, value in nccl.overrides.items():
        env = _set(env, key, value, "override", f"override: nccl.overrides.{key}", known_hcas)
    if nccl.profile is not None:
        for key, value in nccl.profiles.get(nccl.profile, {}).items():
            env = _set(env, key, value, "profile", f"profile: nccl.profiles.{nccl.profile}.{key}", known_hcas)
    return env


def _set(env: NcclEnv, key: str, value: str, source: Source, provenance: str, known_hcas: list[str]) -> NcclEnv:
    problems = validate_var(key, value, known_hcas=known_hcas if source in ("override", "profile") else None)
    if problems:
        where = provenance.split(": ", 1)[1] if ": " in provenance else provenance
        for p in problems:
            env = env.with_problem(f"{where}: {p}" if source != "measured" else p)
        return env
    for note in advise_var(key, value):
        env = env.with_note(note)
    return env.with_var(EnvVar(key, value, source, provenance))


# ---------------------------------------------------------------------------
# rendering

def _stamp(ts: float | None) -> str:
    if ts is None:
        return "unknown time"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _header(env: NcclEnv, generated_at: float, hostname: str | None, intro: list[str]) -> list[str]:
    host = f" on {clean_comment(hostname)}" if hostname else ""
    lines = [f"# {clean_comment(line)}" for line in intro]
    # The one line that changes on every write; agentd ignores it when comparing content.
    lines.append(f"# generated: {_stamp(generated_at)} by agentd {agentd.__version__}{host}, from measurements taken {_stamp(env.measured_at)}")
    source = env.host_root if env.host_root and env.host_root != "/" else None
    if source:
        lines.append(f"# host root: {clean_comment(source)}")
    for o in env.omitted:
        lines.append(f"# not set: {o.key}: {o.reason}")
    by_design = [k for k in NOT_SET_BY_DEFAULT if k not in env]
    if by_design:
        lines.append(f"# not set by design: {', '.join(by_design)} (NCCL chooses these per node and job)")
    lines.append("#")
    return lines


def sh_quote(value: str) -> str:
    if _SH_SAFE.fullmatch(value):
        return value
    return "'" + value.replace("'", "'\\''") + "'"


def render_env_sh(env: NcclEnv, *, generated_at: float, hostname: str | None) -> str:
    """nccl.env: ``. /etc/nccl.env`` in bash or sh exports every variable."""
    lines = _header(
        env,
        generated_at,
        hostname,
        [
            "NCCL settings for this node, written by agentd. Source it in bash or sh ('. FILE') to export them.",
            "Do not edit: agentd rewrites this file when the node changes and reports edits as drift.",
        ],
    )
    for var in env.variables:
        lines.append(f"# {var.provenance}")
        lines.append(f"export {var.key}={sh_quote(var.value)}")
    return "\n".join(lines) + "\n"


def render_env_conf(env: NcclEnv, *, generated_at: float, hostname: str | None) -> str:
    """Plain ``KEY=VALUE`` lines read identically by NCCL's nccl.conf reader, systemd
    ``EnvironmentFile=`` and ``docker --env-file``: no quotes, no ``export``, LF endings,
    and no ``=`` in comment lines (NCCL before 2.26 does not skip ``#`` lines)."""
    lines = _header(
        env,
        generated_at,
        hostname,
        [
            "NCCL settings for this node, written by agentd as plain KEY VALUE lines for NCCL's own",
            "nccl.conf reader, systemd EnvironmentFile and docker --env-file.",
            "Do not edit: agentd rewrites this file when the node changes and reports edits as drift.",
        ],
    )
    for var in env.variables:
        if not VALUE_CHARS.fullmatch(var.value) or "\n" in var.value:
            raise ValueError(f"{var.key}: value {var.value!r} cannot be written as a literal KEY=VALUE line")
        lines.append(f"# {var.provenance}")
        lines.append(f"{var.key}={var.value}")
    return "\n".join(lines) + "\n"
