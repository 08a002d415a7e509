"""The module EEPROM reader (agentd.host.module_eeprom): the paged netlink protocol the
kernel enforces (net/ethtool/eeprom.c: at most 128 bytes, never across the half-page
boundary, pages above 0 only in the upper half) served from a real module's pages, the
legacy ioctl's flat layout, the recorded form, and the live path in a private netns."""

from __future__ import annotations

import errno

import pytest

from agentd.host import module_eeprom, transceiver
from agentd.host.dcb import NetlinkError, iter_attrs
from agentd.host.fs import HostRoot, ReadContext
from tests.support.eeprom_dumps import EEPROM, flat_bytes, paged, pages_of_flat
from tests.support.netns import in_netns

DR8 = paged(EEPROM / "cmis-osfp-800g-dr8-juniper.txt")
SFF = EEPROM / "sff8636-qsfp28-mlxsw-netdev-2019.txt"


def _module(pages: dict[tuple[int, int, int], bytes], refuse: dict[tuple[int, int, int], int] | None = None):
    """A kernel answering MODULE_EEPROM_GET from ``pages``, checking each request as
    eeprom_parse_request does; the requests are logged."""
    asked: list[tuple[int, int, int]] = []

    def ask(cmd: int, attrs: bytes) -> bytes:
        assert cmd == 31  # ETHTOOL_MSG_MODULE_EEPROM_GET
        a = {t: v for t, v in iter_attrs(attrs)}
        offset, length = (int.from_bytes(a[t], "little") for t in (2, 3))
        page, bank, i2c = a[4][0], a[5][0], a[6][0]
        assert i2c == 0x50 and 0 < length <= 128
        assert not (page and offset < 128), "reading from lower half page is allowed for page 0 only"
        assert not (offset < 128 < offset + length), "reading cross half page boundary is illegal"
        key = (page, bank, offset)
        asked.append(key)
        if refuse and key in refuse:
            raise NetlinkError(refuse[key])
        if key not in pages:
            raise NetlinkError(errno.EINVAL)
        return _data(pages[key][:length])

    return ask, asked


def _data(b: bytes) -> bytes:
    from agentd.host.genl import attr

    return attr(7, b)


def test_pages_read_are_the_ones_the_module_has():
    ask, asked = _module(DR8)
    got = module_eeprom.ask_pages(ask, "eth0")
    # lower, upper 00h, then what the CMIS header and page 01h say: 01h, 02h, 11h of bank 0
    assert asked == [(0, 0, 0), (0, 0, 128), (1, 0, 128), (2, 0, 128), (0x11, 0, 128)]
    assert transceiver.decode(got) == transceiver.decode({k: DR8[k] for k in asked})


def test_a_page_the_module_refuses_is_left_out_and_said():
    ask, _ = _module(DR8, refuse={(2, 0, 128): errno.EINVAL})
    t = transceiver.decode(module_eeprom.ask_pages(ask, "eth0"), "netlink")
    assert t.temperature_thresholds is None and "not read: page 02h" in (t.problem or "")
    assert t.lanes and t.serial == "1G1TK1AA350AZ"


def test_the_lower_page_refused_is_the_readers_error():
    ask, _ = _module(DR8, refuse={(0, 0, 0): errno.EIO})
    with pytest.raises(NetlinkError):
        module_eeprom.ask_pages(ask, "eth0")


def test_the_legacy_ioctl_layout_is_the_kernels_fallback_mapping():
    data = flat_bytes(SFF)
    assert module_eeprom.flat_pages(data) == pages_of_flat(data)
    assert module_eeprom.flat_pages(data[:256]) == {(0, 0, 0): data[:128], (0, 0, 128): data[128:256]}
    assert module_eeprom.flat_pages(b"") == {}


def test_answers_read_back_as_the_same_module():
    t = transceiver.decode(DR8, "netlink")
    assert module_eeprom.module_of(module_eeprom.answer_of(t)) == t
    assert module_eeprom.module_of({"error": "EOPNOTSUPP"}) is None  # no module ops: no data
    empty = module_eeprom.module_of({"via": "netlink", "error": "EIO"})
    assert empty is not None and empty.identifier is None and "EIO" in (empty.problem or "")
    assert module_eeprom.module_of(module_eeprom.answer_of(empty)) == empty
    assert "not {page" in (module_eeprom.module_of({"pages": [{"page": 0}]}).problem or "")  # type: ignore[union-attr]


def test_the_gate_keeps_a_device_unread(tmp_path):
    import json

    from agentd.base import recorded

    d = tmp_path / ".agentd" / recorded.ETHTOOL_NETLINK
    d.mkdir(parents=True)
    answer = {"module-eeprom": module_eeprom.answer_of_pages(DR8, "netlink")}
    for n in ("eth0", "eth1"):
        (d / f"{n}.json").write_text(json.dumps(answer))
    ctx = ReadContext(HostRoot(tmp_path, "offline", "test", answers=".agentd"), "optics")
    out = module_eeprom.read_modules(ctx, [("eth0", "0000:01:00.0"), ("eth1", "0000:02:00.0")], may_read=lambda bus: bus != "0000:02:00.0")
    assert list(out) == ["eth0"] and ctx.files_read == 1


@pytest.mark.proc
def test_live_netdevs_without_module_ops_are_no_data():
    def probe() -> tuple[object, ...]:
        ctx = ReadContext(HostRoot.at("/"), "optics")
        out = module_eeprom.read_modules(ctx, [("v0", None), ("lo", None), ("nosuch0", None)])
        return out, [(e.path, e.kind) for e in ctx.errors]

    out, errors = in_netns(probe)
    assert out == {}
    assert errors == [("genl(ethtool module-eeprom, nosuch0)", "unreadable")]
