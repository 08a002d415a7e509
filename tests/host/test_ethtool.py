"""ethtool statistics: the live SIOCETHTOOL ioctl on a real veth pair, and the simulated
`ethtool -S` text."""

from __future__ import annotations

import errno
import os
import shutil
import struct
import subprocess
import uuid
from pathlib import Path

import pytest

from agentd.host import ethtool
from agentd.host.ethtool import ecn_counters, parse_ethtool_s, pfc_counters, read_ethtool
from agentd.host.fs import HostRoot, ReadContext
from tests.support.recorded_root import answers_dir

# Realistic excerpt of `ethtool -S` on a ConnectX-7 RoCE port with PFC on priority 3.
MLX5_TEXT = """NIC statistics:
     rx_packets: 104857600
     rx_bytes: 98765432101
     rx_ecn_mark: 7
     rx_vport_rdma_unicast_packets: 81234567
     rx_vport_rdma_unicast_bytes: 86912468480
     rx_prio3_bytes: 86912468480
     rx_prio3_pause: 12
     rx_prio3_pause_duration: 840
     tx_prio3_pause: 4
     tx_prio3_pause_duration: 96
     rx_prio3_pause_transition: 6
     rx_prio3_marked: 55
     tx_pause_storm_warning_events: 0
     tx_pause_storm_error_events: 0
     rx_global_pause: 0
     ch0_arm: 18446744073709551615
"""


def ctx_for(root: Path, source: str = "ethtool") -> ReadContext:
    return ReadContext(HostRoot.at(root), source)


def sim_root(tmp_path: Path, files: dict[str, str | bytes]) -> Path:
    d = answers_dir(tmp_path) / "ethtool"
    d.mkdir(parents=True)
    for name, content in files.items():
        p = d / name
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    return tmp_path


# ---------------------------------------------------------------------------
# parsing


def test_parse_mlx5_names_and_u64_values():
    stats = parse_ethtool_s(MLX5_TEXT)
    assert stats is not None
    assert stats["rx_vport_rdma_unicast_bytes"] == 86912468480
    assert stats["ch0_arm"] == 2**64 - 1
    assert len(stats) == 16


def test_parse_keeps_raw_names_with_spaces_dots_brackets():
    text = "NIC statistics:\n     rx_priority_3_xoff.nic: 9\n     tx queue[0] packets: 3\n     port.rx_priority_2_xoff: 1\n"
    assert parse_ethtool_s(text) == {"rx_priority_3_xoff.nic": 9, "tx queue[0] packets": 3, "port.rx_priority_2_xoff": 1}


def test_parse_skips_section_headers():
    text = "NIC statistics:\n     a: 1\nStandard stats for eth0:\n     eth-mac-FramesTransmittedOK: 5\n"
    assert parse_ethtool_s(text) == {"a": 1, "eth-mac-FramesTransmittedOK": 5}


@pytest.mark.parametrize("text", ["\x00\x01garbage", "NIC statistics:\n     rx_packets: lots\n", "no stats available\n", "     rx: -1\n"])
def test_parse_garbage_is_none(text):
    assert parse_ethtool_s(text) is None


def test_pfc_counters_mlx5_and_intel():
    stats = parse_ethtool_s(MLX5_TEXT) or {}
    stats.update({"rx_priority_5_xoff.nic": 2, "tx_priority_5_xoff.nic": 1, "rx_priority_5_xon.nic": 8})
    pfc = pfc_counters(stats)
    assert pfc[3] == {
        "rx_pause": 12,
        "tx_pause": 4,
        "rx_pause_duration": 840,
        "tx_pause_duration": 96,
        "rx_pause_transition": 6,
    }
    assert pfc[5] == {"rx_pause": 2, "tx_pause": 1}
    assert set(pfc) == {3, 5}  # rx_global_pause is not a priority


def test_ecn_counters_picks_mlx5_names():
    ecn = ecn_counters(parse_ethtool_s(MLX5_TEXT) or {})
    assert ecn == {
        "rx_ecn_mark": 7,
        "tx_pause_storm_warning_events": 0,
        "tx_pause_storm_error_events": 0,
        "rx_prio3_marked": 55,
    }


# ---------------------------------------------------------------------------
# simulated root


def test_sim_reads_each_interface(tmp_path):
    root = sim_root(tmp_path, {"eth2": MLX5_TEXT, "eth3": "NIC statistics:\n     rx_packets: 1\n"})
    ctx = ctx_for(root)
    out = read_ethtool(ctx, ["eth2", "eth3", "eth9"])
    assert set(out) == {"eth2", "eth3"}  # eth9: no file, no statistics, no error
    assert out["eth2"]["rx_prio3_pause"] == 12
    assert ctx.errors == []


