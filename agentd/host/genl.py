"""Generic netlink: resolve a family by name and ask it one question at a time.

What ``ethtool`` and ``ynl`` do (genetlink(7), linux/genetlink.h), by hand as the DCB and
link-event code do (agentd.host.dcb, agentd.daemon.netlink): pyroute2 would do it but is a
large import, and agentd counts its RSS (docs/performance.md). The message parsing
(``iter_messages``, ``iter_attrs``, ``NetlinkError``) is agentd.host.dcb's.

A request is one message (``NLM_F_REQUEST``, no dump) of the family's id with a
``struct genlmsghdr {u8 cmd; u8 version; u16 reserved}`` and attributes; the kernel answers
with one message of the same family or an ``NLMSG_ERROR``. Every wait is bounded
(``REPLY_TIMEOUT_S``). A family that does not exist (CTRL_CMD_GETFAMILY answers ENOENT:
the kernel was built without it) is ``None``, not an error.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from typing import Iterable

from agentd.host.dcb import NLA_F_NESTED, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR, NetlinkError, iter_attrs, iter_messages, raise_for_error

NETLINK_GENERIC = 16
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2
REPLY_TIMEOUT_S = 2.0
RECV_BYTES = 64 * 1024
_NLMSGHDR = struct.Struct("=IHHII")
_NLATTR = struct.Struct("=HH")
_GENLMSGHDR = struct.Struct("=BBH")


# ---------------------------------------------------------------------------
# encoding (pure)


def attr(atype: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to 4 bytes."""
    a = _NLATTR.pack(_NLATTR.size + len(payload), atype) + payload
    return a + b"\0" * (-len(a) % 4)


def nest(atype: int, parts: Iterable[bytes]) -> bytes:
    return attr(atype | NLA_F_NESTED, b"".join(parts))


def u8(atype: int, value: int) -> bytes:
    return attr(atype, struct.pack("=B", value))


def u32(atype: int, value: int) -> bytes:
    return attr(atype, struct.pack("=I", value))


def strz(atype: int, value: str) -> bytes:
    return attr(atype, os.fsencode(value) + b"\0")  # the kernel's bytes: a name that is not UTF-8 too


def message(family: int, cmd: int, attrs: bytes, seq: int, version: int = 1) -> bytes:
    body = _GENLMSGHDR.pack(cmd, version, 0) + attrs
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), family, NLM_F_REQUEST, seq, 0) + body


def reply(data: bytes, seq: int, family: int) -> tuple[bool, bytes | None]:
    """(answered, the attributes after the genlmsghdr) for request ``seq`` in a datagram.
    Raises NetlinkError for an error answer, ValueError for malformed data."""
    for mtype, mseq, payload in iter_messages(data):
        if mseq != seq:
            continue
        if mtype == NLMSG_ERROR:
            raise_for_error(payload)
            continue  # an ACK
        if mtype == NLMSG_DONE:
            return True, None
        if mtype == family:
            if len(payload) < _GENLMSGHDR.size:
                raise ValueError("short genlmsghdr")
            return True, payload[_GENLMSGHDR.size :]
    return False, None


def attrs_of(data: bytes) -> dict[int, bytes]:
    """The attributes of a message or nest by type (the last of a repeated type). ValueError
    on a truncated attribute."""
    return dict(iter_attrs(data))


def unsigned(value: bytes) -> int:
    """A u8/u16/u32/u64 (or ``uint``: 4 or 8 bytes) attribute in host order."""
    fmt = {1: "=B", 2: "=H", 4: "=I", 8: "=Q"}.get(len(value))
    if fmt is None:
        raise ValueError(f"an integer attribute of {len(value)} bytes")
    return int(struct.unpack(fmt, value)[0])


# ---------------------------------------------------------------------------
# live


class Genl:
    """One NETLINK_GENERIC socket (a context manager). Requests run one at a time."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_GENERIC)
        try:
            self.sock.bind((0, 0))
        except OSError:
            self.sock.close()
            raise
        self._seq = int(time.monotonic() * 1000) & 0x3FFFFFFF

    def __enter__(self) -> Genl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def ask(self, family: int, cmd: int, attrs: bytes, version: int = 1) -> bytes | None:
        """The reply's attributes (None: an empty DONE). Raises NetlinkError, TimeoutError,
        ValueError (malformed reply) or OSError."""
        self._seq += 1
        seq = self._seq
        self.sock.send(message(family, cmd, attrs, seq, version))
        deadline = time.monotonic() + REPLY_TIMEOUT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            answered, payload = reply(self.sock.recv(RECV_BYTES), seq, family)
            if answered:
                return payload

    def family(self, name: str) -> int | None:
        """The id of the generic netlink family ``name``; None when the kernel has none."""
        try:
            payload = self.ask(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, strz(CTRL_ATTR_FAMILY_NAME, name))
        except NetlinkError as e:
            if e.errno == errno.ENOENT:
                return None
            raise
        value = attrs_of(payload or b"").get(CTRL_ATTR_FAMILY_ID)
        if value is None:
            raise ValueError(f"CTRL_CMD_GETFAMILY {name}: no family id in the answer")
        return unsigned(value)
