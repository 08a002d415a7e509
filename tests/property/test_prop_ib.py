"""Properties of the InfiniBand/RoCE text parsers (agentd.host.ibparse) and of the test
oracles built on them (tests/support/ib_oracles.py): any text gives the documented shapes,
rendered text round-trips, and the GID pick is always a usable GID."""

from __future__ import annotations

import ipaddress
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.host import ibparse
from agentd.model import Gid
from tests.support import ib_oracles

PROFILE = settings.get_profile("agentd")  # registered in conftest.py

GEN_NAMES = ["SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR"]
LONG_DIGITS = "9" * 4301  # one past CPython's int-from-string digit limit


def _opt(t: type):
    return lambda v: v is None or type(v) is t


# -- rate -------------------------------------------------------------------------------

rate_like = st.builds(
    lambda pre, n, unit, width, gen: f"{pre}{n}{unit}" + (f" ({width}X{gen})" if width is not None else ""),
    st.sampled_from(["", "rate: ", " "]),
    st.from_regex(r"\d{1,6}(\.\d{1,3})?", fullmatch=True),
    st.sampled_from([" Gb/sec", " Gb/s", "", "Gb/sec", " gb/SEC"]),
    st.none() | st.integers(0, 64),
    st.sampled_from([""] + [f" {g}" for g in GEN_NAMES]) | st.text(max_size=6),
)


@settings(PROFILE)
@given(st.text() | rate_like)
def test_parse_rate_shapes(text: str) -> None:
    gbps, width, gen = ibparse.parse_rate(text)
    assert _opt(float)(gbps) and _opt(int)(width) and _opt(str)(gen)
    assert (gbps is None) <= (width is None and gen is None)  # nothing without a number
    assert gen is None or gen == gen.upper()


@settings(PROFILE)
@given(
    st.integers(0, 10**6),
    st.sampled_from(["", ".5", ".25", ".125"]),
    st.sampled_from([" Gb/sec", " Gb/s"]),
    st.integers(1, 32),
    st.sampled_from(GEN_NAMES) | st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,7}", fullmatch=True) | st.none(),
    st.sampled_from(["", "rate:\t ", "  "]),
)
def test_parse_rate_round_trips(whole: int, frac: str, unit: str, width: int, gen: str | None, prefix: str) -> None:
    text = f"{prefix}{whole}{frac}{unit} ({width}X{' ' + gen if gen else ''})\n"
    assert ibparse.parse_rate(text) == (float(f"{whole}{frac}"), width, gen.upper() if gen else None)
    assert ibparse.parse_rate(f"{whole}{frac}") == (float(f"{whole}{frac}"), None, None)  # ibstat's "Rate: 400"


@pytest.mark.parametrize("width", [LONG_DIGITS, "9" * 21, "٤", "²"])
def test_parse_rate_odd_width(width: str) -> None:
    assert ibparse.parse_rate(f"400 Gb/sec ({width}X NDR)") == (None, None, None)


# -- state ------------------------------------------------------------------------------

state_name = st.from_regex(r"[A-Za-z][A-Za-z_ ]{0,20}[A-Za-z]|[A-Za-z]", fullmatch=True)


@settings(PROFILE)
@given(st.text() | st.builds(lambda i, n: f"{i}: {n}", st.integers(0, 10**6), st.text(max_size=20)))
def test_parse_state_shapes(text: str) -> None:
    sid, name = ibparse.parse_state(text)
    assert _opt(int)(sid) and _opt(str)(name)
    assert sid is not None or name is None


@settings(PROFILE)
@given(st.integers(0, 10**9), state_name, st.sampled_from(["", "\n", "  "]))
def test_parse_state_round_trips(sid: int, name: str, tail: str) -> None:
    assert ibparse.parse_state(f"{sid}: {name}{tail}") == (sid, name)
    assert ibparse.parse_state(f"{sid}{tail}") == (sid, None)
    assert ibparse.parse_state(f"{sid}: <unknown>") == (sid, None)


