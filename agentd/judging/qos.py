"""The RoCE QoS chain: which priority RDMA traffic really uses, link by link (pure).

NCCL puts ``NCCL_IB_TC`` (default 0) in the GRH traffic class of its QPs; the upper six
bits are the DSCP (``TC >> 2``), the lower two ECN. mlx5's driver-global override
(``tc/<port>/traffic_class``, "Global tclass=N") replaces it in every QP of the port. The
NIC then picks the priority by its trust mode: ``dscp`` maps the DSCP through its
dscp2prio table, ``pcp`` uses the 802.1p priority, which for RoCE is the address handle's
SL (``NCCL_IB_SL``, default 0). PFC and ECN must be on for *that* priority.

Where NCCL_IB_TC comes from, highest first (what a job that sources agentd's env file
sees): ``nccl.profiles.<profile>`` > ``nccl.overrides`` > ``nccl.ib_tc`` (only when
agentd writes the env file, ``nccl.enabled``) > the node's ``/etc/nccl.conf``. With none
of them, NCCL's default 0 applies to jobs that do not set it themselves: the chain is
still shown, but ``configured`` is False and the checks do not judge it (a job's own
environment is out of agentd's sight).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from agentd.config import AgentConfig
from agentd.judging.nic_firmware import cc_global, ecn_mixed
from agentd.model import IbPort, NcclConf, Netdev, NodeSnapshot


@dataclass(frozen=True)
class Setting:
    value: int
    source: str  # "nccl.ib_tc", "nccl.overrides.NCCL_IB_TC", "nccl.profiles.<p>.NCCL_IB_TC", the conf file's node path ("/etc/nccl.conf"), "NCCL default"


def parse_nccl_int(text: str) -> int | None:
    """An NCCL integer variable as NCCL reads it (strtoll, base 0: "106", "0x6a");
    None when it is not one."""
    try:
        return int(text.strip(), 0)
    except ValueError:
        return None


def nccl_setting(config: AgentConfig, conf: NcclConf | None, key: str, lo: int, hi: int) -> Setting | None:
    """The value of an integer NCCL variable a job on this node gets, and where it is set;
    None when neither agentd's config nor /etc/nccl.conf sets it (to a value in lo..hi)."""
    nccl = config.nccl
    if nccl.enabled:
        candidates: list[tuple[str | None, str]] = []
        if nccl.profile is not None:
            candidates.append((nccl.profiles.get(nccl.profile, {}).get(key), f"nccl.profiles.{nccl.profile}.{key}"))
        candidates.append((nccl.overrides.get(key), f"nccl.overrides.{key}"))
        attr = {"NCCL_IB_TC": nccl.ib_tc, "NCCL_IB_SL": nccl.ib_sl}.get(key)
        candidates.append((None if attr is None else str(attr), f"nccl.{key.removeprefix('NCCL_').lower()}"))
        for text, source in candidates:
            value = None if text is None else parse_nccl_int(text)
            if value is not None and lo <= value <= hi:
                return Setting(value, source)
    if conf is not None and key in conf.variables:
        value = parse_nccl_int(conf.variables[key])
        if value is not None and lo <= value <= hi:
            return Setting(value, "/" + conf.path.lstrip("/"))  # the node's path, as NCCL names it
    return None


