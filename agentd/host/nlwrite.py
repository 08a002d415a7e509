"""Netlink requests that change something, and their acknowledgements.

What the kernel's tools send, built the way they build them (libmnl: attributes padded
to 4 bytes with zeros, nests flagged ``NLA_F_NESTED``, every request
``NLM_F_REQUEST | NLM_F_ACK``), so that a request here is byte for byte the one
``ip``, ``dcb`` or ``ethtool`` sends for the same change (tests/fixtures/netlink).

``talk`` sends one request and waits, bounded, for its acknowledgement: the kernel's
``NLMSG_ERROR`` with error 0 (done) or a negative errno, with the extended ack's message
when the kernel gives one ("mtu greater than device maximum"), which the socket asks for
(``NETLINK_EXT_ACK``). Replies before the acknowledgement are handed back (a DCB set
answers with its own status attribute first). Decoding is agentd.host.dcb's.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import Callable, Iterable

from agentd.base.actuation import Outcome, done, failed
from agentd.host.dcb import NLA_F_NESTED, NLMSG_ERROR, NetlinkError, iter_attrs, iter_messages

NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
REQUEST_ACK = NLM_F_REQUEST | NLM_F_ACK
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10  # the error echoes only the request's header, not all of it
NETLINK_EXT_ACK = 11  # the error carries the kernel's message (NLMSGERR_ATTR_MSG)
NLMSGERR_ATTR_MSG = 1
_NLMSGHDR = struct.Struct("=IHHII")
_NLATTR = struct.Struct("=HH")


def _pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


def attr(atype: int, payload: bytes) -> bytes:
    """One attribute, padded to 4 bytes (the length field counts the payload unpadded)."""
    return _pad(_NLATTR.pack(_NLATTR.size + len(payload), atype) + payload)


def attr_strz(atype: int, name: str) -> bytes:
    """A NUL-terminated string attribute: a netdev name as the kernel's bytes."""
    return attr(atype, os.fsencode(name) + b"\0")


def attr_u8(atype: int, value: int) -> bytes:
    return attr(atype, bytes((value,)))


def attr_u32(atype: int, value: int) -> bytes:
    return attr(atype, struct.pack("=I", value))


def nest(atype: int, children: Iterable[bytes]) -> bytes:
    body = b"".join(children)
    return _NLATTR.pack(_NLATTR.size + len(body), atype | NLA_F_NESTED) + body


def message(mtype: int, seq: int, body: bytes, flags: int = REQUEST_ACK) -> bytes:
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), mtype, flags, seq & 0xFFFFFFFF, 0) + body


def seq_now() -> int:
    """A sequence number as iproute2 picks one (the time in seconds)."""
    return int(time.time()) & 0xFFFFFFFF


def open_socket(protocol: int) -> socket.socket:
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, protocol)
    for opt in (NETLINK_CAP_ACK, NETLINK_EXT_ACK):
        try:
            s.setsockopt(SOL_NETLINK, opt, 1)
        except OSError:  # an old kernel: the errno alone then
            pass
    s.bind((0, 0))
    return s


def _ack(payload: bytes) -> tuple[int, str]:
    """(errno, the extended ack's message) of an NLMSG_ERROR payload; errno 0: done. The
    message's attributes follow the echoed request: its header alone (NETLINK_CAP_ACK) or
    all of it (a kernel that refused the option)."""
    if len(payload) < 4:
        raise ValueError("short NLMSG_ERROR")
    err = -struct.unpack_from("=i", payload)[0]
    if len(payload) < 4 + _NLMSGHDR.size:
        return err, ""
    echoed = _NLMSGHDR.unpack_from(payload, 4)[0]
    for skip in (4 + _NLMSGHDR.size, 4 + ((echoed + 3) & ~3)):
        try:
            for atype, value in iter_attrs(payload[skip:]):
                if atype == NLMSGERR_ATTR_MSG:
                    return err, value.rstrip(b"\0").decode("utf-8", "replace")
        except ValueError:
            continue
    return err, ""


def talk(sock: socket.socket, request: bytes, seq: int, timeout_s: float) -> list[tuple[int, bytes]]:
    """Send ``request`` and return the (type, payload) of every message answering ``seq``
    before its acknowledgement. Raises NetlinkError (with the kernel's message, when it
    gave one), TimeoutError past ``timeout_s``, ValueError on a malformed answer, OSError."""
    sock.send(request)
    deadline = time.monotonic() + timeout_s
    replies: list[tuple[int, bytes]] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        data = sock.recv(65536)
        for mtype, mseq, payload in iter_messages(data):
            if mseq != seq:
                continue
            if mtype == NLMSG_ERROR:
                err, text = _ack(payload)
                if err:
                    e = NetlinkError(err)
                    if text:
                        e.args = (f"{e.args[0]}: {text}",)
                    raise e
                return replies
            replies.append((mtype, payload))


def netlink_outcome(run: Callable[[], object], what: str) -> Outcome:
    """``run`` (a request and its acknowledgement) as an Outcome: the kernel's refusal
    with its errno and message, a timeout, a socket that cannot be opened."""
    try:
        run()
    except NetlinkError as e:
        return failed(f"{what}: {e}", e.errno)
    except TimeoutError:
        return failed(f"{what}: no answer from the kernel in time")
    except ValueError as e:
        return failed(f"{what}: malformed answer: {e}")
    except OSError as e:
        return failed(f"{what}: {e.strerror or e}", e.errno)
    return done(what)
