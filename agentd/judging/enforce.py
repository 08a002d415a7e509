"""The node's desired fabric configuration and how far it is from it: a plan (pure).

Desired state is what the checks expect, derived with the checks' own functions, so the
enforcer and the checks cannot disagree: a knob of a thing drifts exactly when its check
raises a finding, and once it is set as desired that finding is gone.

==========  ==================================================  =================================
knob        desired (the expectation)                           the check's finding
==========  ==================================================  =================================
peermem     nvidia_peermem registered where DMA-BUF cannot      gdr.unavailable
            carry GPUDirect RDMA (checks.gdr.dmabuf_blockers)
mtu         expect.roce_mtu / expect.ipoib_mtu (checks.mtu)     mtu.mismatch
pfc         PFC on roce.priority (others kept)                  roce.pfc.disabled
ecn         ECN np and rp on roce.priority                      roce.ecn.disabled
trust       dscp where RDMA traffic is DSCP-marked              roce.qos.trust_mismatch
dscp2prio   the marked DSCP -> roce.priority                    roce.qos.lossy / ecn_off /
                                                                priority_mismatch
tclass      no global tclass where it overrides NCCL_IB_TC      roce.qos.tclass_override
pause       global pause off (checks.roce.pause_off)            roce.pause.global
==========  ==================================================  =================================

The QoS knobs follow the chain (agentd.judging.qos): trust and dscp2prio are judged on the
chain as it will be once the named knobs before them are set (a cleared override, DSCP
trust), so a plan never asks to map a DSCP that is about to stop being used.

``plan`` lists every target of each named knob: its current value (when it was read), the
desired one, whether agentd may set it now and why not (an offline root, no carrier, a
device without the setting, DSCP 0), and the command a person would run. Which *window*
the daemon applies in (maintenance, boot grace, idle GPUs) is ``apply_window``'s business.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

from agentd.base.actuation import APPTRUST_ORDER, Setting, Value
from agentd.config import KNOBS, AgentConfig, Knob
from agentd.judging.checks.common import CheckInput, roce_compute_ports
from agentd.judging.checks.gdr import dmabuf_blockers
from agentd.judging.checks.mtu import mtu_rules
from agentd.judging.checks.roce import judged_netdevs, pause_off
from agentd.judging.findings import finding, setting_subject
from agentd.judging.qos import RoceChain, chain
from agentd.judging.roles import HcaRoles, hca_roles
from agentd.model import Finding, IbPort, Netdev, NodeSnapshot, TclassOverride

DRIFT_CODE = "config.drift"
STUCK_CODE = "enforce.stuck"
# The order changes are applied in: the module, the MTU, then the QoS chain in its own
# order (the override before the trust before the map), then PFC, ECN and pause.
APPLY_ORDER: tuple[Knob, ...] = ("peermem", "mtu", "tclass", "trust", "dscp2prio", "pfc", "ecn", "pause")
# Finding codes of the checks each knob answers (docs/enforce.md)
CODES: dict[str, tuple[str, ...]] = {
    "peermem": ("gdr.unavailable",),
    "mtu": ("mtu.mismatch",),
    "pfc": ("roce.pfc.disabled",),
    "ecn": ("roce.ecn.disabled",),
    "trust": ("roce.qos.trust_mismatch",),
    "dscp2prio": ("roce.qos.lossy", "roce.qos.ecn_off", "roce.qos.priority_mismatch"),
    "tclass": ("roce.qos.tclass_override",),
    "pause": ("roce.pause.global",),
}
OFFLINE = "an offline root (a capture or a copied tree): plans only, nothing on it can be changed"


@dataclass(frozen=True)
class Change:
    """One knob of one thing: what it is, what it should be, whether agentd may set it now."""

    knob: Knob
    target: str  # the thing: "ens1np0", "mlx5_0:1", "node"
    current: Value  # meaningful when ``readable``
    desired: Value
    readable: bool
    why: str  # the expectation it comes from: "expect.roce_mtu 9000"
    command: str  # what a person runs for the same change
    blocked: str | None = None  # why agentd cannot apply it now; None: it can
    setting: Setting = field(default_factory=lambda: Setting("", "", None))  # the actuator's request (value: desired)

    @property
    def drift(self) -> bool:
        return self.readable and self.current != self.desired

    @property
    def applicable(self) -> bool:
        return self.drift and self.blocked is None

    @property
    def key(self) -> str:
        return f"{self.knob}@{self.target}"

    @property
    def current_text(self) -> str:
        return show(self.knob, self.current, self.setting.param) if self.readable else "unknown"

    @property
    def desired_text(self) -> str:
        return show(self.knob, self.desired, self.setting.param)


@dataclass(frozen=True)
class Plan:
    knobs: tuple[Knob, ...]
    changes: tuple[Change, ...]
    host_mode: str | None

    @property
    def drift(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.drift)

    def find(self, knob: str, target: str) -> Change | None:
        return next((c for c in self.changes if c.knob == knob and c.target == target), None)

    def next_applicable(self, knobs: Iterable[str] | None = None) -> Change | None:
        """The first change agentd may apply now, in APPLY_ORDER (only ``knobs`` when given)."""
        wanted = set(self.knobs if knobs is None else knobs)
        for k in APPLY_ORDER:
            if k not in wanted:
                continue
            for c in self.changes:
                if c.knob == k and c.applicable:
                    return c
        return None


# ---------------------------------------------------------------------------
# values for people


def _on(v: object) -> str:
    return "unknown" if v is None else "on" if v else "off"


def show(knob: str, value: Value, param: int | None = None) -> str:
    """A knob's value as a person reads it."""
    if knob == "peermem":
        return "loaded" if value else "not loaded"
    if knob == "pfc":
        return "PFC on " + (",".join(map(str, value)) if isinstance(value, tuple) and value else "none")
    if knob == "ecn" and isinstance(value, tuple) and len(value) == 2:
        return f"np {_on(value[0])}, rp {_on(value[1])} (priority {param})"
    if knob == "pause" and isinstance(value, tuple) and len(value) == 2:
        return f"rx {_on(value[0])}, tx {_on(value[1])}"
    if knob == "dscp2prio":
        return f"DSCP {param} -> " + ("no entry" if value is None else f"priority {value}")
    if knob == "tclass":
        return "none" if value is None else f"Global tclass={value}"
    return str(value)


