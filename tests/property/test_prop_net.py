"""Properties of the NIC parsers: ``ethtool -S`` text, ``mlnx_qos`` text and the DCB
netlink reply decoder (random bytes and generated, well-framed messages)."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.host import dcb, ethtool
from agentd.model import PfcConfig

PROFILE = settings.get_profile("agentd")  # registered in conftest.py

LONG_DIGITS = "9" * 4301  # one past CPython's int-from-string digit limit


# -- ethtool -S -------------------------------------------------------------------------

stat_name = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.:\-\[\] ]{0,30}[A-Za-z0-9_\]]", fullmatch=True)
ethtool_lines = st.lists(
    st.sampled_from(["NIC statistics:", "     rx_packets: 12", "tx: -1", "x: 1.5", "bad line", "", "  a:b: 3", "Standard stats for eth0:", "k: ٣", "k: ²", f"k: {LONG_DIGITS}"]) | st.text(max_size=30),
    max_size=12,
).map("\n".join)


@settings(PROFILE)
@given(st.text() | ethtool_lines)
def test_parse_ethtool_shapes(text: str) -> None:
    out = ethtool.parse_ethtool_s(text)
    assert out is None or all(type(k) is str and type(v) is int and v >= 0 for k, v in out.items())


@settings(PROFILE)
@given(st.dictionaries(stat_name, st.integers(0, 2**64 - 1), max_size=40), st.sampled_from(["     ", "\t", ""]), st.sampled_from(["\n", "\r\n"]))
def test_parse_ethtool_round_trips(stats: dict[str, int], indent: str, eol: str) -> None:
    text = f"NIC statistics:{eol}" + "".join(f"{indent}{k}: {v}{eol}" for k, v in stats.items())
    assert ethtool.parse_ethtool_s(text) == stats


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("NIC statistics:\n     rx_prio3_pause: ²\n", id="superscript-digit"),
        pytest.param("NIC statistics:\n     rx_prio3_pause: ٣\n", id="arabic-indic-digit"),
        pytest.param(f"NIC statistics:\n     rx_bytes: {LONG_DIGITS}\n", id="over-int-digit-limit"),
        pytest.param(f"NIC statistics:\n     rx_bytes: {2**64 * 10}\n", id="over-u64-digits"),
    ],
)
def test_parse_ethtool_odd_digits(text: str) -> None:
    assert ethtool.parse_ethtool_s(text) is None


# -- mlnx_qos ---------------------------------------------------------------------------


def render_mlnx_qos(trust: str | None, enabled: set[int], noise: list[str]) -> str:
    lines = [*noise, "DCBX mode: OS controlled"]
    if trust is not None:
        lines.append(f"Priority trust state: {trust}")
    lines += ["Cable len: 7", "PFC configuration:", "        priority    0   1   2   3   4   5   6   7"]
    lines.append("        enabled     " + "   ".join("1" if p in enabled else "0" for p in range(8)) + "   ")
    lines += ["tc: 0 ratelimit: unlimited, tsa: vendor", "         priority:  1"]
    return "\n".join(lines) + "\n"


qos_tokens = st.sampled_from(["PFC configuration:", "priority", "enabled", "0", "1", "9", "-1", "01", "٣", "²", LONG_DIGITS, "x", "  ", "Priority trust state: pcp"])
qos_text = st.lists(st.lists(qos_tokens, max_size=10).map(" ".join), max_size=10).map("\n".join)


@settings(PROFILE)
@given(st.text() | qos_text)
def test_parse_mlnx_qos_shapes(text: str) -> None:
    cfg = dcb.parse_mlnx_qos(text)
    assert cfg is None or (isinstance(cfg, PfcConfig) and all(type(p) is int and 0 <= p <= 7 for p in cfg.enabled) and cfg.trust in (None, "pcp", "dscp"))


@settings(PROFILE)
@given(st.sampled_from(["pcp", "dscp", "PCP", "none", None]), st.sets(st.integers(0, 7)), st.lists(st.text(max_size=20).filter(lambda s: "PFC" not in s and "trust" not in s), max_size=3))
def test_parse_mlnx_qos_round_trips(trust: str | None, enabled: set[int], noise: list[str]) -> None:
    cfg = dcb.parse_mlnx_qos(render_mlnx_qos(trust, enabled, noise))
    want_trust = trust.lower() if trust and trust.lower() in ("pcp", "dscp") else None
    assert cfg == PfcConfig(enabled=tuple(sorted(enabled)), trust=want_trust, source="mlnx_qos")


@pytest.mark.parametrize("prio", ["²", "٣", "8", "9", "-1", LONG_DIGITS])
def test_parse_mlnx_qos_refuses_what_is_not_a_priority(prio: str) -> None:
    """Priorities are 0-7 in ASCII: anything else makes the table unreadable (None)."""
    assert dcb.parse_mlnx_qos(f"PFC configuration:\n  priority {prio}\n  enabled 1\n") is None
    assert dcb.parse_mlnx_qos(f"PFC configuration:\n  priority 3 {prio}\n  enabled 1 0\n") is None


# -- DCB netlink ------------------------------------------------------------------------


def nlattr(atype: int, payload: bytes) -> bytes:
    a = struct.pack("=HH", 4 + len(payload), atype) + payload
    return a + b"\0" * (-len(a) % 4)


def nlmsg(mtype: int, seq: int, payload: bytes) -> bytes:
    m = struct.pack("=IHHII", 16 + len(payload), mtype, 0, seq, 0) + payload
    return m + b"\0" * (-len(m) % 4)


def ieee_payload(pfc_en: int | None, apps: list[tuple[int, int, int]], trust: list[int] | None, nested_flag: bool) -> bytes:
    inner = b""
    if pfc_en is not None:
        inner += nlattr(dcb.DCB_ATTR_IEEE_PFC, struct.pack("=BBBH8Q8Q", 8, pfc_en, 0, 0, *([0] * 16)))
    if apps:
        inner += nlattr(dcb.DCB_ATTR_IEEE_APP_TABLE, b"".join(nlattr(1, struct.pack("=BBH", sel, prio, proto)) for sel, prio, proto in apps))
    if trust is not None:
        inner += nlattr(dcb.DCB_ATTR_DCB_APP_TRUST_TABLE, b"".join(nlattr(1, bytes([sel])) for sel in trust))
    ieee_type = dcb.DCB_ATTR_IEEE | (dcb.NLA_F_NESTED if nested_flag else 0)
    return struct.pack("=BBH", 0, dcb.DCB_CMD_IEEE_GET, 0) + nlattr(dcb.DCB_ATTR_IFNAME, b"eth0\0") + nlattr(ieee_type, inner)


selectors = st.sampled_from([1, 2, 3, 4, dcb.IEEE_8021QAZ_APP_SEL_DSCP, dcb.DCB_APP_SEL_PCP])


# struct dcb_app {selector, priority, protocol}: for DSCP entries protocol is the DSCP;
# out-of-range priorities (> 7) and DSCPs (> 63) must be skipped, not mapped.
app_entries = st.tuples(selectors, st.sampled_from([0, 3, 7, 8, 255]), st.sampled_from([0, 26, 63, 64, 65535]))


@settings(PROFILE)
@given(st.none() | st.integers(0, 255), st.lists(app_entries, max_size=4), st.none() | st.lists(selectors, max_size=3), st.booleans())
def test_parse_ieee_get_round_trips(pfc_en: int | None, apps: list[tuple[int, int, int]], trust: list[int] | None, nested: bool) -> None:
    cfg = dcb.parse_ieee_get(ieee_payload(pfc_en, apps, trust, nested))
    if pfc_en is None:
        assert cfg is None
        return
    mapping = {proto: prio for sel, prio, proto in apps if sel == dcb.IEEE_8021QAZ_APP_SEL_DSCP and prio <= 7 and proto <= 63}
    if trust is not None:
        want = {dcb.IEEE_8021QAZ_APP_SEL_DSCP: "dscp", dcb.DCB_APP_SEL_PCP: "pcp"}.get(trust[0]) if trust else None
    else:
        want = "dscp" if mapping else None
    assert cfg == PfcConfig(enabled=tuple(p for p in range(8) if pfc_en >> p & 1), trust=want, source="dcbnl", dscp2prio=mapping,
                            apptrust=trust is not None)


def _decode(data: bytes, seq: int) -> None:
    try:
        answered, cfg = dcb.parse_reply(data, seq)
    except (ValueError, dcb.NetlinkError):
        return  # the documented errors
    assert type(answered) is bool and (cfg is None or isinstance(cfg, PfcConfig))
    assert answered or cfg is None


@settings(PROFILE)
@given(st.binary(max_size=512), st.integers(0, 2**32 - 1))
def test_parse_reply_random_bytes(data: bytes, seq: int) -> None:
    _decode(data, seq)
    try:
        cfg = dcb.parse_ieee_get(data)
    except ValueError:
        return
    assert cfg is None or isinstance(cfg, PfcConfig)


message = st.one_of(
    st.builds(lambda seq, err: nlmsg(dcb.NLMSG_ERROR, seq, struct.pack("=i", err) + b"\0" * 16), st.sampled_from([1, 2]), st.integers(-(2**31), 2**31 - 1)),
    st.builds(lambda seq: nlmsg(dcb.NLMSG_DONE, seq, b"\0" * 4), st.sampled_from([1, 2])),
    st.builds(lambda seq, p: nlmsg(dcb.RTM_GETDCB, seq, p), st.sampled_from([1, 2]), st.builds(ieee_payload, st.none() | st.integers(0, 255), st.lists(app_entries, max_size=2), st.none() | st.lists(selectors, max_size=2), st.booleans())),
    st.builds(lambda t, seq, p: nlmsg(t, seq, p), st.integers(0, 0xFFFF), st.sampled_from([1, 2]), st.binary(max_size=40)),
)


@settings(PROFILE)
@given(st.lists(message, max_size=5).map(b"".join), st.integers(0, 64), st.binary(max_size=8))
def test_parse_reply_framed_messages(data: bytes, cut: int, junk: bytes) -> None:
    _decode(data, 1)
    _decode(data[: max(0, len(data) - cut)] + junk, 1)  # truncated and trailing garbage


def test_parse_reply_int_min_error() -> None:
    """error = INT_MIN: its negation is not a C int, which os.strerror refuses."""
    with pytest.raises(dcb.NetlinkError) as e:
        dcb.parse_reply(nlmsg(dcb.NLMSG_ERROR, 1, struct.pack("=i", -(2**31))), 1)
    assert e.value.errno == 2**31 and str(e.value)


# -- interface names as the kernel has them ---------------------------------------------


@settings(PROFILE)
@given(st.binary(min_size=1, max_size=20) | st.sampled_from([b"v\xffx", b"\xff" * 15, b"\xed\xa0\x80", b"eth0", b"\xc2\xa0"]))
def test_ifname_bytes_are_asked_for_as_they_are(raw: bytes) -> None:
    """A netdev name is the kernel's bytes, decoded losslessly (``os.fsdecode``, as
    ``listdir`` does): never an exception, and the netlink request carries the same bytes."""
    name = os.fsdecode(raw)
    ok = ethtool.valid_ifname(name)
    assert ok == (len(raw) < 16 and b"/" not in raw and raw not in (b".", b"..") and not any(c.isspace() for c in name))
    if ok and b"\0" not in raw:
        msg = dcb.build_ieee_get(name, 7)  # UnicodeEncodeError on a non-UTF-8 name before the fix
        assert raw + b"\0" in msg and len(msg) % 4 == 0 and struct.unpack_from("=I", msg)[0] == len(msg)
