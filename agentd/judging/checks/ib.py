"""IB/RoCE port state, rate, width, port count and flapping (counters: ib_counters.py).

Flapping counts a port's downs over ``thresholds.flap_window_s`` three ways, which see the
same events and are never added: down->up cycles in the history's port states,
``link_downed`` increments, and for a RoCE port its netdev's carrier losses (the kernel's
``carrier_down_count``), which catch a flap between two polls.

Compute ports (roles.compute) are judged strictly. Other ports (storage, management) are
judged milder: a problem is at most a warning, and a port that is not ACTIVE is only a
warning when it was seen ACTIVE before (in the baseline or the history); otherwise it is
reported with severity ok (an unused second port of a storage card is not a fault).

A port whose state cannot be read (an empty, unreadable or unparsable ``state`` file) is
``ib.port.unreadable``: agentd cannot vouch for it, so it is left out of NCCL_IB_HCA. One
failed read is a warning (sysfs reads can miss once, e.g. during a driver event) and the
port does not yet count against ``expect.hca_ports``; when the previous collection could
not read it either, it is judged as a port that is not ACTIVE: critical for compute ports,
and missing from the count.

Expectations: rate and width from config (``expect.rate_gbps``/``expect.width``, compute
ports only), else inferred as the best value among the ACTIVE ports of the same role,
HCA model and link layer.

Evidence before a critical (NVSentinel#1361, #1462): a compute port that is not ACTIVE
and was never seen ACTIVE (not in the baseline, not in the history) is critical only when
a peer, a compute port of the same HCA model and link layer, is ACTIVE: an unprovisioned
port on a shape whose other ports are also down is not a node fault on that evidence, and
is a warning that says so (``expect.hca_ports`` still counts it).

A port of an SR-IOV virtual function is never a node fault: its state follows what the
subnet manager gives the VF (INIT until it assigns a vGUID) and the guest that uses it;
it is reported with severity ok. A port whose link reads agentd backed off from
(agentd.host.gate) and that has no netdev to take its state from is not judged.
"""

from __future__ import annotations

from typing import Iterable

from agentd.config import Expectations
from agentd.judging.checks.common import CheckInput, changes, earlier, fmt
from agentd.judging.findings import NODE, finding, port_subject
from agentd.judging.roles import HcaRoles
from agentd.model import Finding, Hca, HistoryEntry, IbPort, NodeSnapshot, Severity

_HINT_ETH_DOWN = "check the cable, transceiver and switch port; `ip link show {nd}` and `ethtool {nd}` show the link"
_HINT_PHYS = {
    "polling": "no link partner answers: reseat or replace the cable/transceiver and check the switch port (`mlxlink -d {hca} -p {port}`)",
    "disabled": "the port is disabled: enable it (`ibportstate <lid> {port} enable`, or on the switch) and find out who disabled it",
    "sleep": "the port is asleep: check the switch port and `mlxlink -d {hca} -p {port}`",
    "linkerrorrecovery": "the link is stuck in error recovery: reseat or replace the cable/transceiver",
}
_HINT_STATE = {
    "INIT": "the physical link is up but no subnet manager activated the port: check that the SM (opensm/UFM) sees this port",
    "ARMED": "the subnet manager has not finished activating the port: check the SM (opensm/UFM) and its logs",
}
_HINT_DOWN = "check the cable, transceiver and switch port (`ibstat {hca} {port}`, `mlxlink -d {hca} -p {port}`)"
_HINT_NETDEV = ("the port's state is its netdev's ({nd}: operstate and carrier; {hca}'s own port state does not tell): "
                "`ip link show {nd}`; check the adapter's attachment (cloud console) or cable and switch port")


def _norm(text: str | None) -> str:
    return "".join((text or "").split()).lower()


