"""RDMA devices: ``<pci dev>/infiniband/<hca>/`` and ``class/infiniband/<hca>`` links.

Per HCA: node_type, node_guid, sys_image_guid, fw_ver, hca_type, hw_rev, board_id,
node_desc, ``device`` (-> ``../../../<bdf>``), ``subsystem``; per port (only port 1, as
on ConnectX): state, phys_state, rate, link_layer, lid, sm_lid, sm_sl, lid_mask_count,
cap_mask, pkeys/0, gids/0..15, gid_attrs/{types,ndevs}/<i>, counters/*, hw_counters/*.
With MLNX_OFED (Profile.ofed_version) each HCA also has ``tc/1/traffic_class``, OFED
mlx5_ib's per-port traffic class override: empty while nothing is set ("Global
tclass=<v>" once one is; the tclass_override fault). Inbox kernels have no ``tc/``.

GID table: 16 slots are written (mlx5 has up to 255; readers must not depend on the
count). Empty slots read as all zeros, as the kernel prints them. On a real kernel
reading ``gid_attrs/types/<i>`` or ``ndevs/<i>`` of an empty slot fails with EINVAL; a
regular file cannot do that, so those files are simply ABSENT here (readers must treat
ENOENT like EINVAL: "no entry"). InfiniBand ports have GID 0 = fe80::<port GUID> typed
``IB/RoCE v1`` with no ndev (reading it fails on a real kernel, so it is absent too).
RoCE ports have the kernel's usual layout: MAC-derived fe80:: link-local as RoCE v1 (0)
and v2 (1), then the IPv4-mapped address as v1 (2) and v2 (3), all owned by the netdev.

Counters: the standard PMA set (as in the gpud H100 fixture) on every port; hw_counters:
the mlx5 set from that fixture, plus the RoCE congestion-control counters
(np_cnp_sent, np_ecn_marked_roce_packets, rp_cnp_handled, rp_cnp_ignored) on Ethernet
ports only, as mlx5 exposes them only there.
"""

from __future__ import annotations

from pathlib import Path

from agentd.sim.pci import PciNode
from agentd.sim.profiles import HcaSpec, Profile
from agentd.sim.tree import symlink, write_attr

GID_SLOTS = 16
ZERO_GID = ":".join(["0000"] * 8)

PMA_COUNTERS = {
    "VL15_dropped": 0,
    "excessive_buffer_overrun_errors": 0,
    "link_downed": 0,
    "link_error_recovery": 0,
    "local_link_integrity_errors": 0,
    "multicast_rcv_packets": 1204,
    "multicast_xmit_packets": 0,
    "port_rcv_constraint_errors": 0,
    "port_rcv_data": 230539874932483,
    "port_rcv_errors": 0,
    "port_rcv_packets": 317548853677,
    "port_rcv_remote_physical_errors": 0,
    "port_rcv_switch_relay_errors": 0,
    "port_xmit_constraint_errors": 0,
    "port_xmit_data": 230442669431839,
    "port_xmit_discards": 0,
    "port_xmit_packets": 315487941081,
    "port_xmit_wait": 2489603687,
    "symbol_error": 0,
    "unicast_rcv_packets": 317548852473,
    "unicast_xmit_packets": 315487941081,
}
GROWING = ("port_rcv_data", "port_rcv_packets", "port_xmit_data", "port_xmit_packets", "unicast_rcv_packets", "unicast_xmit_packets")

HW_COUNTERS = {
    "duplicate_request": 0,
    "implied_nak_seq_err": 0,
    "lifespan": 12,
    "local_ack_timeout_err": 0,
    "out_of_buffer": 0,
    "out_of_sequence": 0,
    "packet_seq_err": 0,
    "req_cqe_error": 0,
    "req_cqe_flush_error": 0,
    "req_remote_access_errors": 0,
    "req_remote_invalid_request": 0,
    "resp_cqe_error": 0,
    "resp_cqe_flush_error": 0,
    "resp_local_length_error": 0,
    "resp_remote_access_errors": 0,
    "rnr_nak_retry_err": 0,
    "roce_adp_retrans": 3,
    "roce_adp_retrans_to": 0,
    "roce_slow_restart": 0,
    "roce_slow_restart_cnps": 0,
    "roce_slow_restart_trans": 0,
    "rx_atomic_requests": 0,
    "rx_dct_connect": 422237,
    "rx_icrc_encapsulated": 0,
    "rx_read_requests": 9187392,
    "rx_write_requests": 3809045607,
}
ROCE_CC_COUNTERS = {"np_cnp_sent": 18234, "np_ecn_marked_roce_packets": 18301, "rp_cnp_handled": 17950, "rp_cnp_ignored": 0}

CAP_MASK = {"InfiniBand": "0xa751e848", "Ethernet": "0x04010000"}


def guid_bytes(guid: str) -> list[int]:
    h = guid.replace(":", "")
    return [int(h[i : i + 2], 16) for i in range(0, 16, 2)]