@settings(PROFILE)
@given(st.sampled_from(sorted({**ibparse.PORT_STATES, **ibparse.PHYS_STATES}.items())), st.sampled_from([str.lower, str.upper, str.title, lambda s: s]))
def test_parse_state_plain_names(item: tuple[int, str], case) -> None:
    _sid, kernel_name = item
    got = ibparse.parse_state(case(kernel_name))
    assert got[0] in (ibparse.PORT_STATES | ibparse.PHYS_STATES) and got[1] is not None
    assert got[1].lower().replace(" ", "") == kernel_name.lower().replace(" ", "")


@pytest.mark.parametrize("text", [LONG_DIGITS, f"{LONG_DIGITS}: ACTIVE", "9" * 21, "٤: ACTIVE", "²"])
def test_parse_state_odd_id(text: str) -> None:
    assert ibparse.parse_state(text) == (None, None)


# -- ibstat / ibstatus ------------------------------------------------------------------

ca_name = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)
hexval = st.integers(0, 2**64 - 1).map(lambda v: f"0x{v:016x}")
port = st.fixed_dictionaries({
    "state": st.sampled_from(["Active", "Down", "Initializing", "Armed"]),
    "phys": st.sampled_from(["LinkUp", "Polling", "Disabled", "Sleep"]),
    "rate": st.sampled_from([10, 25, 40, 56, 100, 200, 400, 800]),
    "lid": st.integers(0, 0xBFFF),
    "sm_lid": st.integers(0, 0xBFFF),
    "layer": st.sampled_from(["InfiniBand", "Ethernet"]),
    "guid": hexval,
})
ca = st.fixed_dictionaries({"name": ca_name, "fw": st.from_regex(r"\d{1,2}\.\d{1,2}\.\d{1,4}", fullmatch=True), "guid": hexval, "ports": st.lists(port, min_size=1, max_size=3)})


def render_ibstat(cas: list[dict], indent: str) -> str:
    out = []
    for c in cas:
        out += [f"CA '{c['name']}'", f"{indent}CA type: MT4129", f"{indent}Number of ports: {len(c['ports'])}", f"{indent}Firmware version: {c['fw']}",
                f"{indent}Hardware version: 0", f"{indent}Node GUID: {c['guid']}", f"{indent}System image GUID: {c['guid']}"]
        for i, p in enumerate(c["ports"], 1):
            d = indent * 2
            out += [f"{indent}Port {i}:", f"{d}State: {p['state']}", f"{d}Physical state: {p['phys']}", f"{d}Rate: {p['rate']}",
                    f"{d}Base lid: {p['lid']}", f"{d}LMC: 0", f"{d}SM lid: {p['sm_lid']}", f"{d}Capability mask: 0x2651e848",
                    f"{d}Port GUID: {p['guid']}", f"{d}Link layer: {p['layer']}"]
    return "\n".join(out) + "\n"


def _check_port_dict(p: dict) -> None:
    assert type(p["port"]) is int
    for k, t in (("state_id", int), ("phys_state_id", int), ("lid", int), ("sm_lid", int), ("lmc", int), ("rate_gbps", float), ("width", int)):
        assert _opt(t)(p.get(k)), (k, p.get(k))


@settings(PROFILE)
@given(st.text() | st.lists(st.sampled_from(["CA 'x'", "\tPort 1:", "\t\tState: Active", "\tRate: 4", "ibpanic: x", "", "\t\tRate: 1e9", f"\tPort {LONG_DIGITS}:", "\tPort ²:", f"\t\tState: {LONG_DIGITS}", f"\t\tBase lid: {LONG_DIGITS}"]), max_size=12).map("\n".join))
def test_parse_ibstat_shapes(text: str) -> None:
    for c in ib_oracles.parse_ibstat(text):
        assert type(c["name"]) is str and _opt(int)(c.get("num_ports"))
        for p in c["ports"]:
            _check_port_dict(p)


