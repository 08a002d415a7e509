"""Change DCB settings through rtnetlink, as iproute2's ``dcb`` does (the actuator beside
agentd.host.dcb, which reads them).

Every request is ``RTM_SETDCB`` with ``struct dcbmsg {AF_UNSPEC, cmd}``, the device's
name (``DCB_ATTR_IFNAME``) and a ``DCB_ATTR_IEEE`` nest, byte for byte what ``dcb`` sends
(iproute2 dcb/dcb.c ``dcb_set_attribute_va``; captured in tests/fixtures/netlink):

- PFC (``dcb pfc set dev IF prio-pfc 3:on``): the device's ``struct ieee_pfc`` is read
  (``DCB_CMD_IEEE_GET``) and written back (``DCB_CMD_IEEE_SET``, ``DCB_ATTR_IEEE_PFC``)
  with only ``pfc_en`` changed, so its capability, MACsec bypass and delay stay as they are;
- APP entries (``dcb app add|del dev IF dscp-prio 26:3``): ``DCB_CMD_IEEE_SET`` or
  ``DCB_CMD_IEEE_DEL`` with ``DCB_ATTR_IEEE_APP_TABLE`` of ``struct dcb_app`` entries. A
  DSCP moved to another priority is ``dcb app replace``: the new entry added, then the old
  one deleted (mlx5 drops the old one itself when it takes the new one: its delete then
  answers ENOENT, which is the result wanted);
- the APP trust table (``dcb apptrust set dev IF order dscp pcp``, kernels >= 6.3 and
  drivers with the op): ``DCB_CMD_IEEE_SET`` with ``DCB_ATTR_DCB_APP_TRUST_TABLE``.

The kernel answers a set with an ``RTM_SETDCB`` whose ``DCB_ATTR_IEEE`` attribute holds
the driver's result as a negative errno in one byte, then the acknowledgement.
"""

from __future__ import annotations

import errno
import socket
import struct
from typing import Iterable, Sequence

from agentd.base.actuation import APPTRUST_ORDER, Outcome, failed
from agentd.host.dcb import (
    DCB_APP_SEL_PCP,
    DCB_ATTR_DCB_APP_TRUST_TABLE,
    DCB_ATTR_IEEE,
    DCB_ATTR_IEEE_APP_TABLE,
    DCB_ATTR_IEEE_PFC,
    DCB_ATTR_IFNAME,
    DCB_CMD_IEEE_GET,
    IEEE_8021QAZ_APP_SEL_DSCP,
    NETLINK_ROUTE,
    RTM_GETDCB,
    NetlinkError,
    iter_attrs,
)
from agentd.host.ethtool import valid_ifname
from agentd.host.nlwrite import attr, attr_strz, attr_u8, message, nest, netlink_outcome, open_socket, seq_now, talk

RTM_SETDCB = 79
DCB_CMD_IEEE_SET = 20
DCB_CMD_IEEE_DEL = 27
DCB_ATTR_IEEE_APP = 1  # an IEEE selector's entry in the APP table
DCB_ATTR_DCB_APP = 2  # a DCB-only selector's (PCP)
IEEE_PFC_SIZE = 136  # struct ieee_pfc: u8 cap, en, mbc; u16 delay; u64 requests[8], indications[8]
_DCB_APP = struct.Struct("=BBH")


def _dcbmsg(cmd: int) -> bytes:
    return struct.pack("=BBH", socket.AF_UNSPEC, cmd, 0)


def build_get(ifname: str, seq: int) -> bytes:
    """``DCB_CMD_IEEE_GET`` as dcb sends it (with NLM_F_ACK)."""
    return message(RTM_GETDCB, seq, _dcbmsg(DCB_CMD_IEEE_GET) + attr_strz(DCB_ATTR_IFNAME, ifname))


