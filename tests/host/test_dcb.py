"""PFC configuration: mlnx_qos text (real sample), rtnetlink DCB replies built by hand,
and a live RTM_GETDCB on a veth (no DCB: no entry, no error)."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import struct
import subprocess
import uuid
from pathlib import Path

import pytest

from agentd.host import dcb
from agentd.host.dcb import build_ieee_get, parse_mlnx_qos, parse_reply, read_pfc
from agentd.host.fs import HostRoot, ReadContext
from agentd.model import PfcConfig
from tests.support.fixtures import OUTPUTS
from tests.support.recorded_root import answers_dir

MLNX_QOS = OUTPUTS / "mlnx_qos.eth4-roce-trust-dscp-pfc3.txt"
DEFAULT_DSCP2PRIO = {d: d >> 3 for d in range(64)}  # mlx5's default map, as the real sample prints it


# ---------------------------------------------------------------------------
# netlink reply builders (the kernel's layout: include/uapi/linux/dcbnl.h)


def nla(atype: int, payload: bytes, nested: bool = False) -> bytes:
    head = struct.pack("=HH", 4 + len(payload), atype | (0x8000 if nested else 0))
    data = head + payload
    return data + b"\0" * ((-len(data)) % 4)


def ieee_pfc(pfc_en: int, pfc_cap: int = 8) -> bytes:
    # u8 pfc_cap, u8 pfc_en, u8 mbc, (pad), u16 delay, (pad), u64 requests[8], u64 indications[8]
    return struct.pack("=BBBxHxx8Q8Q", pfc_cap, pfc_en, 0, 0, *([0] * 16))


def nlmsg(mtype: int, seq: int, body: bytes) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), mtype, 0, seq, 1234) + body


def dcb_reply(seq: int, ieee_attrs: bytes, ifname: str = "eth4") -> bytes:
    body = struct.pack("=BBH", socket.AF_UNSPEC, dcb.DCB_CMD_IEEE_GET, 0)
    body += nla(dcb.DCB_ATTR_IFNAME, ifname.encode() + b"\0")
    body += nla(dcb.DCB_ATTR_IEEE, ieee_attrs, nested=True)
    body += nla(14, b"\x08")  # DCB_ATTR_DCBX: DCB_CAP_DCBX_VER_IEEE
    return nlmsg(dcb.RTM_GETDCB, seq, body)


def error_reply(seq: int, err: int) -> bytes:
    return nlmsg(dcb.NLMSG_ERROR, seq, struct.pack("=i", -err) + struct.pack("=IHHII", 36, dcb.RTM_GETDCB, 1, seq, 0))


ETS = nla(1, bytes(59))  # DCB_ATTR_IEEE_ETS: contents not read
TRUST_DSCP_PCP = nla(dcb.DCB_ATTR_DCB_APP_TRUST_TABLE, nla(1, b"\x05") + nla(2, b"\xff"), nested=True)
TRUST_PCP = nla(dcb.DCB_ATTR_DCB_APP_TRUST_TABLE, nla(2, b"\xff"), nested=True)


# ---------------------------------------------------------------------------
# parsing


def test_request_layout():
    msg = build_ieee_get("eth4", 7)
    length, mtype, flags, seq, pid = struct.unpack_from("=IHHII", msg)
    assert (length, mtype, flags, seq, pid) == (len(msg), 78, 1, 7, 0)
    assert msg[16:20] == bytes([socket.AF_UNSPEC, 21, 0, 0])
    assert msg[20:24] == struct.pack("=HH", 9, 1) and msg[24:29] == b"eth4\0"
    assert len(msg) % 4 == 0


def test_parse_pfc_and_trust_dscp():
    data = dcb_reply(3, ETS + nla(dcb.DCB_ATTR_IEEE_PFC, ieee_pfc(0b00001000)) + TRUST_DSCP_PCP)
    assert parse_reply(data, 3) == (True, PfcConfig(enabled=(3,), trust="dscp", source="dcbnl"))


def test_parse_trust_pcp_and_several_priorities():
    data = dcb_reply(1, nla(dcb.DCB_ATTR_IEEE_PFC, ieee_pfc(0b10010001)) + TRUST_PCP)
    answered, cfg = parse_reply(data, 1)
    assert answered and cfg == PfcConfig(enabled=(0, 4, 7), trust="pcp", source="dcbnl")


def test_parse_without_trust_table_is_trust_none():
    _, cfg = parse_reply(dcb_reply(1, ETS + nla(dcb.DCB_ATTR_IEEE_PFC, ieee_pfc(0))), 1)
    assert cfg == PfcConfig(enabled=(), trust=None, source="dcbnl")


def test_parse_without_pfc_attribute_is_no_config():
    assert parse_reply(dcb_reply(1, ETS), 1) == (True, None)


def test_parse_ignores_other_sequence_numbers():
    assert parse_reply(dcb_reply(9, nla(2, ieee_pfc(8))), 1) == (False, None)


def test_parse_error_reply_raises_netlink_error():
    with pytest.raises(dcb.NetlinkError) as ei:
        parse_reply(error_reply(2, errno.EOPNOTSUPP), 2)
    assert ei.value.errno == errno.EOPNOTSUPP


@pytest.mark.parametrize("cut", [20, 30, 60])
def test_parse_truncated_datagram_is_value_error(cut):
    data = dcb_reply(1, nla(dcb.DCB_ATTR_IEEE_PFC, ieee_pfc(8)))
    with pytest.raises(ValueError):
        parse_reply(data[:cut], 1)


def test_parse_bogus_attribute_length_is_value_error():
    body = struct.pack("=BBH", 0, dcb.DCB_CMD_IEEE_GET, 0) + struct.pack("=HH", 200, dcb.DCB_ATTR_IEEE) + bytes(8)
    with pytest.raises(ValueError):
        parse_reply(nlmsg(dcb.RTM_GETDCB, 1, body), 1)


# ---------------------------------------------------------------------------
# live path with a scripted socket


class FakeSocket:
    """Answers each request with the scripted reply for its interface name."""

    def __init__(self, replies):
        self.replies = replies
        self.pending: list[bytes] = []

    def send(self, msg: bytes) -> int:
        seq = struct.unpack_from("=I", msg, 8)[0]
        name = msg[24 : msg.index(b"\0", 24)].decode()
        self.pending.append(self.replies[name](seq))
        return len(msg)

    def recv(self, _n: int) -> bytes:
        if not self.pending:
            raise TimeoutError("timed out")
        return self.pending.pop(0)

    def settimeout(self, _t):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_live_loop_maps_answers(monkeypatch):
    replies = {
        "eth4": lambda seq: error_reply(seq - 1, 0) + dcb_reply(seq, nla(2, ieee_pfc(8)) + TRUST_DSCP_PCP),
        "veth0": lambda seq: error_reply(seq, errno.EOPNOTSUPP),
        "eth5": lambda seq: error_reply(seq, errno.EPERM),
        "eth6": lambda seq: dcb_reply(seq, nla(2, b"\x01")),  # ieee_pfc too short
        "eth7": lambda seq: b"",
    }
    monkeypatch.setattr(dcb, "_open_socket", lambda: FakeSocket(replies))
    ctx = ReadContext(HostRoot.at("/"), "dcb")
    out = read_pfc(ctx, ["eth4", "veth0", "eth5", "eth6", "eth7"])
    assert out == {"eth4": PfcConfig(enabled=(3,), trust="dscp", source="dcbnl")}
    kinds = {e.path: e.kind for e in ctx.errors}
    assert kinds == {
        "netlink(RTM_GETDCB, eth5)": "unreadable",
        "netlink(RTM_GETDCB, eth6)": "unparsable",
        "netlink(RTM_GETDCB, eth7)": "timeout",
    }


# ---------------------------------------------------------------------------
# live netlink on a real veth


@pytest.fixture
def veth():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("creating a veth pair needs root and iproute2")
    a = f"agd{uuid.uuid4().hex[:6]}a"
    r = subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", a[:-1] + "b"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot create a veth pair here: {r.stderr.strip()}")
    try:
        yield a
    finally:
        subprocess.run(["ip", "link", "del", a], capture_output=True)


@pytest.mark.proc
def test_live_veth_has_no_dcb_and_no_error(veth):
    ctx = ReadContext(HostRoot.at("/"), "dcb")
    assert read_pfc(ctx, [veth]) == {}
    assert ctx.errors == []


def test_live_unknown_interface_is_recorded():
    ctx = ReadContext(HostRoot.at("/"), "dcb")
    name = f"agdx{uuid.uuid4().hex[:6]}"
    assert read_pfc(ctx, [name]) == {}
    # ENODEV, or EOPNOTSUPP on kernels without CONFIG_DCB (nothing recorded then)
    assert all(e.kind == "unreadable" for e in ctx.errors)


# ---------------------------------------------------------------------------
# mlnx_qos text (simulated root)


def test_real_mlnx_qos_sample():
    assert parse_mlnx_qos(MLNX_QOS.read_text()) == PfcConfig(enabled=(3,), trust="dscp", source="mlnx_qos", dscp2prio=DEFAULT_DSCP2PRIO)


def test_mlnx_qos_dscp2prio_rows_changed_and_tolerant():
    # the real sample with DSCP 26 moved to priority 0 (mlnx_qos --dscp2prio set,26,0): its
    # row leaves prio:3 and joins prio:0; trailing spaces and a missing final comma are read too
    text = MLNX_QOS.read_text()
    text = text.replace("prio:3 dscp:31,30,29,28,27,26,25,24,", "prio:3 dscp:31,30,29,28,27,25,24,  ")
    text = text.replace("prio:0 dscp:07,06,05,04,03,02,01,00,", "prio:0 dscp:26,07,06,05,04,03,02,01,00")
    cfg = parse_mlnx_qos(text)
    assert cfg is not None and cfg.dscp2prio == {**DEFAULT_DSCP2PRIO, 26: 0}


def test_mlnx_qos_dscp2prio_out_of_range_values_skipped():
    text = MLNX_QOS.read_text().replace("prio:7 dscp:63,62,", "prio:7 dscp:99,63,62,").replace("prio:6 dscp:55,", "prio:9 dscp:55,")
    cfg = parse_mlnx_qos(text)
    # DSCP 99 and the row of priority 9 are skipped; the rows after them are still read
    assert cfg is not None and cfg.dscp2prio == {d: p for d, p in DEFAULT_DSCP2PRIO.items() if p != 6}


def test_mlnx_qos_without_dscp2prio_table_is_empty_map():
    text = "DCBX mode: OS controlled\nPriority trust state: pcp\nPFC configuration:\n\tpriority    0   1   2   3   4   5   6   7\n\tenabled     0   0   0   1   0   0   0   0\n"
    cfg = parse_mlnx_qos(text)
    assert cfg is not None and cfg.dscp2prio == {}


def test_mlnx_qos_trust_pcp_all_off():
    text = "DCBX mode: OS controlled\nPriority trust state: pcp\nPFC configuration:\n\tpriority    0   1   2   3   4   5   6   7\n\tenabled     0   0   0   0   0   0   0   0\n"
    assert parse_mlnx_qos(text) == PfcConfig(enabled=(), trust="pcp", source="mlnx_qos")


@pytest.mark.parametrize(
    "text",
    [
        "garbage\x00\x01",
        "Priority trust state: dscp\nPFC configuration:\n  priority 0 1 2 3 4 5 6 7\n  enabled 0 0 0 x 0 0 0 0\n",
        "Priority trust state: dscp\nPFC configuration:\n  priority 0 1 2 3 4 5 6 7\n  enabled 0 0 0 1\n",
    ],
)
def test_mlnx_qos_garbage_is_none(text):
    assert parse_mlnx_qos(text) is None


def test_sim_root_reads_dcb_files(tmp_path):
    d = answers_dir(tmp_path) / "dcb"
    d.mkdir(parents=True)
    (d / "eth4").write_bytes(MLNX_QOS.read_bytes())
    (d / "eth5").write_text("not mlnx_qos output\n")
    ctx = ReadContext(HostRoot.at(tmp_path), "dcb")
    out = read_pfc(ctx, ["eth4", "eth5", "eth6"])
    assert out == {"eth4": PfcConfig(enabled=(3,), trust="dscp", source="mlnx_qos", dscp2prio=DEFAULT_DSCP2PRIO)}  # eth6: not DCB capable
    assert [(e.path, e.kind) for e in ctx.errors] == [(".agentd/dcb/eth5", "unparsable")]


def test_copied_tree_has_no_dcb_data(tmp_path: Path):
    (tmp_path / "sys").mkdir()
    ctx = ReadContext(HostRoot.at(tmp_path), "dcb")
    assert read_pfc(ctx, ["eth4"]) == {}
    assert ctx.errors == []


def test_mlx5_dscp_app_entries_mean_dscp_trust_without_trust_table():
    # mlx5 in DSCP trust: 64 APP entries {selector=DSCP(5), priority, protocol=dscp}, no trust table
    apps = b"".join(nla(1, struct.pack("=BBH", 5, dscp // 8, dscp)) for dscp in range(64))
    data = dcb_reply(1, ETS + nla(2, ieee_pfc(8)) + nla(dcb.DCB_ATTR_IEEE_APP_TABLE, apps, nested=True))
    assert parse_reply(data, 1)[1] == PfcConfig(enabled=(3,), trust="dscp", source="dcbnl", dscp2prio=DEFAULT_DSCP2PRIO)
    # an APP table without DSCP entries proves nothing about trust
    other = nla(dcb.DCB_ATTR_IEEE_APP_TABLE, nla(1, struct.pack("=BBH", 1, 3, 0x8915)), nested=True)
    assert parse_reply(dcb_reply(1, nla(2, ieee_pfc(8)) + other), 1)[1].trust is None


def test_dcbnl_dscp_map_from_app_table():
    # DSCP 26 on priority 0, one PCP entry (selector 255) and an EtherType entry (selector 1)
    # beside the DSCP ones, and entries a kernel would never hold (DSCP 64, priority 8)
    apps = b"".join(nla(1, struct.pack("=BBH", 5, 0 if dscp == 26 else dscp >> 3, dscp)) for dscp in range(64))
    apps += nla(1, struct.pack("=BBH", 255, 3, 3)) + nla(1, struct.pack("=BBH", 1, 3, 0x8915))
    apps += nla(1, struct.pack("=BBH", 5, 3, 64)) + nla(1, struct.pack("=BBH", 5, 8, 10))
    apps += nla(1, b"\x05\x03")  # a short entry: skipped
    data = dcb_reply(1, ETS + nla(2, ieee_pfc(8)) + nla(dcb.DCB_ATTR_IEEE_APP_TABLE, apps, nested=True) + TRUST_PCP)
    cfg = parse_reply(data, 1)[1]
    assert cfg is not None and cfg.trust == "pcp"  # the trust table decides, the map is still reported
    assert cfg.dscp2prio == {**DEFAULT_DSCP2PRIO, 26: 0}


def test_dcbnl_without_app_table_has_empty_map():
    cfg = parse_reply(dcb_reply(1, ETS + nla(2, ieee_pfc(8)) + TRUST_DSCP_PCP), 1)[1]
    assert cfg is not None and cfg.dscp2prio == {}


def test_dscp_map_survives_the_recorded_format():
    # what `agentd capture` writes for a live node's map, read back as a replay reads it
    from agentd.base import recorded

    live = {**DEFAULT_DSCP2PRIO, 26: 0, 34: 0}
    cfg = parse_mlnx_qos(recorded.format_mlnx_qos((3,), "dscp", live))
    assert cfg == PfcConfig(enabled=(3,), trust="dscp", source="mlnx_qos", dscp2prio=live)
