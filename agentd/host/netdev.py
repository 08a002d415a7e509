"""Network interfaces from ``sys/class/net/*``.

Each entry is, on a real kernel, a symlink into ``devices/pci.../<bdf>/net/<if>`` (a PCI
NIC) or ``devices/virtual/net/<if>`` (bond, vlan, veth, bridge, lo). Plain files in the
directory (``bonding_masters``) and entries that are not directories are skipped.

PFC and ``ethtool -S`` statistics are filled by other readers; this one leaves them None.
"""

from __future__ import annotations

from pathlib import Path

from agentd.base.ids import is_bdf, natural_key
from agentd.host.fs import ReadContext, parse_decimal
from agentd.model import Netdev, RoceEcn

CLASS_NET = "sys/class/net"
U32_MAX = 0xFFFFFFFF  # an MTU as the kernel prints it (dev->mtu: unsigned int)
# A netdev's attributes that change when its link does (carrier_changes also counts a flap
# between two reads): what the daemon's quick check re-reads every fast cycle
# (agentd.collection.collector). MTU, addresses, bonds and ECN wait for the whole check
# (every medium interval, and every collection an event triggers).
LINK_SIGNALS = frozenset(("carrier", "operstate", "speed", "carrier_changes"))


def bdf_of_class_path(real: Path | None, subsystem: str) -> str | None:
    """BDF of ``.../<bdf>/<subsystem>/<name>`` (a resolved class entry), else None."""
    if real is None:
        return None
    parent = real.parent
    if parent.name == subsystem and is_bdf(parent.parent.name):
        return parent.parent.name
    return None


def link_bdf(ctx: ReadContext, link: str) -> str | None:
    """Basename of a ``device`` symlink when it is BDF-shaped (no stat, one readlink)."""
    name = ctx.readlink_name(link)
    return name if is_bdf(name) else None


def read_netdevs(ctx: ReadContext, *, ecn: bool = True) -> tuple[Netdev, ...]:
    out: list[Netdev] = []
    for name in ctx.listdir(CLASS_NET, required=True):
        if ctx.skip_ignored("netdev", name, f"{CLASS_NET}/{name}"):
            continue  # collect.ignore: nothing of it is opened
        try:
            nd = _read_one(ctx, name, ecn=ecn)
        except (OSError, ValueError) as e:  # never let one interface hide the others
            ctx.error(f"{CLASS_NET}/{name}", "unreadable", f"{type(e).__name__}: {e}")
            continue
        if nd is not None:
            out.append(nd)
    out.sort(key=lambda n: natural_key(n.name))
    return tuple(out)


def _read_one(ctx: ReadContext, name: str, *, ecn: bool) -> Netdev | None:
    entry = f"{CLASS_NET}/{name}"
    real = ctx.resolve(entry)  # records an error if the link leaves the host root
    if real is None or not real.is_dir():
        return None

    def num(attr: str, *, required: bool = False, base: int = 10) -> int | None:
        return ctx.integer(f"{entry}/{attr}", required=required, base=base)

    carrier = num("carrier")  # EINVAL while the link is administratively down -> None
    mtu = num("mtu", required=True)
    if mtu is not None and not 0 <= mtu <= U32_MAX:  # the kernel prints dev->mtu, an unsigned int
        ctx.error(f"{entry}/mtu", "unparsable", f"expected an MTU (0-{U32_MAX}), got {mtu}")
        mtu = None
    speed = num("speed")  # -1 or EINVAL when unknown / down
    device_link = ctx.readlink_name(f"{entry}/device")
    pci = link_bdf(ctx, f"{entry}/device") or bdf_of_class_path(real, "net")
    is_virtual = (device_link is None and pci is None) or ctx.host.rel(real).startswith("sys/devices/virtual/")
    slaves = ctx.text(f"{entry}/bonding/slaves")
    return Netdev(
        name=name,
        ifindex=num("ifindex"),
        type=num("type", required=True),
        mtu=mtu,
        operstate=ctx.text(f"{entry}/operstate", required=True) or None,
        carrier=None if carrier is None else carrier != 0,
        carrier_changes=num("carrier_changes"),
        carrier_up_count=num("carrier_up_count"),
        carrier_down_count=num("carrier_down_count"),
        speed_mbps=speed if speed is not None and speed >= 0 else None,
        address=ctx.text(f"{entry}/address") or None,
        pci_bus_id=pci,
        is_virtual=is_virtual,
        master=ctx.readlink_name(f"{entry}/master"),
        bond_slaves=tuple(slaves.split()) if slaves else (),
        # mlx5 answers the ECN switches with a firmware command (QUERY_CONG_STATUS): not
        # asked of a function agentd backed off from (agentd.host.gate).
        ecn=_read_ecn(ctx, f"{entry}/ecn") if ecn and (is_virtual or ctx.firmware_ok(pci)) else None,
    )


def _read_ecn(ctx: ReadContext, ecn_dir: str) -> RoceEcn | None:
    """mlx5 ``ecn/roce_{np,rp}/enable/<prio>``; None when the driver has no ecn dir."""
    if not ctx.listdir(ecn_dir):
        return None
    return RoceEcn(
        np=_read_enable(ctx, f"{ecn_dir}/roce_np/enable"),
        rp=_read_enable(ctx, f"{ecn_dir}/roce_rp/enable"),
    )


def _read_enable(ctx: ReadContext, enable_dir: str) -> dict[int, bool]:
    out: dict[int, bool] = {}
    for name in ctx.listdir(enable_dir):
        prio = parse_decimal(name, max_digits=1)
        if prio is None or prio > 7 or name != str(prio):
            continue  # priorities are 0-7; anything else is not the kernel's
        path = f"{enable_dir}/{name}"
        v = ctx.integer(path)
        if v is None:
            continue
        if v not in (0, 1):
            ctx.error(path, "unparsable", f"expected 0 or 1, got {v}")
            continue
        out[prio] = v == 1
    return dict(sorted(out.items()))
