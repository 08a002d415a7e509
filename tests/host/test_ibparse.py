"""agentd's IB text parsers against literal strings, and the ibstat/ibstatus/GID-pick test
oracles (tests/support/ib_oracles.py) against every real capture."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from agentd.host.ibparse import PHYS_STATES, PORT_STATES, is_gid, is_zero, parse_rate, parse_state
from tests.support.fixtures import OUTPUTS
from tests.support.ib_oracles import (
    ipv4_of,
    is_ipv4_mapped,
    is_link_local,
    parse_ibstat,
    parse_ibstatus,
    roce_v2_gid_index,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("400 Gb/sec (4X NDR)", (400.0, 4, "NDR")),
        ("200 Gb/sec (2X NDR)", (200.0, 2, "NDR")),
        ("100 Gb/sec (4X EDR)", (100.0, 4, "EDR")),
        ("40 Gb/sec (4X QDR)", (40.0, 4, "QDR")),
        ("25 Gb/sec (1X EDR)", (25.0, 1, "EDR")),
        ("10 Gb/sec (4X)", (10.0, 4, None)),
        ("2.5 Gb/sec (1X SDR)", (2.5, 1, "SDR")),
        ("53.125 Gb/sec (1X HDR)", (53.125, 1, "HDR")),
        ("14 Gb/sec (1X FDR10)", (14.0, 1, "FDR10")),
        ("800 Gb/sec (4X XDR)", (800.0, 4, "XDR")),
        ("400 Gb/sec (4X NDR)\n", (400.0, 4, "NDR")),
        ("0 Gb/sec", (0.0, None, None)),
        ("40", (40.0, None, None)),  # ibstat "Rate: 40"
        ("Rate: 40", (40.0, None, None)),
        ("rate:            200 Gb/sec (4X HDR)", (200.0, 4, "HDR")),  # ibstatus line
        ("", (None, None, None)),
        (None, (None, None, None)),
        ("fast", (None, None, None)),
        ("-1", (None, None, None)),
        ("400 Gb/sec (4X NDR", (None, None, None)),
    ],
)
def test_parse_rate(text, expected):
    assert parse_rate(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("4: ACTIVE", (4, "ACTIVE")),
        ("1: DOWN", (1, "DOWN")),
        ("2: INIT", (2, "INIT")),
        ("3: ARMED", (3, "ARMED")),
        ("5: LinkUp", (5, "LinkUp")),
        ("2: Polling", (2, "Polling")),
        ("3: Disabled", (3, "Disabled")),
        ("7: Phy Test", (7, "Phy Test")),
        ("4: ACTIVE\n", (4, "ACTIVE")),  # also the procfs phys_state quirk: kept as printed
        ("0: <unknown>", (0, None)),
        ("Active", (4, "ACTIVE")),
        ("Down", (1, "DOWN")),
        ("Initializing", (2, "INIT")),
        ("Armed", (3, "ARMED")),
        ("LinkUp", (5, "LinkUp")),
        ("Polling", (2, "Polling")),
        ("Disabled", (3, "Disabled")),
        ("PortConfigurationTraining", (4, "PortConfigurationTraining")),
        ("LinkErrorRecovery", (6, "LinkErrorRecovery")),
        ("ACTIVE", (4, "ACTIVE")),
        ("", (None, None)),
        (None, (None, None)),
        ("sideways", (None, None)),
    ],
)
def test_parse_state(text, expected):
    assert parse_state(text) == expected


def test_plain_names_map_to_kernel_spellings():
    for sid, name in PORT_STATES.items():
        assert parse_state(f"{sid}: {name}") == (sid, name)
        assert parse_state(name.lower()) == (sid, name)
    for pid, name in PHYS_STATES.items():
        assert parse_state(f"{pid}: {name}") == (pid, name)
        assert parse_state(name) == (pid, name)


# ---------------------------------------------------------------------------
# real ibstat / ibstatus outputs

IBSTAT_FILES = sorted(OUTPUTS.glob("ibstat.*"))
IBSTATUS_FILES = sorted(OUTPUTS.glob("ibstatus.*"))

_PLAIN = {"Active": (4, "ACTIVE"), "Down": (1, "DOWN"), "LinkUp": (5, "LinkUp"),
          "Polling": (2, "Polling"), "Disabled": (3, "Disabled")}


def _ibstat_blocks(text: str) -> list[tuple[str, dict[str, str]]]:
    """Independent, naive reading of the file: one dict of 'Key: value' per CA."""
    out = []
    for block in re.split(r"^CA '", text, flags=re.M)[1:]:
        name, _, body = block.partition("'")
        kv = dict(re.findall(r"^\s+([A-Za-z][A-Za-z ]*?):\s*(\S.*?)\s*$", body, flags=re.M))
        out.append((name, kv))
    return out


@pytest.mark.parametrize("path", IBSTAT_FILES, ids=lambda p: p.name)
def test_ibstat_every_file(path):
    text = path.read_text()
    expected = _ibstat_blocks(text)
    cas = parse_ibstat(text)
    assert [c["name"] for c in cas] == [name for name, _ in expected]
    for ca, (_name, kv) in zip(cas, expected):
        assert ca["hca_type"] == kv["CA type"]
        assert ca["fw_ver"] == kv["Firmware version"]
        assert ca["node_guid"] == kv["Node GUID"]
        assert ca["num_ports"] == int(kv["Number of ports"]) == len(ca["ports"])
        port = ca["ports"][0]
        assert port["port"] == 1
        assert (port["state_id"], port["state"]) == _PLAIN[kv["State"]]
        assert (port["phys_state_id"], port["phys_state"]) == _PLAIN[kv["Physical state"]]
        assert port["rate_raw"] == kv["Rate"]
        assert port["rate_gbps"] == float(kv["Rate"])
        assert port["width"] is None and port["generation"] is None  # ibstat prints the number only
        assert port["link_layer"] == kv["Link layer"] in ("InfiniBand", "Ethernet")
        assert port["lid"] == int(kv["Base lid"])
        assert port["sm_lid"] == int(kv["SM lid"])


def test_ibstat_variants_present_in_corpus():
    """The corpus really holds the variants the parser claims to handle."""
    by_name = {p.name: p.read_text() for p in IBSTAT_FILES}
    tabbed = by_name["ibstat.h100-cx7-ndr400.some-down-polling.txt"]
    spaced = by_name["ibstat.h100-cx7-ndr400.with-bond.all-active.txt"]
    assert "\n\tCA type:" in tabbed and "\n        CA type:" in spaced

    polling = parse_ibstat(tabbed)
    down = [(c["name"], p) for c in polling for p in c["ports"] if p["state"] == "DOWN"]
    assert sorted((n, p["phys_state"], p["rate_gbps"]) for n, p in down) == [
        ("mlx5_11", "Polling", 40.0),
        ("mlx5_5", "Disabled", 40.0),
    ]

    bond = {c["name"]: c for c in parse_ibstat(spaced)}["mlx5_bond_0"]
    assert bond["hca_type"] == "MT41692"
    assert bond["ports"][0]["link_layer"] == "Ethernet" and bond["ports"][0]["rate_gbps"] == 200.0

    panic = by_name["ibstat.a100-cx6-hdr200.ibpanic-exit255.txt"]
    assert panic.strip().splitlines()[-1].startswith("ibpanic:")
    names = [c["name"] for c in parse_ibstat(panic)]
    assert names == [f"mlx5_{i}" for i in range(8)]  # mlx5_8 failed: no CA made from the panic line


@pytest.mark.parametrize("path", IBSTATUS_FILES, ids=lambda p: p.name)
def test_ibstatus_every_file(path):
    text = path.read_text()
    blocks = re.findall(
        r"^Infiniband device '([^']+)' port (\d+) status:\n(.*?)(?:\n\n|\Z)", text, flags=re.M | re.S
    )
    ports = parse_ibstatus(text)
    assert len(ports) == len(blocks) > 0
    for port, (name, num, body) in zip(ports, blocks):
        kv = dict(re.findall(r"^\s+([a-z_ ]+?):\s+(.*?)\s*$", body, flags=re.M))
        assert (port["name"], port["port"]) == (name, int(num))
        sid, sname = kv["state"].split(": ")
        assert (port["state_id"], port["state"]) == (int(sid), sname)
        pid, pname = kv["phys state"].split(": ")
        assert (port["phys_state_id"], port["phys_state"]) == (int(pid), pname)
        m = re.fullmatch(r"(\d+) Gb/sec \((\d+)X (\w+)\)", kv["rate"])
        assert m, kv["rate"]
        assert (port["rate_gbps"], port["width"], port["generation"]) == (
            float(m.group(1)), int(m.group(2)), m.group(3))
        assert port["link_layer"] == kv["link_layer"]
        assert port["lid"] == int(kv["base lid"], 16)
        assert port["default_gid"] == kv["default gid"]


def test_ibstatus_ethernet_port():
    ports = {p["name"]: p for p in parse_ibstatus(IBSTATUS_FILES[0].read_text())}
    eth = ports["mlx5_8"]
    assert (eth["link_layer"], eth["rate_gbps"], eth["width"], eth["generation"]) == ("Ethernet", 40.0, 4, "QDR")
    assert (ports["mlx5_0"]["rate_gbps"], ports["mlx5_0"]["generation"]) == (200.0, "HDR")


def test_ibstat_garbage_is_empty():
    assert parse_ibstat("") == []
    assert parse_ibstat("ibpanic: [1] main: stat of IB device 'mlx5_0' failed\n") == []
    assert parse_ibstatus("nothing here\n") == []


# ---------------------------------------------------------------------------
# GIDs

LL = "fe80:0000:0000:0000:1e34:daff:fe5a:1b2c"
V4 = "0000:0000:0000:0000:0000:ffff:0a00:0105"  # 10.0.1.5
V4B = "0000:0000:0000:0000:0000:ffff:0a00:0207"  # 10.0.2.7
V6 = "2001:0db8:0000:0000:0000:0000:0000:0042"
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"


def test_gid_helpers():
    assert is_ipv4_mapped(V4) and not is_ipv4_mapped(LL) and not is_ipv4_mapped(ZERO)
    assert ipv4_of(V4) == "10.0.1.5" and ipv4_of(V4B) == "10.0.2.7"
    assert ipv4_of(LL) is None and ipv4_of(ZERO) is None and ipv4_of("junk") is None
    assert is_link_local(LL) and not is_link_local(V4) and not is_link_local(V6)
    assert not is_link_local("fe80:0000:0000:0001:0000:0000:0000:0001")  # fe80::/64 only
    assert is_zero(ZERO) and is_zero("::") and not is_zero(V4)
    assert not is_zero("junk") and not is_zero(None) and not is_zero("")
    assert is_gid(LL) and not is_gid("fe80:zz") and not is_gid(None)


def G(index, gid, type_=None):
    return SimpleNamespace(index=index, gid=gid, type=type_)


V1, V2 = "IB/RoCE v1", "RoCE v2"


@pytest.mark.parametrize(
    "table, expected",
    [
        # the usual mlx5 layout: link-local v1/v2 pair, then one pair per IPv4 address
        ([G(0, LL, V1), G(1, LL, V2), G(2, V4, V1), G(3, V4, V2)], 3),
        # GID moved after a netdev event (NVIDIA/nccl#1333): holes before it
        ([G(0, LL, V1), G(1, LL, V2), G(4, V4, V1), G(5, V4, V2)], 5),
        # v2 listed before v1
        ([G(0, LL, V1), G(1, LL, V2), G(2, V4, V2), G(3, V4, V1)], 2),
        # two addresses: the lowest index wins
        ([G(0, LL, V1), G(1, LL, V2), G(2, V4B, V1), G(3, V4B, V2), G(4, V4, V1), G(5, V4, V2)], 3),
        # v2 type unreadable (EINVAL -> None) on the first pair: the next pair is used
        ([G(0, LL, V1), G(1, LL, V2), G(2, V4, None), G(3, V4, None), G(4, V4B, V1), G(5, V4B, V2)], 5),
        # no IPv4 address: NCCL stays on index 0, which is no usable RoCE v2 IPv4 GID
        ([G(0, LL, V1), G(1, LL, V2)], None),
        ([G(0, LL, V1), G(1, LL, V2), G(2, V6, V1), G(3, V6, V2)], None),
        # only RoCE v1
        ([G(0, LL, V1), G(2, V4, V1)], None),
        ([], None),
        # index 0 itself may be the answer
        ([G(0, V4, V2)], 0),
    ],
)
def test_roce_v2_gid_index(table, expected):
    assert roce_v2_gid_index(table) == expected


def test_roce_v2_gid_index_addr_range_and_version():
    table = [G(0, LL, V1), G(1, LL, V2), G(2, V4, V1), G(3, V4, V2), G(4, V4B, V1), G(5, V4B, V2)]
    assert roce_v2_gid_index(table, addr_range="10.0.2.0/24") == 5
    assert roce_v2_gid_index(table, addr_range="192.168.0.0/16") is None
    assert roce_v2_gid_index(table, addr_range="not-a-cidr") is None
    assert roce_v2_gid_index(table, roce_version=1) == 2