def to_json(knob: str, value: Value) -> object:
    """A value as JSON (tuples as lists)."""
    return list(value) if isinstance(value, tuple) else value


def from_json(knob: str, data: object) -> Value:
    """A value read back from JSON (agentd's journal), in the knob's type; ValueError else."""
    if knob == "peermem" and isinstance(data, bool):
        return data
    if knob in ("mtu",) and isinstance(data, int) and not isinstance(data, bool):
        return data
    if knob in ("dscp2prio", "tclass") and (data is None or (isinstance(data, int) and not isinstance(data, bool))):
        return data
    if knob == "trust" and data in ("dscp", "pcp"):
        return str(data)
    if knob == "pfc" and isinstance(data, list) and all(isinstance(p, int) and not isinstance(p, bool) and 0 <= p <= 7 for p in data):
        return tuple(sorted(set(data)))
    if knob in ("ecn", "pause") and isinstance(data, list) and len(data) == 2 and all(isinstance(b, bool) for b in data):
        return (bool(data[0]), bool(data[1]))
    raise ValueError(f"not a {knob} value: {data!r}")


def command_for(s: Setting, frm: Value, to: Value) -> str:
    """What a person runs to take setting ``s`` from ``frm`` to ``to`` (a plan's change, a
    rollback's restore): iproute2, ethtool, modprobe, or the sysfs write."""
    nd, k = s.netdev or "", s.knob
    if k == "peermem":
        return "modprobe nvidia_peermem" if to else "modprobe -r nvidia_peermem"
    if k == "mtu":
        return f"ip link set dev {nd} mtu {to}"
    if k == "pfc" and isinstance(to, tuple):
        old = set(frm) if isinstance(frm, tuple) else set()
        diff = [f"{p}:{'on' if p in to else 'off'}" for p in range(8) if (p in to) != (p in old)]
        return f"dcb pfc set dev {nd} prio-pfc {' '.join(diff) or ' '.join(f'{p}:on' for p in to) or '0:off'}"
    if k == "ecn" and isinstance(to, tuple):
        was = frm if isinstance(frm, tuple) else (None, None)
        return "; ".join(f"echo {1 if on else 0} > /sys/class/net/{nd}/ecn/{side}/enable/{s.param}"
                         for side, on, old in zip(("roce_np", "roce_rp"), to, was, strict=True) if on != old) or "true"
    if k == "trust":
        if s.apptrust:
            return f"dcb apptrust set dev {nd} order " + " ".join(APPTRUST_ORDER[str(to)])
        pairs = " ".join(f"{d}:{p}" for d, p in s.entries)
        return f"dcb app {'add' if to == 'dscp' else 'del'} dev {nd} dscp-prio {pairs}"
    if k == "dscp2prio":
        if to is None:
            return f"dcb app del dev {nd} dscp-prio {s.param}:{frm}"
        return f"dcb app replace dev {nd} dscp-prio {s.param}:{to}"
    if k == "tclass":
        return f"echo {-1 if to is None else to} > /sys/class/infiniband/{s.hca}/tc/{s.port}/traffic_class"
    if k == "pause" and isinstance(to, tuple):
        return f"ethtool -A {nd} rx {'on' if to[0] else 'off'} tx {'on' if to[1] else 'off'}"
    return ""


