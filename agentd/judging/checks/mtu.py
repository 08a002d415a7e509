"""Netdev MTU of the RoCE compute interfaces and of IPoIB interfaces.

RoCE: every netdev of an Ethernet port of a compute HCA must have ``expect.roce_mtu``
(9000 by default). A mismatch is critical: a host MTU that differs from the fabric's
breaks or fragments the path (RDMA path MTU follows the netdev MTU). Since every netdev is
held to the same configured value, netdevs that differ from each other are caught too;
the message lists the other MTUs seen.

IPoIB (ARPHRD_INFINIBAND netdevs): reported with severity ok, judged (warning: IPoIB is
not NCCL's data path) only when ``expect.ipoib_mtu`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentd.config import Expectations
from agentd.judging.checks.common import CheckInput
from agentd.judging.findings import finding, netdev_subject, port_subject
from agentd.judging.roles import HcaRoles
from agentd.model import Finding, Netdev, NodeSnapshot


@dataclass(frozen=True)
class MtuRule:
    """The MTU one netdev is held to."""

    netdev: Netdev
    expected: int | None  # None: IPoIB with expect.ipoib_mtu unset (reported, not judged)
    port: tuple[str, int] | None = None  # RoCE: the compute HCA port the netdev carries


def mtu_rules(snapshot: NodeSnapshot, roles: HcaRoles, expect: Expectations) -> list[MtuRule]:
    """The one MTU rule, for this check and for the exported expected values
    (``agentd.judging.expected``): the netdev of each Ethernet (RoCE) port of a compute
    HCA is held to ``expect.roce_mtu`` (once, by its first port); every IPoIB netdev
    (link layer InfiniBand) to ``expect.ipoib_mtu``, None when that is unset. Only
    netdevs the snapshot has; RoCE first, in HCA and port order."""
    rules: list[MtuRule] = []
    seen: set[str] = set()
    for h in snapshot.hcas:
        if not roles.is_compute(h.name):
            continue
        for p in h.ports:
            nd = snapshot.netdev(p.netdev) if p.link_layer == "Ethernet" and p.netdev else None
            if nd is not None and nd.name not in seen:
                seen.add(nd.name)
                rules.append(MtuRule(nd, expect.roce_mtu, (h.name, p.port)))
    rules += [MtuRule(nd, expect.ipoib_mtu) for nd in snapshot.netdevs if nd.link_layer == "InfiniBand"]
    return rules


def check_mtu(inp: CheckInput) -> list[Finding]:
    """mtu.mismatch (RoCE: critical; IPoIB: warning), mtu.ipoib (ok)."""
    out: list[Finding] = []
    rules = [r for r in mtu_rules(inp.snapshot, inp.resolved_roles(), inp.config.expect) if r.netdev.mtu is not None]
    roce_mtus = {r.netdev.name: r.netdev.mtu for r in rules if r.port is not None and r.netdev.mtu is not None}
    for r in rules:
        nd, expected = r.netdev, r.expected
        if r.port is not None:
            if nd.mtu == expected:
                continue
            others = sorted({m for n, m in roce_mtus.items() if n != nd.name})
            seen = f"; other RoCE compute netdevs: {', '.join(map(str, others))}" if others else ""
            out.append(finding(
                "mtu.mismatch",
                "critical",
                netdev_subject(nd.name),
                f"RoCE compute netdev of {port_subject(*r.port)} has MTU {nd.mtu}, expected {expected} "
                f"(expect.roce_mtu){seen}",
                f"set it (`ip link set {nd.name} mtu {expected}`, and persistently in the network config) to match "
                "the switch ports; or set expect.roce_mtu if the fabric uses another MTU",
                measured=nd.mtu,
                expected=expected,
            ))
        elif expected is not None and nd.mtu != expected:
            out.append(finding(
                "mtu.mismatch",
                "warning",
                netdev_subject(nd.name),
                f"IPoIB netdev MTU {nd.mtu}, expected {expected} (expect.ipoib_mtu)",
                f"set it (`ip link set {nd.name} mtu {expected}`; connected mode allows up to 65520, "
                "datagram mode 4092 on a 4K IB MTU) and persistently in the network config",
                measured=nd.mtu,
                expected=expected,
            ))
        else:
            out.append(finding(
                "mtu.ipoib",
                "ok",
                netdev_subject(nd.name),
                f"IPoIB MTU {nd.mtu}" + ("" if expected is not None else " (not judged: expect.ipoib_mtu unset)"),
                measured=nd.mtu,
                expected=expected,
            ))
    return out
