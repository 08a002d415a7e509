"""Priority flow control configuration per netdev.

Live (the running kernel's root, ``/`` or a container's ``/host``; the netns agentd runs
in must be the host's): rtnetlink DCB, the request ``dcb pfc show`` / ``lldptool`` make:
RTM_GETDCB with ``struct dcbmsg {family=AF_UNSPEC, cmd=DCB_CMD_IEEE_GET}`` and
DCB_ATTR_IFNAME. The reply's DCB_ATTR_IEEE nest carries DCB_ATTR_IEEE_PFC
(``struct ieee_pfc``; bit i of pfc_en = PFC on priority i) and, on kernels >= 6.3 with a
driver that implements it, DCB_ATTR_DCB_APP_TRUST_TABLE (trusted selectors, highest
precedence first). Without a trust table (mlx5 implements none), DSCP entries in the APP
table mean DSCP trust. The APP table's DSCP entries (selector 5) are the DSCP -> priority
map (``PfcConfig.dscp2prio``). Netdevs without DCB support answer EOPNOTSUPP: no entry, no
error.

Recorded (a capture or a simulated node): ``.agentd/dcb/<if>`` holds ``mlnx_qos -i <if>``
output (docs/capture.md). A root without recorded answers has no DCB data: ``{}``.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import struct
import time
from typing import Callable, Iterator, Sequence, TypeVar

from agentd.host.ethtool import read_recorded_per_netdev, valid_ifname
from agentd.host.fs import ReadContext, parse_decimal
from agentd.model import PfcConfig

NETLINK_ROUTE = 0
NLM_F_REQUEST = 0x1
NLMSG_ERROR = 0x2
NLMSG_DONE = 0x3
RTM_GETDCB = 78
DCB_CMD_IEEE_GET = 21
DCB_ATTR_IFNAME = 1
DCB_ATTR_IEEE = 13
DCB_ATTR_IEEE_PFC = 2
DCB_ATTR_IEEE_APP_TABLE = 3
DCB_ATTR_DCB_APP_TRUST_TABLE = 11
NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = 0x3FFF
IEEE_8021QAZ_APP_SEL_DSCP = 5
DCB_APP_SEL_PCP = 255
_NLMSGHDR = struct.Struct("=IHHII")
_NLATTR = struct.Struct("=HH")
_DCB_APP = struct.Struct("=BBH")  # struct dcb_app { u8 selector; u8 priority; u16 protocol; }
REPLY_TIMEOUT_S = 2.0
SIM_MAX_BYTES = 256 * 1024


class NetlinkError(Exception):
    def __init__(self, err: int):
        try:
            msg = os.strerror(err)
        except (OverflowError, ValueError):  # not a C int (-INT_MIN in a forged reply)
            msg = f"Unknown error {err}"
        super().__init__(msg)
        self.errno = err


# ---------------------------------------------------------------------------
# netlink encoding / decoding (pure)


def _align4(n: int) -> int:
    return (n + 3) & ~3


def build_ieee_get(ifname: str, seq: int) -> bytes:
    name = os.fsencode(ifname) + b"\0"  # the kernel's bytes: a name that is not UTF-8 too
    attr = _NLATTR.pack(_NLATTR.size + len(name), DCB_ATTR_IFNAME) + name
    attr += b"\0" * (_align4(len(attr)) - len(attr))
    body = struct.pack("=BBH", socket.AF_UNSPEC, DCB_CMD_IEEE_GET, 0) + attr
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), RTM_GETDCB, NLM_F_REQUEST, seq, 0) + body


def iter_messages(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(type, seq, payload) of each netlink message in a datagram; ValueError if truncated."""
    off = 0
    while off + _NLMSGHDR.size <= len(data):
        length, mtype, _flags, seq, _pid = _NLMSGHDR.unpack_from(data, off)
        if length < _NLMSGHDR.size or off + length > len(data):
            raise ValueError(f"netlink message length {length} at offset {off} exceeds the datagram")
        yield mtype, seq, data[off + _NLMSGHDR.size : off + length]
        off += _align4(length)