def same(s: Setting, a: Value, b: Value) -> bool:
    """Whether ``a`` and ``b`` are the same as far as setting ``s`` goes: PFC of priority
    ``param`` only (the knob sets that priority and keeps the others), else equal."""
    if s.knob == "pfc" and s.param is not None and isinstance(a, tuple) and isinstance(b, tuple):
        return (s.param in a) == (s.param in b)
    return a == b


def read_setting(snap: NodeSnapshot, s: Setting) -> tuple[bool, Value]:
    """(readable, value) of setting ``s`` as ``snap`` reads it: only what the knob sets
    (the read-back of a change, compared with what was asked)."""
    k = s.knob
    if k == "peermem":
        return True, snap.gdr.peermem_version_path is not None
    if k == "tclass":
        h = next((h for h in snap.hcas if h.name == s.hca), None)
        port = next((p for p in h.ports if p.port == s.port), None) if h is not None else None
        if port is None or port.tclass is None:
            return False, None
        return True, port.tclass.global_tclass
    nd = snap.netdev(s.netdev or "")
    if nd is None:
        return False, None
    if k == "mtu":
        return nd.mtu is not None, nd.mtu
    if k == "pause":
        return (True, (nd.pause.rx, nd.pause.tx)) if nd.pause is not None else (False, None)
    if k == "ecn":
        if nd.ecn is None or s.param is None:
            return False, None
        np_, rp = nd.ecn.np.get(s.param), nd.ecn.rp.get(s.param)
        return (np_ is not None and rp is not None), (bool(np_), bool(rp))
    pfc = nd.pfc
    if pfc is None:
        return False, None
    if k == "pfc":
        return True, tuple(sorted(pfc.enabled))
    if k == "trust":
        return pfc.trust is not None, pfc.trust
    if k == "dscp2prio" and s.param is not None:
        return True, pfc.dscp2prio.get(s.param)
    return False, None


# ---------------------------------------------------------------------------
# targets


def _carrier(nd: Netdev) -> str | None:
    """Why a netdev knob must wait for the link (as NVIDIA's NIC configuration operator
    refuses a NO-CARRIER port): the change could not be verified on the wire."""
    if nd.carrier is True:
        return None
    if nd.carrier is False:
        return f"{nd.name} has no carrier (operstate {nd.operstate or 'unknown'}): a change could not be verified on the link"
    return f"{nd.name}'s link state is unknown (administratively down?): a change could not be verified on the link"


