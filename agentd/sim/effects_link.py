"""Fault effects on links: IB/RoCE ports, netdevs, ECN and pause counters, NICs, PCIe links
and ACS (the rest of RoCE QoS: effects_qos).

Each fault has ``apply(ctx, target, value)``, ``restores(ctx, target, value)`` (canonical
paths clearing copies back from the fault-free tree) and optionally ``advancing`` (counter
files left advanced after clearing) and ``on_clear``. See fault_kinds for the table.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

from agentd.sim import aer, effects_kmsg
from agentd.sim.pci import PciNode, pci_device_paths
from agentd.sim.pcicfg import GEN_SPEED, SPEED_GEN, set_acs_ctrl, set_link_status
from agentd.sim.targets import Ctx, Restorable, Target
from agentd.sim.tree import remove_path, write_attr

DOWN_RATE = "40 Gb/sec (4X QDR)"  # what mlx5 reports on a port that is down (ibstat "Rate: 40")
LANE_GBPS = {"SDR": 2.5, "DDR": 5.0, "QDR": 10.0, "FDR": 14.0625, "EDR": 25.0, "HDR": 50.0, "NDR": 100.0, "XDR": 200.0}
_RATE_RE = re.compile(r"^([\d.]+) Gb/sec \((\d+)X ?(\w*)\)$")


def _need(ctx: Ctx, rel: str) -> str:
    if not ctx.path(rel).exists():
        raise ValueError(f"{rel} does not exist (removed by another fault?)")
    return rel


def _is_roce(t: Target) -> bool:
    return t.hca is not None and t.hca.link_layer == "Ethernet"


# -- port state ----------------------------------------------------------------


def port_down_apply(ctx: Ctx, t: Target, v: str) -> None:
    pd = _need(ctx, ctx.port_dir(t.the_hca))
    ctx.write(f"{pd}/state", "1: DOWN")
    ctx.write(f"{pd}/phys_state", "2: Polling" if v == "polling" else "3: Disabled")
    ctx.write(f"{pd}/rate", DOWN_RATE)
    ctx.add(f"{pd}/counters/link_downed", 1, cap=255)
    nd = ctx.netdev_dir(t.the_netdev)
    if ctx.path(nd).is_dir():
        ctx.write(f"{nd}/operstate", "down")
        ctx.write(f"{nd}/carrier", 0)
        ctx.write(f"{nd}/speed", -1)
        ctx.add(f"{nd}/carrier_changes", 1)
        ctx.add(f"{nd}/carrier_down_count", 1)
    if _is_roce(t):
        ctx.ethtool_add(t.the_netdev, {"link_down_events_phy": 1})


def port_down_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    pd, nd = ctx.port_dir(t.the_hca), ctx.netdev_dir(t.the_netdev)
    return [f"{pd}/state", f"{pd}/phys_state", f"{pd}/rate", f"{nd}/operstate", f"{nd}/carrier", f"{nd}/speed"]


def port_down_on_clear(ctx: Ctx, t: Target) -> None:
    nd = ctx.netdev_dir(t.the_netdev)
    if ctx.path(nd).is_dir():
        ctx.add(f"{nd}/carrier_changes", 1)
        ctx.add(f"{nd}/carrier_up_count", 1)


def link_counters_advancing(ctx: Ctx, t: Target, v: object) -> list[str]:
    nd = ctx.netdev_dir(t.the_netdev)
    out = [f"{ctx.port_dir(t.the_hca)}/counters/link_downed"] + [f"{nd}/{c}" for c in ("carrier_changes", "carrier_up_count", "carrier_down_count")]
    if _is_roce(t):
        out.append(f".agentd/ethtool/{t.netdev}")
    return out


def degraded_rate(rate: str, value: str) -> str:
    """New sysfs rate string: ``width`` halves the lanes, ``NX`` sets them, ``N`` sets Gb/s."""
    m = _RATE_RE.match(rate)
    if not m or m.group(3) not in LANE_GBPS:
        raise ValueError(f"cannot degrade rate {rate!r}")
    width, gen = int(m.group(2)), m.group(3)
    if value == "width":
        width = max(1, width // 2)
    elif value[-1] in "xX":
        width = int(value[:-1])
    else:
        per_lane = float(value) / width
        names = [g for g, lane in LANE_GBPS.items() if abs(lane - per_lane) < 0.01 or (g == "FDR" and abs(per_lane - 14) < 0.01)]
        if not names:
            raise ValueError(f"{value} Gb/s is not a speed a {width}X port can run at")
        gen = names[0]
    total = LANE_GBPS[gen] * width
    text = f"{total:g}" if gen != "FDR" else f"{int(total)}"
    return f"{text} Gb/sec ({width}X {gen})"


def rate_degraded_apply(ctx: Ctx, t: Target, v: str) -> None:
    pd = _need(ctx, ctx.port_dir(t.the_hca))
    rate = degraded_rate(t.hca.rate, v)  # type: ignore[union-attr]
    ctx.write(f"{pd}/rate", rate)
    nd = ctx.netdev_dir(t.the_netdev)
    if ctx.path(nd).is_dir():
        ctx.write(f"{nd}/speed", int(float(rate.split()[0]) * 1000))


def rate_degraded_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    return [f"{ctx.port_dir(t.the_hca)}/rate", f"{ctx.netdev_dir(t.the_netdev)}/speed"]


def flapping_apply(ctx: Ctx, t: Target, n: int) -> None:
    pd = _need(ctx, ctx.port_dir(t.the_hca))
    ctx.add(f"{pd}/counters/link_downed", n, cap=255)
    nd = ctx.netdev_dir(t.the_netdev)
    if ctx.path(nd).is_dir():
        ctx.add(f"{nd}/carrier_changes", 2 * n)
        ctx.add(f"{nd}/carrier_up_count", n)
        ctx.add(f"{nd}/carrier_down_count", n)
    if _is_roce(t):
        ctx.ethtool_add(t.the_netdev, {"link_down_events_phy": n})


def counter_reset_apply(ctx: Ctx, t: Target, v: object) -> None:
    pd = _need(ctx, ctx.port_dir(t.the_hca))
    for sub in ("counters", "hw_counters"):
        for f in sorted(ctx.path(f"{pd}/{sub}").iterdir()):
            if f.name != "lifespan":  # a setting (ms), not a counter
                write_attr(f, 0)


def counter_reset_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    pd = ctx.port_dir(t.the_hca)
    return [f"{pd}/counters", f"{pd}/hw_counters"]


SATURATED = {"port_xmit_wait": 2**32 - 1, "link_downed": 2**8 - 1, "symbol_error": 2**16 - 1}


def counter_saturated_apply(ctx: Ctx, t: Target, v: object) -> None:
    pd = _need(ctx, ctx.port_dir(t.the_hca))
    for name, value in SATURATED.items():
        ctx.write(f"{pd}/counters/{name}", value)


def counter_saturated_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    return [f"{ctx.port_dir(t.the_hca)}/counters/{name}" for name in SATURATED]


# -- netdev and RoCE QoS ----------------------------------------------------------


def mtu_default(ctx: Ctx, t: Target) -> int:
    current = int(ctx.read(f"{ctx.netdev_dir(t.the_netdev)}/mtu"))
    return 9000 if current == 1500 else 1500


def mtu_apply(ctx: Ctx, t: Target, mtu: int) -> None:
    ctx.write(_need(ctx, f"{ctx.netdev_dir(t.the_netdev)}/mtu"), mtu)


def mtu_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    return [f"{ctx.netdev_dir(t.the_netdev)}/mtu"]


def ecn_apply(ctx: Ctx, t: Target, prio: int) -> None:
    for f in ecn_restores(ctx, t, prio):
        ctx.write(_need(ctx, f), 0)


def ecn_restores(ctx: Ctx, t: Target, prio: object) -> list[str]:
    nd = ctx.netdev_dir(t.the_netdev)
    return [f"{nd}/ecn/roce_np/enable/{prio}", f"{nd}/ecn/roce_rp/enable/{prio}"]


def pause_storm_apply(ctx: Ctx, t: Target, n: int) -> None:
    _need(ctx, f".agentd/ethtool/{t.netdev}")
    p = ctx.profile.roce_priority
    ctx.ethtool_add(t.the_netdev, {f"rx_prio{p}_pause": n, f"rx_prio{p}_pause_duration": n // 10, f"rx_prio{p}_pause_transition": n // 2})


def ethtool_file(ctx: Ctx, t: Target, v: object) -> list[str]:
    return [f".agentd/ethtool/{t.netdev}"]


ETHTOOL_GARBAGE = b"\x7fELF\x02\x01\x01\x00 ethtool: bad command line argument(s)\n\xff\xfe\x00NIC statis\x00tics:\n     rx_prio3_pause: 1x2\n"


def ethtool_failure_apply(ctx: Ctx, t: Target, v: str) -> None:
    p = ctx.path(f".agentd/ethtool/{t.netdev}")
    if v == "missing":
        remove_path(p)
    else:
        p.write_bytes(ETHTOOL_GARBAGE)


# -- devices ------------------------------------------------------------------------


def nic_paths(ctx: Ctx, t: Target, v: object) -> list[str]:
    nd = t.netdev
    return pci_device_paths(ctx.layout[t.bdf]) + [  # type: ignore[index]
        f"sys/class/infiniband/{t.hca.name}",  # type: ignore[union-attr]
        f"sys/class/net/{nd}",
        f".agentd/ethtool/{nd}",
        f".agentd/dcb/{nd}",
    ]


def remove_paths_apply(paths_of: Callable[[Ctx, Target, object], Sequence[Restorable]]) -> Callable[[Ctx, Target, object], None]:
    def apply(ctx: Ctx, t: Target, v: object) -> None:
        for rel in paths_of(ctx, t, v):
            if not isinstance(rel, str):
                continue
            p = ctx.path(rel)
            if p.is_symlink() or p.exists():
                remove_path(p)

    return apply


def _link_ends(ctx: Ctx, bdf: str) -> list[PciNode]:
    n = ctx.layout[bdf]
    if n.port_type in ("endpoint", "upstream"):
        other = ctx.layout[n.parent] if n.parent else None
    else:
        other = next((c for c in ctx.layout.values() if c.parent == bdf), None)
    return [n] + ([other] if other else [])


def downtrain_default(ctx: Ctx, t: Target) -> str:
    return "width" if t.bdf in ctx.profile.gpu_bdfs else "speed"


def pcie_downtrained_apply(ctx: Ctx, t: Target, v: str) -> None:
    nodes = _link_ends(ctx, t.the_bdf)
    speed, width = nodes[0].cur_speed, nodes[0].cur_width
    if v in ("speed", "both"):
        speed = GEN_SPEED[max(1, SPEED_GEN[speed] - 1)]
    if v in ("width", "both"):
        width = max(1, width // 2)
    for n in nodes:
        _need(ctx, n.rel)
        ctx.write(f"{n.rel}/current_link_speed", speed)
        ctx.write(f"{n.rel}/current_link_width", width)
        cfg = ctx.path(f"{n.rel}/config")
        cfg.write_bytes(set_link_status(cfg.read_bytes(), speed, width))


def pcie_downtrained_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    return [f"{n.rel}/{f}" for n in _link_ends(ctx, t.the_bdf) for f in ("current_link_speed", "current_link_width", "config")]


def _bridge_above(ctx: Ctx, t: Target) -> PciNode:
    parent = ctx.layout[t.bdf].parent  # type: ignore[index]
    if parent is None:
        raise ValueError(f"{t.bdf} sits directly under a host bridge; no PCI bridge above it")
    return ctx.layout[parent]


def acs_apply(ctx: Ctx, t: Target, ctrl: int) -> None:
    cfg = ctx.path(_need(ctx, f"{_bridge_above(ctx, t).rel}/config"))
    cfg.write_bytes(set_acs_ctrl(cfg.read_bytes(), ctrl))


def acs_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    return [f"{_bridge_above(ctx, t).rel}/config"]


# -- PCIe error counters (AER, NVML replays) -------------------------------------------
# The error type each fault counts: a completion timeout (the common non-fatal one), a
# data link protocol error (fatal), a bad TLP (corrected by a replay).
AER_TYPES = {"nonfatal": "CmpltTO", "fatal": "DLP", "correctable": "BadTLP"}


def _aer_dir(ctx: Ctx, t: Target) -> str:
    return _need(ctx, ctx.layout[t.bdf].rel)  # type: ignore[index]


def aer_uncorrectable_apply(ctx: Ctx, t: Target, severity: str) -> None:
    aer.advance(ctx.path(_aer_dir(ctx, t)), severity, AER_TYPES[severity], 1)
    effects_kmsg.aer_received(ctx, t, severity)


def aer_correctable_apply(ctx: Ctx, t: Target, n: int) -> None:
    aer.advance(ctx.path(_aer_dir(ctx, t)), "correctable", AER_TYPES["correctable"], n)
    effects_kmsg.aer_received(ctx, t, "correctable", n)


def aer_advancing(severity: str | None, *also: str) -> Callable[[Ctx, Target, object], list[str]]:
    """The AER file a fault advances (``severity`` None: the one VALUE names), and ``also``."""
    def paths(ctx: Ctx, t: Target, v: object) -> list[str]:
        return [f"{ctx.layout[t.bdf].rel}/{aer.FILES[str(severity or v)][0]}", *also]  # type: ignore[index]

    return paths