def test_sim_garbage_is_unparsable_for_that_interface_only(tmp_path):
    root = sim_root(tmp_path, {"eth2": b"\xff\xfe\x00garbage\n", "eth3": "NIC statistics:\n     x: zz\n", "eth4": MLX5_TEXT})
    ctx = ctx_for(root)
    out = read_ethtool(ctx, ["eth2", "eth3", "eth4"])
    assert list(out) == ["eth4"]
    kinds = {(e.path, e.kind) for e in ctx.errors}
    assert (".agentd/ethtool/eth2", "unparsable") in kinds
    assert (".agentd/ethtool/eth3", "unparsable") in kinds
    assert all(e.source == "ethtool" for e in ctx.errors)


def test_sim_rejects_path_like_names(tmp_path):
    root = sim_root(tmp_path, {"eth2": MLX5_TEXT})
    ctx = ctx_for(root)
    assert read_ethtool(ctx, ["../ethtool/eth2", "..", ""]) == {}
    assert len(ctx.errors) == 3


def test_copied_tree_without_sim_dir_has_no_ethtool_data(tmp_path):
    (tmp_path / "sys" / "class" / "net").mkdir(parents=True)
    ctx = ctx_for(tmp_path)
    assert read_ethtool(ctx, ["eth0"]) == {}
    assert ctx.errors == []


# ---------------------------------------------------------------------------
# live ioctl on a real veth pair


@pytest.fixture
def veth_pair():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("creating a veth pair needs root and iproute2")
    suffix = uuid.uuid4().hex[:6]
    a, b = f"agt{suffix}a", f"agt{suffix}b"
    r = subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot create a veth pair here: {r.stderr.strip()}")
    try:
        yield a, b
    finally:
        subprocess.run(["ip", "link", "del", a], capture_output=True)


@pytest.mark.proc
def test_live_ioctl_matches_ethtool_on_veth(veth_pair):
    a, b = veth_pair
    ctx = ReadContext(HostRoot.at("/"), "ethtool")
    out = read_ethtool(ctx, [a, b])
    assert ctx.errors == []
    assert set(out) == {a, b}
    peer_ifindex = int(Path(f"/sys/class/net/{b}/ifindex").read_text())
    assert out[a]["peer_ifindex"] == peer_ifindex
    assert out[b]["peer_ifindex"] == int(Path(f"/sys/class/net/{a}/ifindex").read_text())
    if shutil.which("ethtool"):
        r = subprocess.run(["ethtool", "-S", a], capture_output=True, text=True, check=True)
        assert out[a] == parse_ethtool_s(r.stdout)


@pytest.mark.proc
def test_live_missing_and_statless_interfaces_are_per_interface_errors(veth_pair):
    a, _ = veth_pair
    ctx = ReadContext(HostRoot.at("/"), "ethtool")
    missing = f"agtnone{uuid.uuid4().hex[:6]}"
    out = read_ethtool(ctx, [missing, a, "lo"])
    assert list(out) == [a]  # the others still read
    by_path = {e.path: e for e in ctx.errors}
    assert by_path[f"ioctl(SIOCETHTOOL, {missing})"].kind == "unreadable"
    assert by_path["ioctl(SIOCETHTOOL, lo)"].kind == "unavailable"  # loopback has no statistics


@pytest.mark.proc
def test_live_falls_back_to_drvinfo_n_stats(veth_pair, monkeypatch):
    """Drivers without ETHTOOL_GSSET_INFO: the count comes from ETHTOOL_GDRVINFO.n_stats,
    which the kernel fills for every driver; same statistics either way."""
    a, _ = veth_pair
    expected = read_ethtool(ReadContext(HostRoot.at("/"), "ethtool"), [a])
    real_ioctl = ethtool._ioctl
    seen: list[int] = []

    def no_sset_info(sock, ifname, buf):
        cmd = struct.unpack_from("=I", buf, 0)[0]
        seen.append(cmd)
        if cmd == ethtool.ETHTOOL_GSSET_INFO:
            raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
        real_ioctl(sock, ifname, buf)

    monkeypatch.setattr(ethtool, "_ioctl", no_sset_info)
    ctx = ReadContext(HostRoot.at("/"), "ethtool")
    assert read_ethtool(ctx, [a]) == expected
    assert ethtool.ETHTOOL_GDRVINFO in seen and ctx.errors == []


@pytest.mark.proc
def test_live_retries_when_the_count_changes_between_calls(veth_pair, monkeypatch):
    a, _ = veth_pair
    real_ioctl = ethtool._ioctl
    changed = {"times": 0}

    def growing(sock, ifname, buf):
        real_ioctl(sock, ifname, buf)
        if struct.unpack_from("=I", buf, 0)[0] == ethtool.ETHTOOL_GSTATS and changed["times"] < 1:
            changed["times"] += 1
            n = struct.unpack_from("=I", buf, 4)[0]
            struct.pack_into("=I", buf, 4, n + 5)  # as if PFC got enabled on a priority meanwhile

    monkeypatch.setattr(ethtool, "_ioctl", growing)
    ctx = ReadContext(HostRoot.at("/"), "ethtool")
    out = read_ethtool(ctx, [a])
    assert changed["times"] == 1 and "peer_ifindex" in out[a] and ctx.errors == []