def _extra_netdevs(snap: NodeSnapshot, config: AgentConfig, seen: Iterable[str]) -> list[Netdev]:
    globs = config.enforce.netdevs
    skip = set(seen)
    return [nd for nd in snap.netdevs if nd.name not in skip and any(fnmatch.fnmatchcase(nd.name, g) for g in globs)]


@dataclass(frozen=True)
class _Ctx:
    snap: NodeSnapshot
    config: AgentConfig
    roles: HcaRoles
    knobs: tuple[Knob, ...]
    offline: bool
    memo: dict[str, object] = field(default_factory=dict)  # _links, computed once per plan

    def blocked(self, *why: str | None) -> str | None:
        if self.offline:
            return OFFLINE
        return next((w for w in why if w), None)


def _change(ctx: _Ctx, knob: Knob, target: str, current: Value, desired: Value, readable: bool, why: str,
            blocked: str | None, **setting: object) -> Change:
    st = Setting(knob, target, desired, **setting)  # type: ignore[arg-type]  # the Setting fields, by name
    return Change(knob=knob, target=target, current=current, desired=desired, readable=readable, why=why,
                  command=command_for(st, current if readable else None, desired),
                  blocked=ctx.blocked(blocked) if readable else (blocked or "not readable"), setting=st)


def _peermem(ctx: _Ctx) -> list[Change]:
    snap = ctx.snap
    if not snap.gpus or not ctx.roles.compute:
        return []  # check_gdr judges nodes with GPUs and compute HCAs only
    g = snap.gdr
    registered = g.peermem_version_path is not None
    blockers = dmabuf_blockers(g, snap)
    if not blockers:
        return [_change(ctx, "peermem", "node", registered, registered, True,
                        "DMA-BUF carries GPUDirect RDMA: nvidia_peermem is not needed", None)]
    blocked = None
    if g.peermem_loaded and not registered:
        blocked = ("nvidia_peermem is loaded but not registered with NCCL: it needs a reload "
                   "(`modprobe -r nvidia_peermem; modprobe nvidia_peermem`), which agentd never does")
    return [_change(ctx, "peermem", "node", registered, True, True,
                    f"GPUDirect RDMA needs nvidia_peermem: DMA-BUF is not possible ({', '.join(blockers)})", blocked)]


def _mtu(ctx: _Ctx) -> list[Change]:
    expect = ctx.config.expect
    rules = [(r.netdev, r.expected, "expect.roce_mtu" if r.port is not None else "expect.ipoib_mtu")
             for r in mtu_rules(ctx.snap, ctx.roles, expect) if r.expected is not None]
    for nd in _extra_netdevs(ctx.snap, ctx.config, [r[0].name for r in rules]):
        ib = nd.link_layer == "InfiniBand"
        want = expect.ipoib_mtu if ib else expect.roce_mtu
        if want is not None:
            rules.append((nd, want, "expect.ipoib_mtu" if ib else "expect.roce_mtu"))
    return [_change(ctx, "mtu", nd.name, nd.mtu, want, nd.mtu is not None, f"{key} {want}", _carrier(nd), netdev=nd.name, ifindex=nd.ifindex)
            for nd, want, key in rules]


def _roce_netdevs(ctx: _Ctx) -> list[Netdev]:
    judged = judged_netdevs(CheckInput(ctx.snap, (), ctx.config, roles=ctx.roles))
    return judged + _extra_netdevs(ctx.snap, ctx.config, [nd.name for nd in judged])


def _pfc(ctx: _Ctx) -> list[Change]:
    cfg = ctx.config.roce
    if not cfg.require_pfc:
        return []
    prio, out = cfg.priority, []
    for nd in _roce_netdevs(ctx):
        cur = tuple(sorted(nd.pfc.enabled)) if nd.pfc is not None else ()
        want = tuple(sorted({*cur, prio}))
        out.append(_change(ctx, "pfc", nd.name, cur, want, nd.pfc is not None, f"roce.priority {prio} (roce.require_pfc)",
                           _carrier(nd) if nd.pfc is not None else "no DCB (PFC) settings were read: the device has none",
                           netdev=nd.name, ifindex=nd.ifindex, param=prio))
    return out


