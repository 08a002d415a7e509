"""The RoCE QoS chain, link by link (agentd.judging.qos): does RDMA traffic really use the
lossless priority ``roce.priority``?

Judged per chain (a RoCE compute port's netdev, or each slave of its bond), only when the
traffic class is known (``chain.configured``: the global tclass override, or NCCL_IB_TC in
agentd's config or /etc/nccl.conf; a job's own environment is out of sight) and the
priority is known (trust mode read, the DSCP in the map). A chain on ``roce.priority``
itself is roce.pfc.disabled / roce.ecn.disabled's business (checks/roce.py), not this
module's. The most severe finding of a chain wins:

- ``roce.qos.lossy`` (critical, when ``roce.require_pfc``): the traffic runs on another
  priority and PFC is off there: drops and retransmits under load;
- ``roce.qos.ecn_off`` (critical, when ``roce.require_ecn``): another priority, PFC not
  off, ECN off: DCQCN cannot slow senders down;
- ``roce.qos.priority_mismatch`` (warning): another priority, neither PFC nor ECN judged
  off there: it differs from the switch's lossless class.

Besides:
- ``roce.qos.trust_mismatch`` (warning): trust pcp while a DSCP is marked (the DSCP is then
  ignored), or trust dscp while only NCCL_IB_SL is set (the SL is then ignored);
- ``roce.qos.tclass_override`` (warning, on the port): the global tclass disagrees with
  NCCL_IB_TC (the override wins in every QP of the port);
- ``roce.qos.lossy_traffic`` (critical, when ``roce.require_pfc``): measured over the short
  rate window, the port sends RDMA at least ``thresholds.roce_lossy_min_bytes_per_s`` and
  less than half of its bytes are counted on PFC priorities (``tx_prio<N>_bytes``). Not
  raised where roce.pfc.disabled already is (the lossless priority itself is lossy).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentd.base.pma import pma_max
from agentd.judging.checks.common import (
    CheckInput,
    changes,
    counter_change,
    fmt,
    in_window,
    port_index,
    roce_compute_ports,
)
from agentd.judging.findings import finding, netdev_subject, port_subject
from agentd.judging.qos import RoceChain, roce_chains
from agentd.model import Finding, HistoryEntry, IbPort, Netdev

PREFERRED_DSCP = 26  # NCCL_IB_TC 106 (26 << 2 | ECT): the common RoCE marking


def _tclass_path(c: RoceChain) -> str:
    return f"/sys/class/infiniband/{c.hca}/tc/{c.port}/traffic_class"


def _tc_for(c: RoceChain, dscp: int) -> int:
    return dscp << 2 | (c.tc & 3)  # keep the ECN bits the chain uses


def _move_to(c: RoceChain, nd: Netdev, want: int) -> str:
    """How to put the chain's traffic on priority ``want``: the link that decides it first."""
    if c.trust == "pcp":
        return (f"{nd.name} trusts pcp, so the priority is NCCL_IB_SL: set nccl.ib_sl = {want} (agentd's env file) "
                f"or NCCL_IB_SL={want} where it is set now ({c.sl.source}); or trust the DSCP: "
                f"`mlnx_qos -i {nd.name} --trust dscp`")
    dscp2prio = nd.pfc.dscp2prio if nd.pfc is not None else {}
    clear = f"`echo -1 > {_tclass_path(c)}`"
    steps = []
    override_is_the_fault = (c.override is not None and c.nccl_tc is not None
                             and dscp2prio.get(c.nccl_tc.value >> 2) == want)
    if override_is_the_fault and c.nccl_tc is not None:
        steps.append(f"the global tclass {c.override} overrides NCCL_IB_TC {c.nccl_tc.value}, "
                     f"which maps to priority {want}: clear it with {clear}")
    steps.append(("or " if steps else "") + f"map DSCP {c.dscp} to priority {want}: `mlnx_qos -i {nd.name} --dscp2prio set,{c.dscp},{want}`")
    good = sorted(d for d, p in dscp2prio.items() if p == want)
    dscp = PREFERRED_DSCP if PREFERRED_DSCP in good else (good[0] if good else None)
    if dscp is not None:
        tc = _tc_for(c, dscp)
        if c.override is not None:
            steps.append(f"or set the global tclass to {tc} (DSCP {dscp}): `echo {tc} > {_tclass_path(c)}`")
        else:
            steps.append(f"or mark DSCP {dscp}: nccl.ib_tc = {tc} (NCCL_IB_TC, now from {c.tc_source})")
    if c.override is not None and not override_is_the_fault:
        steps.append(f"clearing the global tclass ({clear}) lets NCCL_IB_TC decide again")
    return "; ".join(steps)


