"""The rtnetlink link parser (agentd.daemon.netlink) on arbitrary and on mangled
RTM_NEWLINK/RTM_DELLINK datagrams: it never raises, and what is well-formed reads back.
Layout (rtnetlink(7)): nlmsghdr (=IHHII), ifinfomsg (=BxHiII), rtattrs (=HH + payload,
each padded to 4 bytes); IFLA_IFNAME 3, IFLA_OPERSTATE 16 (u8), IFLA_CARRIER 33 (u8)."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.daemon.netlink import OPERSTATES, LinkEvent, parse_link_messages

PROFILE = settings.get_profile("agentd")  # registered in conftest.py


def rtattr(atype: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), atype) + payload
    return raw + b"\0" * (-len(raw) % 4)


def message(mtype: int, ifindex: int, attrs: list[tuple[int, bytes]]) -> bytes:
    body = struct.pack("=BxHiII", 0, 1, ifindex, 0, 0) + b"".join(rtattr(t, p) for t, p in attrs)
    return struct.pack("=IHHII", 16 + len(body), mtype, 0, 0, 0) + body


names = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=15)
other_attrs = st.lists(st.tuples(st.integers(0, 0xFFFF).filter(lambda t: t & 0x3FFF not in (3, 16, 33)), st.binary(max_size=12)), max_size=5)


@settings(PROFILE)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_raise(data):
    events, _ = parse_link_messages(data)
    assert all(isinstance(e, LinkEvent) for e in events)


@settings(PROFILE)
@given(st.sampled_from([16, 17]), st.integers(-(2**31), 2**31 - 1), names, st.integers(0, 6), st.booleans(), other_attrs)
def test_well_formed_messages_read_back(mtype, ifindex, name, oper, carrier, others):
    attrs = [*others, (3, name.encode() + b"\0"), (16, bytes([oper])), (33, bytes([carrier]))]
    (event,), malformed = parse_link_messages(message(mtype, ifindex, attrs))
    assert not malformed
    assert event == LinkEvent("new" if mtype == 16 else "del", ifindex, name, 1, OPERSTATES[oper], carrier)


@settings(PROFILE)
@given(names, other_attrs, st.integers(0, 300), st.integers(0, 300), st.binary(min_size=1, max_size=4), st.binary(max_size=16))
def test_mangled_messages_never_raise(name, others, cut, at, patch, tail):
    data = bytearray(message(16, 5, [*others, (3, name.encode() + b"\0"), (33, b"\0")]) * 2)
    at = min(at, len(data))
    data[at : at + len(patch)] = patch  # forged lengths, types, payloads
    events, _ = parse_link_messages(bytes(data[:cut]) + tail)
    assert all(isinstance(e, LinkEvent) for e in events)
