"""rtnetlink link notifications -> an immediate fast-tier collection.

A port whose link drops is otherwise seen on the next fast-tier poll (``intervals.fast_s``,
2 s by default: ~1.3 s median from carrier loss to /health 503 and a rewritten
``NCCL_IB_HCA``). The kernel announces every link change on rtnetlink's RTMGRP_LINK
multicast group as it happens, so the daemon listens there and collects the fast tier
(port state, netdev state) as soon as a watched netdev's carrier or operstate changes.

The socket (AF_NETLINK, NETLINK_ROUTE, bound to RTMGRP_LINK, non-blocking) is read from the
event loop with ``loop.add_reader``, a bounded number of datagrams per wakeup. The
messages are parsed by hand (rtnetlink(7), linux/if_link.h): pyroute2 would do it but is a
large import, and agentd counts its RSS (docs/performance.md). Each RTM_NEWLINK/RTM_DELLINK
datagram is::

    struct nlmsghdr  { u32 len; u16 type; u16 flags; u32 seq; u32 pid; }      16 bytes
    struct ifinfomsg { u8 family; u8 pad; u16 type; s32 index; u32 flags; u32 change; } 16 bytes
    struct rtattr    { u16 len; u16 type; } + payload, each padded to 4 bytes ...

of which IFLA_IFNAME (3, NUL-terminated), IFLA_OPERSTATE (16, u8, RFC 2863 state) and
IFLA_CARRIER (33, u8) are used. The kernel sends RTM_NEWLINK for statistics and flag
updates too; only a change of carrier or operstate from what was last seen for that
ifindex (or, before any notification, from the current snapshot) triggers a collection,
as does RTM_DELLINK of a watched netdev. Malformed or truncated datagrams are counted and
dropped; nothing in them raises out of the reader.

Watched netdevs: the netdevs of RDMA ports (RoCE) and IPoIB netdevs of the current
snapshot; before the first snapshot, or on a node with none, every netdev but loopback.
By default (``events.rtnetlink = "auto"``) only on a live host root: the notifications
are the running kernel's. Failing to open the socket is logged once and is not fatal; the
tiered schedule still runs.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from dataclasses import dataclass
from typing import Callable, Collection, Iterator, Protocol

from agentd.daemon.logging import Log
from agentd.host.dcb import NETLINK_ROUTE, iter_attrs, iter_messages
from agentd.model import NodeSnapshot

RTMGRP_LINK = 0x1
RTM_NEWLINK = 16
RTM_DELLINK = 17
IFLA_IFNAME = 3
IFLA_OPERSTATE = 16
IFLA_CARRIER = 33
ARPHRD_INFINIBAND = 32
ARPHRD_LOOPBACK = 772
_IFINFOMSG = struct.Struct("=BxHiII")
_NLMSGHDR_SIZE = 16
# RFC 2863 operational states as the kernel numbers them (IF_OPER_*) and sysfs spells them
OPERSTATES = ("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up")
MAX_DATAGRAMS_PER_WAKEUP = 64
RECV_BYTES = 64 * 1024


@dataclass(frozen=True)
class LinkEvent:
    kind: str  # "new" | "del"
    ifindex: int
    ifname: str | None
    arphrd: int
    operstate: str | None  # OPERSTATES, or "unknown-<n>"
    carrier: bool | None


def parse_link_messages(data: bytes) -> tuple[list[LinkEvent], bool]:
    """The link events in one rtnetlink datagram, and whether any of it was malformed
    (events before the malformed part are kept). Never raises."""
    events: list[LinkEvent] = []
    if len(data) < _NLMSGHDR_SIZE:
        return events, bool(data)
    try:
        for mtype, _seq, payload in iter_messages(data):
            if mtype not in (RTM_NEWLINK, RTM_DELLINK):
                continue
            if len(payload) < _IFINFOMSG.size:
                return events, True
            _family, arphrd, ifindex, _flags, _change = _IFINFOMSG.unpack_from(payload)
            name: str | None = None
            operstate: str | None = None
            carrier: bool | None = None
            for atype, value in iter_attrs(payload[_IFINFOMSG.size :]):
                if atype == IFLA_IFNAME and value:
                    name = os.fsdecode(value.split(b"\0", 1)[0])
                elif atype == IFLA_OPERSTATE and value:
                    operstate = OPERSTATES[value[0]] if value[0] < len(OPERSTATES) else f"unknown-{value[0]}"
                elif atype == IFLA_CARRIER and value:
                    carrier = bool(value[0])
            events.append(LinkEvent("new" if mtype == RTM_NEWLINK else "del", ifindex, name, arphrd, operstate, carrier))
    except ValueError:
        return events, True
    return events, False


def watched_netdevs(snapshot: NodeSnapshot | None) -> frozenset[str] | None:
    """Netdevs of RDMA ports and IPoIB netdevs; None (watch all but loopback) when unknown."""
    if snapshot is None:
        return None
    names = {p.netdev for h in snapshot.hcas for p in h.ports if p.netdev}
    names.update(n.name for n in snapshot.netdevs if n.type == ARPHRD_INFINIBAND)
    return frozenset(names) or None


class NetlinkSocket(Protocol):
    """What the watcher uses of its socket (``open_rtnetlink``'s, or a test's)."""

    def fileno(self) -> int: ...

    def recv(self, bufsize: int, /) -> bytes: ...

    def close(self) -> None: ...


def open_rtnetlink() -> socket.socket:
    """A non-blocking NETLINK_ROUTE socket on RTMGRP_LINK. Raises OSError (caller logs it)."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC, NETLINK_ROUTE)
    try:
        sock.bind((0, RTMGRP_LINK))
    except OSError:
        sock.close()
        raise
    return sock


