"""NIC statistics (``ethtool -S``) for a list of netdevs.

Live (the running kernel's root, ``/`` or a container's ``/host``; the ioctl names a
netdev in agentd's own netns, so a container needs the host's): the SIOCETHTOOL ioctl, exactly what ``ethtool -S`` does:
ETHTOOL_GSSET_INFO for the number of ETH_SS_STATS strings (older drivers: n_stats of
ETHTOOL_GDRVINFO), ETHTOOL_GSTRINGS for the names, ETHTOOL_GSTATS for the u64 values.
No subprocess. Under a recorded root (a capture or a simulated node) the file
``.agentd/ethtool/<if>`` holds the text ``ethtool -S <if>`` prints (docs/capture.md). A
root without recorded answers has no ethtool data: the reader answers ``{}`` quietly.

Names are kept raw (mlx5 ``rx_prio3_pause``, ``rx_vport_rdma_unicast_bytes``; ice
``rx_priority_3_xoff.nic``). ``pfc_counters`` and ``ecn_counters`` pick out the ones the
RoCE checks use.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import socket
import struct
from typing import Callable, Sequence, TypeVar

from agentd.host.fs import ReadContext, parse_decimal

T = TypeVar("T")

SIOCETHTOOL = 0x8946
ETHTOOL_GDRVINFO = 0x03
ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_GSTATS = 0x1D
ETHTOOL_GSSET_INFO = 0x37
ETH_SS_STATS = 1
ETH_GSTRING_LEN = 32
IFNAMSIZ = 16
# struct ethtool_drvinfo: cmd, driver[32], version[32], fw_version[32], bus_info[32],
# erom_version[32], reserved2[12], n_priv_flags, n_stats, testinfo_len, eedump_len, regdump_len
_DRVINFO_SIZE = 4 + 32 * 5 + 12 + 5 * 4
_DRVINFO_N_STATS_OFF = 4 + 32 * 5 + 12 + 4
SIM_MAX_BYTES = 4 * 1024 * 1024
_ATTEMPTS = 3


class _IfMap(ctypes.Structure):
    _fields_ = [
        ("mem_start", ctypes.c_ulong),
        ("mem_end", ctypes.c_ulong),
        ("base_addr", ctypes.c_ushort),
        ("irq", ctypes.c_ubyte),
        ("dma", ctypes.c_ubyte),
        ("port", ctypes.c_ubyte),
    ]


class _IfrIfru(ctypes.Union):
    # Only ifr_data is used; the other members give the union its kernel size (24 on LP64).
    _fields_ = [("ifr_data", ctypes.c_void_p), ("ifr_map", _IfMap), ("ifr_addr", ctypes.c_ubyte * 16)]


class _IfReq(ctypes.Structure):
    _fields_ = [("ifr_name", ctypes.c_char * IFNAMSIZ), ("ifr_ifru", _IfrIfru)]


class _CountChanged(Exception):
    pass


def valid_ifname(name: str) -> bool:
    """A name the kernel could have given a netdev. Taken as its bytes (``os.fsencode``,
    the inverse of how ``listdir`` decoded it): a name that is not UTF-8 is still valid."""
    try:
        b = os.fsencode(name)
    except UnicodeEncodeError:  # a surrogate no byte decodes to: not from the kernel
        return False
    return 0 < len(b) < IFNAMSIZ and "/" not in name and name not in (".", "..") and not any(c.isspace() for c in name)


# ---------------------------------------------------------------------------
# live: SIOCETHTOOL


def _ioctl(sock: socket.socket, ifname: bytes, buf: ctypes.Array[ctypes.c_char]) -> None:
    ifr = _IfReq()
    ifr.ifr_name = ifname
    ifr.ifr_ifru.ifr_data = ctypes.addressof(buf)
    fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifr, True)


def ethtool_ioctl(sock: socket.socket, ifname: bytes, buf: ctypes.Array[ctypes.c_char]) -> None:
    """SIOCETHTOOL with ``buf`` (its first u32 the ETHTOOL_* command) for ``ifname``
    (the module EEPROM reader's legacy fallback uses it too). Raises OSError."""
    _ioctl(sock, ifname, buf)


def _stats_count(sock: socket.socket, ifname: bytes) -> int:
    # struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[]; }
    buf = ctypes.create_string_buffer(24)
    struct.pack_into("=IIQ", buf, 0, ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_STATS)
    try:
        _ioctl(sock, ifname, buf)
    except OSError as e:
        if e.errno != errno.EOPNOTSUPP:
            raise
        drv = ctypes.create_string_buffer(_DRVINFO_SIZE)
        struct.pack_into("=I", drv, 0, ETHTOOL_GDRVINFO)
        _ioctl(sock, ifname, drv)
        return int(struct.unpack_from("=I", drv, _DRVINFO_N_STATS_OFF)[0])
    _, _, mask = struct.unpack_from("=IIQ", buf, 0)
    if not mask & (1 << ETH_SS_STATS):
        return 0
    return int(struct.unpack_from("=I", buf, 16)[0])


def _read_once(sock: socket.socket, ifname: bytes) -> dict[str, int]:
    count = _stats_count(sock, ifname)
    if count == 0:
        return {}
    # The kernel writes as many entries as the driver has *now*, ignoring the length we
    # pass. mlx5 adds counters when PFC is enabled on a priority, any driver when channels
    # are added: leave ample room so a change between calls cannot overrun the buffer.
    cap = 2 * count + 256
    sbuf = ctypes.create_string_buffer(12 + cap * ETH_GSTRING_LEN)
    struct.pack_into("=III", sbuf, 0, ETHTOOL_GSTRINGS, ETH_SS_STATS, count)
    _ioctl(sock, ifname, sbuf)
    n_strings = struct.unpack_from("=III", sbuf, 0)[2]
    vbuf = ctypes.create_string_buffer(8 + cap * 8)
    struct.pack_into("=II", vbuf, 0, ETHTOOL_GSTATS, count)
    _ioctl(sock, ifname, vbuf)
    n_stats = struct.unpack_from("=II", vbuf, 0)[1]
    if n_strings != count or n_stats != count:
        raise _CountChanged(f"statistics count changed while reading ({count} -> {n_strings}/{n_stats})")
    raw = sbuf.raw
    values = struct.unpack_from(f"={count}Q", vbuf, 8)
    out: dict[str, int] = {}
    for i in range(count):
        name = raw[12 + i * ETH_GSTRING_LEN : 12 + (i + 1) * ETH_GSTRING_LEN].split(b"\0", 1)[0]
        out[os.fsdecode(name)] = values[i]  # losslessly, as every name: two odd names stay two
    return out


def _read_live(ctx: ReadContext, names: Sequence[str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError as e:
        ctx.error("ioctl(SIOCETHTOOL)", "unavailable", f"cannot open a socket: {e.strerror or e}")
        return out
    with sock:
        for name in names:
            path = f"ioctl(SIOCETHTOOL, {name})"
            if not valid_ifname(name):
                ctx.error(path, "unreadable", "invalid interface name")
                continue
            for attempt in range(_ATTEMPTS):
                try:
                    stats = _read_once(sock, os.fsencode(name))
                except _CountChanged as e:
                    if attempt == _ATTEMPTS - 1:
                        ctx.error(path, "unreadable", str(e))
                    continue
                except OSError as e:
                    if e.errno == errno.EOPNOTSUPP:
                        ctx.error(path, "unavailable", "driver does not support ethtool statistics")
                    elif e.errno == errno.ENODEV:
                        ctx.error(path, "unreadable", "no such device")
                    else:
                        ctx.error(path, "unreadable", e.strerror or str(e))
                    break
                if stats:
                    out[name] = stats
                else:
                    ctx.error(path, "unavailable", "driver reports no statistics")
                break
    return out


# ---------------------------------------------------------------------------
# simulated: `ethtool -S` text


def parse_ethtool_s(text: str) -> dict[str, int] | None:
    """Parse ``ethtool -S`` output. Section headers (``NIC statistics:``) are skipped;
    every other non-blank line must be ``name: <u64>``. None when any line is not."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        name, sep, value = s.rpartition(":")
        value = value.strip()
        if sep and not value and name:
            continue  # "NIC statistics:", "Standard stats for eth0:"
        name = name.strip()
        v = parse_decimal(value)  # a u64: ASCII digits, at most 20 of them
        if not sep or not name or v is None:
            return None
        out[name] = v
    return out


def read_recorded_per_netdev(ctx: ReadContext, kind: str, names: Sequence[str], parse: Callable[[str], T | None],
                             unparsable: str, *, empty: str | None = None, max_bytes: int = SIM_MAX_BYTES, suffix: str = "") -> dict[str, T]:
    """``{netdev: parse(text)}`` from the recorded answers ``<answers>/<kind>/<netdev><suffix>``
    (a capture or a simulated node: `ethtool -S`, `mlnx_qos -i`, `ethtool -a` text, ethtool
    netlink answers as ``.json``). No file:
    nothing recorded for that netdev; a name that is not an interface name, text ``parse``
    refuses (None), or (with ``empty``) a result that is empty: a read error for that netdev."""
    out: dict[str, T] = {}
    for name in names:
        path = f"{ctx.host.answers}/{kind}/{name}{suffix}"
        if not valid_ifname(name):
            ctx.error(path, "unreadable", "invalid interface name")
            continue
        text = ctx.text(path, max_bytes=max_bytes)
        if text is None:
            continue
        value = parse(text)
        if value is None:
            ctx.error(path, "unparsable", unparsable)
        elif empty is not None and not value:
            ctx.error(path, "unavailable", empty)
        else:
            out[name] = value
    return out


def _read_recorded(ctx: ReadContext, names: Sequence[str]) -> dict[str, dict[str, int]]:
    return read_recorded_per_netdev(ctx, "ethtool", names, parse_ethtool_s, "not `ethtool -S` output (expected `name: value` lines)",
                                    empty="no statistics")


def read_ethtool(ctx: ReadContext, names: Sequence[str]) -> dict[str, dict[str, int]]:
    """``{netdev: {stat name: value}}`` for the netdevs that answered. Never raises."""
    if ctx.host.is_live:
        return _read_live(ctx, names)
    if ctx.host.answers is not None:
        return _read_recorded(ctx, names)
    return {}


# ---------------------------------------------------------------------------
# selections used by the RoCE checks

# mlx5 (drivers/net/ethernet/mellanox/mlx5/core/en_stats.c, pport_per_prio_pfc_stats_desc):
# rx/tx_prio<N>_pause, rx/tx_prio<N>_pause_duration (microseconds), rx_prio<N>_pause_transition.
# They exist only for priorities with PFC enabled.
_MLX5_PFC = re.compile(r"^(rx|tx)_prio([0-7])_pause(_duration|_transition)?$")
# Intel ice (`rx_priority_3_xoff.nic`) and i40e (`port.rx_priority_3_xoff`): XOFF = pause frames.
_INTEL_XOFF = re.compile(r"^(?:port\.)?(rx|tx)_priority_([0-7])_xoff(?:_(?:rx|tx))?(?:\.nic)?$")


def pfc_counters(stats: dict[str, int]) -> dict[int, dict[str, int]]:
    """Per-priority pause counters: ``{prio: {"rx_pause", "tx_pause", "rx_pause_duration",
    "tx_pause_duration", "rx_pause_transition"}}`` (only the keys the driver has)."""
    out: dict[int, dict[str, int]] = {}
    for name, value in stats.items():
        m = _MLX5_PFC.match(name)
        if m:
            out.setdefault(int(m.group(2)), {})[f"{m.group(1)}_pause{m.group(3) or ''}"] = value
            continue
        m = _INTEL_XOFF.match(name)
        if m:
            out.setdefault(int(m.group(2)), {})[f"{m.group(1)}_pause"] = value
    return out


# mlx5 names. CNP counters (np_cnp_sent, rp_cnp_handled, np_ecn_marked_roce_packets) are
# not ethtool statistics: they are RDMA hw_counters, read by the infiniband reader.
ECN_NAMES = (
    "rx_ecn_mark",  # CE-marked packets seen by the netdev (kernel) path, not RoCE
    "tx_pause_storm_warning_events",  # PFC stall watermark (pause storm) events
    "tx_pause_storm_error_events",
)
_MLX5_MARKED = re.compile(r"^rx_prio([0-7])_marked$")  # per-TC ECN-marked (sbcam_reg capable FW)


def ecn_counters(stats: dict[str, int]) -> dict[str, int]:
    """ECN / pause-storm counters under their raw mlx5 names (only those present)."""
    out = {n: stats[n] for n in ECN_NAMES if n in stats}
    out.update({n: v for n, v in stats.items() if _MLX5_MARKED.match(n)})
    return out