@settings(PROFILE)
@given(st.lists(ca, max_size=4), st.sampled_from(["\t", "    ", "  "]))
def test_parse_ibstat_round_trips(cas: list[dict], indent: str) -> None:
    parsed = ib_oracles.parse_ibstat(render_ibstat(cas, indent) + "ibpanic: [12] main: stat of IB device 'x' failed\n")
    assert [c["name"] for c in parsed] == [c["name"] for c in cas]
    for c, got in zip(cas, parsed):
        assert (got["fw_ver"], got["node_guid"], got["num_ports"]) == (c["fw"], c["guid"], len(c["ports"]))
        for i, (p, g) in enumerate(zip(c["ports"], got["ports"], strict=True), 1):
            _check_port_dict(g)
            assert (g["port"], g["rate_gbps"], g["lid"], g["sm_lid"], g["link_layer"], g["port_guid"]) == (i, float(p["rate"]), p["lid"], p["sm_lid"], p["layer"], p["guid"])
            assert g["state"] == {"Active": "ACTIVE", "Down": "DOWN", "Initializing": "INIT", "Armed": "ARMED"}[p["state"]]
            assert g["phys_state"] == p["phys"]


@settings(PROFILE)
@given(st.lists(st.tuples(ca_name, st.integers(1, 4), port), max_size=5))
def test_parse_ibstatus_round_trips(ports: list) -> None:
    text = "".join(
        f"Infiniband device '{n}' port {i} status:\n\tdefault gid:\t fe80:0000:0000:0000:0015:5dff:fd34:11eb\n\tbase lid:\t 0x{p['lid']:x}\n"
        f"\tsm lid:\t\t 0x{p['sm_lid']:x}\n\tstate:\t\t 4: ACTIVE\n\tphys state:\t 5: LinkUp\n\trate:\t\t {p['rate']} Gb/sec (4X NDR)\n\tlink_layer:\t {p['layer']}\n\n"
        for n, i, p in ports
    )
    got = ib_oracles.parse_ibstatus(text)
    assert [(g["name"], g["port"], g["lid"], g["sm_lid"], g["rate_gbps"], g["width"], g["link_layer"]) for g in got] == [
        (n, i, p["lid"], p["sm_lid"], float(p["rate"]), 4, p["layer"]) for n, i, p in ports
    ]


@settings(PROFILE)
@given(st.text())
def test_parse_ibstatus_shapes(text: str) -> None:
    for p in ib_oracles.parse_ibstatus(text):
        assert type(p["name"]) is str
        _check_port_dict(p)


def test_parse_ibstat_huge_port_number() -> None:
    """A 'Port N:' block whose N is not a port number is skipped; the next port is read."""
    got = ib_oracles.parse_ibstat(f"CA 'mlx5_0'\n\tPort {LONG_DIGITS}:\n\t\tState: Active\n\tPort 2:\n\t\tState: Down\n")
    assert [(p["port"], p["state"]) for p in got[0]["ports"]] == [(2, "DOWN")]


def test_parse_ibstatus_huge_port_number() -> None:
    text = f"Infiniband device 'mlx5_0' port {LONG_DIGITS} status:\n\tstate:\t 4: ACTIVE\nInfiniband device 'mlx5_0' port 1 status:\n\tstate:\t 1: DOWN\n"
    assert [(p["port"], p["state"]) for p in ib_oracles.parse_ibstatus(text)] == [(1, "DOWN")]


# -- GIDs -------------------------------------------------------------------------------


def sysfs_gid(v: int) -> str:
    h = f"{v:032x}"
    return ":".join(h[i : i + 4] for i in range(0, 32, 4))


ZERO, LINK_LOCAL = 0, 0xFE80 << 112
ipv4_mapped = st.integers(0, 2**32 - 1).map(lambda a: (0xFFFF << 32) | a)
link_local = st.integers(0, 2**64 - 1).map(lambda a: LINK_LOCAL | a)
gid_value = st.one_of(st.just(ZERO), link_local, ipv4_mapped, st.integers(0, 2**128 - 1))
gid_text = gid_value.map(sysfs_gid) | gid_value.map(lambda v: str(ipaddress.IPv6Address(v))) | st.text(max_size=45)
gid_type = st.sampled_from(["IB/RoCE v1", "RoCE v2", "RoCE v1", None, "", "v2"]) | st.text(max_size=10)


