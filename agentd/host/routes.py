"""The netdevs that carry a default route: the node's management path.

``proc/net/route`` (IPv4; net/ipv4/fib_trie.c ``fib_route_seq_show``): a header line, then
one line a route, tab-separated: ``Iface Destination Gateway Flags RefCnt Use Metric Mask
MTU Window IRTT``, addresses and flags in hex. A default route has destination and mask
``00000000`` and RTF_UP (0x1) set.

``proc/net/ipv6_route`` (net/ipv6/route.c ``ipv6_route_native_seq_show``): one line a
route, space-separated: destination (32 hex digits), prefix length (2 hex), source,
source prefix length, next hop, metric, refcnt, use, flags (8 hex), interface. A default
route has an all-zero destination of length 0, RTF_UP and not RTF_REJECT (0x200: the
kernel's "unreachable" placeholders on ``lo``).

Both files are the reading process's network namespace's: a container sees the node's
only with the host network. Absent files give no default route, never an
error (a node without IPv6); one that cannot be read is a read error.
"""

from __future__ import annotations

from agentd.base.ids import natural_key
from agentd.host.fs import ReadContext

ROUTE4 = "proc/net/route"
ROUTE6 = "proc/net/ipv6_route"
ROUTES_MAX_BYTES = 1 << 20  # a table of ~8000 routes; a larger one is read up to here
RTF_UP = 0x1
RTF_REJECT = 0x200


def parse_route4(text: str) -> set[str]:
    out: set[str] = set()
    for line in text.splitlines()[1:]:
        f = line.split("\t")
        if len(f) < 8:
            continue
        iface, dest, flags, mask = f[0].strip(), f[1].strip(), f[3].strip(), f[7].strip()
        try:
            up = int(flags, 16) & RTF_UP
        except ValueError:
            continue
        if up and dest == "00000000" and mask == "00000000" and iface:
            out.add(iface)
    return out


def parse_route6(text: str) -> set[str]:
    out: set[str] = set()
    for line in text.splitlines():
        f = line.split()
        if len(f) != 10:
            continue
        dest, plen, flags, iface = f[0], f[1], f[8], f[9]
        try:
            fl = int(flags, 16)
        except ValueError:
            continue
        if dest.strip("0") == "" and plen == "00" and fl & RTF_UP and not fl & RTF_REJECT and iface != "lo":
            out.add(iface)
    return out


def read_default_routes(ctx: ReadContext) -> tuple[str, ...]:
    """The netdevs with a default route, IPv4 or IPv6, in natural order."""
    out: set[str] = set()
    for path, parse in ((ROUTE4, parse_route4), (ROUTE6, parse_route6)):
        data = ctx.raw(path, max_bytes=ROUTES_MAX_BYTES)
        if data is not None:
            out |= parse(data.decode("ascii", "replace"))
    return tuple(sorted(out, key=natural_key))