# What to do for the link-down reason an Ethernet PHY reports (ethtool netlink
# ETHTOOL_A_LINKSTATE_EXT_STATE; agentd.host.ethtool_nl names them)
_HINT_REASON = {
    "no_cable": "no cable or module detected: plug in (or reseat) the cable/transceiver of `{nd}`",
    "cable_issue": "the cable is not supported or failed its test: replace it with a supported one (`ethtool -m {nd}`)",
    "eeprom_issue": "the module's EEPROM cannot be read: reseat or replace the transceiver (`ethtool -m {nd}`)",
    "bad_signal_integrity": "too many physical errors to hold the link: clean or replace the fibre/cable and the modules at both ends",
    "link_training_failure": "link training with the peer failed: check the switch port's speed/FEC settings and the cable",
    "link_logical_mismatch": "PCS/FEC lock failed: check that both ends use the same FEC mode and speed (`ethtool --show-fec {nd}`)",
    "autoneg": "auto-negotiation failed: check the switch port's speed and auto-negotiation settings",
    "overheat": "the module or PHY overheated: check airflow and the module's temperature (`ethtool -m {nd}`)",
    "power_budget_exceeded": "the module needs more power than the cage allows: use a module of a supported power class",
    "module": "the module is not ready (CMIS state machine): reseat it, check its firmware",
    "calibration_failure": "the PHY failed to calibrate: reset the port; replace the module if it repeats",
}


def _reason(inp: CheckInput, p: IbPort) -> str | None:
    """The PHY's link-down reason for an Ethernet port (``no_cable``, ``cable_issue/
    unsupported_cable``), when the driver reports one."""
    nd = inp.snapshot.netdev(p.netdev) if p.netdev else None
    if nd is None or nd.phy is None or nd.phy.ext_state is None:
        return None
    return nd.phy.ext_state + (f"/{nd.phy.ext_substate}" if nd.phy.ext_substate else "")


def _down_hint(h: Hca, p: IbPort, reason: str | None = None) -> str:
    if p.state_from is not None:
        return _HINT_NETDEV.format(nd=p.state_from, hca=h.name)
    if p.link_layer == "Ethernet":
        hint = _HINT_REASON.get((reason or "").partition("/")[0], _HINT_ETH_DOWN)
        return hint.format(nd=p.netdev or "<netdev>")
    hint = _HINT_PHYS.get(_norm(p.phys_state)) or _HINT_STATE.get(p.state or "") or _HINT_DOWN
    return hint.format(hca=h.name, port=p.port)


def _role(roles: HcaRoles, name: str) -> str:
    return "compute" if roles.is_compute(name) else "non-compute"


def _group(roles: HcaRoles, h: Hca, p: IbPort) -> tuple[bool, str, str]:
    return (roles.is_compute(h.name), h.hca_type or "?", p.link_layer or "?")


def _inferred(snap: NodeSnapshot, roles: HcaRoles) -> dict[tuple[bool, str, str], tuple[float | None, int | None, int]]:
    """(compute, model, link layer) -> (best rate, best width, ACTIVE ports seen)."""
    out: dict[tuple[bool, str, str], tuple[float | None, int | None, int]] = {}
    for h in snap.hcas:
        for p in h.ports:
            if not p.is_active:
                continue
            key = _group(roles, h, p)
            rate, width, n = out.get(key, (None, None, 0))
            if p.rate_gbps is not None and p.rate_gbps > 0:
                rate = max(rate or 0.0, p.rate_gbps)
            if p.width is not None:
                width = max(width or 0, p.width)
            out[key] = (rate, width, n + 1)
    return out


def expected_port_values(snap: NodeSnapshot, roles: HcaRoles, expect: Expectations) -> dict[tuple[str, int], tuple[float | None, int | None]]:
    """(hca, port) -> (expected rate Gb/s, expected width) as the port checks judge them:
    config values for compute ports, else the best ACTIVE value of the port's (role,
    model, link layer) group. The daemon exports these as ``..._expected`` gauges."""
    inferred = _inferred(snap, roles)
    out: dict[tuple[str, int], tuple[float | None, int | None]] = {}
    for h in snap.hcas:
        compute = roles.is_compute(h.name)
        for p in h.ports:
            rate, width, _ = inferred.get(_group(roles, h, p), (None, None, 0))
            if compute and expect.rate_gbps:
                rate = expect.rate_gbps
            if compute and expect.width:
                width = expect.width
            out[(h.name, p.port)] = (rate, width)
    return out


