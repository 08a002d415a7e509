"""rtnetlink link notifications (agentd.daemon.netlink): the parser, the watcher, a live veth.

The messages are built byte by byte as the kernel sends them (rtnetlink(7), linux/if_link.h,
linux/netlink.h; native byte order, every part padded to 4 bytes):

    struct nlmsghdr  { __u32 nlmsg_len; __u16 nlmsg_type; __u16 nlmsg_flags; __u32 nlmsg_seq; __u32 nlmsg_pid; }
    struct ifinfomsg { unsigned char ifi_family; unsigned char __pad; unsigned short ifi_type;
                       int ifi_index; unsigned ifi_flags; unsigned ifi_change; }
    struct rtattr    { unsigned short rta_len; unsigned short rta_type; } + payload

RTM_NEWLINK = 16, RTM_DELLINK = 17; IFLA_IFNAME = 3 (NUL-terminated string), IFLA_MTU = 4
(u32), IFLA_OPERSTATE = 16 (u8, IF_OPER_*: 2 down, 6 up), IFLA_CARRIER = 33 (u8).
Fuzzing of the parser: tests/property/test_prop_netlink.py.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import struct
import subprocess
import time

import pytest

from agentd.daemon.netlink import LinkEvent, LinkWatcher, open_rtnetlink, parse_link_messages, watched_netdevs
from agentd.model import Hca, IbPort, Netdev, NodeSnapshot

RTM_NEWLINK, RTM_DELLINK, RTM_NEWADDR = 16, 17, 20
IFLA_IFNAME, IFLA_MTU, IFLA_OPERSTATE, IFLA_CARRIER = 3, 4, 16, 33
ARPHRD_ETHER = 1


def rtattr(atype: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), atype) + payload
    return raw + b"\0" * (-len(raw) % 4)


def link_msg(ifname: str | None, *, ifindex: int = 7, operstate: int | None = 6, carrier: int | None = 1, mtype: int = RTM_NEWLINK,
             arphrd: int = ARPHRD_ETHER, mtu: int = 9000) -> bytes:
    body = struct.pack("=BxHiII", socket.AF_UNSPEC, arphrd, ifindex, 0x11043, 0)  # IFF_UP|BROADCAST|RUNNING|MULTICAST|LOWER_UP
    if ifname is not None:
        body += rtattr(IFLA_IFNAME, ifname.encode() + b"\0")
    body += rtattr(IFLA_MTU, struct.pack("=I", mtu))
    if operstate is not None:
        body += rtattr(IFLA_OPERSTATE, bytes([operstate]))
    if carrier is not None:
        body += rtattr(IFLA_CARRIER, bytes([carrier]))
    return struct.pack("=IHHII", 16 + len(body), mtype, 0, 0, 0) + body


# -- parser ---------------------------------------------------------------------------


def test_a_carrier_loss_notification_parses():
    events, malformed = parse_link_messages(link_msg("ens1np0", operstate=2, carrier=0))
    assert not malformed
    assert events == [LinkEvent("new", 7, "ens1np0", ARPHRD_ETHER, "down", False)]


def test_several_messages_in_one_datagram_and_other_types_skipped():
    other = struct.pack("=IHHII", 16 + 8, RTM_NEWADDR, 0, 0, 0) + b"\0" * 8
    data = link_msg("ib0", ifindex=3, arphrd=32) + other + link_msg("ib0", ifindex=3, mtype=RTM_DELLINK, operstate=None, carrier=None)
    events, malformed = parse_link_messages(data)
    assert not malformed
    assert [(e.kind, e.ifname, e.operstate, e.carrier) for e in events] == [("new", "ib0", "up", True), ("del", "ib0", None, None)]


def test_truncated_datagram_keeps_what_came_before_and_says_malformed():
    whole = link_msg("ens1np0") + link_msg("ens2np0", ifindex=8)
    events, malformed = parse_link_messages(whole[:-5])
    assert malformed
    assert [e.ifname for e in events] == ["ens1np0"]


def test_an_unknown_operstate_is_named_not_dropped():
    (event,), _ = parse_link_messages(link_msg("x", operstate=9))
    assert event.operstate == "unknown-9"


# -- what is watched ---------------------------------------------------------------------


def snapshot(*netdevs: Netdev, port_netdevs: tuple[str, ...] = ()) -> NodeSnapshot:
    hcas = tuple(Hca(name=f"mlx5_{i}", ports=(IbPort(port=1, netdev=nd),)) for i, nd in enumerate(port_netdevs))
    return NodeSnapshot(taken_at=0.0, host_root="/", hcas=hcas, netdevs=netdevs)


def test_watched_are_rdma_port_netdevs_and_ipoib_else_everything():
    snap = snapshot(Netdev(name="ib0", type=32), Netdev(name="eth0", type=1), port_netdevs=("ens1np0",))
    assert watched_netdevs(snap) == {"ens1np0", "ib0"}
    assert watched_netdevs(snapshot(Netdev(name="eth0", type=1))) is None
    assert watched_netdevs(None) is None


# -- the watcher over a socketpair -------------------------------------------------------


class Log:
    def __init__(self):
        self.events: list[tuple[str, dict]] = []

    def __getattr__(self, level):
        return lambda event, **kw: self.events.append((event, kw))


class Harness:
    """A LinkWatcher reading one end of a datagram socketpair, as it would read rtnetlink."""

    def __init__(self, snap: NodeSnapshot | None):
        self.ours, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.ours.setblocking(False)
        self.fired = 0
        self.snap = snap
        self.log = Log()
        self.watcher = LinkWatcher(trigger=self.fire, snapshot=lambda: self.snap, log=self.log, opener=lambda: self.ours)

    def fire(self):
        self.fired += 1

    async def send(self, *datagrams: bytes) -> None:
        for d in datagrams:
            self.theirs.send(d)
        for _ in range(50):  # let the reader run (it drains everything queued in one wakeup)
            await asyncio.sleep(0)
            if not self._pending():
                break
        await asyncio.sleep(0.01)

    def _pending(self) -> bool:
        try:
            self.ours.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            return True
        except BlockingIOError:
            return False

    def close(self):
        self.watcher.stop()
        self.theirs.close()


@pytest.fixture
async def roce():
    h = Harness(snapshot(Netdev(name="ens1np0", ifindex=7, type=1, operstate="up", carrier=True), Netdev(name="eth0", ifindex=2, type=1), port_netdevs=("ens1np0",)))
    assert h.watcher.start(asyncio.get_running_loop())
    yield h
    h.close()


async def test_a_carrier_change_triggers_once_and_repeats_do_not(roce):
    await roce.send(link_msg("ens1np0", operstate=6, carrier=1))  # as the snapshot knows it: statistics only
    assert roce.fired == 0
    await roce.send(link_msg("ens1np0", operstate=2, carrier=0))
    assert roce.fired == 1
    await roce.send(link_msg("ens1np0", operstate=2, carrier=0), link_msg("ens1np0", operstate=2, carrier=0))
    assert roce.fired == 1
    await roce.send(link_msg("ens1np0", operstate=6, carrier=1))
    assert roce.fired == 2
    assert roce.watcher.counts == {"changed": 2, "unchanged": 3}


async def test_a_burst_in_one_wakeup_triggers_once(roce):
    await roce.send(link_msg("ens1np0", operstate=2, carrier=0), link_msg("ens1np0", operstate=6, carrier=1), link_msg("ens1np0", operstate=2, carrier=0))
    assert roce.fired == 1
    assert roce.watcher.counts == {"changed": 3}


async def test_unwatched_netdevs_do_not_trigger(roce):
    await roce.send(link_msg("eth0", ifindex=2, operstate=2, carrier=0), link_msg("veth9", ifindex=30, operstate=2, carrier=0))
    assert roce.fired == 0
    assert roce.watcher.counts == {"unwatched": 2}


async def test_removal_of_a_watched_netdev_triggers(roce):
    await roce.send(link_msg("ens1np0", mtype=RTM_DELLINK, operstate=None, carrier=None))
    assert roce.fired == 1


async def test_garbage_is_counted_and_the_reader_keeps_going(roce):
    await roce.send(b"\x01\x02", struct.pack("=IHHII", 4000, RTM_NEWLINK, 0, 0, 0) + b"x" * 20)
    assert roce.watcher.counts == {"malformed": 2} and roce.watcher.active
    await roce.send(link_msg("ens1np0", operstate=2, carrier=0))
    assert roce.fired == 1


async def test_without_a_snapshot_everything_but_loopback_is_watched():
    h = Harness(None)
    h.watcher.start(asyncio.get_running_loop())
    try:
        await h.send(link_msg("lo", ifindex=1, arphrd=772, operstate=0))
        assert h.fired == 0
        await h.send(link_msg("eth0", ifindex=2, operstate=2, carrier=0))
        assert h.fired == 1
        await h.send(link_msg("eth0", ifindex=2, operstate=2, carrier=0))
        assert h.fired == 1
    finally:
        h.close()


async def test_a_socket_that_cannot_open_is_logged_once_and_not_fatal():
    def broken():
        raise PermissionError(1, "Operation not permitted")

    log = Log()
    w = LinkWatcher(trigger=lambda: None, snapshot=lambda: None, log=log, opener=broken)
    assert not w.start(asyncio.get_running_loop())
    assert not w.active and "Operation not permitted" in (w.error or "")
    assert [e for e, _ in log.events] == ["rtnetlink.unavailable"]


# -- a real notification from the running kernel -------------------------------------------


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.mark.proc
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and iproute2 to create a veth pair")
async def test_a_live_veth_carrier_loss_arrives():
    a, b = f"agtl{os.getpid() % 100000}a", f"agtl{os.getpid() % 100000}b"
    try:
        _ip("link", "add", a, "type", "veth", "peer", "name", b)
    except (subprocess.CalledProcessError, OSError) as e:
        pytest.skip(f"cannot create a veth pair here: {e}")
    try:
        _ip("link", "set", a, "up")
        _ip("link", "set", b, "up")
        fired: list[float] = []
        snap = snapshot(Netdev(name=a, type=1, operstate="up", carrier=True), port_netdevs=(a,))
        log = Log()
        w = LinkWatcher(trigger=lambda: fired.append(time.monotonic()), snapshot=lambda: snap, log=log, opener=open_rtnetlink)
        assert w.start(asyncio.get_running_loop()), w.error
        try:
            await asyncio.sleep(0.2)  # the notifications of bringing them up (a's carrier may still be settling)
            fired.clear()
            log.events.clear()
            _ip("link", "set", b, "down")  # a loses carrier: RTM_NEWLINK for a

            def lost() -> bool:
                return any(e == "rtnetlink.link_changed" and kw["netdev"] == a and kw["carrier"] is False for e, kw in log.events)

            for _ in range(300):
                if fired and lost():
                    break
                await asyncio.sleep(0.01)
            assert fired and lost(), (w.counts, log.events)
        finally:
            w.stop()
    finally:
        subprocess.run(["ip", "link", "del", a], capture_output=True, timeout=10)


async def test_lost_notifications_collect_to_be_sure():
    import errno

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    ours.setblocking(False)

    class Overrun:  # the kernel's answer when its socket buffer overflowed: ENOBUFS, once
        raised = False

        def fileno(self):
            return ours.fileno()

        def recv(self, n):
            if not self.raised:
                self.raised = True
                raise OSError(errno.ENOBUFS, os.strerror(errno.ENOBUFS))
            return ours.recv(n)

        def close(self):
            ours.close()

    fired = []
    snap = snapshot(Netdev(name="eth0", ifindex=2, type=1, operstate="up", carrier=True))
    w = LinkWatcher(trigger=lambda: fired.append(1), snapshot=lambda: snap, log=Log(), opener=Overrun)
    assert w.start(asyncio.get_running_loop())
    try:
        theirs.send(link_msg("eth0", ifindex=2))  # as the snapshot knows it: would not trigger on its own
        for _ in range(100):
            if w.counts.get("unchanged"):
                break
            await asyncio.sleep(0.01)
        assert fired == [1] and w.counts == {"overrun": 1, "unchanged": 1} and w.active
    finally:
        w.stop()
        theirs.close()