def mac_of(hca: HcaSpec) -> str:
    """mlx5 derives the MAC from the node GUID: OUI + the low 3 bytes."""
    g = guid_bytes(hca.node_guid)
    return ":".join(f"{b:02x}" for b in g[:3] + g[5:])


def _groups(b: list[int]) -> str:
    return ":".join(f"{b[i]:02x}{b[i + 1]:02x}" for i in range(0, len(b), 2))


def gid_table(hca: HcaSpec) -> list[tuple[str, str | None, str | None]]:
    """[(gid, type, ndev)] for the used slots, index order."""
    if hca.link_layer == "InfiniBand":
        return [(f"fe80:0000:0000:0000:{hca.node_guid}", "IB/RoCE v1", None)]
    m = [int(x, 16) for x in mac_of(hca).split(":")]
    eui = [m[0] ^ 0x02, m[1], m[2], 0xFF, 0xFE, m[3], m[4], m[5]]
    link_local = "fe80:0000:0000:0000:" + _groups(eui)
    v4 = [int(x) for x in (hca.ipv4 or "0.0.0.0").split(".")]
    mapped = "0000:0000:0000:0000:0000:ffff:" + _groups(v4)
    nd = hca.netdev
    return [(link_local, "IB/RoCE v1", nd), (link_local, "RoCE v2", nd), (mapped, "IB/RoCE v1", nd), (mapped, "RoCE v2", nd)]


def port_counters(index: int) -> dict[str, int]:
    """PMA counters of the HCA at ``index``, varied so devices differ."""
    out = dict(PMA_COUNTERS)
    for k in GROWING:
        out[k] += index * 1_000_003_917
    out["port_xmit_wait"] += index * 7_919
    return out


def port_hw_counters(hca: HcaSpec) -> dict[str, int]:
    out = dict(HW_COUNTERS)
    if hca.link_layer == "Ethernet":
        out.update(ROCE_CC_COUNTERS)
    return out


def ib_dir(layout: dict[str, PciNode], hca: HcaSpec) -> str:
    return f"{layout[hca.bdf].rel}/infiniband/{hca.name}"


def port_dir(layout: dict[str, PciNode], hca: HcaSpec, port: int = 1) -> str:
    return f"{ib_dir(layout, hca)}/ports/{port}"


def tclass_file(layout: dict[str, PciNode], hca: HcaSpec, port: int = 1) -> str:
    """OFED mlx5_ib's traffic class override file of a port (canonical path)."""
    return f"{ib_dir(layout, hca)}/tc/{port}/traffic_class"


def write_port(root: Path, hca: HcaSpec, index: int, pdir: Path) -> None:
    ib = hca.link_layer == "InfiniBand"
    attrs = {
        "state": "4: ACTIVE",
        "phys_state": "5: LinkUp",
        "rate": hca.rate,
        "link_layer": hca.link_layer,
        "lid": f"0x{hca.lid:x}",
        "sm_lid": "0x1" if ib else "0x0",
        "sm_sl": 0,
        "lid_mask_count": 0,
        "cap_mask": CAP_MASK[hca.link_layer],
        "pkeys/0": "0xffff",
    }
    for name, value in attrs.items():
        write_attr(pdir / name, value)
    table = gid_table(hca)
    for i in range(GID_SLOTS):
        gid, gtype, ndev = table[i] if i < len(table) else (ZERO_GID, None, None)
        write_attr(pdir / "gids" / str(i), gid)
        if gtype is not None:
            write_attr(pdir / "gid_attrs/types" / str(i), gtype)
        if ndev is not None:
            write_attr(pdir / "gid_attrs/ndevs" / str(i), ndev)
    (pdir / "gid_attrs/types").mkdir(parents=True, exist_ok=True)
    (pdir / "gid_attrs/ndevs").mkdir(parents=True, exist_ok=True)
    for name, value in port_counters(index).items():
        write_attr(pdir / "counters" / name, value)
    for name, value in port_hw_counters(hca).items():
        write_attr(pdir / "hw_counters" / name, value)


def write_rdma(root: Path, profile: Profile, layout: dict[str, PciNode]) -> None:
    (root / "sys/class/infiniband").mkdir(parents=True, exist_ok=True)
    for index, hca in enumerate(profile.hcas):
        d = root / ib_dir(layout, hca)
        attrs = {
            "node_type": "1: CA",
            "node_guid": hca.node_guid,
            "sys_image_guid": hca.node_guid,
            "fw_ver": hca.fw_ver,
            "hca_type": hca.hca_type,
            "hw_rev": "0x0",
            "board_id": hca.board_id,
            "node_desc": f"{profile.hostname} {hca.name}",
        }
        for name, value in attrs.items():
            write_attr(d / name, value)
        symlink(d / "device", root / layout[hca.bdf].rel)
        symlink(d / "subsystem", root / "sys/class/infiniband")
        symlink(root / "sys/class/infiniband" / hca.name, d)
        write_port(root, hca, index, d / "ports/1")
        if profile.ofed_version:
            write_attr(root / tclass_file(layout, hca), "", newline=False)
