"""IB/RoCE port state, rate, width, port count and flapping (counters: ib_counters.py).

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
"""

from __future__ import annotations

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


def _not_active(inp: CheckInput, roles: HcaRoles, h: Hca, p: IbPort) -> Finding:
    compute = roles.is_compute(h.name)
    sev: Severity = "critical" if compute else ("warning" if _seen_active(inp, h.name, p.port) else "ok")
    phys = f", phys_state {p.phys_state}" if p.phys_state else ""
    note = "" if sev != "ok" else " (never seen ACTIVE: reported, not judged)"
    reason = _reason(inp, p)
    why = f", link-down reason {reason} (the PHY)" if reason else ""
    return finding(
        "ib.port.down",
        sev,
        port_subject(h.name, p.port),
        f"{_role(roles, h.name)} port state {p.state}{phys}{why}, expected ACTIVE{note}",
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
    for h in snap.hcas:
        for p in h.ports:
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


def _flaps(snaps: list[HistoryEntry], hca: str, port: int) -> tuple[int, int]:
    """(down->up cycles seen in the states, link_downed increments) over ``snaps``."""
    cycles = increments = 0
    was_down = False
    last_downed: int | None = None
    for s in snaps:
        h = s.hca(hca)
        p = next((q for q in h.ports if q.port == port), None) if h is not None else None
        if p is None:
            continue
        if p.state is not None:
            if p.is_active and was_down:
                cycles += 1
            was_down = not p.is_active
        downed = p.counters.get("link_downed")
        if downed is not None:
            if last_downed is not None and downed > last_downed:
                increments += downed - last_downed  # a decrease is a reset: not counted
            last_downed = downed
    return cycles, increments


def check_flapping(inp: CheckInput) -> list[Finding]:
    """ib.port.flapping: down->up cycles or link_downed increments within flap_window_s,
    not counting those within lifecycle.boot_grace_s of the node's boot (links train,
    and may retrain, while a node comes up)."""
    snap, th = inp.snapshot, inp.config.thresholds
    start = snap.taken_at - th.flap_window_s
    booted_at, grace = snap.system.booted_at, inp.config.lifecycle.boot_grace_s
    if booted_at is not None and grace > 0:
        start = max(start, booted_at + grace)
    # entries repeating their predecessor's HCAs hold no transition (agentd.judging.checks.common.changes)
    past = changes([s for s in earlier(inp.history, snap.taken_at) if s.taken_at >= start], lambda s: s.hcas)
    if not past:
        return []
    roles = inp.resolved_roles()
    snaps = [*past, snap]
    span = snap.taken_at - past[0].taken_at
    out: list[Finding] = []
    for h in snap.hcas:
        for p in h.ports:
            cycles, increments = _flaps(snaps, h.name, p.port)
            flaps = max(cycles, increments)  # both see the same events: never add them
            if flaps < th.flap_count:
                continue
            sev: Severity = "critical" if roles.is_compute(h.name) else "warning"
            out.append(finding(
                "ib.port.flapping",
                sev,
                port_subject(h.name, p.port),
                f"{_role(roles, h.name)} port went down {flaps} times in the last {fmt(span)} s "
                f"(link_downed +{increments}, down->up cycles seen {cycles}), threshold {th.flap_count} "
                f"in {fmt(th.flap_window_s)} s; now {p.state}",
                f"an unstable link: reseat or replace the cable/transceiver and check the switch port logs "
                f"(`mlxlink -d {h.name} -p {p.port}`)",
                measured=flaps,
                expected=f"< {th.flap_count}",
            ))
    return out
