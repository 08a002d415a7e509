"""The default route's netdevs from proc/net/route and proc/net/ipv6_route (issue 36: the
management NIC is never compute). The text is the kernel's, as read on a Linux 6.x node
(net/ipv4/fib_trie.c pads each IPv4 line to 127 characters; net/ipv6/route.c pads the
interface to 8)."""

from __future__ import annotations

from agentd.capture.redact import Redactor
from agentd.host.fs import HostRoot, ReadContext
from agentd.host.routes import parse_route4, parse_route6, read_default_routes

ROUTE4 = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT".ljust(127) + "\n"
    + "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0".ljust(127) + "\n"
    + "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0".ljust(127) + "\n"
)
ROUTE6 = (
    "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n"
    "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000002 00000000 00000003     bond0\n"
    "00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n"
)


def test_parse():
    assert parse_route4(ROUTE4) == {"eth0"}
    assert parse_route6(ROUTE6) == {"bond0"}  # lo's is the kernel's unreachable placeholder (RTF_REJECT)
    assert parse_route4("garbage\nmore garbage\n") == set() and parse_route6("x y z\n") == set()


def test_read_default_routes(tmp_path):
    (tmp_path / "proc/net").mkdir(parents=True)
    (tmp_path / "proc/net/route").write_text(ROUTE4)
    (tmp_path / "proc/net/ipv6_route").write_text(ROUTE6)
    with ReadContext(HostRoot(tmp_path, "offline"), "system") as ctx:
        assert read_default_routes(ctx) == ("bond0", "eth0")
        assert ctx.errors == []
    (tmp_path / "proc/net/ipv6_route").unlink()  # no IPv6: no route, no error
    with ReadContext(HostRoot(tmp_path, "offline"), "system") as ctx:
        assert read_default_routes(ctx) == ("eth0",) and ctx.errors == []


def test_a_redacted_capture_keeps_only_the_default_routes_without_addresses():
    r = Redactor(key=b"k" * 32)
    out4 = r.redact("proc/net/route", ROUTE4.encode()).decode()
    assert parse_route4(out4) == {"eth0"} and "010200C0" not in out4 and "000200C0" not in out4
    out6 = r.redact("proc/net/ipv6_route", ROUTE6.encode()).decode()
    assert parse_route6(out6) == {"bond0"} and "fd00" not in out6