def _ecn(ctx: _Ctx) -> list[Change]:
    cfg = ctx.config.roce
    if not cfg.require_ecn:
        return []
    prio, out = cfg.priority, []
    for nd in _roce_netdevs(ctx):
        np_, rp = (nd.ecn.np.get(prio), nd.ecn.rp.get(prio)) if nd.ecn is not None else (None, None)
        readable = np_ is not None and rp is not None
        why_not = _carrier(nd) if readable else f"no ECN settings of priority {prio} (ecn/roce_np, ecn/roce_rp): not an mlx5 netdev"
        out.append(_change(ctx, "ecn", nd.name, (bool(np_), bool(rp)), (True, True), readable,
                           f"roce.priority {prio} (roce.require_ecn)", why_not, netdev=nd.name, ifindex=nd.ifindex, param=prio))
    return out


def _pause(ctx: _Ctx) -> list[Change]:
    if not ctx.config.roce.require_pfc:
        return []
    out = []
    for nd in _roce_netdevs(ctx):
        cur = (nd.pause.rx, nd.pause.tx) if nd.pause is not None else (False, False)
        readable = pause_off(nd) is not None
        out.append(_change(ctx, "pause", nd.name, cur, (False, False), readable, "global pause off beside PFC (roce.require_pfc)",
                           _carrier(nd) if readable else "no pause parameters were read: the device has none", netdev=nd.name, ifindex=nd.ifindex))
    return out


# -- the QoS chain ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Link:
    """One chain of a RoCE port (or of a netdev named in enforce.netdevs): as it is, and as
    it will be once the named knobs before trust and dscp2prio are set."""

    hca: str
    port: IbPort
    netdev: Netdev
    now: RoceChain
    clear_tclass: bool  # the tclass knob will clear the port's override
    to_dscp: bool  # the trust knob will make the netdev trust DSCP


def _clears(c: RoceChain) -> bool:
    """The override differs from NCCL_IB_TC (checks.qos roce.qos.tclass_override)."""
    return c.override is not None and c.nccl_tc is not None and c.override != c.nccl_tc.value


def _wants_dscp(c: RoceChain) -> bool:
    """pcp trust while a DSCP is marked (checks.qos roce.qos.trust_mismatch, first case)."""
    return c.trust == "pcp" and c.configured and c.dscp != 0


def _links(ctx: _Ctx) -> list[_Link]:
    got = ctx.memo.get("links")
    if got is None:
        got = ctx.memo["links"] = _make_links(ctx)
    return got  # type: ignore[return-value]  # what _make_links returned


def _make_links(ctx: _Ctx) -> list[_Link]:
    snap, config = ctx.snap, ctx.config
    out = []
    ports = [(h, p, nd) for h, p, nd in roce_compute_ports(CheckInput(snap, (), config, roles=ctx.roles))]
    seen: set[str] = set()
    targets: list[tuple[str, IbPort, Netdev]] = []
    for hca, port, nd in ports:
        judged = [s for s in (snap.netdev(n) for n in nd.bond_slaves) if s is not None] or [nd]
        for t in sorted(judged, key=lambda n: n.name):
            targets.append((hca, port, t))
            seen.add(t.name)
    targets += [("", IbPort(port=0), nd) for nd in _extra_netdevs(snap, config, seen)]
    for hca, port, nd in targets:
        c = chain(config, snap.nccl_conf, hca, port, nd)
        clear = "tclass" in ctx.knobs and _clears(c)
        if clear:
            c = chain(config, snap.nccl_conf, hca, _cleared(port), nd)
        out.append(_Link(hca, port, nd, c, clear, "trust" in ctx.knobs and _wants_dscp(c)))
    return out


def _cleared(port: IbPort) -> IbPort:
    rules = port.tclass.rules if port.tclass is not None else ()
    return port.model_copy(update={"tclass": TclassOverride(global_tclass=None, rules=rules)})


