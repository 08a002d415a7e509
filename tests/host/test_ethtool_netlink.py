"""ethtool netlink: the generic netlink client (agentd.host.genl), link state and FEC
(agentd.host.ethtool_nl): encoding and parsing as the kernel lays attributes out
(net/ethtool/linkstate.c, fec.c), the answers <-> PhyLink conversion, the recorded form,
and the live path on this kernel in a private network namespace (veth: link state yes,
FEC EOPNOTSUPP, which is no data and no error)."""

from __future__ import annotations

import errno
import json
import struct
from pathlib import Path

import pytest

from agentd.base import recorded
from agentd.host import ethtool_nl, genl
from agentd.host.dcb import NetlinkError
from agentd.host.fs import HostRoot, ReadContext
from agentd.model import FecBin, FecStats, PhyLink
from tests.support.netns import in_netns


def _u64s(values: list[int]) -> bytes:
    return struct.pack(f"={len(values)}Q", *values)


def _kernel_fec_reply() -> bytes:
    """FEC_GET's attributes as fec_fill_reply lays them out: an ETHTOOL_A_FEC_STATS nest
    with 64-bit arrays (nla_put_64bit may put PAD attributes before them) and HIST nests."""
    hist = genl.nest(ethtool_nl.A_FEC_STAT_HIST, [genl.u32(2, 0), genl.u32(3, 0), genl.attr(4, struct.pack("=Q", 991)),
                                                  genl.attr(5, _u64s([500, 491]))])
    stats = genl.nest(ethtool_nl.A_FEC_STATS, [
        genl.attr(1, b""),  # ETHTOOL_A_FEC_STAT_PAD
        genl.attr(2, _u64s([30, 10, 20])),  # corrected: total, lane 0, lane 1
        genl.attr(3, _u64s([2, 1, 1])),
        genl.attr(4, b""),  # corrected bits: not reported (an empty array)
        hist,
    ])
    return genl.u32(4, 0) + stats  # ETHTOOL_A_FEC_ACTIVE before it


def test_fec_reply_is_read_as_the_kernel_lays_it_out():
    answer = ethtool_nl.parse_fec(_kernel_fec_reply())
    assert answer == {"stats": {"corrected": [30, 10, 20], "uncorr": [2, 1, 1],
                                "hist": [{"bin-low": 0, "bin-high": 0, "bin-val": 991, "bin-val-per-lane": [500, 491]}]}}
    phy = ethtool_nl.phy_of({"fec": answer})
    assert phy is not None and phy.fec == FecStats(corrected_blocks=30, uncorrectable_blocks=2, corrected_per_lane=(10, 20),
                                                   uncorrectable_per_lane=(1, 1), histogram=(FecBin(low=0, high=0, count=991),))
    assert phy.fec.corrected_bits is None  # an empty array: the driver does not count it


def test_linkstate_reply_and_the_reason_names():
    payload = genl.u8(2, 0) + genl.u8(5, 5) + genl.u8(6, 1) + genl.u32(7, 4)
    answer = ethtool_nl.parse_linkstate(payload)
    assert answer == {"link": 0, "ext-state": 5, "ext-substate": 1, "ext-down-cnt": 4}
    assert ethtool_nl.phy_of({"linkstate": answer}) == PhyLink(link=False, ext_state="cable_issue", ext_substate="unsupported_cable", link_down_events=4)
    # numbers this agentd does not know are kept as numbers, never dropped or guessed
    assert ethtool_nl.ext_state_names(40, 2) == ("unknown-40", "unknown-2")
    assert ethtool_nl.ext_state_names(4, 0) == ("no_cable", None)


@pytest.mark.parametrize("answer", [
    {},
    {"linkstate": {"error": "EOPNOTSUPP"}, "fec": {"error": "EOPNOTSUPP"}},
    {"linkstate": "garbage", "fec": [1, 2]},
    {"linkstate": {"link": -1, "ext-state": "x", "ext-down-cnt": True}, "fec": {"stats": {"corrected": ["a", None]}}},
])
def test_answers_that_say_nothing_are_no_data(answer):
    assert ethtool_nl.phy_of(answer) is None


