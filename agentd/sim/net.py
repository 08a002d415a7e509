"""Network interfaces, plus the stand-ins for ``ethtool -S`` and ``mlnx_qos``.

sysfs: ``<pci dev>/net/<if>/`` (linked from ``class/net/<if>``; ``device`` ->
``../../../<bdf>``) for the HCA netdevs (IPoIB ``ibN``: type 32, MTU 4092; RoCE: type 1,
MTU 9000) and the bootstrap NIC (``eno1``, igb, MTU 1500), and
``devices/virtual/net/lo`` (no ``device`` link; no ``speed`` file, since reading it
fails with EINVAL on a real kernel). mlx5 Ethernet netdevs also get
``ecn/roce_np/enable/0..7`` and ``ecn/roce_rp/enable/0..7`` (all 1, the mlx5 default)
with a few of the tunables beside them.

ifindex order: lo 1, the bootstrap NIC 2, then the HCA netdevs in profile order.

``.agentd/ethtool/<if>`` holds ``ethtool -S <if>`` text (``NIC statistics:`` then
``     name: value``) for every Ethernet netdev with a driver (mlx5 names incl.
rx/tx_prioN_pause, *_pause_duration, rx_vport_rdma_unicast_bytes, rx/tx_discards_phy,
rx_pcs_symbol_err_phy, rx_corrected_bits_phy (en_stats.c, PPCNT physical layer statistical
group), link_down_events_phy; a short igb set for eno1). ``.agentd/dcb/<if>`` holds
``mlnx_qos -i <if>`` text for each mlx5 Ethernet netdev, in the format of the captured
att/netarbiter output: trust dscp, the default dscp2prio map (DSCP d -> priority d >> 3),
PFC on the profile's RoCE priority only; ``.agentd/pause/<if>`` its ``ethtool -a`` text:
global pause off (rx, tx, autoneg), as a RoCE port configured for PFC has it. ``parse_mlnx_qos`` reads that text back (for the
QoS faults, which change one part and keep the rest).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agentd.base import recorded
from agentd.sim.pci import PciNode
from agentd.sim.profiles import HcaSpec, Profile
from agentd.sim.rdma import guid_bytes, mac_of
from agentd.sim.tree import symlink, write_attr

ARPHRD_ETHER, ARPHRD_INFINIBAND, ARPHRD_LOOPBACK = 1, 32, 772
IPOIB_BROADCAST = "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff"
ECN_NP_TUNABLES = {"cnp_dscp": 48, "cnp_802p_prio": 6, "min_time_between_cnps": 4}
ECN_RP_TUNABLES = {"clamp_tgt_rate": 0, "initial_alpha_value": 1023, "rpg_ai_rate": 5, "rpg_min_rate": 1, "rpg_time_reset": 300}


def rate_speed_mbps(rate: str) -> int:
    """``400 Gb/sec (4X NDR)`` -> 400000 (what ethtool/IPoIB report as the link speed)."""
    return int(float(rate.split()[0]) * 1000)


def ipoib_address(hca: HcaSpec) -> str:
    qpn = [0x00, 0x00, 0x10, 0x49]
    gid = [0xFE, 0x80] + [0] * 6 + guid_bytes(hca.node_guid)
    return ":".join(f"{b:02x}" for b in qpn + gid)


def netdev_dir(layout: dict[str, PciNode], hca: HcaSpec) -> str:
    return f"{layout[hca.bdf].rel}/net/{hca.netdev}"


def netdev_attrs(hca: HcaSpec, ifindex: int) -> dict[str, object]:
    ib = hca.link_layer == "InfiniBand"
    a: dict[str, object] = {
        "ifindex": ifindex,
        "iflink": ifindex,
        "type": ARPHRD_INFINIBAND if ib else ARPHRD_ETHER,
        "mtu": hca.mtu,
        "operstate": "up",
        "carrier": 1,
        "carrier_changes": 2,
        "carrier_up_count": 1,
        "carrier_down_count": 1,
        "speed": rate_speed_mbps(hca.rate),
        "duplex": "full",
        "address": ipoib_address(hca) if ib else mac_of(hca),
        "broadcast": IPOIB_BROADCAST if ib else "ff:ff:ff:ff:ff:ff",
        "addr_len": 20 if ib else 6,
        "dev_port": 0,
        "dev_id": "0x0",
        "flags": "0x1003",
        "tx_queue_len": 256 if ib else 1000,
    }
    if not ib:
        a["phys_port_name"] = "p0"
    return a


def _write_netdev(root: Path, d: Path, name: str, attrs: dict[str, object], device: Path | None) -> None:
    for k, v in attrs.items():
        write_attr(d / k, v)
    symlink(d / "subsystem", root / "sys/class/net")
    if device is not None:
        symlink(d / "device", device)
    symlink(root / "sys/class/net" / name, d)


def write_ecn(d: Path, enabled: bool = True) -> None:
    for part, tunables in (("roce_np", ECN_NP_TUNABLES), ("roce_rp", ECN_RP_TUNABLES)):
        for prio in range(8):
            write_attr(d / "ecn" / part / "enable" / str(prio), 1 if enabled else 0)
        for k, v in tunables.items():
            write_attr(d / "ecn" / part / k, v)


def ethtool_stats(hca: HcaSpec, index: int) -> dict[str, int]:
    """``ethtool -S`` counters of an mlx5 Ethernet netdev, in mlx5 order."""
    pkts = 48_112_930_551 + index * 1_000_117
    byts = pkts * 4118
    s: dict[str, int] = {
        "rx_packets": 1_204_332,
        "rx_bytes": 108_389_880,
        "tx_packets": 1_198_004,
        "tx_bytes": 107_820_360,
        "rx_out_of_buffer": 0,
        "rx_vport_rdma_unicast_packets": pkts,
        "rx_vport_rdma_unicast_bytes": byts,
        "tx_vport_rdma_unicast_packets": pkts - 1311,
        "tx_vport_rdma_unicast_bytes": byts - 1311 * 4118,
        "rx_packets_phy": pkts + 1_204_332,
        "rx_bytes_phy": byts + 108_389_880,
        "tx_packets_phy": pkts + 1_196_693,
        "tx_bytes_phy": byts + 107_820_360,
        "rx_crc_errors_phy": 0,
        "rx_symbol_err_phy": 0,
        "rx_discards_phy": 0,
        "tx_discards_phy": 0,
        "rx_pause_ctrl_phy": 0,
        "tx_pause_ctrl_phy": 0,
        "rx_pcs_symbol_err_phy": 0,
        "rx_corrected_bits_phy": 2_104_552,
        "link_down_events_phy": 1,
    }
    for p in range(8):
        s[f"rx_prio{p}_bytes"] = byts if p == 3 else (108_389_880 if p == 0 else 0)
        s[f"rx_prio{p}_packets"] = pkts if p == 3 else (1_204_332 if p == 0 else 0)
        s[f"tx_prio{p}_bytes"] = byts if p == 3 else (107_820_360 if p == 0 else 0)
        s[f"tx_prio{p}_packets"] = pkts if p == 3 else (1_198_004 if p == 0 else 0)
        s[f"rx_prio{p}_pause"] = 2_112 if p == 3 else 0
        s[f"rx_prio{p}_pause_duration"] = 31_680 if p == 3 else 0
        s[f"tx_prio{p}_pause"] = 417 if p == 3 else 0
        s[f"tx_prio{p}_pause_duration"] = 6_255 if p == 3 else 0
        s[f"rx_prio{p}_pause_transition"] = 1_056 if p == 3 else 0
    return s


IGB_STATS = {"rx_packets": 9_820_114, "tx_packets": 7_220_841, "rx_bytes": 8_120_553_810, "tx_bytes": 1_990_221_067, "rx_errors": 0, "tx_errors": 0, "rx_dropped": 0, "tx_dropped": 0, "rx_crc_errors": 0, "rx_missed_errors": 0}


def format_ethtool(stats: dict[str, int]) -> str:
    return recorded.format_ethtool_s(stats)


def parse_ethtool(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines()[1:]:
        k, _, v = line.strip().partition(": ")
        out[k] = int(v)
    return out


def format_mlnx_qos(pfc_priority: int | None) -> str:
    return recorded.format_mlnx_qos(() if pfc_priority is None else (pfc_priority,))


@dataclass(frozen=True)
class Qos:
    """What the mlnx_qos text says: PFC-enabled priorities, trust state, DSCP map (trust dscp)."""

    pfc: tuple[int, ...]
    trust: str | None
    dscp2prio: dict[int, int] | None

    def format(self) -> str:
        return recorded.format_mlnx_qos(self.pfc, self.trust, self.dscp2prio)


def parse_mlnx_qos(text: str) -> Qos:
    """The simulator's own mlnx_qos text back into a Qos; ValueError when it is not that."""
    trust: str | None = None
    table: dict[int, int] = {}
    pfc: tuple[int, ...] | None = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("Priority trust state:"):
            trust = s.partition(":")[2].strip()
        elif s.startswith("prio:"):
            head, _, dscps = s.partition(" dscp:")
            for d in dscps.split(","):
                if d:
                    table[int(d)] = int(head[5:])
        elif s.startswith("enabled"):
            flags = s.split()[1:]
            if len(flags) != 8:
                raise ValueError(f"bad PFC row {s!r}")
            pfc = tuple(p for p, f in enumerate(flags) if f == "1")
    if pfc is None:
        raise ValueError("no PFC configuration in the mlnx_qos text")
    return Qos(pfc, trust, table if trust == "dscp" else None)