def build_set_pfc(ifname: str, ieee_pfc: bytes, seq: int) -> bytes:
    body = _dcbmsg(DCB_CMD_IEEE_SET) + attr_strz(DCB_ATTR_IFNAME, ifname) + nest(DCB_ATTR_IEEE, [attr(DCB_ATTR_IEEE_PFC, ieee_pfc)])
    return message(RTM_SETDCB, seq, body)


def with_pfc_enabled(ieee_pfc: bytes, enabled: Iterable[int]) -> bytes:
    """The device's ``struct ieee_pfc`` with ``pfc_en`` (byte 1) set to ``enabled``."""
    mask = 0
    for p in enabled:
        mask |= 1 << p
    return ieee_pfc[:1] + bytes((mask,)) + ieee_pfc[2:]


def build_app(ifname: str, cmd: int, apps: Sequence[tuple[int, int, int]], seq: int) -> bytes:
    """``dcb app add`` (cmd DCB_CMD_IEEE_SET) or ``del`` (DCB_CMD_IEEE_DEL) of
    (selector, priority, protocol) entries."""
    entries = [attr(DCB_ATTR_DCB_APP if sel == DCB_APP_SEL_PCP else DCB_ATTR_IEEE_APP, _DCB_APP.pack(sel, prio, proto))
               for sel, prio, proto in apps]
    body = _dcbmsg(cmd) + attr_strz(DCB_ATTR_IFNAME, ifname) + nest(DCB_ATTR_IEEE, [nest(DCB_ATTR_IEEE_APP_TABLE, entries)])
    return message(RTM_SETDCB, seq, body)


def build_apptrust(ifname: str, selectors: Sequence[int], seq: int) -> bytes:
    """``dcb apptrust set dev IF order ...`` (iproute2 dcb/dcb_apptrust.c: one u8 per
    selector, its attribute type the APP table's for that selector; captured from iproute2
    7.1's dcb in tests/fixtures/netlink)."""
    table = [attr_u8(DCB_ATTR_DCB_APP if s == DCB_APP_SEL_PCP else DCB_ATTR_IEEE_APP, s) for s in selectors]
    body = _dcbmsg(DCB_CMD_IEEE_SET) + attr_strz(DCB_ATTR_IFNAME, ifname) + nest(DCB_ATTR_IEEE, [nest(DCB_ATTR_DCB_APP_TRUST_TABLE, table)])
    return message(RTM_SETDCB, seq, body)


_SELECTOR = {"dscp": IEEE_8021QAZ_APP_SEL_DSCP, "pcp": DCB_APP_SEL_PCP}  # the kernel's selector numbers (dcbnl.h)


def apptrust_order(trust: str) -> list[int]:
    """The selectors trusted for ``trust`` "dscp" (``order dscp pcp``: an IP packet's DSCP,
    else the VLAN tag's PCP) or "pcp" (``order pcp``)."""
    return [_SELECTOR[name] for name in APPTRUST_ORDER[trust]]


def _check_set_reply(replies: list[tuple[int, bytes]]) -> None:
    """The driver's result in an RTM_SETDCB reply (DCB_ATTR_IEEE: one byte, a negative
    errno; 0 done). Raises NetlinkError."""
    for mtype, payload in replies:
        if mtype != RTM_SETDCB or len(payload) < 4:
            continue
        for atype, value in iter_attrs(payload[4:]):
            if atype == DCB_ATTR_IEEE and len(value) == 1 and value[0]:
                raise NetlinkError(-struct.unpack("=b", value)[0])


def _set(sock: socket.socket, request: bytes, seq: int, timeout_s: float) -> None:
    _check_set_reply(talk(sock, request, seq, timeout_s))


def _ieee_pfc(sock: socket.socket, ifname: str, seq: int, timeout_s: float) -> bytes:
    for mtype, payload in talk(sock, build_get(ifname, seq), seq, timeout_s):
        if mtype != RTM_GETDCB or len(payload) < 4:
            continue
        for atype, value in iter_attrs(payload[4:]):
            if atype != DCB_ATTR_IEEE:
                continue
            for itype, ivalue in iter_attrs(value):
                if itype == DCB_ATTR_IEEE_PFC and len(ivalue) >= 2:
                    return ivalue
    raise NetlinkError(errno.EOPNOTSUPP)  # the device reports no PFC


