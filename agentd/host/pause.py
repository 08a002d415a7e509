"""Global (802.3x link-level) pause of a netdev: read and set through ethtool netlink, as
``ethtool -a IF`` and ``ethtool -A IF rx off tx off`` do (ethtool >= 5.6; Linux >= 5.6).

Generic netlink: the ``ethtool`` family's id is asked of the controller
(``CTRL_CMD_GETFAMILY``), then ``ETHTOOL_MSG_PAUSE_GET`` / ``ETHTOOL_MSG_PAUSE_SET`` with
the device named in the ``ETHTOOL_A_PAUSE_HEADER`` nest (``ETHTOOL_A_HEADER_DEV_NAME``);
the answer's ``ETHTOOL_A_PAUSE_AUTONEG``/``RX``/``TX`` are u8 flags. The requests are
ethtool's own, byte for byte (tests/fixtures/netlink). A device without pause parameters
(a veth, a bond, IPoIB) answers EOPNOTSUPP: no entry, no error, as for DCB.

A set names only ``RX`` and ``TX``: autonegotiation of pause is left as it is and never
compared (mlx5 reports it off and refuses it on; comparing it made the NIC configuration
operator re-apply forever).

Recorded (a capture or a simulated node): ``.agentd/pause/<if>`` holds ``ethtool -a``
text (agentd.base.recorded.format_ethtool_a).
"""

from __future__ import annotations

import errno
import functools
import re
import struct
from typing import Callable, Sequence

from agentd.base.actuation import Outcome, failed
from agentd.host.dcb import NetlinkError, iter_attrs, query_each
from agentd.host.ethtool import read_recorded_per_netdev, valid_ifname
from agentd.host.fs import ReadContext
from agentd.host.nlwrite import attr_strz, attr_u8, message, nest, netlink_outcome, open_socket, talk
from agentd.model import PauseConfig

NETLINK_GENERIC = 16
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2
ETHTOOL_GENL_NAME = "ethtool"
ETHTOOL_GENL_VERSION = 1
ETHTOOL_MSG_PAUSE_GET = 21
ETHTOOL_MSG_PAUSE_SET = 22
ETHTOOL_A_PAUSE_HEADER = 1
ETHTOOL_A_PAUSE_AUTONEG = 2
ETHTOOL_A_PAUSE_RX = 3
ETHTOOL_A_PAUSE_TX = 4
ETHTOOL_A_HEADER_DEV_NAME = 2
TIMEOUT_S = 2.0
SIM_MAX_BYTES = 4096


def _genl(cmd: int, version: int = ETHTOOL_GENL_VERSION) -> bytes:
    return struct.pack("=BBH", cmd, version, 0)


def build_get_family(seq: int) -> bytes:
    return message(GENL_ID_CTRL, seq, _genl(CTRL_CMD_GETFAMILY) + attr_strz(CTRL_ATTR_FAMILY_NAME, ETHTOOL_GENL_NAME))


def _header(ifname: str) -> bytes:
    return nest(ETHTOOL_A_PAUSE_HEADER, [attr_strz(ETHTOOL_A_HEADER_DEV_NAME, ifname)])


def build_pause_get(family: int, ifname: str, seq: int) -> bytes:
    return message(family, seq, _genl(ETHTOOL_MSG_PAUSE_GET) + _header(ifname))


def build_pause_set(family: int, ifname: str, rx: bool, tx: bool, seq: int) -> bytes:
    body = _genl(ETHTOOL_MSG_PAUSE_SET) + _header(ifname) + attr_u8(ETHTOOL_A_PAUSE_RX, int(rx)) + attr_u8(ETHTOOL_A_PAUSE_TX, int(tx))
    return message(family, seq, body)


def parse_family(replies: list[tuple[int, bytes]]) -> int:
    for _mtype, payload in replies:
        for atype, value in iter_attrs(payload[4:]):
            if atype == CTRL_ATTR_FAMILY_ID and len(value) >= 2:
                return int(struct.unpack_from("=H", value)[0])
    raise ValueError("no family id in the controller's answer")


