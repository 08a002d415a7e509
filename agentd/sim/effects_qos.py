"""Fault effects on the RoCE QoS chain: NCCL_IB_TC -> (tclass override) -> DSCP ->
dscp2prio -> priority -> PFC/ECN, and RDMA traffic that runs outside it.

Same contract as effects_link: apply / restores / advancing per fault kind. The mlnx_qos
stand-in (``.agentd/dcb/<if>``) is read back and rewritten with one part changed, so QoS
faults on one netdev compose (clearing any of them restores the whole file).
"""

from __future__ import annotations

from agentd.base import recorded
from agentd.sim.net import Qos, parse_mlnx_qos
from agentd.sim.node import NCCL_CONF
from agentd.sim.pristine import pristine_root
from agentd.sim.profiles import NCCL_IB_TC_ROCE
from agentd.sim.rdma import tclass_file
from agentd.sim.targets import Ctx, Target
from agentd.sim.tree import write_attr


def _need(ctx: Ctx, rel: str, why: str = "removed by another fault?") -> str:
    if not ctx.path(rel).exists():
        raise ValueError(f"{rel} does not exist ({why})")
    return rel


# -- the HCA's traffic class override (OFED mlx5_ib tc/1/traffic_class) --------------


def _tclass(ctx: Ctx, t: Target) -> str:
    return tclass_file(ctx.layout, t.the_hca)


def tclass_override_apply(ctx: Ctx, t: Target, tclass: int) -> None:
    rel = _need(ctx, _tclass(ctx, t), "the profile's driver is not MLNX_OFED, or the HCA was removed")
    write_attr(ctx.path(rel), f"Global tclass={tclass}")


def tclass_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    return [_tclass(ctx, t)]


# -- mlnx_qos: trust state and the DSCP map ---------------------------------------------


def _dcb(t: Target) -> str:
    return f".agentd/dcb/{t.netdev}"


def _qos(ctx: Ctx, t: Target) -> Qos:
    """What the netdev's mlnx_qos text says now (the profile's settings when another
    fault left it unreadable)."""
    rel = _need(ctx, _dcb(t))
    try:
        return parse_mlnx_qos(ctx.path(rel).read_text())
    except (ValueError, UnicodeDecodeError):
        return Qos((ctx.profile.roce_priority,), "dscp", None)


def _write_qos(ctx: Ctx, t: Target, q: Qos) -> None:
    write_attr(ctx.path(_dcb(t)), q.format(), newline=False)


def dcb_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    return [_dcb(t)]


def pfc_off_apply(ctx: Ctx, t: Target, v: object) -> None:
    q = _qos(ctx, t)
    _write_qos(ctx, t, Qos((), q.trust, q.dscp2prio))


def trust_pcp_apply(ctx: Ctx, t: Target, v: object) -> None:
    q = _qos(ctx, t)
    _write_qos(ctx, t, Qos(q.pfc, "pcp", None))


def roce_dscp(ctx: Ctx) -> int:
    """The DSCP RDMA traffic is marked with: the profile's NCCL_IB_TC >> 2 (26 by default)."""
    tc = ctx.profile.nccl_ib_tc
    return (NCCL_IB_TC_ROCE if tc is None else tc) >> 2


def dscp_map_lossy_apply(ctx: Ctx, t: Target, prio: int) -> None:
    if prio == ctx.profile.roce_priority:
        raise ValueError(f"priority {prio} is the profile's RoCE priority: moving DSCP {roce_dscp(ctx)} there changes nothing")
    q = _qos(ctx, t)
    dscp = roce_dscp(ctx)
    table = dict(q.dscp2prio) if q.dscp2prio else {d: d >> 3 for d in range(63, -1, -1)}
    table.pop(dscp, None)
    # `mlnx_qos --dscp2prio set,D,P` adds an app entry; the kernel lists it first
    _write_qos(ctx, t, Qos(q.pfc, "dscp", {dscp: prio, **table}))


# -- global pause (the `ethtool -a` stand-in) ---------------------------------------------


def _pause(t: Target) -> str:
    return f"{recorded.DIR}/{recorded.PAUSE}/{t.netdev}"


def pause_on_apply(ctx: Ctx, t: Target, which: str) -> None:
    rel = _need(ctx, _pause(t))
    rx, tx = which in ("rx", "both"), which in ("tx", "both")
    write_attr(ctx.path(rel), recorded.format_ethtool_a(t.netdev or "", False, rx, tx), newline=False)


def pause_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    return [_pause(t)]


# -- /etc/nccl.conf -----------------------------------------------------------------------


def nccl_tc_mismatch_apply(ctx: Ctx, t: Target, tc: int) -> None:
    p = ctx.path(NCCL_CONF)
    lines = p.read_text().splitlines() if p.is_file() else []
    kept = [line for line in lines if line.strip().partition("=")[0].strip() != "NCCL_IB_TC"]
    write_attr(p, "\n".join([*kept, f"NCCL_IB_TC={tc}"]))


def nccl_conf_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    # where the profile has no etc/ the fault created it: clearing removes it again
    etc = NCCL_CONF.partition("/")[0]
    return [NCCL_CONF if (pristine_root(ctx.profile.name) / etc).is_dir() else etc]


# -- RDMA traffic outside the lossless priority -----------------------------------------


def _xmit_data(ctx: Ctx, t: Target) -> str:
    return f"{ctx.port_dir(t.the_hca)}/counters/port_xmit_data"


def roce_lossy_traffic_apply(ctx: Ctx, t: Target, n: int) -> None:
    _need(ctx, f".agentd/ethtool/{t.netdev}")
    ctx.ethtool_add(t.the_netdev, {"tx_prio0_bytes": n, "tx_vport_rdma_unicast_bytes": n})
    ctx.add(_need(ctx, _xmit_data(ctx, t)), n // 4)  # PMA counts 4-byte words


def roce_lossy_advancing(ctx: Ctx, t: Target, v: object) -> list[str]:
    return [f".agentd/ethtool/{t.netdev}", _xmit_data(ctx, t)]
