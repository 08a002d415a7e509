"""Fabric metrics: InfiniBand/RoCE HCA ports and their counters, RoCE PFC/ECN, netdevs."""

from __future__ import annotations

import re
from typing import Final

from agentd.base.expo import Exposition, Family, MetricType
from agentd.base.ids import bus_id_label
from agentd.base.pma import PMA_COUNTER_WIDTHS, is_saturated
from agentd.judging.qos import nccl_setting
from agentd.metrics.registry import Area
from agentd.metrics.source import MetricsSource
from agentd.model import Hca, IbPort, NodeSnapshot, PathType

G: Final[MetricType] = "gauge"
C: Final[MetricType] = "counter"
DP = ("device", "port")
GBPS_TO_BYTES = 125_000_000  # 1 Gb/s = 125 000 000 bytes/s

# counters/ (PMA PortCounters[Extended]) -> metric suffix, multiplier. Names follow
# node_exporter's infiniband collector where it has one.
IB_COUNTERS: dict[str, tuple[str, int]] = {
    "port_xmit_data": ("data_transmitted_bytes_total", 4),  # 4-byte words
    "port_rcv_data": ("data_received_bytes_total", 4),
    "port_xmit_packets": ("packets_transmitted_total", 1),
    "port_rcv_packets": ("packets_received_total", 1),
    "unicast_xmit_packets": ("unicast_packets_transmitted_total", 1),
    "unicast_rcv_packets": ("unicast_packets_received_total", 1),
    "multicast_xmit_packets": ("multicast_packets_transmitted_total", 1),
    "multicast_rcv_packets": ("multicast_packets_received_total", 1),
    "symbol_error": ("symbol_errors_total", 1),
    "link_downed": ("link_downed_total", 1),
    "link_error_recovery": ("link_error_recovery_total", 1),
    "port_rcv_errors": ("receive_errors_total", 1),
    "port_rcv_remote_physical_errors": ("receive_remote_physical_errors_total", 1),
    "port_rcv_switch_relay_errors": ("receive_switch_relay_errors_total", 1),
    "port_xmit_discards": ("transmit_discards_total", 1),
    "port_xmit_constraint_errors": ("transmit_constraint_errors_total", 1),
    "port_rcv_constraint_errors": ("receive_constraint_errors_total", 1),
    "local_link_integrity_errors": ("local_link_integrity_errors_total", 1),
    "excessive_buffer_overrun_errors": ("excessive_buffer_overrun_errors_total", 1),
    "VL15_dropped": ("vl15_dropped_total", 1),
    "port_xmit_wait": ("transmit_wait_ticks_total", 1),
}
# Named counters that are per port only with metrics.ib_counters_per_port; at the defaults
# they are summed over the node's ports in agentd_ib_hw_counters_total{counter=<file>}
# (NCCL's traffic is unicast; multicast counts say little per port and cost 2 series each).
PER_PORT_ONLY = frozenset({"multicast_xmit_packets", "multicast_rcv_packets"})
# hw_counters/ (mlx5 driver) -> metric suffix.
IB_HW_COUNTERS: dict[str, str] = {
    "np_ecn_marked_roce_packets": "np_ecn_marked_roce_packets_received_total",
    "np_cnp_sent": "np_cnp_packets_sent_total",
    "rp_cnp_handled": "rp_cnp_packets_handled_total",
    "rp_cnp_ignored": "rp_cnp_ignored_packets_received_total",
    "out_of_sequence": "out_of_sequence_packets_received_total",
    "packet_seq_err": "packet_sequence_errors_total",
    "local_ack_timeout_err": "local_ack_timeout_errors_total",
    "implied_nak_seq_err": "implied_nak_sequence_errors_total",
    "rnr_nak_retry_err": "rnr_nak_retry_errors_total",
    "out_of_buffer": "out_of_buffer_drops_total",
    "rx_icrc_encapsulated": "received_icrc_encapsulated_errors_total",
    "roce_adp_retrans": "roce_adp_retransmits_total",
    "duplicate_request": "duplicate_requests_received_total",
}
_PRIO_PAUSE = re.compile(r"^(rx|tx)_prio([0-7])_pause$")
_PRIO_PAUSE_DURATION = re.compile(r"^(rx|tx)_prio([0-7])_pause_duration$")
_PRIO_BYTES = re.compile(r"^(rx|tx)_prio([0-7])_(bytes|packets)$")
_DIRECTION = {"rx": "received", "tx": "transmitted"}
_OTHER = "priority is roce.priority or other (the other seven summed); 0-7 each with metrics.roce_every_priority."

