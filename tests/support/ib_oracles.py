"""Test oracles for InfiniBand/RoCE: ``ibstat``/``ibstatus`` text parsers and NCCL's GID pick.

agentd reads sysfs (``agentd.host.infiniband``, parsing with ``agentd.host.ibparse``) and
never runs these tools nor picks a GID index. Tests use what is here to check agentd
against independent evidence: the rate/state parsing against the text real ``ibstat`` and
``ibstatus`` print (the same kernel values, spelled by the tools), and a simulated or real
GID table against the index NCCL would choose on it (``ncclIbGetGidIndex``).

Every function returns ``None`` (or an empty result) for text it does not understand;
none of them raises on bad input.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Any, Protocol

from agentd.host.fs import parse_decimal
from agentd.host.ibparse import gid_int, parse_rate, parse_state

# ---------------------------------------------------------------------------
# ibstat / ibstatus

_KV_RE = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z _]*?)\s*:\s*(?P<value>.*?)\s*$")
_CA_RE = re.compile(r"^CA\s+'(?P<name>[^']+)'\s*$")
_PORT_RE = re.compile(r"^\s*Port\s+(?P<port>\d+)\s*:\s*$", re.ASCII)
_IBSTATUS_RE = re.compile(r"^\s*Infiniband device\s+'(?P<name>[^']+)'\s+port\s+(?P<port>\d+)\s+status\s*:\s*$", re.ASCII)

_IBSTAT_CA_KEYS = {
    "CA type": "hca_type",
    "Number of ports": "num_ports",
    "Firmware version": "fw_ver",
    "Hardware version": "hw_ver",
    "Node GUID": "node_guid",
    "System image GUID": "system_image_guid",
}
_IBSTAT_PORT_KEYS = {
    "State": "state",
    "Physical state": "phys_state",
    "Rate": "rate",
    "Base lid": "lid",
    "LMC": "lmc",
    "SM lid": "sm_lid",
    "Capability mask": "capability_mask",
    "Port GUID": "port_guid",
    "Link layer": "link_layer",
}
_IBSTATUS_KEYS = {
    "default gid": "default_gid",
    "base lid": "lid",
    "sm lid": "sm_lid",
    "state": "state",
    "phys state": "phys_state",
    "rate": "rate",
    "link_layer": "link_layer",
}


def _int_or_none(s: str, base: int = 10) -> int | None:
    try:
        return int(s, 16 if s.lower().startswith("0x") else base)
    except ValueError:
        return None


def _port_fields(raw: dict[str, str]) -> dict[str, Any]:
    """Turn a port's raw key/values into the field names IbPort uses."""
    out: dict[str, Any] = {}
    if "state" in raw:
        out["state_id"], out["state"] = parse_state(raw["state"])
    if "phys_state" in raw:
        out["phys_state_id"], out["phys_state"] = parse_state(raw["phys_state"])
    if "rate" in raw:
        out["rate_raw"] = raw["rate"]
        out["rate_gbps"], out["width"], out["generation"] = parse_rate(raw["rate"])
    for key in ("lid", "sm_lid", "lmc"):
        if key in raw:
            out[key] = _int_or_none(raw[key])
    for key in ("link_layer", "port_guid", "capability_mask", "default_gid"):
        if key in raw:
            out[key] = raw[key]
    return out


def parse_ibstat(text: str) -> list[dict[str, Any]]:
    """``ibstat`` output -> one dict per CA: name, hca_type, num_ports, fw_ver, hw_ver,
    node_guid, system_image_guid and ``ports`` (dicts with IbPort field names plus
    ``port_guid``/``lmc``/``capability_mask``). Indentation (tabs or spaces) is ignored;
    lines that are not part of a CA block (e.g. a trailing ``ibpanic:``) are skipped."""
    cas: list[dict[str, Any]] = []
    ca: dict[str, Any] | None = None
    port_raw: dict[str, str] | None = None

    def close_port() -> None:
        nonlocal port_raw
        if ca is not None and port_raw is not None:
            port = parse_decimal(port_raw.pop("_port"))
            if port is not None:  # else not a port number: the block is skipped
                ca["ports"].append({"port": port, **_port_fields(port_raw)})
        port_raw = None

    for line in text.splitlines():
        if m := _CA_RE.match(line):
            close_port()
            ca = {"name": m.group("name"), "ports": []}
            cas.append(ca)
            continue
        if ca is None or not line.strip():
            continue
        if not line[:1].isspace():  # "ibpanic: ..." or other unindented noise ends the CA
            close_port()
            ca = None
            continue
        if m := _PORT_RE.match(line):
            close_port()
            port_raw = {"_port": m.group("port")}
            continue
        kv = _KV_RE.match(line)
        if not kv:
            continue
        key, value = kv.group("key"), kv.group("value")
        if port_raw is not None and key in _IBSTAT_PORT_KEYS:
            port_raw[_IBSTAT_PORT_KEYS[key]] = value
        elif key in _IBSTAT_CA_KEYS:
            field = _IBSTAT_CA_KEYS[key]
            ca[field] = _int_or_none(value) if field == "num_ports" else value
    close_port()
    return cas