def parse_pause(replies: list[tuple[int, bytes]]) -> PauseConfig | None:
    """PauseConfig from a PAUSE_GET answer; None when it has no RX/TX."""
    for _mtype, payload in replies:
        flags: dict[int, bool] = {}
        for atype, value in iter_attrs(payload[4:]):
            if atype in (ETHTOOL_A_PAUSE_AUTONEG, ETHTOOL_A_PAUSE_RX, ETHTOOL_A_PAUSE_TX) and len(value) >= 1:
                flags[atype] = value[0] != 0
        if ETHTOOL_A_PAUSE_RX in flags and ETHTOOL_A_PAUSE_TX in flags:
            return PauseConfig(autoneg=flags.get(ETHTOOL_A_PAUSE_AUTONEG), rx=flags[ETHTOOL_A_PAUSE_RX], tx=flags[ETHTOOL_A_PAUSE_TX])
    return None


class _Genl:
    """One generic netlink socket with the ethtool family resolved (sequence numbers from 1, as ethtool's)."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.sock = open_socket(NETLINK_GENERIC)
        self.seq = 0
        try:
            self.family = parse_family(self.talk(build_get_family))
        except BaseException:
            self.sock.close()
            raise

    def talk(self, build: Callable[[int], bytes]) -> list[tuple[int, bytes]]:
        self.seq += 1
        return talk(self.sock, build(self.seq), self.seq, self.timeout_s)

    def __enter__(self) -> "_Genl":
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def _read_live(ctx: ReadContext, names: Sequence[str]) -> dict[str, PauseConfig]:
    out: dict[str, PauseConfig] = {}
    if not names:
        return out
    try:
        genl = _Genl(TIMEOUT_S)
    except (OSError, NetlinkError, ValueError, TimeoutError) as e:
        # no ethtool netlink (a kernel before 5.6, or CONFIG_ETHTOOL_NETLINK off): unknown
        ctx.error("genetlink(ethtool)", "unavailable", f"no ethtool netlink family: {e}")
        return out
    with genl:
        return query_each(ctx, names, lambda name: f"genetlink(ETHTOOL_MSG_PAUSE_GET, {name})",
                          lambda name: parse_pause(genl.talk(functools.partial(build_pause_get, genl.family, name))),
                          absent=(errno.EOPNOTSUPP, errno.ENODEV), timeout_s=TIMEOUT_S)  # no pause on this netdev, or it went away


_LINE = re.compile(r"^(Autonegotiate|RX|TX):\s*(on|off)\s*$", re.M)


def parse_ethtool_a(text: str) -> PauseConfig | None:
    """PauseConfig from ``ethtool -a`` text; None without both RX and TX lines."""
    flags = {m.group(1): m.group(2) == "on" for m in _LINE.finditer(text)}
    if "RX" not in flags or "TX" not in flags:
        return None
    return PauseConfig(autoneg=flags.get("Autonegotiate"), rx=flags["RX"], tx=flags["TX"])


def _read_recorded(ctx: ReadContext, names: Sequence[str]) -> dict[str, PauseConfig]:
    return read_recorded_per_netdev(ctx, "pause", names, parse_ethtool_a, "no RX/TX lines of `ethtool -a`", max_bytes=SIM_MAX_BYTES)


def read_pause(ctx: ReadContext, names: Sequence[str]) -> dict[str, PauseConfig]:
    """``{netdev: PauseConfig}`` for the netdevs among ``names`` that have pause parameters. Never raises."""
    if ctx.host.is_live:
        return _read_live(ctx, names)
    if ctx.host.answers is not None:
        return _read_recorded(ctx, names)
    return {}


def set_pause(ifname: str, rx: bool, tx: bool, timeout_s: float) -> Outcome:
    """Global pause rx/tx of ``ifname`` (autonegotiation untouched)."""
    if not valid_ifname(ifname):
        return failed(f"{ifname!r} is not a netdev name")

    def run() -> None:
        with _Genl(timeout_s) as genl:
            genl.talk(lambda seq: build_pause_set(genl.family, ifname, rx, tx, seq))

    return netlink_outcome(run, f"ETHTOOL_MSG_PAUSE_SET {ifname} rx {'on' if rx else 'off'} tx {'on' if tx else 'off'}")