def _tclass(ctx: _Ctx) -> list[Change]:
    out, seen = [], set()
    for link in _links(ctx):
        if not link.hca or (link.hca, link.port.port) in seen:
            continue
        seen.add((link.hca, link.port.port))
        c = chain(ctx.config, ctx.snap.nccl_conf, link.hca, link.port, link.netdev)
        target = f"{link.hca}:{link.port.port}"
        path = f"/sys/class/infiniband/{link.hca}/tc/{link.port.port}/traffic_class"
        readable = link.port.tclass is not None
        if _clears(c) and c.nccl_tc is not None:
            why = f"NCCL_IB_TC {c.nccl_tc.value} ({c.nccl_tc.source}) decides the traffic class"
            desired: int | None = None
        else:
            why = "the override agrees with NCCL_IB_TC, or NCCL_IB_TC is set nowhere agentd sees (the override is then what jobs use)"
            desired = c.override
        out.append(_change(ctx, "tclass", target, c.override, desired, readable, why,
                           None if readable else f"no {path}: the inbox mlx5_ib has no global traffic class",
                           hca=link.hca, port=link.port.port))
    return out


def _dscp_table(link: _Link, want: int) -> dict[int, int]:
    """The netdev's DSCP map once the trust knob made it trust DSCP: mlx5 keeps its APP
    entries and takes the one added (the marked DSCP to ``want``)."""
    table = dict(link.netdev.pfc.dscp2prio) if link.netdev.pfc is not None else {}
    if link.to_dscp:
        table[link.now.dscp] = want
    return table


def _trust(ctx: _Ctx) -> list[Change]:
    want, out = ctx.config.roce.priority, []
    for link in _links(ctx):
        nd, c = link.netdev, link.now
        pfc = nd.pfc
        readable = pfc is not None and pfc.trust is not None
        desired = "dscp" if _wants_dscp(c) else (pfc.trust if pfc is not None else None)
        apptrust = pfc is not None and pfc.apptrust
        entries: tuple[tuple[int, int], ...] = () if apptrust else ((c.dscp, want),)
        why = (f"RDMA traffic is marked DSCP {c.dscp} (traffic class {c.tc}, {c.tc_source}), which pcp trust ignores"
               if desired == "dscp" and c.trust == "pcp" else "trust agrees with how RDMA traffic is marked")
        not_readable = "the trust mode was not read (no DCB, or a VF without DSCP APP entries)"
        out.append(_change(ctx, "trust", nd.name, pfc.trust if pfc is not None else None, desired, readable, why,
                           _carrier(nd) if readable else not_readable, netdev=nd.name, ifindex=nd.ifindex, param=c.dscp, entries=entries, apptrust=apptrust))
    return out


def _dscp2prio(ctx: _Ctx) -> list[Change]:
    want, out = ctx.config.roce.priority, []
    for link in _links(ctx):
        nd, c = link.netdev, link.now
        if nd.pfc is None:
            continue
        trust = "dscp" if link.to_dscp else c.trust
        if trust != "dscp" or not c.configured:
            continue  # the DSCP is not what picks the priority (pcp, or not marked where agentd sees)
        table = _dscp_table(link, want)
        mapped = table.get(c.dscp)
        current = nd.pfc.dscp2prio.get(c.dscp)
        if mapped is None:
            continue  # no entry: the checks do not judge an unknown priority
        desired = want if mapped != want else current
        blocked = _carrier(nd)
        if c.dscp == 0 and desired != current:
            blocked = ("DSCP 0 is the marking of all unmarked traffic: mapping it to the lossless priority would make "
                       "every packet lossless; clear the global tclass or mark RDMA with a DSCP (nccl.ib_tc) instead")
        out.append(_change(ctx, "dscp2prio", nd.name, current, desired, True,
                           f"RDMA traffic is marked DSCP {c.dscp} ({c.tc_source}); roce.priority {want}", blocked, netdev=nd.name, ifindex=nd.ifindex, param=c.dscp,
                           entries=((c.dscp, current),) if current is not None else ()))
    return out


_BUILDERS = {"peermem": _peermem, "mtu": _mtu, "pfc": _pfc, "ecn": _ecn, "trust": _trust, "dscp2prio": _dscp2prio,
             "tclass": _tclass, "pause": _pause}