FAMILIES: tuple[Family, ...] = (
    Family("agentd_ib_hca_info", G, "One series per RDMA device (value 1).", ("device", "hca_type", "firmware_version", "board_id", "node_guid", "pci_bus_id", "numa_node")),
    Family("agentd_ib_port_info", G, "Join metric (value 1): HCA port <-> netdev, link layer, PCI bus id, NUMA node, nearest GPUs (comma-separated indices) and role (compute or other); sm_sl the SL the subnet manager uses (ports/N/sm_sl, InfiniBand) and nccl_ib_sl the NCCL_IB_SL jobs get on a compute InfiniBand port (agentd's nccl settings or /etc/nccl.conf; \"\" when unknown or not set, NCCL's default 0). The SL->VL table is in the SM (smpquery sl2vl).", ("device", "port", "netdev", "link_layer", "pci_bus_id", "numa_node", "nearest_gpus", "role", "sm_sl", "nccl_ib_sl")),
    Family("agentd_ib_port_state_id", G, "Logical port state from ports/N/state: 1 down, 2 init, 3 armed, 4 active, 5 active_defer.", DP),
    Family("agentd_ib_port_phys_state_id", G, "Physical port state from ports/N/phys_state: 2 polling, 3 disabled, 5 link up, 6 link error recovery.", DP),
    Family("agentd_ib_port_rate_bytes_per_second", G, "Port rate from ports/N/rate (Gb/s x 125000000).", DP),
    Family("agentd_ib_port_rate_expected_bytes_per_second", G, "Rate every compute port should have (expect.rate_gbps, else inferred from the compute ports).", DP),
    Family("agentd_ib_port_width_lanes", G, "Link width in lanes (4 for 4X).", DP),
    Family("agentd_ib_port_width_expected_lanes", G, "Width every compute port should have (expect.width, else inferred).", DP),
    *(Family(f"agentd_ib_port_{suffix}", C, f"ports/N/counters/{name}" + (" x 4 (the PMA counts 4-byte words)." if mult == 4 else ".")
             + (f" Only with metrics.ib_counters_per_port; at the defaults summed over the node's ports as agentd_ib_hw_counters_total{{counter=\"{name}\"}}." if name in PER_PORT_ONLY else ""), DP)
      for name, (suffix, mult) in IB_COUNTERS.items()),
    *(Family(f"agentd_ib_port_{suffix}", C, f"ports/N/hw_counters/{name} (mlx5).", DP) for name, suffix in IB_HW_COUNTERS.items()),
    Family("agentd_ib_hw_counters_total", C, "Any other counters/ or hw_counters/ file (and, at the defaults, multicast_xmit_packets and multicast_rcv_packets), by its file name, summed over the node's HCA ports.", ("counter",)),
    Family("agentd_ib_port_hw_counters_total", C, "Any other counters/ or hw_counters/ file, by its file name, per port (only with metrics.ib_counters_per_port).", ("device", "port", "counter")),
    Family("agentd_ib_port_hw_counters_lifespan_seconds", G, "hw_counters/lifespan: how long the driver caches hw_counters values.", DP),
    Family("agentd_ib_pma_saturated_counters", G, "Fixed-width PMA counters, over the node's HCA ports, that sit at their maximum and have stopped counting; agentd_ib_port_pma_saturated names them.", ()),
    Family("agentd_ib_port_pma_saturated", G, "1 for a fixed-width PMA counter that sits at its maximum and has stopped counting (rate() would read 0); only saturated counters have a series. Reset it with perfquery -R.", ("device", "port", "counter")),
    Family("agentd_roce_ecn_enabled", G, "ECN for RoCE per priority from /sys/class/net/IF/ecn/roce_{np,rp}/enable (np: notification point, rp: reaction point).", ("netdev", "priority", "point")),
    Family("agentd_roce_pfc_enabled", G, "1 when priority flow control is on for the priority.", ("netdev", "priority")),
    Family("agentd_netdev_pause_enabled", G, "1 when global (802.3x link-level) pause is on in the direction (ethtool -a; rx: pause frames are obeyed, tx: sent); RoCE ports with PFC keep it off.", ("netdev", "direction")),
    Family("agentd_roce_pfc_pause_frames_total", C, f"PFC pause frames per priority (ethtool rx/tx_prioN_pause). {_OTHER}", ("netdev", "priority", "direction")),
    Family("agentd_roce_pfc_pause_duration_seconds_total", C, f"Time paused per priority (ethtool rx/tx_prioN_pause_duration, microseconds / 1e6). {_OTHER}", ("netdev", "priority", "direction")),
    Family("agentd_roce_priority_bytes_total", C, f"Bytes per priority (ethtool rx/tx_prioN_bytes). {_OTHER}", ("netdev", "priority", "direction")),
    Family("agentd_roce_priority_packets_total", C, f"Packets per priority (ethtool rx/tx_prioN_packets). {_OTHER}", ("netdev", "priority", "direction")),
    Family("agentd_netdev_info", G, "One series per network interface (value 1), with the HCA port it belongs to, if any.", ("netdev", "address", "operstate", "link_layer", "pci_bus_id", "device", "port", "master")),
    Family("agentd_netdev_up", G, "1 when operstate is up.", ("netdev",)),
    Family("agentd_netdev_carrier", G, "Carrier as sysfs reports it (1 link detected).", ("netdev",)),
    Family("agentd_netdev_mtu_bytes", G, "Interface MTU.", ("netdev",)),
    Family("agentd_netdev_mtu_expected_bytes", G, "MTU the interface should have (expect.roce_mtu for RoCE compute interfaces, expect.ipoib_mtu for IPoIB when set).", ("netdev",)),
    Family("agentd_netdev_speed_bytes_per_second", G, "Link speed from sysfs (Mb/s x 125000); absent when unknown.", ("netdev",)),
    Family("agentd_netdev_carrier_changes_total", C, "carrier_changes from sysfs, on kernels before 4.16 only (later it is the sum of the up and down counts).", ("netdev",)),
    Family("agentd_netdev_carrier_up_changes_total", C, "carrier_up_count from sysfs.", ("netdev",)),
    Family("agentd_netdev_carrier_down_changes_total", C, "carrier_down_count from sysfs.", ("netdev",)),
)


