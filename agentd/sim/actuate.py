"""The simulated node's kernel, as far as agentd changes it: what a change through the real
interface does to the node, done to the simulated node's files and recorded answers, so
plan -> apply -> verify -> rollback runs whole in tests and in the demo.

==========  ==============================================================================
knob        what changes (and what the real kernel would refuse, refused the same way)
==========  ==============================================================================
peermem     ``sys/module/nvidia_peermem/`` (version, initstate, refcnt) and its line in
            ``proc/modules``; unload removes them. Without the nvidia module: modprobe's
            "Unknown symbol in module" error
mtu         the netdev's ``mtu`` file; above mlx5's maximum (9978 on Ethernet, 4092 on a
            datagram-mode IPoIB netdev) or below 68: EINVAL "mtu greater than device maximum"
pfc         the PFC row of the ``mlnx_qos`` stand-in (``.agentd/dcb/<if>``)
trust       its trust state; DSCP trust brings the map (mlx5's default, with the entries
            added), PCP trust drops it
dscp2prio   one DSCP's priority in its map (listed first in its row, as a changed entry);
            no entry: priority 0, as mlx5 resets a deleted one
ecn         ``ecn/roce_{np,rp}/enable/<prio>``
tclass      ``tc/<port>/traffic_class``: "Global tclass=N", or empty when cleared
pause       the ``ethtool -a`` stand-in (``.agentd/pause/<if>``); autoneg kept
==========  ==============================================================================

A netdev without the stand-in answers EOPNOTSUPP, as a device without DCB or pause does.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

from agentd.base import recorded
from agentd.base.actuation import Outcome, Setting, done, failed, renamed
from agentd.sim.net import Qos, parse_mlnx_qos
from agentd.sim.node import modules_text
from agentd.sim.pci import pci_layout
from agentd.sim.pristine import MARKER, get_profile
from agentd.sim.rdma import tclass_file
from agentd.sim.targets import Ctx
from agentd.sim.tree import remove_path, write_attr

ETH_MIN_MTU = 68
MLX5_MAX_MTU = 9978
IPOIB_DATAGRAM_MAX_MTU = 4092
PEERMEM = "sys/module/nvidia_peermem"
NVIDIA = "sys/module/nvidia"
MODULES = "proc/modules"
DRIVER_VERSION = "proc/driver/nvidia/version"


def _ctx(root: Path) -> Ctx:
    profile = get_profile(json.loads((root / MARKER).read_text())["profile"])
    return Ctx(root, profile, pci_layout(profile))


def _unsupported(what: str) -> Outcome:
    return failed(f"{what}: Operation not supported", errno.EOPNOTSUPP)


class SimActuators:
    """Changes on the simulated node rooted at ``root`` (a tree of agentd.sim.build)."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    def apply(self, s: Setting, timeout_s: float) -> Outcome:
        try:
            ctx = _ctx(self.root)
        except (OSError, ValueError, KeyError) as e:
            return failed(f"not a simulated node: {e}")
        v, nd = s.value, s.netdev or ""
        try:
            if s.netdev is not None and s.ifindex is not None:
                f = ctx.path(f"{ctx.netdev_dir(nd)}/ifindex") if ctx.hca_of_netdev(nd) or nd == ctx.profile.boot_nic.netdev else None
                text = f.read_text().strip() if f is not None and f.is_file() else ""
                refused = renamed(s, int(text) if text.isdigit() else None)
                if refused is not None:
                    return refused
            if s.knob == "peermem":
                return self._peermem(ctx, bool(v))
            if s.knob == "mtu" and isinstance(v, int):
                return self._mtu(ctx, nd, v)
            if s.knob in ("pfc", "trust", "dscp2prio"):
                return self._qos(ctx, s)
            if s.knob == "ecn" and isinstance(v, tuple) and s.param is not None:
                d = ctx.netdev_dir(nd)
                for side, on in zip(("roce_np", "roce_rp"), v, strict=True):
                    p = ctx.path(f"{d}/ecn/{side}/enable/{s.param}")
                    if not p.is_file():
                        return failed(f"/{d}/ecn/{side}/enable/{s.param}: No such file or directory", errno.ENOENT)
                    write_attr(p, 1 if on else 0)
                return done(f"ECN np {'on' if v[0] else 'off'}, rp {'on' if v[1] else 'off'} on {nd} priority {s.param}")
            if s.knob == "tclass" and s.hca and s.port is not None:
                hca = next((h for h in ctx.profile.hcas if h.name == s.hca), None)
                rel = tclass_file(ctx.layout, hca, s.port) if hca is not None else ""
                if not rel or not ctx.path(rel).is_file():
                    return failed(f"no traffic_class file for {s.hca} port {s.port}", errno.ENOENT)
                write_attr(ctx.path(rel), "" if v is None else f"Global tclass={v}")
                return done(f"echo {'-1' if v is None else v} > /{rel}")
            if s.knob == "pause" and isinstance(v, tuple):
                p = ctx.path(f"{recorded.DIR}/{recorded.PAUSE}/{nd}")
                if not p.is_file():
                    return _unsupported(f"ETHTOOL_MSG_PAUSE_SET {nd}")
                autoneg = any(line.split() == ["Autonegotiate:", "on"] for line in p.read_text().splitlines())
                write_attr(p, recorded.format_ethtool_a(nd, autoneg, bool(v[0]), bool(v[1])), newline=False)
                return done(f"ETHTOOL_MSG_PAUSE_SET {nd} rx {'on' if v[0] else 'off'} tx {'on' if v[1] else 'off'}")
        except (OSError, ValueError) as e:
            return failed(f"{s.knob} of {s.target}: {e}")
        return failed(f"no simulated actuator for {s.knob} = {v!r}")

    # -- modules ------------------------------------------------------------------
    def _peermem(self, ctx: Ctx, load: bool) -> Outcome:
        open_module = "Open Kernel Module" in (ctx.path(DRIVER_VERSION).read_text() if ctx.path(DRIVER_VERSION).is_file() else "")
        if load:
            if not ctx.path(NVIDIA).is_dir():
                return failed("modprobe: ERROR: could not insert 'nvidia_peermem': Unknown symbol in module, or unknown parameter (see dmesg)")
            d = ctx.path(PEERMEM)
            write_attr(d / "initstate", "live")
            write_attr(d / "refcnt", 0)
            write_attr(d / "version", ctx.profile.driver_version)
        else:
            remove_path(ctx.path(PEERMEM))
        ctx.path(MODULES).write_text(modules_text(load, open_module))
        return done(f"modprobe {'' if load else '-r '}nvidia_peermem")

    # -- netdevs --------------------------------------------------------------------
    def _mtu(self, ctx: Ctx, nd: str, mtu: int) -> Outcome:
        d = ctx.netdev_dir(nd)
        p = ctx.path(f"{d}/mtu")
        if not p.is_file():
            return failed(f"no netdev {nd}", errno.ENODEV)
        ib = (ctx.path(f"{d}/type").read_text().strip() == "32") if ctx.path(f"{d}/type").is_file() else False
        top = IPOIB_DATAGRAM_MAX_MTU if ib else MLX5_MAX_MTU
        if not ETH_MIN_MTU <= mtu <= top:
            why = "mtu greater than device maximum" if mtu > top else "mtu less than device minimum"
            return failed(f"RTM_NEWLINK {nd} IFLA_MTU {mtu}: Invalid argument: {why}", errno.EINVAL)
        write_attr(p, mtu)
        return done(f"RTM_NEWLINK {nd} IFLA_MTU {mtu}")

    def _qos(self, ctx: Ctx, s: Setting) -> Outcome:
        nd = s.netdev or ""
        p = ctx.path(f"{recorded.DIR}/{recorded.DCB}/{nd}")
        if not p.is_file():
            return _unsupported(f"DCB {nd}")
        q = parse_mlnx_qos(p.read_text())
        v = s.value
        if s.knob == "pfc" and isinstance(v, tuple):
            want = {int(x) for x in v}
            if s.param is not None:  # priority ``param`` alone, the others as they are now (dcb pfc set ... prio-pfc P:on)
                want = ({int(x) for x in q.pfc} - {s.param}) | ({s.param} if s.param in want else set())
            new = Qos(tuple(sorted(want)), q.trust, q.dscp2prio)
        elif s.knob == "trust" and v == "pcp":
            new = Qos(q.pfc, "pcp", None)
        elif s.knob == "trust" and v == "dscp":
            table = dict(q.dscp2prio) if q.trust == "dscp" and q.dscp2prio else recorded.default_dscp2prio()
            new = Qos(q.pfc, "dscp", _moved(table, s.entries))
        elif s.knob == "dscp2prio" and s.param is not None and (v is None or isinstance(v, int)):
            table = dict(q.dscp2prio) if q.trust == "dscp" and q.dscp2prio else recorded.default_dscp2prio()
            new = Qos(q.pfc, "dscp", _moved(table, ((s.param, 0 if v is None else int(v)),)))
        else:
            return failed(f"no simulated actuator for {s.knob} = {v!r}")
        write_attr(p, new.format(), newline=False)
        return done(f"DCB {nd} {s.knob}")


def _moved(table: dict[int, int], entries: tuple[tuple[int, int], ...]) -> dict[int, int]:
    """``table`` with each (dscp, priority) of ``entries`` set, listed first (mlnx_qos shows
    a changed entry first in its priority's row)."""
    moved = {d: p for d, p in entries}
    return {**moved, **{d: p for d, p in table.items() if d not in moved}}
