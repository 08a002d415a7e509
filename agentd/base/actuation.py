"""What an actuator is asked to do and what it answers: shared by the node's kernel
interfaces (agentd.host, live) and the simulated node (agentd.sim.actuate), so both
layers speak the same typed language without importing each other. Pure data.

A ``Setting`` names one knob of one thing (a netdev, an RDMA port, the node) and the
value to give it, in the knob's own value type:

=========  ==========================================  =====================================
knob       value                                       thing
=========  ==========================================  =====================================
peermem    bool: nvidia_peermem loaded                 the node
mtu        int                                         ``netdev``
pfc        tuple of the priorities with PFC on         ``netdev``
ecn        (np, rp) enabled on priority ``param``      ``netdev``
trust      "dscp" | "pcp"                              ``netdev`` (``entries``: see below)
dscp2prio  the priority DSCP ``param`` maps to         ``netdev`` (None: no entry)
tclass     the global traffic class (None: cleared)    ``hca`` port ``port``
pause      (rx, tx) global pause                       ``netdev``
=========  ==========================================  =====================================

``entries`` ((dscp, priority) pairs) say how a trust change is made on a device without
an APP trust table (mlx5): the DSCP APP entries to add for "dscp" (the first one switches
the port to DSCP trust), or to delete for "pcp" (deleting the last switches it back).
``apptrust``: the device has a trust table (DCB_ATTR_DCB_APP_TRUST_TABLE) to set instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

Value = bool | int | str | None | tuple[int, ...] | tuple[bool, bool]


@dataclass(frozen=True)
class Setting:
    knob: str
    target: str  # "ens1np0", "mlx5_0:1", "node": the subject's text
    value: Value
    netdev: str | None = None
    hca: str | None = None
    port: int | None = None
    param: int | None = None  # ecn: the priority; dscp2prio: the DSCP
    entries: tuple[tuple[int, int], ...] = ()
    apptrust: bool = False
    # the netdev's ifindex when the plan read it: a name udev gave to another device since
    # (a rename between the read and the change) is refused, not changed (None: unchecked)
    ifindex: int | None = None


@dataclass(frozen=True)
class Outcome:
    """What one change did: ``ok`` (the interface took it), else the interface's own
    reason (``detail``: "Operation not supported", "mtu greater than device maximum",
    modprobe's stderr) and its errno when it gave one."""

    ok: bool
    detail: str = ""
    errno: int | None = None


def done(detail: str = "") -> Outcome:
    return Outcome(True, detail)


def failed(detail: str, err: int | None = None) -> Outcome:
    return Outcome(False, " ".join(detail.split()) or "failed", err)


def renamed(s: Setting, ifindex: int | None) -> Outcome | None:
    """The refusal when ``s.netdev`` is now another device than the one read (its ifindex
    ``ifindex`` now, None: unknown), else None."""
    if s.ifindex is None or s.netdev is None or ifindex == s.ifindex:
        return None
    now = "gone" if ifindex is None else f"ifindex {ifindex}"
    return failed(f"{s.netdev} is not the device that was read (ifindex {s.ifindex}, now {now}): renamed since; not changed")


class Actuators(Protocol):
    """One change through the node's own interface; never raises, never decides."""

    def apply(self, setting: Setting, timeout_s: float) -> Outcome: ...


# What the trust knob asks of the DCB app-trust table, by trust (iproute2's `dcb apptrust set
# dev X order ...` names): "dscp" trusts an IP packet's DSCP, else the VLAN tag's PCP; "pcp"
# the PCP alone. The writer (agentd.host.dcb_write) and the plan's command text
# (agentd.judging.enforce) both take it from here.
APPTRUST_ORDER: dict[str, tuple[str, ...]] = {"dscp": ("dscp", "pcp"), "pcp": ("pcp",)}