@settings(PROFILE)
@given(gid_text)
def test_gid_helpers_never_raise(text: str) -> None:
    for fn in (ibparse.is_gid, ibparse.is_zero, ib_oracles.is_ipv4_mapped, ib_oracles.is_link_local):
        assert type(fn(text)) is bool
    v4 = ib_oracles.ipv4_of(text)
    assert v4 is None or (ib_oracles.is_ipv4_mapped(text) and ipaddress.IPv4Address(v4) is not None)


@settings(PROFILE)
@given(gid_value)
def test_gid_helpers_agree_with_the_integer(v: int) -> None:
    g = sysfs_gid(v)
    assert ibparse.is_gid(g) and ibparse.is_zero(g) == (v == 0)
    assert ib_oracles.is_ipv4_mapped(g) == (v >> 32 == 0xFFFF)
    assert ib_oracles.is_link_local(g) == (v >> 64 == 0xFE80 << 48)
    if v >> 32 == 0xFFFF:
        assert ib_oracles.ipv4_of(g) == str(ipaddress.IPv4Address(v & 0xFFFFFFFF))


def _table(entries: list[tuple[int, str, str | None]]) -> list[Gid]:
    seen: dict[int, Gid] = {}
    for i, g, t in entries:
        seen.setdefault(i, Gid(index=i, gid=g, type=t))
    return list(seen.values())


gid_tables = st.lists(st.tuples(st.integers(0, 255), gid_text, gid_type), max_size=24).map(_table)
addr_ranges = st.none() | st.sampled_from(["10.0.0.0/8", "192.168.1.0/24", "0.0.0.0/0", "10.1.2.3/32", "nonsense", "fe80::/64", ""])


@settings(PROFILE)
@given(gid_tables, addr_ranges, st.sampled_from([1, 2]), st.randoms(use_true_random=False))
def test_roce_gid_index_is_a_usable_ipv4_gid(table: list[Gid], addr_range: str | None, version: int, rnd: random.Random) -> None:
    idx = ib_oracles.roce_v2_gid_index(table, roce_version=version, addr_range=addr_range)
    if idx is not None:
        g = next(x for x in table if x.index == idx)
        assert ib_oracles.is_ipv4_mapped(g.gid) and not ibparse.is_zero(g.gid)
        assert (g.type or "").strip().startswith("RoCE v2" if version == 2 else ("IB/RoCE v1", "RoCE v1"))
        if addr_range:
            assert ipaddress.IPv4Address(ib_oracles.ipv4_of(g.gid)) in ipaddress.IPv4Network(addr_range, strict=False)
    shuffled = list(table)
    rnd.shuffle(shuffled)
    assert ib_oracles.roce_v2_gid_index(shuffled, roce_version=version, addr_range=addr_range) == idx  # order-free


@settings(PROFILE)
@given(st.lists(st.tuples(link_local, st.sampled_from(["IB/RoCE v1", "RoCE v2"])), max_size=6), ipv4_mapped.filter(lambda v: v & 0xFFFFFFFF), st.data())
def test_roce_gid_index_picks_the_ipv4_v2_entry(lls: list, v4: int, data: st.DataObject) -> None:
    """A table of link-local GIDs plus one IPv4 address as v1 and v2 (what the kernel
    makes for an address on a RoCE netdev): NCCL's pick is the v2 entry."""
    slots = data.draw(st.permutations(range(len(lls) + 2)))
    entries = [Gid(index=slots[i], gid=sysfs_gid(v), type=t) for i, (v, t) in enumerate(lls)]
    entries += [Gid(index=slots[-2], gid=sysfs_gid(v4), type="IB/RoCE v1"), Gid(index=slots[-1], gid=sysfs_gid(v4), type="RoCE v2")]
    assert ib_oracles.roce_v2_gid_index(entries) == slots[-1]
    assert ib_oracles.roce_v2_gid_index(entries, roce_version=1) == slots[-2]