@dataclass(frozen=True)
class RoceChain:
    """One RoCE compute port's chain, judged on ``netdev`` (the port's netdev, or for a
    bond each slave, where mlx5 keeps the DCB and ECN settings)."""

    hca: str
    port: int
    netdev: str
    nccl_tc: Setting | None  # NCCL_IB_TC as configured for jobs; None: not set anywhere agentd sees
    override: int | None  # the port's global tclass, when set
    override_rules: int  # per-address tclass rules on the port (they apply only without a global value)
    tc: int  # the traffic class the QPs get
    tc_source: str  # "override" | the nccl_tc source | "NCCL default"
    sl: Setting  # NCCL_IB_SL (default 0): the priority in pcp trust
    trust: str | None  # "dscp" | "pcp" | None (unknown)
    priority: int | None  # the priority the traffic uses; None: unknown
    pfc: bool | None  # PFC on that priority (None: PFC not read or priority unknown)
    ecn: bool | None  # ECN np and rp on that priority (False: either is off; None: unknown)

    @property
    def dscp(self) -> int:
        return self.tc >> 2

    @property
    def configured(self) -> bool:
        """The traffic class is known: the override, or NCCL_IB_TC set in agentd's config
        or /etc/nccl.conf (else NCCL's default, which a job may replace)."""
        return self.override is not None or self.nccl_tc is not None

    def describe(self) -> str:
        """Every link of the chain, in order, for a finding's message."""
        parts = []
        if self.nccl_tc is not None:
            parts.append(f"NCCL_IB_TC {self.nccl_tc.value} ({self.nccl_tc.source})")
        else:
            parts.append("NCCL_IB_TC not set (NCCL default 0)")
        if self.override is not None:
            parts.append(f"overridden by the global tclass {self.override} ({self.hca} tc/{self.port}/traffic_class)")
        parts.append(f"traffic class {self.tc} = DSCP {self.dscp}")
        if self.trust == "dscp":
            parts.append(f"trust dscp on {self.netdev}: dscp2prio {self.dscp} -> "
                         + (f"priority {self.priority}" if self.priority is not None else "no entry"))
        elif self.trust == "pcp":
            parts.append(f"trust pcp on {self.netdev}: the DSCP is ignored, NCCL_IB_SL {self.sl.value} ({self.sl.source}) -> priority {self.priority}")
        else:
            parts.append(f"trust mode of {self.netdev} unknown")
        if self.priority is not None:
            pfc = "unknown" if self.pfc is None else "on" if self.pfc else "off"
            ecn = "unknown" if self.ecn is None else "on" if self.ecn else "off"
            parts.append(f"PFC {pfc} and ECN {ecn} for priority {self.priority}")
        return " -> ".join(parts)


def _ecn_on(nd: Netdev, prio: int) -> bool | None:
    if nd.ecn is None:
        return None
    states = [nd.ecn.np.get(prio), nd.ecn.rp.get(prio)]
    if False in states:
        return False
    return True if all(s is True for s in states) else None


def _priority(nd: Netdev, tc: int, sl: int) -> tuple[str | None, int | None]:
    if nd.pfc is None or nd.pfc.trust is None:
        return None, None
    if nd.pfc.trust == "pcp":
        return "pcp", sl & 7
    if nd.pfc.trust == "dscp":
        return "dscp", nd.pfc.dscp2prio.get(tc >> 2)
    return None, None


def chain(config: AgentConfig, conf: NcclConf | None, hca: str, port: IbPort, nd: Netdev, *, cc_global: bool = False) -> RoceChain:
    """``cc_global``: the firmware applies congestion control to all priorities alike
    (agentd.judging.nic_firmware): ECN on a priority is unknown while the switches differ."""
    nccl_tc = nccl_setting(config, conf, "NCCL_IB_TC", 0, 255)
    sl = nccl_setting(config, conf, "NCCL_IB_SL", 0, 15) or Setting(0, "NCCL default")
    override = port.tclass.global_tclass if port.tclass is not None else None
    rules = len(port.tclass.rules) if port.tclass is not None else 0
    if override is not None:
        tc, source = override, "override"
    elif nccl_tc is not None:
        tc, source = nccl_tc.value, nccl_tc.source
    else:
        tc, source = 0, "NCCL default"
    trust, prio = _priority(nd, tc, sl.value)
    pfc = None if prio is None or nd.pfc is None else prio in nd.pfc.enabled
    ecn = None if prio is None or (cc_global and ecn_mixed(nd)) else _ecn_on(nd, prio)
    return RoceChain(hca=hca, port=port.port, netdev=nd.name, nccl_tc=nccl_tc, override=override, override_rules=rules,
                     tc=tc, tc_source=source, sl=sl, trust=trust, priority=prio, pfc=pfc, ecn=ecn)


def roce_chains(snapshot: NodeSnapshot, config: AgentConfig, ports: Iterable[tuple[str, IbPort, Netdev]]) -> list[RoceChain]:
    """The chain of each (hca, port, netdev) RoCE compute port; a bond's chain is judged on
    each slave (sorted by netdev), a plain netdev on itself."""
    out = []
    for hca, port, nd in ports:
        judged = [s for s in (snapshot.netdev(n) for n in nd.bond_slaves) if s is not None] or [nd]
        glob = cc_global(snapshot.hca(hca)) is not None
        for target in sorted(judged, key=lambda n: n.name):
            out.append(chain(config, snapshot.nccl_conf, hca, port, target, cc_global=glob))
    return out
