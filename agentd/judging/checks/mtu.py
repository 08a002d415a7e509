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

from agentd.judging.checks.common import CheckInput, roce_compute_ports
from agentd.judging.findings import finding, netdev_subject, port_subject
from agentd.model import Finding


def check_mtu(inp: CheckInput) -> list[Finding]:
    """mtu.mismatch (RoCE: critical; IPoIB: warning), mtu.ipoib (ok)."""
    expect = inp.config.expect
    out: list[Finding] = []
    roce = roce_compute_ports(inp)
    mtus = {nd.name: nd.mtu for _, _, nd in roce if nd.mtu is not None}
    done: set[str] = set()
    for hca, p, nd in roce:
        if nd.name in done or nd.mtu is None:
            continue
        done.add(nd.name)
        if nd.mtu == expect.roce_mtu:
            continue
        others = sorted({m for n, m in mtus.items() if n != nd.name})
        seen = f"; other RoCE compute netdevs: {', '.join(map(str, others))}" if others else ""
        out.append(finding(
            "mtu.mismatch",
            "critical",
            netdev_subject(nd.name),
            f"RoCE compute netdev of {port_subject(hca, p.port)} has MTU {nd.mtu}, expected {expect.roce_mtu} "
            f"(expect.roce_mtu){seen}",
            f"set it (`ip link set {nd.name} mtu {expect.roce_mtu}`, and persistently in the network config) to match "
            "the switch ports; or set expect.roce_mtu if the fabric uses another MTU",
            measured=nd.mtu,
            expected=expect.roce_mtu,
        ))
    for nd in inp.snapshot.netdevs:
        if nd.link_layer != "InfiniBand" or nd.mtu is None:
            continue
        if expect.ipoib_mtu is not None and nd.mtu != expect.ipoib_mtu:
            out.append(finding(
                "mtu.mismatch",
                "warning",
                netdev_subject(nd.name),
                f"IPoIB netdev MTU {nd.mtu}, expected {expect.ipoib_mtu} (expect.ipoib_mtu)",
                f"set it (`ip link set {nd.name} mtu {expect.ipoib_mtu}`; connected mode allows up to 65520, "
                "datagram mode 4092 on a 4K IB MTU) and persistently in the network config",
                measured=nd.mtu,
                expected=expect.ipoib_mtu,
            ))
        else:
            out.append(finding(
                "mtu.ipoib",
                "ok",
                netdev_subject(nd.name),
                f"IPoIB MTU {nd.mtu}" + ("" if expect.ipoib_mtu is not None else " (not judged: expect.ipoib_mtu unset)"),
                measured=nd.mtu,
                expected=expect.ipoib_mtu,
            ))
    return out