def _seen_active(inp: CheckInput, hca: str, port: int) -> bool:
    if inp.baseline is not None and inp.baseline.port_was_active(hca, port):
        return True
    for s in inp.history:
        h = s.hca(hca)
        if h is not None and any(p.port == port and p.is_active for p in h.ports):
            return True
    return False


def _peers_up(snap: NodeSnapshot, roles: HcaRoles, h: Hca, p: IbPort) -> int:
    """ACTIVE compute ports of the same HCA model and link layer (other than ``p``)."""
    return sum(1 for o in snap.hcas if roles.is_compute(o.name) and o.hca_type == h.hca_type
               for q in o.ports if q.is_active and q.link_layer == p.link_layer and (o.name, q.port) != (h.name, p.port))


def _not_active(inp: CheckInput, roles: HcaRoles, h: Hca, p: IbPort) -> Finding:
    compute = roles.is_compute(h.name) and not h.is_vf
    seen = _seen_active(inp, h.name, p.port)
    note = ""
    if h.is_vf:
        sev: Severity = "ok"
        note = f" (an SR-IOV virtual function of {h.physfn}: its state is the subnet manager's and its guest's, not a node fault)"
    elif compute and not seen:
        peers = _peers_up(inp.snapshot, roles, h, p)
        sev = "critical" if peers else "warning"
        note = (f" (never seen ACTIVE; {peers} compute {h.hca_type or '?'} port(s) of its kind are)" if peers else
                f" (never seen ACTIVE, and no other compute {h.hca_type or '?'} {p.link_layer or ''} port is ACTIVE: no evidence "
                "it is provisioned, so not critical on its own; set expect.hca_ports to require it)")
    else:
        sev = "critical" if compute else ("warning" if seen else "ok")
        note = "" if sev != "ok" else " (never seen ACTIVE: reported, not judged)"
    phys = f", phys_state {p.phys_state}" if p.phys_state else ""
    via = f" (from its netdev {p.state_from})" if p.state_from else ""
    reason = _reason(inp, p)
    why = f", link-down reason {reason} (the PHY)" if reason else ""
    return finding(
        "ib.port.down",
        sev,
        port_subject(h.name, p.port),
        f"{_role(roles, h.name)} port state {p.state}{phys}{via}{why}, expected ACTIVE{note}",
        _down_hint(h, p, reason),
        measured=p.state,
        expected="ACTIVE",
    )


def _state_unread(snap: HistoryEntry | None, hca: str, port: int) -> bool:
    h = snap.hca(hca) if snap is not None else None
    p = next((q for q in h.ports if q.port == port), None) if h is not None else None
    return p is not None and p.state is None


def _unreadable(roles: HcaRoles, h: Hca, p: IbPort, repeated: bool) -> Finding:
    compute = roles.is_compute(h.name)
    sev: Severity = "critical" if compute and repeated else "warning"
    when = ("in two collections in a row" if repeated else
            "in this collection (a warning until the next collection misses it too)")
    left = "; it is left out of NCCL_IB_HCA" if compute else ""
    return finding(
        "ib.port.unreadable",
        sev,
        port_subject(h.name, p.port),
        f"{_role(roles, h.name)} port state could not be read {when}: the state file is empty, unreadable or "
        f"not a port state{left}",
        f"check the HCA and its driver in dmesg; `ibstat {h.name} {p.port}` and "
        f"`cat /sys/class/infiniband/{h.name}/ports/{p.port}/state` show what the kernel reports; "
        "probe.failed findings name the file when the read itself failed",
        measured="unreadable",
        expected="ACTIVE",
    )