def _priority_findings(c: RoceChain, nd: Netdev, want: int, require_pfc: bool, require_ecn: bool) -> Finding | None:
    if not c.configured or c.priority is None or c.priority == want:
        return None
    chain = c.describe()
    move = _move_to(c, nd, want)
    if require_pfc and c.pfc is False:
        return finding(
            "roce.qos.lossy", "critical", netdev_subject(c.netdev),
            f"RDMA traffic runs on priority {c.priority} without PFC: {chain}; roce.priority {want}",
            f"RDMA must use the lossless priority {want}: {move}",
            measured=str(c.priority), expected=str(want),
        )
    if require_ecn and c.ecn is False:
        return finding(
            "roce.qos.ecn_off", "critical", netdev_subject(c.netdev),
            f"RDMA traffic runs on priority {c.priority} with ECN off: {chain}; roce.priority {want}",
            f"RDMA must use priority {want}, where ECN and PFC are on: {move}; without ECN on priority "
            f"{c.priority} DCQCN cannot slow senders down",
            measured=str(c.priority), expected=str(want),
        )
    return finding(
        "roce.qos.priority_mismatch", "warning", netdev_subject(c.netdev),
        f"RDMA traffic runs on priority {c.priority}, not roce.priority {want}: {chain}",
        f"the switch's lossless class is priority {want} (roce.priority): {move}; or set roce.priority = {c.priority} "
        "if the fabric really uses that one",
        measured=str(c.priority), expected=str(want),
    )


def _trust_mismatch(c: RoceChain, want: int) -> Finding | None:
    if c.trust == "pcp" and c.configured and c.dscp != 0:
        return finding(
            "roce.qos.trust_mismatch", "warning", netdev_subject(c.netdev),
            f"{c.netdev} trusts pcp but DSCP {c.dscp} is marked, and ignored: {c.describe()}",
            f"trust the DSCP: `mlnx_qos -i {c.netdev} --trust dscp` (and check its dscp2prio map sends DSCP {c.dscp} "
            f"to priority {want}); or, for an L2 fabric, drop the DSCP marking and set NCCL_IB_SL (nccl.ib_sl = {want})",
            measured="pcp", expected="dscp",
        )
    if c.trust == "dscp" and c.sl.source != "NCCL default" and c.sl.value != 0 and not c.configured:
        return finding(
            "roce.qos.trust_mismatch", "warning", netdev_subject(c.netdev),
            f"{c.netdev} trusts dscp but only NCCL_IB_SL {c.sl.value} ({c.sl.source}) is set, and ignored: {c.describe()}",
            f"mark a DSCP that maps to priority {want}: nccl.ib_tc (e.g. 106, DSCP {PREFERRED_DSCP}); or trust pcp: "
            f"`mlnx_qos -i {c.netdev} --trust pcp`",
            measured="dscp", expected="pcp",
        )
    return None


def _tclass_override(c: RoceChain) -> Finding | None:
    if c.override is None or c.nccl_tc is None or c.override == c.nccl_tc.value:
        return None
    rules = (f"; {c.override_rules} per-address tclass rule(s) too (used only without a global value)"
             if c.override_rules else "")
    return finding(
        "roce.qos.tclass_override", "warning", port_subject(c.hca, c.port),
        f"global tclass {c.override} on {c.hca} port {c.port} overrides NCCL_IB_TC {c.nccl_tc.value} "
        f"({c.nccl_tc.source}) in every QP{rules}: {c.describe()}",
        f"clear the override: `echo -1 > {_tclass_path(c)}` (and remove what sets it at boot: a udev rule or "
        f"if-up script); or set it to NCCL_IB_TC: `echo {c.nccl_tc.value} > {_tclass_path(c)}`; "
        "or make NCCL_IB_TC (nccl.ib_tc) agree with it",
        measured=str(c.override), expected=str(c.nccl_tc.value),
    )


# ---------------------------------------------------------------------------
# lossy_traffic: where the port's RDMA bytes are really counted


@dataclass(frozen=True)
class _Rates:
    rdma: float  # bytes/s sent by RDMA on the port
    rdma_source: str
    pfc: float  # bytes/s on PFC-enabled priorities (over the port's netdevs)
    worst: tuple[float, str, int] | None  # (bytes/s, netdev, priority): busiest priority without PFC


def _rate(window: list[HistoryEntry], now: float, value: int | None, old: list[int | None],
          max_value: int | None = None) -> float | None:
    """Per second over the window; None: unknown (no value, a reset in the last step, saturated)."""
    if value is None:
        return None
    return counter_change([*((s.taken_at, v) for s, v in zip(window, old, strict=True)), (now, value)], max_value).rate


def _port_rdma_rate(inp: CheckInput, window: list[HistoryEntry], hca: str, p: IbPort,
                    nds: list[Netdev]) -> tuple[float, str] | None:
    now = inp.snapshot.taken_at
    value = p.counters.get("port_xmit_data")
    if value is not None:
        old = []
        for s in window:
            before = port_index(s).get((hca, p.port))
            old.append(before.counters.get("port_xmit_data") if before is not None else None)
        rate = _rate(window, now, value, old, pma_max("port_xmit_data", value))
        if rate is not None:
            return rate * 4, "port_xmit_data x 4"
    total, seen = 0.0, False
    for nd in nds:
        rate = _rate(window, now, (nd.ethtool or {}).get("tx_vport_rdma_unicast_bytes"),
                     [_ethtool(s, nd.name, "tx_vport_rdma_unicast_bytes") for s in window])
        if rate is not None:
            total, seen = total + rate, True
    return (total, "tx_vport_rdma_unicast_bytes") if seen else None