LinkState = tuple[str | None, bool | None]  # (operstate, carrier)


class LinkWatcher:
    """Calls ``trigger`` when a watched netdev's carrier or operstate changes.

    ``snapshot`` returns the daemon's current snapshot (what is watched, and the link state
    known before any notification). ``counts`` by outcome: ``changed`` (triggered),
    ``unchanged`` (statistics/flags only, or a repeat), ``unwatched``, ``malformed``."""

    def __init__(
        self,
        *,
        trigger: Callable[[], None],
        snapshot: Callable[[], NodeSnapshot | None],
        log: Log,
        opener: Callable[[], NetlinkSocket] = open_rtnetlink,
    ):
        self._trigger = trigger
        self._snapshot = snapshot
        self._log = log
        self._opener = opener
        self._sock: NetlinkSocket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last: dict[int, LinkState] = {}
        self.counts: dict[str, int] = {}
        self.error: str | None = None

    @property
    def active(self) -> bool:
        return self._sock is not None

    def start(self, loop: asyncio.AbstractEventLoop) -> bool:
        if self._sock is not None:
            return True
        try:
            sock = self._opener()
            loop.add_reader(sock.fileno(), self._readable)
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"
            self._log.warning("rtnetlink.unavailable", error=self.error, effect="link changes are seen on the fast-tier poll")
            return False
        self._sock, self._loop, self.error = sock, loop, None
        self._log.info("rtnetlink.watching", group="RTMGRP_LINK")
        return True

    def _count(self, outcome: str) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + 1

    def _datagrams(self, sock: NetlinkSocket) -> Iterator[bytes]:
        for _ in range(MAX_DATAGRAMS_PER_WAKEUP):  # bounded drain; the reader fires again if more is queued
            try:
                data = sock.recv(RECV_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # ENOBUFS: notifications were lost; what changed is unknown
                self._log.warning("rtnetlink.read_failed", error=f"{type(e).__name__}: {e}")
                self._count("overrun")
                self._last.clear()
                yield b""
                return
            if not data:
                return
            yield data

    def _readable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        fire = False
        snap = self._snapshot()
        watched = watched_netdevs(snap)
        for data in self._datagrams(sock):
            if not data:  # overrun: collect to be sure
                fire = True
                continue
            events, malformed = parse_link_messages(data)
            if malformed:
                self._count("malformed")
            for ev in events:
                if self._changed(ev, snap, watched):
                    fire = True
        if fire:
            self._trigger()

    def _changed(self, ev: LinkEvent, snap: NodeSnapshot | None, watched: Collection[str] | None) -> bool:
        is_watched = ev.ifname in watched if watched is not None else ev.arphrd != ARPHRD_LOOPBACK and ev.ifname != "lo"
        if not is_watched:
            self._last.pop(ev.ifindex, None)
            self._count("unwatched")
            return False
        if ev.kind == "del":
            self._last.pop(ev.ifindex, None)
            self._count("changed")
            self._log.debug("rtnetlink.link_removed", netdev=ev.ifname)
            return True
        prev = self._last.get(ev.ifindex)
        if prev is None:
            known = snap.netdev(ev.ifname) if snap is not None and ev.ifname else None
            prev = (known.operstate, known.carrier) if known is not None else (None, None)
        operstate = ev.operstate if ev.operstate is not None else prev[0]
        carrier = ev.carrier if ev.carrier is not None else prev[1]
        self._last[ev.ifindex] = (operstate, carrier)
        if (operstate, carrier) == prev:
            self._count("unchanged")
            return False
        self._count("changed")
        self._log.debug("rtnetlink.link_changed", netdev=ev.ifname, operstate=operstate, carrier=carrier, was_operstate=prev[0], was_carrier=prev[1])
        return True

    def stop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self._loop is not None:
            try:
                self._loop.remove_reader(sock.fileno())
            except Exception:
                pass
        try:
            sock.close()
        except Exception:
            pass
        self._last.clear()
