"""Change a netdev's MTU through rtnetlink, as ``ip link set dev IF mtu N`` does.

The request is iproute2's (tests/fixtures/netlink: ``RTM_NEWLINK``, ``NLM_F_REQUEST |
NLM_F_ACK``, an ``ifinfomsg`` naming the device by index, one ``IFLA_MTU``); the kernel
answers with an acknowledgement or the reason it refused (``ERANGE``/``EINVAL`` with
"mtu greater than device maximum", ``EBUSY``...). An actuator: it changes what it is told
to and says what happened, never decides and never raises.
"""

from __future__ import annotations

import socket
import struct

from agentd.base.actuation import Outcome, failed
from agentd.host.dcb import NETLINK_ROUTE
from agentd.host.ethtool import valid_ifname
from agentd.host.nlwrite import attr_u32, message, netlink_outcome, open_socket, seq_now, talk

RTM_NEWLINK = 16
IFLA_MTU = 4
_IFINFOMSG = struct.Struct("=BxHiII")  # family, pad, type, index, flags, change


def build_set_mtu(ifindex: int, mtu: int, seq: int) -> bytes:
    body = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, ifindex, 0, 0) + attr_u32(IFLA_MTU, mtu)
    return message(RTM_NEWLINK, seq, body)


def set_mtu(name: str, mtu: int, timeout_s: float) -> Outcome:
    """Set ``name``'s MTU in the netns agentd runs in (the host's)."""
    if not valid_ifname(name):
        return failed(f"{name!r} is not a netdev name")
    try:
        index = socket.if_nametoindex(name)
    except OSError as e:
        return failed(f"no netdev {name}: {e.strerror or e}", e.errno)
    seq = seq_now()

    def run() -> None:
        with open_socket(NETLINK_ROUTE) as sock:
            talk(sock, build_set_mtu(index, mtu, seq), seq, timeout_s)

    return netlink_outcome(run, f"RTM_NEWLINK {name} IFLA_MTU {mtu}")