def test_answers_of_reads_back_as_the_same_phylink():
    for phy in (PhyLink(link=True, link_down_events=3, fec=FecStats(corrected_blocks=9, uncorrectable_blocks=0, corrected_bits=77,
                                                                    corrected_per_lane=(4, 5), histogram=(FecBin(low=1, high=1, count=2),))),
                PhyLink(link=False, ext_state="module", ext_substate="cmis_not_ready"),
                PhyLink(link=False, ext_state="unknown-40", ext_substate="unknown-3")):
        assert ethtool_nl.phy_of(ethtool_nl.answers_of(phy)) == phy


def test_genl_reply_errors_and_acks():
    seq, fam = 7, 21
    def msg(mtype: int, mseq: int, payload: bytes) -> bytes:
        return struct.pack("=IHHII", 16 + len(payload), mtype, 0, mseq, 0) + payload
    ack = msg(2, seq, struct.pack("=i", 0) + bytes(16))
    answer = msg(fam, seq, struct.pack("=BBH", 7, 1, 0) + genl.u8(2, 1))
    assert genl.reply(ack + answer, seq, fam) == (True, genl.u8(2, 1))
    assert genl.reply(msg(fam, seq + 1, b"\0" * 4), seq, fam) == (False, None)  # someone else's
    with pytest.raises(NetlinkError) as e:
        genl.reply(msg(2, seq, struct.pack("=i", -errno.EOPNOTSUPP)), seq, fam)
    assert e.value.errno == errno.EOPNOTSUPP
    with pytest.raises(ValueError):
        genl.reply(struct.pack("=IHHII", 64, fam, 0, seq, 0), seq, fam)  # longer than the datagram


def test_recorded_answers_and_their_problems(tmp_path: Path):
    d = tmp_path / ".agentd" / recorded.ETHTOOL_NETLINK
    d.mkdir(parents=True)
    (d / "eth0.json").write_text(json.dumps({"linkstate": {"link": 0, "ext-state": 4}}))
    (d / "eth1.json").write_text("{not json")
    (d / "eth2.json").write_text("[1, 2]")
    host = HostRoot(tmp_path, "offline", "test", answers=".agentd")
    ctx = ReadContext(host, "ethtool")
    out = ethtool_nl.read_phy(ctx, ["eth0", "eth1", "eth2", "eth3"])
    assert out == {"eth0": PhyLink(link=False, ext_state="no_cable")}
    assert sorted((e.path.rpartition("/")[2], e.kind) for e in ctx.errors) == [("eth1.json", "unparsable"), ("eth2.json", "unparsable")]


@pytest.mark.proc
def test_live_on_this_kernel_in_a_private_netns():
    def probe() -> tuple[object, ...]:
        ctx = ReadContext(HostRoot.at("/"), "ethtool")
        with genl.Genl() as g:
            family = g.family(ethtool_nl.FAMILY)
            missing = g.family("agentdnone")
        phy = ethtool_nl.read_phy(ctx, ["v0", "v1", "lo", "nosuch0"])
        return family, missing, phy, [(e.path, e.kind, e.detail) for e in ctx.errors]

    family, missing, phy, errors = in_netns(probe)
    if family is None:
        pytest.skip("this kernel has no ethtool netlink family (CONFIG_ETHTOOL_NETLINK)")
    assert missing is None  # a family the kernel does not have is no data
    # veth has link state but no FEC op: EOPNOTSUPP is no data, not an error; v0 is up
    # without a peer that is up, so no carrier
    assert phy["v0"] == PhyLink(link=False) and phy["lo"] == PhyLink(link=True)
    assert errors == [("genl(ethtool, nosuch0)", "unreadable", "ENODEV: No such device")]