def _rate_width(cfg_rate: float | None, cfg_width: int | None, inferred: tuple[float | None, int | None, int],
                roles: HcaRoles, h: Hca, p: IbPort) -> list[Finding]:
    compute = roles.is_compute(h.name)
    best_rate, best_width, seen = inferred
    out: list[Finding] = []
    subject = port_subject(h.name, p.port)
    desc = f"best of {seen} ACTIVE {_role(roles, h.name)} {h.hca_type or '?'} {p.link_layer or ''} ports".replace("  ", " ")
    exp_rate, rate_src = (cfg_rate, "expect.rate_gbps") if compute and cfg_rate else (best_rate, desc)
    if exp_rate and p.rate_gbps is not None and p.rate_gbps < exp_rate:
        shown = p.rate_raw or f"{fmt(p.rate_gbps)} Gb/s"
        out.append(finding(
            "ib.port.rate_degraded",
            "critical" if compute else "warning",
            subject,
            f"{_role(roles, h.name)} port rate {shown}, expected {fmt(exp_rate)} Gb/s ({rate_src})",
            "the link trained below its speed: reseat or replace the cable/transceiver and check the switch port "
            f"speed settings (`mlxlink -d {h.name} -p {p.port}`)",
            measured=p.rate_gbps,
            expected=exp_rate,
        ))
    exp_width, width_src = (cfg_width, "expect.width") if compute and cfg_width else (best_width, desc)
    if exp_width and p.width is not None and p.width < exp_width:
        out.append(finding(
            "ib.port.width_degraded",
            "warning",
            subject,
            f"{_role(roles, h.name)} port width {p.width}X, expected {exp_width}X ({width_src})",
            "lanes failed to train: reseat or replace the cable/transceiver, check the switch port "
            f"(`mlxlink -d {h.name} -p {p.port}`)",
            measured=p.width,
            expected=exp_width,
        ))
    return out


def check_ports(inp: CheckInput) -> list[Finding]:
    """ib.port.down, ib.port.unreadable, ib.port.rate_degraded, ib.port.width_degraded, ib.ports.count."""
    snap, expect = inp.snapshot, inp.config.expect
    roles = inp.resolved_roles()
    inferred = _inferred(snap, roles)
    out: list[Finding] = []
    active_compute = 0
    unread_once = 0  # compute ports whose state one read missed: not yet counted missing
    not_active: list[str] = []
    past = earlier(inp.history, snap.taken_at)
    previous = past[-1] if past else None
    link_off = {b.pci_bus_id for b in snap.backed_off if b.reads == "link"}
    for h in snap.hcas:
        for p in h.ports:
            if p.state is None and h.pci_bus_id in link_off:
                continue  # not read on purpose: collect.device.backed_off says why
            if p.state is None:
                repeated = _state_unread(previous, h.name, p.port)
                out.append(_unreadable(roles, h, p, repeated))
                if roles.is_compute(h.name):
                    if repeated:
                        not_active.append(f"{port_subject(h.name, p.port)} (state unreadable)")
                    else:
                        unread_once += 1
                continue
            if not p.is_active:
                out.append(_not_active(inp, roles, h, p))
                if roles.is_compute(h.name):
                    not_active.append(str(port_subject(h.name, p.port)))
                continue
            if roles.is_compute(h.name):
                active_compute += 1
            out.extend(_rate_width(expect.rate_gbps, expect.width, inferred[_group(roles, h, p)], roles, h, p))
    if expect.hca_ports is not None and active_compute + unread_once < expect.hca_ports:
        others = f"; not ACTIVE: {', '.join(not_active)}" if not_active else ""
        out.append(finding(
            "ib.ports.count",
            "critical",
            NODE,
            f"{active_compute} ACTIVE compute HCA ports, expected {expect.hca_ports} (expect.hca_ports){others}",
            "bring the missing ports up or replace the missing HCAs; check hca.compute selects the right devices",
            measured=active_compute,
            expected=expect.hca_ports,
        ))
    return out