def set_pfc(ifname: str, enabled: Sequence[int], timeout_s: float, *, only: int | None = None) -> Outcome:
    """PFC on exactly the priorities ``enabled`` (read, change pfc_en, write back); with
    ``only``, priority ``only`` alone is changed (on when in ``enabled``), the others kept
    as the device has them now, as ``dcb pfc set dev IF prio-pfc 3:on`` does."""
    if not valid_ifname(ifname):
        return failed(f"{ifname!r} is not a netdev name")
    seq = seq_now()

    def run() -> None:
        with open_socket(NETLINK_ROUTE) as sock:
            current = _ieee_pfc(sock, ifname, seq, timeout_s)
            want = enabled
            if only is not None:
                now = {p for p in range(8) if current[1] >> p & 1}
                want = sorted((now - {only}) | ({only} if only in enabled else set()))
            _set(sock, build_set_pfc(ifname, with_pfc_enabled(current, want), seq + 1), seq + 1, timeout_s)

    return netlink_outcome(run, f"DCB_CMD_IEEE_SET {ifname} PFC on {','.join(map(str, sorted(enabled))) or 'none'}")


def set_dscp_prio(ifname: str, dscp: int, prio: int | None, old: int | None, timeout_s: float) -> Outcome:
    """DSCP ``dscp`` to priority ``prio`` (``dcb app replace``); ``prio`` None: its entry
    (to ``old``) deleted."""
    if not valid_ifname(ifname):
        return failed(f"{ifname!r} is not a netdev name")
    seq = seq_now()

    def run() -> None:
        with open_socket(NETLINK_ROUTE) as sock:
            if prio is not None and prio != old:
                _set(sock, build_app(ifname, DCB_CMD_IEEE_SET, [(IEEE_8021QAZ_APP_SEL_DSCP, prio, dscp)], seq), seq, timeout_s)
            if old is not None and old != prio:
                try:
                    _set(sock, build_app(ifname, DCB_CMD_IEEE_DEL, [(IEEE_8021QAZ_APP_SEL_DSCP, old, dscp)], seq + 1), seq + 1, timeout_s)
                except NetlinkError as e:
                    if e.errno != errno.ENOENT or prio is None:  # mlx5 replaced it itself
                        raise

    what = f"DCB APP {ifname} DSCP {dscp} -> " + (f"priority {prio}" if prio is not None else "no entry")
    return netlink_outcome(run, what)


def set_trust(ifname: str, trust: str, *, apptrust: bool, entries: Sequence[tuple[int, int]], timeout_s: float) -> Outcome:
    """Trust ``trust`` ("dscp" or "pcp"): the APP trust table where the device has one,
    else (mlx5) by its DSCP APP entries: ``entries`` added for dscp, deleted for pcp."""
    if not valid_ifname(ifname):
        return failed(f"{ifname!r} is not a netdev name")
    if trust not in ("dscp", "pcp"):
        return failed(f"trust {trust!r} is neither dscp nor pcp")
    seq = seq_now()
    apps = [(IEEE_8021QAZ_APP_SEL_DSCP, prio, dscp) for dscp, prio in entries]

    def run() -> None:
        with open_socket(NETLINK_ROUTE) as sock:
            if apptrust:
                _set(sock, build_apptrust(ifname, apptrust_order(trust), seq), seq, timeout_s)
            elif not apps:
                raise NetlinkError(errno.EINVAL)  # nothing to add or delete: the caller's bug
            else:
                _set(sock, build_app(ifname, DCB_CMD_IEEE_SET if trust == "dscp" else DCB_CMD_IEEE_DEL, apps, seq), seq, timeout_s)

    return netlink_outcome(run, f"DCB {ifname} trust {trust}" + ("" if apptrust else f" ({len(apps)} DSCP APP entries)"))