def parse_ibstatus(text: str) -> list[dict[str, Any]]:
    """``ibstatus`` output -> one dict per port: name, port, default_gid, lid, sm_lid,
    state/state_id, phys_state/phys_state_id, rate_raw/rate_gbps/width/generation, link_layer."""
    ports: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    raw: dict[str, str] = {}

    def close() -> None:
        if cur is not None:
            cur.update(_port_fields(raw))
            ports.append(cur)

    for line in text.splitlines():
        if m := _IBSTATUS_RE.match(line):
            close()
            port = parse_decimal(m.group("port"))
            # A port number past u64 is not a port: its block is skipped.
            cur = None if port is None else {"name": m.group("name"), "port": port}
            raw = {}
            continue
        if cur is None:
            continue
        kv = _KV_RE.match(line)
        if kv and kv.group("key") in _IBSTATUS_KEYS:
            raw[_IBSTATUS_KEYS[kv.group("key")]] = kv.group("value")
    close()
    return ports


# ---------------------------------------------------------------------------
# GIDs (nccl-spec.md section 4)


def is_ipv4_mapped(gid: str | None) -> bool:
    """``::ffff:a.b.c.d`` (first 80 bits zero, then 0xffff)."""
    v = gid_int(gid)
    return v is not None and (v >> 32) == 0xFFFF


def is_link_local(gid: str | None) -> bool:
    """fe80::/64, as NCCL's linkLocalGid tests it (first 64 bits fe80:0000:0000:0000)."""
    v = gid_int(gid)
    return v is not None and (v >> 64) == 0xFE80 << 48


def ipv4_of(gid: str | None) -> str | None:
    """``0000:...:ffff:0a00:0105`` -> ``"10.0.1.5"``; None if not IPv4-mapped."""
    v = gid_int(gid)
    if v is None or (v >> 32) != 0xFFFF:
        return None
    return str(ipaddress.IPv4Address(v & 0xFFFFFFFF))


def _nccl_family_is_inet(v: int) -> bool:
    # getGidAddrFamily: IPv4-mapped, or IPv4-mapped multicast (ff0e::ffff:a.b.c.d).
    return (v >> 32) == 0xFFFF or (v >> 32) == (0xFF0E << 80) | 0xFFFF


def _nccl_configured(v: int) -> bool:
    # configuredGid: not all-zero and not fe80:: with an all-zero trailer.
    return v != 0 and v != 0xFE80 << 112


def _nccl_valid(v: int) -> bool:
    return _nccl_configured(v) and (v >> 64) != 0xFE80 << 48


def _roce_version(gid_type: str | None) -> int | None:
    if not gid_type:
        return None
    t = gid_type.strip()
    if t.startswith(("IB/RoCE v1", "RoCE v1")):
        return 1
    if t.startswith("RoCE v2"):
        return 2
    return None


class _GidLike(Protocol):
    index: int
    gid: str
    type: str | None


def roce_v2_gid_index(
    gids: Iterable[_GidLike], *, roce_version: int = 2, addr_range: str | None = None
) -> int | None:
    """The GID index NCCL picks by itself on a RoCE port (ncclIbGetGidIndex with
    NCCL_IB_ADDR_FAMILY=AF_INET), or None when that pick is not a usable IPv4 RoCE GID of
    the wanted version (NCCL would then fall back to an index that does not work).

    ``gids`` are the non-empty table entries (model ``Gid``); absent indices are empty.
    ``addr_range`` mirrors NCCL_IB_ADDR_RANGE (an IPv4 CIDR).
    """
    table: dict[int, tuple[int, int | None]] = {}
    for g in gids:
        v = gid_int(g.gid)
        if v is not None:
            table[g.index] = (v, _roce_version(g.type))
    if not table:
        return None
    net = None
    if addr_range:
        try:
            net = ipaddress.IPv4Network(addr_range, strict=False)
        except ValueError:
            return None

    def in_range(v: int) -> bool:
        return net is None or ipaddress.IPv4Address(v & 0xFFFFFFFF) in net

    def at(i: int) -> tuple[int, int | None]:
        return table.get(i, (0, None))

    chosen = 0
    for cand in range(1, max(table) + 1):
        (gv, gver), (cv, cver) = at(chosen), at(cand)
        g_inet, c_inet = _nccl_family_is_inet(gv), _nccl_family_is_inet(cv)
        if c_inet != g_inet and c_inet and in_range(cv):
            chosen = cand
            continue
        if not c_inet or not _nccl_valid(cv) or not in_range(cv):
            continue
        if (gver != cver or not _nccl_valid(gv)) and cver == roce_version:
            chosen = cand
    v, ver = at(chosen)
    if (v >> 32) == 0xFFFF and _nccl_valid(v) and ver == roce_version and in_range(v):
        return chosen
    return None