def _increments(readings: Iterable[int | None]) -> int:
    """How much a counter rose over ``readings`` (oldest first; None: not read then). A
    decrease is a reset: not counted, the count goes on from the lower value."""
    total, last = 0, None
    for v in readings:
        if v is None:
            continue
        if last is not None and v > last:
            total += v - last
        last = v
    return total


def _flaps(snaps: list[HistoryEntry], hca: str, port: int) -> tuple[int, int]:
    """(down->up cycles seen in the states, link_downed increments) over ``snaps``."""
    cycles = 0
    was_down = False
    downed: list[int | None] = []
    for s in snaps:
        h = s.hca(hca)
        p = next((q for q in h.ports if q.port == port), None) if h is not None else None
        if p is None:
            continue
        if p.state is not None:
            if p.is_active and was_down:
                cycles += 1
            was_down = not p.is_active
        downed.append(p.counters.get("link_downed"))
    return cycles, _increments(downed)


def _carrier_losses(snaps: list[HistoryEntry], netdev: str) -> int:
    """How often a RoCE port's netdev lost its carrier over ``snaps``: ``carrier_down_count``
    increments, or half the ``carrier_changes`` ones where the kernel has no down count. The
    kernel counts every loss, so a flap shorter than the poll, which no port state read
    ever shows, is counted too."""
    nds = [s.netdev(netdev) for s in snaps]
    downs = _increments(n.carrier_down_count if n is not None else None for n in nds)
    changes = _increments(n.carrier_changes if n is not None else None for n in nds)
    return max(downs, changes // 2)


def check_flapping(inp: CheckInput) -> list[Finding]:
    """ib.port.flapping: down->up cycles, link_downed increments or (RoCE ports) carrier
    losses of the port's netdev within flap_window_s, not counting those within
    lifecycle.boot_grace_s of the node's boot (links train, and may retrain, while a node
    comes up)."""
    snap, th = inp.snapshot, inp.config.thresholds
    start = snap.taken_at - th.flap_window_s
    booted_at, grace = snap.system.booted_at, inp.config.lifecycle.boot_grace_s
    if booted_at is not None and grace > 0:
        start = max(start, booted_at + grace)
    window = [s for s in earlier(inp.history, snap.taken_at) if s.taken_at >= start]
    if not window:
        return []
    # entries repeating their predecessor's HCAs (netdevs) hold no transition (agentd.judging.checks.common.changes)
    past = changes(window, lambda s: s.hcas)
    by_netdev = [*changes(window, lambda s: s.netdevs), snap]
    roles = inp.resolved_roles()
    snaps = [*past, snap]
    span = snap.taken_at - window[0].taken_at
    out: list[Finding] = []
    for h in snap.hcas:
        for p in h.ports:
            cycles, increments = _flaps(snaps, h.name, p.port)
            carrier = _carrier_losses(by_netdev, p.netdev) if p.link_layer == "Ethernet" and p.netdev else None
            flaps = max(cycles, increments, carrier or 0)  # all see the same events: never add them
            if flaps < th.flap_count:
                continue
            sev: Severity = "critical" if roles.is_compute(h.name) else "warning"
            lost = f", {p.netdev} carrier lost {carrier}" if carrier is not None else ""
            out.append(finding(
                "ib.port.flapping",
                sev,
                port_subject(h.name, p.port),
                f"{_role(roles, h.name)} port went down {flaps} times in the last {fmt(span)} s "
                f"(link_downed +{increments}{lost}, down->up cycles seen {cycles}), threshold {th.flap_count} "
                f"in {fmt(th.flap_window_s)} s; now {p.state}",
                f"an unstable link: reseat or replace the cable/transceiver and check the switch port logs "
                f"(`mlxlink -d {h.name} -p {p.port}`)",
                measured=flaps,
                expected=f"< {th.flap_count}",
            ))
    return out