def nearest_gpus(snap: NodeSnapshot) -> dict[str, str]:
    """HCA name -> comma-separated indices of the GPUs with the shortest PCIe path to it."""
    best: dict[str, tuple[int, list[int]]] = {}
    for g in snap.gpus:
        for hca, path in g.nic_paths.items():
            rank = int(PathType[path])
            cur = best.get(hca)
            if cur is None or rank < cur[0]:
                best[hca] = (rank, [g.index])
            elif rank == cur[0]:
                cur[1].append(g.index)
    return {hca: ",".join(str(i) for i in sorted(idx)) for hca, (_, idx) in best.items()}


def _port(x: Exposition, s: MetricsSource, h: Hca, p: IbPort, near: dict[str, str], other: dict[str, int], sl: str) -> int:
    """One port's series; its unnamed counters are added to ``other`` (node sums). Returns
    how many of its PMA counters are saturated. ``sl``: NCCL_IB_SL as configured ("" unset)."""
    lab = (h.name, p.port)
    compute = h.name in s.compute_hcas
    x.add(
        "agentd_ib_port_info",
        (h.name, p.port, p.netdev or "", p.link_layer or "", bus_id_label(h.pci_bus_id), "" if h.numa_node is None else h.numa_node, near.get(h.name, ""),
         "compute" if compute else "other", "" if p.sm_sl is None else p.sm_sl, sl if compute and p.link_layer == "InfiniBand" else ""),
        1,
    )
    if p.state_id is not None:
        x.add("agentd_ib_port_state_id", lab, p.state_id)
    if p.phys_state_id is not None:
        x.add("agentd_ib_port_phys_state_id", lab, p.phys_state_id)
    if p.rate_gbps is not None:
        x.add("agentd_ib_port_rate_bytes_per_second", lab, p.rate_gbps * GBPS_TO_BYTES)
    exp_rate = s.expected.port_rate_gbps.get((h.name, p.port))
    if exp_rate is not None:
        x.add("agentd_ib_port_rate_expected_bytes_per_second", lab, exp_rate * GBPS_TO_BYTES)
    if p.width is not None:
        x.add("agentd_ib_port_width_lanes", lab, p.width)
    exp_width = s.expected.port_width.get((h.name, p.port))
    if exp_width is not None:
        x.add("agentd_ib_port_width_expected_lanes", lab, exp_width)
    per_port = s.config.metrics.ib_counters_per_port
    saturated = 0
    unnamed = [(n, v) for n, v in p.counters.items() if n not in IB_COUNTERS or n in PER_PORT_ONLY]
    for name, value in p.counters.items():
        known = IB_COUNTERS.get(name)
        if known is not None and (per_port or name not in PER_PORT_ONLY):
            x.add(f"agentd_ib_port_{known[0]}", lab, value * known[1])
        if name in PMA_COUNTER_WIDTHS and is_saturated(name, value):
            saturated += 1
            x.add("agentd_ib_port_pma_saturated", (h.name, p.port, name), 1)
    for name, value in p.hw_counters.items():
        if name == "lifespan":
            x.add("agentd_ib_port_hw_counters_lifespan_seconds", lab, value / 1000)
        elif name in IB_HW_COUNTERS:
            x.add(f"agentd_ib_port_{IB_HW_COUNTERS[name]}", lab, value)
        elif name not in p.counters:
            unnamed.append((name, value))
    for name, value in unnamed:
        other[name] = other.get(name, 0) + value
        if per_port and name not in PER_PORT_ONLY:  # those have their named family
            x.add("agentd_ib_port_hw_counters_total", (h.name, p.port, name), value)
    return saturated


