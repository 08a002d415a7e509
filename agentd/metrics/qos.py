"""RoCE QoS metrics: the chain from NCCL_IB_TC to the priority RDMA traffic uses, and PFC
and ECN on that priority (agentd.judging.qos), one series per RoCE netdev.

A RoCE compute port's netdev (each slave of a bond) carries its whole chain; any other
netdev whose PFC configuration was read (storage NICs) carries its trust mode and where it
was read, the chain labels empty. The IB service level (NCCL_IB_SL, the SM's sm_sl) is on
agentd_ib_port_info (area fabric): one more series per port would cost the series budget.
"""

from __future__ import annotations

from typing import Final

from agentd.base.expo import Exposition, Family, MetricType
from agentd.judging.checks.common import CheckInput, roce_compute_ports
from agentd.judging.qos import RoceChain, roce_chains
from agentd.judging.roles import HcaRoles
from agentd.metrics.registry import Area
from agentd.metrics.source import MetricsSource
from agentd.model import Netdev

G: Final[MetricType] = "gauge"
LABELS = ("device", "port", "netdev", "trust", "source", "tc", "tc_source", "dscp", "priority", "pfc", "ecn")

FAMILIES: tuple[Family, ...] = (
    Family(
        "agentd_roce_qos_info", G,
        "RoCE QoS of a netdev (value 1; \"\" where unknown or not a RoCE compute port): device and port the HCA port; "
        "trust the QoS trust mode (pcp or dscp) and source where the PFC configuration was read; for a compute port, tc the "
        "traffic class NCCL's QPs get and tc_source where it is set (override: the HCA's global tclass; nccl.ib_tc, "
        "nccl.overrides.NCCL_IB_TC, nccl.profiles.<p>.NCCL_IB_TC, /etc/nccl.conf, or NCCL default when nothing sets it); "
        "dscp = tc >> 2; priority the priority the traffic uses (dscp2prio of the DSCP in trust dscp, NCCL_IB_SL in trust "
        "pcp); pfc and ecn (on or off) on that priority.",
        LABELS,
    ),
)


def _onoff(v: bool | None) -> str:
    return "" if v is None else "on" if v else "off"


def _chain_labels(c: RoceChain, nd: Netdev) -> tuple[object, ...]:
    source = nd.pfc.source if nd.pfc is not None else ""
    return (c.hca, c.port, c.netdev, c.trust or "", source, c.tc, c.tc_source, c.dscp,
            "" if c.priority is None else c.priority, _onoff(c.pfc), _onoff(c.ecn))


def cache_key(s: MetricsSource) -> tuple[object, ...] | None:
    snap = s.snapshot
    if snap is None:
        return None
    return (snap.hcas, snap.netdevs, snap.nccl_conf, s.compute_hcas, s.config)


def render(x: Exposition, s: MetricsSource) -> None:
    snap = s.snapshot
    if snap is None:
        return
    roles = HcaRoles(compute=s.compute_hcas, other=(), source=s.hca_roles_source)
    ports = roce_compute_ports(CheckInput(snapshot=snap, history=(), config=s.config, roles=roles))
    by_netdev: dict[str, list[RoceChain]] = {}
    for c in roce_chains(snap, s.config, ports):
        by_netdev.setdefault(c.netdev, []).append(c)
    port_of_netdev: dict[str, tuple[str, int]] = {}
    for h in snap.hcas:
        for p in h.ports:
            if p.netdev:
                port_of_netdev.setdefault(p.netdev, (h.name, p.port))
    for nd in snap.netdevs:
        chains = by_netdev.get(nd.name)
        if chains:
            for c in chains:
                x.add("agentd_roce_qos_info", _chain_labels(c, nd), 1)
        elif nd.pfc is not None:
            dev, port = port_of_netdev.get(nd.name, ("", 0))
            x.add("agentd_roce_qos_info", (dev, port or "", nd.name, nd.pfc.trust or "", nd.pfc.source, "", "", "", "", "", ""), 1)


AREA = Area("qos", FAMILIES, render, cache_key)
