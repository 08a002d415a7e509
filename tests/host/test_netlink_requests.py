"""agentd's netlink requests are byte for byte what iproute2 and ethtool send for the same
change (tests/fixtures/netlink/requests.txt, captured from the tools by
tests/support/netlink_capture.py; fields the kernel assigns per run, the sequence number,
the ifindex and the genetlink family id, are taken from the captured request)."""

from __future__ import annotations

import os
import struct

import pytest

from agentd.host import dcb_write, link_set, pause
from tests.support import netlink_capture

CAPTURED = netlink_capture.load()


def _seq(msg: bytes) -> int:
    return int(struct.unpack_from("=I", msg, 8)[0])


def _type(msg: bytes) -> int:
    return int(struct.unpack_from("=H", msg, 4)[0])


def built(name: str, captured: bytes) -> bytes:
    """Our request for the change the captured one makes, with its per-run fields."""
    seq = _seq(captured)
    dev = netlink_capture.DEV
    if name == "mtu":
        ifindex = struct.unpack_from("=i", captured, 20)[0]
        return link_set.build_set_mtu(ifindex, 9000, seq)
    if name == "pause_get":
        return pause.build_pause_get(_type(captured), dev, seq)
    if name == "pause_set":
        return pause.build_pause_set(_type(captured), dev, False, False, seq)
    if name in ("pause_get.1", "pause_set.1"):
        return pause.build_get_family(seq)
    if name == "app_add":
        return dcb_write.build_app(dev, dcb_write.DCB_CMD_IEEE_SET, [(5, 3, 26)], seq)
    if name == "app_del":
        return dcb_write.build_app(dev, dcb_write.DCB_CMD_IEEE_DEL, [(5, 0, 26)], seq)
    if name == "pfc_set":
        # the stand-in answered the read with pfc_cap 8, PFC on none: agentd writes back
        # what it read with priority 3 on
        read = bytes([8, 0]) + bytes(dcb_write.IEEE_PFC_SIZE - 2)
        return dcb_write.build_set_pfc(dev, dcb_write.with_pfc_enabled(read, [3]), seq)
    if name == "apptrust_dscp":
        return dcb_write.build_apptrust(dev, dcb_write.apptrust_order("dscp"), seq)
    if name == "apptrust_pcp":
        return dcb_write.build_apptrust(dev, dcb_write.apptrust_order("pcp"), seq)
    raise KeyError(name)


OURS = sorted(n for n in CAPTURED if not n.startswith("mtu."))


@pytest.mark.parametrize("name", OURS)
def test_request_is_the_tools_own(name: str) -> None:
    cmd, captured = CAPTURED[name]
    assert built(name, captured).hex() == captured.hex(), cmd


def test_the_fixture_covers_every_change_agentd_makes_by_netlink() -> None:
    assert {"mtu", "pfc_set", "app_add", "app_del", "pause_set", "pause_get", "apptrust_dscp", "apptrust_pcp"} <= set(CAPTURED)


@pytest.mark.proc
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
@pytest.mark.skipif(bool(netlink_capture.missing_tools()), reason=f"needs {', '.join(netlink_capture.missing_tools())}")
def test_the_tools_still_send_what_the_fixture_holds() -> None:
    """Captured again now: the tools on this machine send what the fixture says (iproute2
    and ethtool 6.1 made it), so the comparison above is with what they really send. A dcb
    without apptrust (iproute2 < 6.2, Debian 12's) sends no apptrust request: those two
    are then checked against the fixture alone (made by iproute2 7.1's dcb)."""
    try:
        now = netlink_capture.capture()
    except Exception as e:  # no unshare permission in this container, a tool that failed
        pytest.skip(f"cannot capture here: {e}")
    missing = set(OURS) - set(now)
    assert missing <= (set() if netlink_capture.has_apptrust() else netlink_capture.APPTRUST)
    for name in sorted(set(OURS) & set(now)):
        cmd, captured = now[name]
        assert built(name, captured).hex() == captured.hex(), cmd