def _ethtool(x: Exposition, name: str, stats: dict[str, int], keep: int | None) -> None:
    """Per-priority counters; with ``keep`` set, every priority but ``keep`` is summed into
    priority="other" (the same stats every scrape, so the sum is a counter too)."""
    other: dict[tuple[str, str], float] = {}
    for stat, value in stats.items():
        if not stat.startswith(("rx_prio", "tx_prio")):
            continue
        m = _PRIO_PAUSE.match(stat)
        if m:
            fam, v = "agentd_roce_pfc_pause_frames_total", float(value)
        elif (m := _PRIO_PAUSE_DURATION.match(stat)) is not None:
            fam, v = "agentd_roce_pfc_pause_duration_seconds_total", value / 1e6
        elif (m := _PRIO_BYTES.match(stat)) is not None:
            fam, v = ("agentd_roce_priority_bytes_total" if m.group(3) == "bytes" else "agentd_roce_priority_packets_total"), float(value)
        else:
            continue
        direction = _DIRECTION[m.group(1)]
        if keep is None or int(m.group(2)) == keep:
            x.add(fam, (name, m.group(2), direction), v if fam.endswith("seconds_total") else value)
        else:
            other[(fam, direction)] = other.get((fam, direction), 0.0) + v
    for (fam, direction), total in sorted(other.items()):
        x.add(fam, (name, "other", direction), total)