def _ethtool(s: HistoryEntry, name: str, key: str) -> int | None:
    nd = s.netdev(name)
    return (nd.ethtool or {}).get(key) if nd is not None else None


def _rates(inp: CheckInput, window: list[HistoryEntry], hca: str, p: IbPort, nds: list[Netdev]) -> _Rates | None:
    rdma = _port_rdma_rate(inp, window, hca, p, nds)
    if rdma is None:
        return None
    pfc_rate, worst, any_prio = 0.0, None, False
    for nd in nds:
        if nd.pfc is None:
            return None  # which priorities are lossless is unknown
        for prio in range(8):
            key = f"tx_prio{prio}_bytes"
            rate = _rate(window, inp.snapshot.taken_at, (nd.ethtool or {}).get(key), [_ethtool(s, nd.name, key) for s in window])
            if rate is None:
                continue
            any_prio = True
            if prio in nd.pfc.enabled:
                pfc_rate += rate
            elif worst is None or rate > worst[0]:
                worst = (rate, nd.name, prio)
    if not any_prio:
        return None
    return _Rates(rdma=rdma[0], rdma_source=rdma[1], pfc=pfc_rate, worst=worst)


def _lossy_traffic(inp: CheckInput, window: list[HistoryEntry], chains: list[RoceChain]) -> list[Finding]:
    want = inp.config.roce.priority
    limit = inp.config.thresholds.roce_lossy_min_bytes_per_s
    out = []
    for hca, p, _nd in roce_compute_ports(inp):
        port_chains = [c for c in chains if c.hca == hca and c.port == p.port]
        nds = [nd for nd in (inp.snapshot.netdev(c.netdev) for c in port_chains) if nd is not None]
        if not nds or any(nd.pfc is not None and want not in nd.pfc.enabled for nd in nds):
            continue  # roce.pfc.disabled already says the lossless priority is lossy
        r = _rates(inp, window, hca, p, nds)
        if r is None or r.worst is None or r.rdma < limit or r.pfc >= r.rdma / 2:
            continue
        rate, name, prio = r.worst
        c = next(x for x in port_chains if x.netdev == name)
        out.append(finding(
            "roce.qos.lossy_traffic", "critical", netdev_subject(name),
            f"{hca} port {p.port} sends RDMA at {_bytes_rate(r.rdma)} ({r.rdma_source}) but only {_bytes_rate(r.pfc)} is "
            f"counted on PFC priorities; priority {prio} (no PFC) carries {_bytes_rate(rate)} on {name} "
            f"(over {fmt(inp.config.thresholds.short_rate_window_s)} s); chain as configured: {c.describe()}",
            f"the traffic runs lossy: find which link puts it on priority {prio} (a job's own NCCL_IB_TC/NCCL_IB_SL, "
            f"the global tclass in {_tclass_path(c)}, the trust mode and dscp2prio map: `mlnx_qos -i {name}`) "
            f"and move it to priority {want}",
            measured=rate, expected=limit,
        ))
    return out


def _bytes_rate(v: float) -> str:
    """12.5e9 -> '12.5 GB/s' (decimal units, as link rates are given)."""
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if abs(v) >= scale:
            return f"{fmt(v / scale)} {unit}"
    return f"{fmt(v)} B/s"


def check_roce_qos(inp: CheckInput) -> list[Finding]:
    """roce.qos.lossy, roce.qos.ecn_off, roce.qos.priority_mismatch, roce.qos.trust_mismatch,
    roce.qos.tclass_override, roce.qos.lossy_traffic."""
    cfg = inp.config.roce
    chains = roce_chains(inp.snapshot, inp.config, roce_compute_ports(inp))
    out: list[Finding] = []
    ports_seen: set[tuple[str, int]] = set()
    for c in chains:
        nd = inp.snapshot.netdev(c.netdev)
        if nd is None:
            continue
        for f in (_priority_findings(c, nd, cfg.priority, cfg.require_pfc, cfg.require_ecn), _trust_mismatch(c, cfg.priority)):
            if f is not None:
                out.append(f)
        if (c.hca, c.port) not in ports_seen:
            ports_seen.add((c.hca, c.port))
            f = _tclass_override(c)
            if f is not None:
                out.append(f)
    window = changes(in_window(inp.history, inp.snapshot.taken_at, inp.config.thresholds.short_rate_window_s), lambda s: s.netdevs, lambda s: s.hcas)
    if window and cfg.require_pfc:
        out.extend(_lossy_traffic(inp, window, chains))
    return out