def iter_attrs(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, payload) of each netlink attribute; ValueError if truncated."""
    off = 0
    while off + _NLATTR.size <= len(data):
        length, atype = _NLATTR.unpack_from(data, off)
        if length < _NLATTR.size or off + length > len(data):
            raise ValueError(f"netlink attribute length {length} at offset {off} exceeds its container")
        yield atype & NLA_TYPE_MASK, data[off + _NLATTR.size : off + length]
        off += _align4(length)


def _trust(table: bytes) -> str | None:
    for _atype, payload in iter_attrs(table):
        if not payload:
            continue
        selector = payload[0]  # first entry = highest precedence
        if selector == IEEE_8021QAZ_APP_SEL_DSCP:
            return "dscp"
        if selector == DCB_APP_SEL_PCP:
            return "pcp"
        return None
    return None


def parse_ieee_get(payload: bytes) -> PfcConfig | None:
    """PfcConfig from the payload of an RTM_GETDCB/DCB_CMD_IEEE_GET reply (after the
    nlmsghdr). None when the driver reports no PFC. ValueError on malformed input."""
    if len(payload) < 4:
        raise ValueError("short dcbmsg")
    pfc_en: int | None = None
    trust_table: bytes | None = None
    dscp2prio: dict[int, int] = {}
    for atype, value in iter_attrs(payload[4:]):
        if atype != DCB_ATTR_IEEE:
            continue
        for itype, ivalue in iter_attrs(value):
            if itype == DCB_ATTR_IEEE_PFC:
                # struct ieee_pfc { u8 pfc_cap; u8 pfc_en; u8 mbc; u16 delay; u64 requests[8]; u64 indications[8]; }
                if len(ivalue) < 2:
                    raise ValueError(f"ieee_pfc of {len(ivalue)} bytes")
                pfc_en = ivalue[1]
            elif itype == DCB_ATTR_DCB_APP_TRUST_TABLE:
                trust_table = ivalue
            elif itype == DCB_ATTR_IEEE_APP_TABLE:
                dscp2prio.update(_dscp_apps(ivalue))
    if pfc_en is None:
        return None
    if trust_table is not None:
        trust = _trust(trust_table)
    else:
        # mlx5 has no apptrust op; in DSCP trust it installs DSCP APP entries (dscp2prio)
        # and removes them otherwise. Their absence does not prove PCP trust (VFs never
        # install them), so it stays unknown.
        trust = "dscp" if dscp2prio else None
    return PfcConfig(enabled=tuple(p for p in range(8) if pfc_en >> p & 1), trust=trust, source="dcbnl",
                     dscp2prio=dict(sorted(dscp2prio.items())), apptrust=trust_table is not None)


def _dscp_apps(table: bytes) -> dict[int, int]:
    """``{dscp: priority}`` of the DSCP entries (selector 5) of a DCB_ATTR_IEEE_APP_TABLE
    nest, one ``struct dcb_app`` per attribute. Entries outside DSCP 0-63 or priority 0-7
    (not a valid mapping) and entries of other selectors are skipped."""
    out: dict[int, int] = {}
    for _atype, app in iter_attrs(table):
        if len(app) < _DCB_APP.size:
            continue
        selector, priority, protocol = _DCB_APP.unpack_from(app)
        if selector == IEEE_8021QAZ_APP_SEL_DSCP and protocol <= 63 and priority <= 7:
            out[protocol] = priority
    return out


def raise_for_error(payload: bytes) -> None:
    """An NLMSG_ERROR's payload: NetlinkError for an error, nothing for an ACK (error 0);
    ValueError when it is too short to say."""
    if len(payload) < 4:
        raise ValueError("short NLMSG_ERROR")
    err = -struct.unpack_from("=i", payload)[0]
    if err:
        raise NetlinkError(err)


def parse_reply(data: bytes, seq: int) -> tuple[bool, PfcConfig | None]:
    """(answered, config) for our request ``seq`` in a received datagram. Raises
    NetlinkError for an NLMSG_ERROR answer, ValueError for malformed data."""
    for mtype, mseq, payload in iter_messages(data):
        if mseq != seq:
            continue
        if mtype == NLMSG_ERROR:
            raise_for_error(payload)
            continue  # a bare ACK
        if mtype == NLMSG_DONE:
            return True, None
        if mtype == RTM_GETDCB:
            return True, parse_ieee_get(payload)
    return False, None


# ---------------------------------------------------------------------------
# live


def _open_socket() -> socket.socket:
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    s.bind((0, 0))
    return s


def _query(sock: socket.socket, ifname: str, seq: int) -> PfcConfig | None:
    sock.send(build_ieee_get(ifname, seq))
    deadline = time.monotonic() + REPLY_TIMEOUT_S
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        answered, cfg = parse_reply(sock.recv(65536), seq)
        if answered:
            return cfg


def _read_live(ctx: ReadContext, names: Sequence[str]) -> dict[str, PfcConfig]:
    out: dict[str, PfcConfig] = {}
    if not names:
        return out
    try:
        sock = _open_socket()
    except OSError as e:
        ctx.error("netlink(RTM_GETDCB)", "unavailable", f"cannot open a NETLINK_ROUTE socket: {e.strerror or e}")
        return out
    with sock:
        seqs = iter(range(1, len(names) + 1))
        return query_each(ctx, names, lambda name: f"netlink(RTM_GETDCB, {name})", lambda name: _query(sock, name, next(seqs)),
                          absent=(errno.EOPNOTSUPP,))  # no DCB on this netdev (or no CONFIG_DCB)


T = TypeVar("T")


def query_each(ctx: ReadContext, names: Sequence[str], path: Callable[[str], str], query: Callable[[str], T | None], *,
               absent: tuple[int, ...], timeout_s: float = REPLY_TIMEOUT_S) -> dict[str, T]:
    """``{netdev: answer}`` of one netlink query per netdev; each failure is a read error
    of that netdev's ``path`` (an errno in ``absent``: no such setting, no entry, no
    error), so one bad netdev never hides the others. Shared by the DCB and pause readers."""
    out: dict[str, T] = {}
    for name in names:
        where = path(name)
        if not valid_ifname(name):
            ctx.error(where, "unreadable", "invalid interface name")
            continue
        try:
            got = query(name)
        except NetlinkError as e:
            if e.errno not in absent:
                ctx.error(where, "unreadable", str(e))
            continue
        except TimeoutError:
            ctx.error(where, "timeout", f"no reply within {timeout_s:.0f}s")
            continue
        except ValueError as e:
            ctx.error(where, "unparsable", str(e))
            continue
        except OSError as e:
            ctx.error(where, "unreadable", e.strerror or str(e))
            continue
        if got is not None:
            out[name] = got
    return out


# ---------------------------------------------------------------------------
# simulated: mlnx_qos text

_TRUST = re.compile(r"^\s*Priority trust (?:state|mode)\s*:\s*(\S+)", re.M)


_DSCP2PRIO_ROW = re.compile(r"^\s*prio:\s*(\d{1,3})\s+dscp:\s*([\d,\s]*?)\s*$")


def parse_dscp2prio(lines: Sequence[str]) -> dict[int, int]:
    """``{dscp: priority}`` from the rows after ``dscp2prio mapping:`` in mlnx_qos output
    (``        prio:3 dscp:31,30,29,28,27,26,25,24,``; a trailing comma or spaces are
    tolerated). Rows end at the first line of another shape; values outside DSCP 0-63 or
    priority 0-7 are skipped."""
    out: dict[int, int] = {}
    for i, line in enumerate(lines):
        if line.strip() != "dscp2prio mapping:":
            continue
        for row in lines[i + 1 : i + 1 + 64]:
            m = _DSCP2PRIO_ROW.match(row)
            if m is None:
                break
            prio = int(m.group(1))
            for d in m.group(2).replace(" ", "").split(","):
                dscp = parse_decimal(d, max_digits=3)
                if dscp is not None and dscp <= 63 and prio <= 7:
                    out[dscp] = prio
        break
    return dict(sorted(out.items()))


def parse_mlnx_qos(text: str) -> PfcConfig | None:
    """PfcConfig from ``mlnx_qos -i <if>`` output; None when there is no PFC table."""
    m = _TRUST.search(text)
    trust = m.group(1).lower() if m else None
    if trust not in ("pcp", "dscp"):
        trust = None
    prios: list[str] | None = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() != "PFC configuration:":
            continue
        for row in lines[i + 1 : i + 6]:
            cols = row.split()
            if cols and cols[0] == "priority":
                prios = cols[1:]
            elif cols and cols[0] == "enabled" and prios is not None:
                flags = cols[1:]
                numbers = [parse_decimal(p) for p in prios]
                if len(flags) != len(prios) or not all(f in ("0", "1") for f in flags) or not all(n is not None and n <= 7 for n in numbers):
                    return None  # priorities are 0-7
                enabled = tuple(sorted({n for n, f in zip(numbers, flags) if f == "1" and n is not None}))
                return PfcConfig(enabled=enabled, trust=trust, source="mlnx_qos", dscp2prio=parse_dscp2prio(lines))
        return None
    return None


def _read_recorded(ctx: ReadContext, names: Sequence[str]) -> dict[str, PfcConfig]:
    return read_recorded_per_netdev(ctx, "dcb", names, parse_mlnx_qos, "no `PFC configuration:` priority/enabled table", max_bytes=SIM_MAX_BYTES)


def read_pfc(ctx: ReadContext, names: Sequence[str]) -> dict[str, PfcConfig]:
    """``{netdev: PfcConfig}`` for the DCB-capable netdevs among ``names``. Never raises."""
    if ctx.host.is_live:
        return _read_live(ctx, names)
    if ctx.host.answers is not None:
        return _read_recorded(ctx, names)
    return {}