def cache_key(s: MetricsSource) -> tuple[object, ...] | None:
    snap = s.snapshot
    if snap is None:
        return None
    return (snap.hcas, snap.netdevs, snap.gpus, snap.nccl_conf, s.expected, s.compute_hcas, s.config.metrics, s.config.roce, s.config.nccl)


def render(x: Exposition, s: MetricsSource) -> None:
    snap = s.snapshot
    if snap is None:
        return
    near = nearest_gpus(snap)
    ib_sl = nccl_setting(s.config, snap.nccl_conf, "NCCL_IB_SL", 0, 15)
    sl = "" if ib_sl is None else str(ib_sl.value)
    port_of_netdev: dict[str, tuple[str, int]] = {}
    other: dict[str, int] = {}
    saturated = 0
    ports = 0
    for h in snap.hcas:
        x.add(
            "agentd_ib_hca_info",
            (h.name, h.hca_type or "", h.fw_ver or "", h.board_id or "", h.node_guid or "", bus_id_label(h.pci_bus_id), "" if h.numa_node is None else h.numa_node),
            1,
        )
        for p in h.ports:
            if p.netdev:
                port_of_netdev.setdefault(p.netdev, (h.name, p.port))
            saturated += _port(x, s, h, p, near, other, sl)
            ports += 1
    for name, total in sorted(other.items()):
        x.add("agentd_ib_hw_counters_total", (name,), total)
    if ports:
        x.add("agentd_ib_pma_saturated_counters", (), saturated)
    keep = None if s.config.metrics.roce_every_priority else s.config.roce.priority

    for n in snap.netdevs:
        name = n.name
        dev, port = port_of_netdev.get(name, ("", ""))
        x.add("agentd_netdev_info", (name, n.address or "", n.operstate or "", n.link_layer or "", bus_id_label(n.pci_bus_id), dev, port, n.master or ""), 1)
        if n.operstate is not None:
            x.add("agentd_netdev_up", (name,), n.operstate == "up")
        if n.carrier is not None:
            x.add("agentd_netdev_carrier", (name,), n.carrier)
        if n.mtu is not None:
            x.add("agentd_netdev_mtu_bytes", (name,), n.mtu)
        exp = s.expected.netdev_mtu.get(name)
        if exp is not None:
            x.add("agentd_netdev_mtu_expected_bytes", (name,), exp)
        if n.speed_mbps is not None:
            x.add("agentd_netdev_speed_bytes_per_second", (name,), n.speed_mbps * 125_000)
        # since Linux 4.16 carrier_changes is carrier_up_count + carrier_down_count
        # (net/core/net-sysfs.c carrier_changes_show): exported only where those are absent
        if n.carrier_changes is not None and (n.carrier_up_count is None or n.carrier_down_count is None):
            x.add("agentd_netdev_carrier_changes_total", (name,), n.carrier_changes)
        if n.carrier_up_count is not None:
            x.add("agentd_netdev_carrier_up_changes_total", (name,), n.carrier_up_count)
        if n.carrier_down_count is not None:
            x.add("agentd_netdev_carrier_down_changes_total", (name,), n.carrier_down_count)
        if n.ecn is not None:
            for point, table in (("np", n.ecn.np), ("rp", n.ecn.rp)):
                for prio, on in sorted(table.items()):
                    x.add("agentd_roce_ecn_enabled", (name, prio, point), on)
        if n.pfc is not None:
            enabled = set(n.pfc.enabled)
            for prio in range(8):
                x.add("agentd_roce_pfc_enabled", (name, prio), prio in enabled)
        if n.pause is not None:
            x.add("agentd_netdev_pause_enabled", (name, "rx"), n.pause.rx)
            x.add("agentd_netdev_pause_enabled", (name, "tx"), n.pause.tx)
        if n.ethtool:
            _ethtool(x, name, n.ethtool, keep)


AREA = Area("fabric", FAMILIES, render, cache_key)
