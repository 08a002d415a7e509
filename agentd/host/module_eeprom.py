"""The EEPROM of the module plugged into an Ethernet port, page by page.

Live: ``ETHTOOL_MSG_MODULE_EEPROM_GET`` (net/ethtool/eeprom.c, kernel >= 5.13): offset,
length, page, bank and I2C address (0x50) per request, at most half a page (128 bytes)
each, never across the lower/upper boundary; pages other than 0 only in the upper half.
The kernel asks the driver's ``get_module_eeprom_by_page`` (mlx5e: the firmware's MCIA
register) and, for a driver without it, maps the request onto the legacy
``get_module_info``/``get_module_eeprom`` itself. Which pages to ask for follows from the
lower page (agentd.host.transceiver.pages_to_read), as ethtool does it.

Fallback, for kernels without the netlink request (< 5.13, or no CONFIG_ETHTOOL_NETLINK):
the ``ETHTOOL_GMODULEINFO``/``ETHTOOL_GMODULEEEPROM`` ioctls (``struct ethtool_modinfo``:
the module's standard and ``eeprom_len``; then that many bytes in the flat layout: lower
page, upper page 00h, then upper pages 01h, 02h, 03h of an SFF-8636 module at 640 bytes).

EOPNOTSUPP from both is the normal answer of a netdev without module ops (IPoIB, veth): no
data, no error. mlx5 answers EIO when the cage is empty or the module does not respond:
the port has no Transceiver, and the reason is kept. Every page read is a firmware
register access on mlx5, so the reader takes ``may_read`` (device PCI bus id -> bool),
the gate that keeps firmware reads off a device (issue 36).

Recorded: the ``module-eeprom`` part of ``.agentd/ethtool-netlink/<if>.json``:
``{"via": "netlink"|"ioctl", "pages": [{"page", "bank", "i2c-address", "offset", "data":
hex}]}`` or ``{"error": "EOPNOTSUPP"|"EIO"|...}``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from agentd.base.jsontypes import JsonObject
from agentd.base.sff import I2C_ADDRESS, PAGE_SIZE, Cmis
from agentd.host import ethtool_nl, transceiver
from agentd.host.dcb import NetlinkError, iter_attrs
from agentd.host.ethtool import ethtool_ioctl, valid_ifname
from agentd.host.fs import ReadContext
from agentd.host.gate import Gate, allow_all
from agentd.host.genl import Genl, u8, u32
from agentd.host.transceiver import LOWER, UPPER0, PageKey
from agentd.model import Transceiver

A_OFFSET, A_LENGTH, A_PAGE, A_BANK, A_I2C_ADDRESS, A_DATA = 2, 3, 4, 5, 6, 7
ETHTOOL_GMODULEINFO = 0x42
ETHTOOL_GMODULEEEPROM = 0x43
MAX_IOCTL_BYTES = 2048  # ETH_MODULE_SFF_8472_LEN is 512, SFF-8636 640: anything larger is not a module map
_MODINFO = struct.Struct("=III32x")  # cmd, type, eeprom_len, reserved[8]
_EEPROM = struct.Struct("=IIII")  # cmd, magic, offset, len; data[] follows
# ---------------------------------------------------------------------------
# netlink


def page_request(ifname: str, key: PageKey) -> bytes:
    page, bank, offset = key
    return b"".join((ethtool_nl.header(ifname), u32(A_OFFSET, offset), u32(A_LENGTH, PAGE_SIZE), u8(A_PAGE, page),
                     u8(A_BANK, bank), u8(A_I2C_ADDRESS, I2C_ADDRESS)))


def ask_pages(ask: ethtool_nl.Asker, ifname: str) -> dict[PageKey, bytes]:
    """Every page the module has, lower page first. Raises NetlinkError for the lower
    page; a later page the module refuses (EINVAL/EOPNOTSUPP/EIO) is left out."""

    def one(key: PageKey) -> bytes:
        payload = ask(ethtool_nl.MSG_MODULE_EEPROM_GET, page_request(ifname, key))
        data = dict(iter_attrs(payload or b"")).get(A_DATA)
        if data is None:
            raise ValueError(f"page {key[0]:02x}h: no data attribute in the reply")
        return data

    pages = {LOWER: one(LOWER)}
    todo = transceiver.pages_to_read(pages[LOWER])
    while todo:
        key = todo.pop(0)
        if key in pages:
            continue
        try:
            pages[key] = one(key)
        except NetlinkError as e:
            if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.EIO):
                raise
            continue
        if key == (Cmis.ADVERTISED_PAGE, 0, PAGE_SIZE):
            todo = [k for k in transceiver.pages_to_read(pages[LOWER], pages[key]) if k not in pages]
    return pages


# ---------------------------------------------------------------------------
# the legacy ioctl


def flat_pages(data: bytes) -> dict[PageKey, bytes]:
    """The legacy ioctl's flat layout as pages: lower, upper 00h, then upper 01h, 02h ..."""
    out: dict[PageKey, bytes] = {}
    if data:
        out[LOWER] = data[:PAGE_SIZE]
    if len(data) > PAGE_SIZE:
        out[UPPER0] = data[PAGE_SIZE : 2 * PAGE_SIZE]
    for page in range(1, (len(data) + PAGE_SIZE - 1) // PAGE_SIZE - 1):
        out[(page, 0, PAGE_SIZE)] = data[(page + 1) * PAGE_SIZE : (page + 2) * PAGE_SIZE]
    return out


def ioctl_eeprom(sock: socket.socket, ifname: str) -> bytes:
    """GMODULEINFO then GMODULEEEPROM (the whole ``eeprom_len``). Raises OSError."""
    info = ctypes.create_string_buffer(_MODINFO.size)
    _MODINFO.pack_into(info, 0, ETHTOOL_GMODULEINFO, 0, 0)
    ethtool_ioctl(sock, os.fsencode(ifname), info)
    _, _, length = _MODINFO.unpack_from(info, 0)
    length = min(length, MAX_IOCTL_BYTES)
    buf = ctypes.create_string_buffer(_EEPROM.size + length)
    _EEPROM.pack_into(buf, 0, ETHTOOL_GMODULEEEPROM, 0, 0, length)
    ethtool_ioctl(sock, os.fsencode(ifname), buf)
    got = _EEPROM.unpack_from(buf, 0)[3]
    return buf.raw[_EEPROM.size : _EEPROM.size + min(got, length)]


# ---------------------------------------------------------------------------
# answers <-> Transceiver (pure)


def answer_of_pages(pages: Mapping[PageKey, bytes], via: str) -> dict[str, Any]:  # Any: JSON-shaped
    return {"via": via, "pages": [{"page": p, "bank": b, "i2c-address": I2C_ADDRESS, "offset": o, "data": d.hex()}
                                  for (p, b, o), d in sorted(pages.items())]}


def module_of(answer: object) -> Transceiver | None:
    """The Transceiver of a ``module-eeprom`` answer; None: no module ops (EOPNOTSUPP) or
    no answer at all."""
    if not isinstance(answer, Mapping):
        return None
    err = answer.get("error")
    if err is not None:
        if err == "EOPNOTSUPP":
            return None
        return Transceiver(source=str(answer.get("via") or ""), problem=f"module EEPROM not readable ({err}): no module plugged, or it does not answer")
    pages: dict[PageKey, bytes] = {}
    for p in answer.get("pages") or ():
        try:
            key = (int(p["page"]), int(p.get("bank", 0)), int(p["offset"]))
            pages[key] = bytes.fromhex(p["data"])[:PAGE_SIZE]
        except (KeyError, TypeError, ValueError):
            return Transceiver(source="recorded", problem="a recorded page is not {page, bank, offset, data: hex}")
    if not pages:
        return None
    return transceiver.decode(pages, str(answer.get("via") or ""))


def answer_of(module: Transceiver | None) -> dict[str, Any]:  # Any: JSON-shaped
    """The recorded answer that reads back as ``module``."""
    if module is None:
        return {"error": "EOPNOTSUPP"}
    if not module.pages:
        err = (module.problem or "").partition("(")[2].partition(")")[0] or "EIO"
        return {"via": module.source, "error": err}
    return answer_of_pages({(p.page, p.bank, p.offset): bytes.fromhex(p.data) for p in module.pages}, module.source)


# ---------------------------------------------------------------------------
# the reader


# Errors that mean the module itself did not answer (mlx5: an empty cage, or a module that
# does not respond to the firmware's MCIA access): the port has no Transceiver.
NOT_ANSWERING = frozenset({errno.EIO, errno.EREMOTEIO})


def _ask_one(g: Genl | None, family: int | None, sock: socket.socket | None, name: str) -> dict[str, Any]:  # Any: JSON-shaped
    """One netdev's ``module-eeprom`` answer. Raises NetlinkError/OSError for a refusal that
    is neither "no module ops" nor "the module does not answer" (ENODEV: the netdev went)."""
    if g is not None and family is not None:
        try:
            return answer_of_pages(ask_pages(lambda cmd, attrs: g.ask(family, cmd, attrs), name), "netlink")
        except NetlinkError as e:
            if e.errno in NOT_ANSWERING:
                return {"via": "netlink", "error": ethtool_nl.errname(e.errno)}
            if e.errno != errno.EOPNOTSUPP:
                raise
    if sock is None:
        return {"error": "EOPNOTSUPP"}
    try:
        return answer_of_pages(flat_pages(ioctl_eeprom(sock, name)), "ioctl")
    except OSError as e:
        if e.errno == errno.EOPNOTSUPP:
            return {"error": "EOPNOTSUPP"}
        if e.errno in NOT_ANSWERING:
            return {"via": "ioctl", "error": ethtool_nl.errname(e.errno)}
        raise


def _read_live(ctx: ReadContext, names: Sequence[str]) -> dict[str, dict[str, Any]]:  # Any: JSON-shaped
    out: dict[str, JsonObject] = {}
    if not names:
        return out
    g: Genl | None = None
    family: int | None = None
    try:
        g = Genl()
        family = g.family(ethtool_nl.FAMILY)
    except (OSError, NetlinkError, TimeoutError, ValueError):
        pass  # no generic netlink here: the ioctl answers
    try:
        sock: socket.socket | None = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        sock = None
    try:
        for name in names:
            if not valid_ifname(name):
                ctx.error(f"genl(ethtool, {name})", "unreadable", "invalid interface name")
                continue
            try:
                out[name] = _ask_one(g, family, sock, name)
            except NetlinkError as e:
                ctx.error(f"genl(ethtool module-eeprom, {name})", "unreadable", f"{ethtool_nl.errname(e.errno)}: {e}")
            except TimeoutError:
                ctx.error(f"genl(ethtool module-eeprom, {name})", "timeout", "no reply within the netlink timeout")
            except (ValueError, OSError) as e:
                ctx.error(f"genl(ethtool module-eeprom, {name})", "unparsable" if isinstance(e, ValueError) else "unreadable", str(e))
    finally:
        if g is not None:
            g.sock.close()
        if sock is not None:
            sock.close()
    return out


def read_modules(ctx: ReadContext, netdevs: Sequence[tuple[str, str | None]], may_read: Gate = allow_all) -> dict[str, Transceiver]:
    """``{netdev: Transceiver}`` for ``(netdev, PCI bus id)`` pairs whose device
    ``may_read`` allows. Never raises."""
    names = [n for n, bus in netdevs if bus is None or may_read(bus)]
    if ctx.host.is_live:
        answers: dict[str, object] = dict(_read_live(ctx, names))
    elif ctx.host.answers is not None:
        answers = {n: a.get("module-eeprom") for n, a in ethtool_nl.read_recorded_answers(ctx, names).items()}
    else:
        return {}
    out = {}
    for name, answer in answers.items():
        module = module_of(answer)
        if module is not None:
            out[name] = module
    return out
