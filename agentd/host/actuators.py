"""The live node's actuators: each knob through the kernel's own interface (DESIGN.md 5).

==========  ============================================================  ================
knob        interface                                                      the tool's form
==========  ============================================================  ================
peermem     the node's modprobe (enforce.modprobe)                         modprobe
mtu         rtnetlink RTM_NEWLINK IFLA_MTU (agentd.host.link_set)          ip link set
pfc         DCB netlink DCB_ATTR_IEEE_PFC (agentd.host.dcb_write)          dcb pfc set
trust       DCB netlink APP trust table, or DSCP APP entries (mlx5)        dcb apptrust / app
dscp2prio   DCB netlink APP table                                          dcb app replace
ecn         sysfs ``class/net/<if>/ecn/roce_{np,rp}/enable/<prio>``        echo > (mlx5)
tclass      sysfs ``class/infiniband/<dev>/tc/<port>/traffic_class``       echo > (MLNX_OFED)
pause       ethtool netlink ETHTOOL_MSG_PAUSE_SET (agentd.host.pause)      ethtool -A
==========  ============================================================  ================

Sysfs writes go through the host root (a container's ``/host/sys`` is the node's), confined
as reads are; netlink talks to the network namespace agentd runs in, which must be the
host's (hostNetwork). Each change is bounded by ``timeout_s`` and answers an Outcome; the
caller decides what to change and checks the result by reading it back.
"""

from __future__ import annotations

import socket
from pathlib import Path

from agentd.base.actuation import Outcome, Setting, done, failed, renamed
from agentd.host import dcb_write, link_set, pause
from agentd.host.fs import HostRoot, ReadContext, ReadFailure, write_attribute
from agentd.host.modprobe import modprobe

PEERMEM_MODULE = "nvidia_peermem"


class LiveActuators:
    def __init__(self, host: HostRoot, modprobe_path: Path | str):
        self.host = host
        self.modprobe_path = modprobe_path

    def _write(self, rel: str, text: str) -> Outcome:
        """``echo TEXT > /<rel>`` under the host root."""
        ctx = ReadContext(self.host, "enforce")
        try:
            write_attribute(ctx, rel, (text + "\n").encode())
        except ReadFailure as e:
            return failed(f"/{rel}: {e.detail}")
        except OSError as e:
            return failed(f"echo {text} > /{rel}: {e.strerror or e}", e.errno)
        finally:
            ctx.close()
        return done(f"echo {text} > /{rel}")

    def apply(self, s: Setting, timeout_s: float) -> Outcome:
        v, nd = s.value, s.netdev or ""
        if s.netdev is not None and s.ifindex is not None:
            try:
                index: int | None = socket.if_nametoindex(nd)
            except (OSError, ValueError):  # no such device; a name no device can have (a NUL: a damaged journal's)
                index = None
            refused = renamed(s, index)
            if refused is not None:
                return refused
        if s.knob == "peermem":
            return modprobe(self.modprobe_path, PEERMEM_MODULE, remove=not v, timeout_s=timeout_s)
        if s.knob == "mtu" and isinstance(v, int):
            return link_set.set_mtu(nd, v, timeout_s)
        if s.knob == "pfc" and isinstance(v, tuple):
            return dcb_write.set_pfc(nd, [int(p) for p in v], timeout_s, only=s.param)
        if s.knob == "trust" and isinstance(v, str):
            return dcb_write.set_trust(nd, v, apptrust=s.apptrust, entries=s.entries, timeout_s=timeout_s)
        if s.knob == "dscp2prio" and s.param is not None and (v is None or isinstance(v, int)):
            old = next((p for d, p in s.entries if d == s.param), None)
            return dcb_write.set_dscp_prio(nd, s.param, v, old, timeout_s)
        if s.knob == "ecn" and isinstance(v, tuple) and s.param is not None:
            for side, on in zip(("roce_np", "roce_rp"), v, strict=True):
                out = self._write(f"sys/class/net/{nd}/ecn/{side}/enable/{s.param}", "1" if on else "0")
                if not out.ok:
                    return out
            return done(f"ECN np {'on' if v[0] else 'off'}, rp {'on' if v[1] else 'off'} on {nd} priority {s.param}")
        if s.knob == "tclass" and s.hca and s.port is not None and (v is None or isinstance(v, int)):
            return self._write(f"sys/class/infiniband/{s.hca}/tc/{s.port}/traffic_class", "-1" if v is None else str(v))
        if s.knob == "pause" and isinstance(v, tuple):
            return pause.set_pause(nd, bool(v[0]), bool(v[1]), timeout_s)
        return failed(f"no actuator for {s.knob} = {v!r}")