def write_netdevs(root: Path, profile: Profile, layout: dict[str, PciNode]) -> None:
    sim = root / ".agentd"
    lo = root / "sys/devices/virtual/net/lo"
    lo_attrs = {"ifindex": 1, "iflink": 1, "type": ARPHRD_LOOPBACK, "mtu": 65536, "operstate": "unknown", "carrier": 1, "carrier_changes": 0, "carrier_up_count": 0, "carrier_down_count": 0, "address": "00:00:00:00:00:00", "broadcast": "00:00:00:00:00:00", "addr_len": 6, "dev_port": 0, "dev_id": "0x0", "flags": "0x9", "tx_queue_len": 1000}
    _write_netdev(root, lo, "lo", lo_attrs, None)
    boot = profile.boot_nic
    bdir = root / layout[boot.bdf].rel
    battrs = {"ifindex": 2, "iflink": 2, "type": ARPHRD_ETHER, "mtu": boot.mtu, "operstate": "up", "carrier": 1, "carrier_changes": 2, "carrier_up_count": 1, "carrier_down_count": 1, "speed": boot.speed_mbps, "duplex": "full", "address": boot.mac, "broadcast": "ff:ff:ff:ff:ff:ff", "addr_len": 6, "dev_port": 0, "dev_id": "0x0", "flags": "0x1003", "tx_queue_len": 1000}
    _write_netdev(root, bdir / "net" / boot.netdev, boot.netdev, battrs, bdir)
    write_attr(sim / "ethtool" / boot.netdev, format_ethtool(IGB_STATS), newline=False)
    for index, hca in enumerate(profile.hcas):
        dev = root / layout[hca.bdf].rel
        d = root / netdev_dir(layout, hca)
        _write_netdev(root, d, hca.netdev, netdev_attrs(hca, 3 + index), dev)
        if hca.link_layer == "Ethernet":
            write_ecn(d)
            write_attr(sim / "ethtool" / hca.netdev, format_ethtool(ethtool_stats(hca, index)), newline=False)
            write_attr(sim / "dcb" / hca.netdev, format_mlnx_qos(profile.roce_priority), newline=False)
            # global pause off, as on a RoCE port configured for PFC (mlx5 boots with it on)
            write_attr(sim / recorded.PAUSE / hca.netdev, recorded.format_ethtool_a(hca.netdev, False, False, False), newline=False)