def plan(snap: NodeSnapshot, config: AgentConfig, *, roles: HcaRoles | None = None, knobs: Sequence[str] | None = None) -> Plan:
    """Every target of each knob (``knobs``; default ``enforce.knobs``), in KNOBS order."""
    wanted = tuple(k for k in KNOBS if k in (config.enforce.knobs if knobs is None else knobs))
    ctx = _Ctx(snap, config, roles if roles is not None else hca_roles(snap, config.hca), wanted, snap.host_mode == "offline")
    changes: list[Change] = []
    for k in wanted:
        changes.extend(_BUILDERS[k](ctx))
    return Plan(knobs=wanted, changes=tuple(changes), host_mode=snap.host_mode)


# ---------------------------------------------------------------------------
# findings


def drift_findings(p: Plan, mode: str) -> list[Finding]:
    """config.drift (warning) for each target that differs from its desired value."""
    out = []
    for c in p.drift:
        how = (f"`agentd enforce apply --knob {c.knob}`, or `{c.command}`" if c.blocked is None
               else f"`{c.command}` once it can be ({c.blocked})" if c.command else c.blocked)
        when = {"apply": "agentd applies it in the next safe window (maintenance, boot grace)", "plan": "enforce.mode is plan: agentd only reports it"}.get(mode, "")
        out.append(finding(
            DRIFT_CODE, "warning", setting_subject(c.knob, c.target),
            f"{c.knob} of {c.target}: {c.current_text}, desired {c.desired_text} ({c.why})"
            + (f"; not applicable now: {c.blocked}" if c.blocked else "") + (f"; {when}" if when and c.blocked is None else ""),
            f"set it: {how}; docs/enforce.md",
            measured=c.current_text, expected=c.desired_text,
        ))
    return out


@dataclass(frozen=True)
class Stuck:
    """A setting that did not stick after ``attempts`` within this boot."""

    knob: str
    target: str
    attempts: int
    last: str  # the last attempt's outcome, as recorded


def stuck_findings(stuck: Iterable[Stuck]) -> list[Finding]:
    return [finding(
        STUCK_CODE, "warning", setting_subject(s.knob, s.target),
        f"{s.knob} of {s.target} still differs after {s.attempts} attempts this boot (last: {s.last}); agentd leaves it alone "
        "until the next boot",
        "find what resets it or refuses it (a boot-time script, the driver, the switch's DCBX), fix that, then "
        "`agentd enforce status --reset`; `agentd enforce status` shows each attempt",
        measured=s.attempts,
    ) for s in stuck]


# ---------------------------------------------------------------------------
# when the daemon may apply


def apply_window(*, maintenance: bool, booted_at: float | None, now: float, boot_grace_s: float, healthy_seen: bool,
                 when_gpus_idle: bool, gpus_busy: bool | None) -> tuple[bool, str]:
    """(open, why): whether a change cannot hurt a running job now. Open in maintenance,
    within boot grace before the node was first healthy, or (opt-in) while no process holds
    a GPU; closed otherwise, and while whether a GPU is held cannot be told."""
    if maintenance:
        return True, "the node is in maintenance"
    if boot_grace_s > 0 and booted_at is not None and now - booted_at < boot_grace_s and not healthy_seen:
        return True, f"boot grace ({now - booted_at:.0f} s of lifecycle.boot_grace_s {boot_grace_s:g}) before the first healthy collection"
    if when_gpus_idle:
        if gpus_busy is False:
            return True, "no process holds a GPU (enforce.when_gpus_idle)"
        return False, "a process holds a GPU" if gpus_busy else "whether a process holds a GPU cannot be told"
    return False, "no safe window: the node is not in maintenance and not in boot grace (enforce.when_gpus_idle is off)"


def with_value(s: Setting, value: Value, **update: object) -> Setting:
    """The actuator request ``s`` for another value (a rollback's prior one)."""
    return replace(s, value=value, **update)  # type: ignore[arg-type]  # Setting's fields, by name
