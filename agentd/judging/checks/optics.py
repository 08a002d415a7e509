"""The physical layer: NIC and module temperatures, module Rx power, FEC, PHY link-downs.

Inputs (issue 38): the HCAs' hwmon sensors (mlx5, kernel >= 6.5), and for Ethernet ports
the ethtool netlink link state and FEC statistics, ``ethtool -S`` PHY counters and the
module EEPROM (agentd.host.ethtool_nl, module_eeprom, transceiver); for InfiniBand ports,
which the kernel shows no module of, the opt-in link tool (agentd.host.mstlink). Where a
module states its own thresholds (SFF-8636 page 03h, CMIS page 02h) they are what it is
judged by; otherwise hwmon's ``tempN_crit`` and ``[optics]``.

Compute ports are judged strictly, others at most as warnings (as the port checks do). A
critical finding on a port takes it out of NCCL_IB_HCA (agentd.nccl.env).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from agentd.judging.checks.common import CheckInput, cap, changes, counter_change, fmt, in_window
from agentd.judging.findings import finding, hca_subject, netdev_subject, port_subject
from agentd.model import Finding, HistoryEntry, Netdev, NetdevReading, Severity, Subject, TempSensor, Transceiver

_MODULE_HINT = ("check the module's airflow (blocked vents, a failed fan, a blanking panel missing) and its power class for the slot; "
                "reseat it, and replace it if it stays hot: `ethtool -m {nd}`")
_ASIC_HINT = "check the HCA's airflow and the server's fans; a NIC at its critical temperature shuts itself down (mlx5 logs it)"
_RX_HINT = ("little light reaches the module: clean the fibre end faces (both ends), check the patch panel, then swap the cable or the "
            "far-end module; `ethtool -m {nd}` shows every lane")
_FEC_HINT = "the link's raw error rate is high: clean or replace the fibre/cable and the modules at both ends; `ethtool -I --show-fec {nd}`"
_DOWN_HINT = "the PHY lost the link and regained it: look for a loose cable, a failing module or the switch port's log; `ethtool {nd}`"


@dataclass(frozen=True)
class Port:
    """An Ethernet port with a netdev, and the HCA port it belongs to (None: a plain NIC)."""

    netdev: Netdev
    hca: str | None
    port: int | None
    compute: bool

    @property
    def subject(self) -> Subject:
        return port_subject(self.hca, self.port) if self.hca is not None and self.port is not None else netdev_subject(self.netdev.name)

    def severity(self, s: Severity) -> Severity:
        return s if self.compute else cap(s, "warning")


def _ports(inp: CheckInput) -> Iterator[Port]:
    snap = inp.snapshot
    roles = inp.resolved_roles()
    owner = {p.netdev: (h.name, p.port) for h in snap.hcas for p in h.ports if p.netdev}
    for n in snap.netdevs:
        if n.phy is None and n.module is None and not n.ethtool:
            continue
        hca, port = owner.get(n.name, (None, None))
        yield Port(n, hca, port, hca is not None and roles.is_compute(hca))


def _deg(c: float) -> str:
    return f"{c:.1f} degC"


def dbm(watts: float) -> str:
    return "-inf dBm" if watts <= 0 else f"{10 * math.log10(watts * 1000):.1f} dBm"


# ---------------------------------------------------------------------------
# temperatures


def _hot(value: float, warn: float | None, alarm: float | None) -> Severity:
    if alarm is not None and value >= alarm:
        return "critical"
    if warn is not None and value >= warn:
        return "warning"
    return "ok"


def _module_by_eeprom(p: Port, m: Transceiver) -> Finding | None:
    th = m.temperature_thresholds
    if m.temperature_c is None or th is None:
        return None
    sev = _hot(m.temperature_c, th.high_warning, th.high_alarm)
    if sev == "ok":
        return None
    limit = th.high_alarm if sev == "critical" else th.high_warning
    return finding(
        "optics.module.temperature", p.severity(sev), p.subject,
        f"module {m.part_number or '?'} ({p.netdev.name}) at {_deg(m.temperature_c)}, at or above its own high "
        f"{'alarm' if sev == 'critical' else 'warning'} threshold {_deg(limit or 0)} (EEPROM; warning {_deg(th.high_warning or 0)}, alarm {_deg(th.high_alarm or 0)})",
        _MODULE_HINT.format(nd=p.netdev.name), measured=m.temperature_c, expected=limit,
    )


def _by_crit(t: TempSensor, margin: float) -> tuple[Severity, float] | None:
    if t.temperature_c is None or t.critical_c is None or t.critical_c <= 0:
        return None
    sev = _hot(t.temperature_c, t.critical_c - margin, t.critical_c)
    return (sev, t.critical_c) if sev != "ok" else None


def check_temperatures(inp: CheckInput) -> list[Finding]:
    """nic.temperature.high (ASIC sensors) and optics.module.temperature (a module above its
    own thresholds, or, without them, near its hwmon critical temperature)."""
    out: list[Finding] = []
    roles = inp.resolved_roles()
    margin = inp.config.optics.temperature_margin_c
    ports = list(_ports(inp))
    judged_by_eeprom = set()
    for p in ports:
        if p.netdev.module is not None and (f := _module_by_eeprom(p, p.netdev.module)) is not None:
            out.append(f)
        if p.netdev.module is not None and p.netdev.module.temperature_thresholds is not None and p.hca is not None:
            judged_by_eeprom.add(p.hca)
    for h in inp.snapshot.hcas:
        compute = roles.is_compute(h.name)
        for t in h.temperatures:
            hot = _by_crit(t, margin)
            if hot is None or (t.kind == "module" and h.name in judged_by_eeprom):
                continue
            sev, crit = hot
            sev = sev if compute else cap(sev, "warning")
            what = f"{h.name} {t.kind} sensor {t.label or t.channel!s} ({t.hwmon} temp{t.channel})"
            msg = (f"{what} at {_deg(t.temperature_c or 0)}, {'at or above' if sev == 'critical' else f'within {margin:g} degC of'} "
                   f"its critical temperature {_deg(crit)} (tempN_crit)")
            if t.kind == "module":
                port = h.ports[0].port if h.ports else 1
                out.append(finding("optics.module.temperature", sev, port_subject(h.name, port), msg,
                                   _MODULE_HINT.format(nd=h.ports[0].netdev if h.ports and h.ports[0].netdev else h.name),
                                   measured=t.temperature_c, expected=crit))
            else:
                out.append(finding("nic.temperature.high", sev, hca_subject(h.name), msg, _ASIC_HINT, measured=t.temperature_c, expected=crit))
    return out


# ---------------------------------------------------------------------------
# Rx power


def _lanes_below(m: Transceiver) -> tuple[Severity, list[str], float | None]:
    th = m.rx_power_thresholds
    if th is None or m.copper:
        return "ok", [], None
    worst: Severity = "ok"
    parts: list[str] = []
    limit: float | None = None
    for lane in m.lanes_in_use:
        rx = lane.rx_power_w
        if rx is None:
            continue
        sev: Severity = "ok"
        if th.low_alarm is not None and rx < th.low_alarm:
            sev, lim = "critical", th.low_alarm
        elif th.low_warning is not None and rx < th.low_warning:
            sev, lim = "warning", th.low_warning
        else:
            continue
        parts.append(f"lane {lane.lane} {dbm(rx)} ({rx * 1e3:.4f} mW) below its low {'alarm' if sev == 'critical' else 'warning'} {dbm(lim)}")
        if sev == "critical" or worst == "ok":
            worst, limit = sev, lim
    return worst, parts, limit


def check_rx_power(inp: CheckInput) -> list[Finding]:
    """optics.rx_power.low: a lane in use receives less light than the module's own low
    warning (warning) or low alarm (critical) threshold, on a port whose link is up."""
    out: list[Finding] = []
    for p in _ports(inp):
        m = p.netdev.module
        if m is None or p.netdev.operstate != "up":
            continue
        sev, parts, limit = _lanes_below(m)
        if sev == "ok":
            continue
        out.append(finding("optics.rx_power.low", p.severity(sev), p.subject,
                           f"module {m.part_number or '?'} ({p.netdev.name}): {'; '.join(parts)}",
                           _RX_HINT.format(nd=p.netdev.name), measured=min(lane.rx_power_w or 0.0 for lane in m.lanes_in_use), expected=limit))
    return out


# ---------------------------------------------------------------------------
# FEC and the PHY's counters


Get = Callable[[NetdevReading], int | None]


def _readings(entries: Sequence[HistoryEntry], name: str, get: Get) -> list[tuple[float, int | None]]:
    """netdev ``name``'s value ``get`` in each entry (oldest first), with its time."""
    out: list[tuple[float, int | None]] = []
    for s in entries:
        n = s.netdev(name)
        out.append((s.taken_at, get(n) if n is not None else None))
    return out


def _stat(key: str) -> Get:
    return lambda n: n.ethtool.get(key) if n.ethtool else None


def _fec(attr: str) -> Get:
    def get(n: NetdevReading) -> int | None:
        f = n.phy.fec if n.phy is not None else None
        v = getattr(f, attr) if f is not None else None
        return v if isinstance(v, int) else None

    return get


# The pre-FEC error counts, best first: mlx5's PPCNT corrected bits (en_stats.c), the FEC
# netlink corrected bits, and corrected codewords (at least one bit each: a lower bound).
BER_SOURCES: tuple[tuple[str, Get, bool], ...] = (
    ("rx_corrected_bits_phy", _stat("rx_corrected_bits_phy"), False),
    ("FEC corrected bits", _fec("corrected_bits"), False),
    ("FEC corrected blocks", _fec("corrected_blocks"), True),
)


@dataclass(frozen=True)
class BerEstimate:
    ber: float
    basis: str
    lower_bound: bool
    seconds: float


def pre_fec_ber(window: Sequence[HistoryEntry], now: HistoryEntry, name: str) -> BerEstimate | None:
    """Pre-FEC bit error rate of netdev ``name`` over ``window`` (oldest first) to ``now``:
    corrected bits over bits received (``rx_bits_phy`` where the driver counts it, else the
    link speed times the span). None without two readings of a source or a link speed."""
    snaps = [*window, now]
    speed = _speed_mbps(now, name)
    for basis, get, lower in BER_SOURCES:
        ch = counter_change(_readings(snaps, name, get))
        if ch.status != "rate" or ch.seconds <= 0:
            continue
        rx = counter_change(_readings(snaps, name, _stat("rx_bits_phy")))
        if rx.status == "rate" and rx.delta > 0:
            bits = float(rx.delta)
        elif speed:
            bits = speed * 1e6 * ch.seconds
        else:
            return None
        return BerEstimate(ch.delta / bits, basis, lower, ch.seconds)
    return None


def _speed_mbps(now: HistoryEntry, name: str) -> int | None:
    """The link speed of the newest entry (a whole snapshot; a compact entry keeps none)."""
    n = now.netdev(name)
    speed = getattr(n, "speed_mbps", None)
    return speed if isinstance(speed, int) else None


def _counter_rose(window: Sequence[HistoryEntry], now: HistoryEntry, name: str, get: Get) -> tuple[int, float] | None:
    ch = counter_change(_readings([*window, now], name, get))
    return (ch.delta, ch.seconds) if ch.status == "rate" and ch.delta > 0 else None


def _down_count(n: NetdevReading) -> int | None:
    if n.phy is not None and n.phy.link_down_events is not None:
        return n.phy.link_down_events
    return n.ethtool.get("link_down_events_phy") if n.ethtool else None


def check_fec(inp: CheckInput) -> list[Finding]:
    """optics.fec.uncorrectable, optics.fec.pre_fec_ber and optics.link.down_events, over
    thresholds.rate_window_s (pre-FEC BER also over short_rate_window_s, as its trend)."""
    snap, t = inp.snapshot, inp.config.thresholds
    window = changes(in_window(inp.history, snap.taken_at, t.rate_window_s), lambda s: s.netdevs)
    if not window:
        return []
    short = changes(in_window(inp.history, snap.taken_at, t.short_rate_window_s), lambda s: s.netdevs)
    ber_max = inp.config.optics.pre_fec_ber_max
    out: list[Finding] = []
    for p in _ports(inp):
        name = p.netdev.name
        rose = _counter_rose(window, snap, name, _fec("uncorrectable_blocks"))
        if rose is not None:
            out.append(finding("optics.fec.uncorrectable", "warning", p.subject,
                               f"{name}: {rose[0]} uncorrectable FEC blocks in {fmt(rose[1])} s (frames lost to bit errors), expected none",
                               _FEC_HINT.format(nd=name), measured=rose[0], expected=0))
        est = pre_fec_ber(window, snap, name)
        if est is not None and est.ber > ber_max:
            trend = pre_fec_ber(short, snap, name) if short else None
            recent = f"; over the last {fmt(trend.seconds)} s {trend.ber:.2e}" if trend is not None and trend.seconds < est.seconds else ""
            bound = " (a lower bound: at least one bit a corrected block)" if est.lower_bound else ""
            out.append(finding("optics.fec.pre_fec_ber", "warning", p.subject,
                               f"{name}: pre-FEC BER {est.ber:.2e} over {fmt(est.seconds)} s from {est.basis}{bound}{recent}, "
                               f"above {ber_max:.1e} ([optics] pre_fec_ber_max)",
                               _FEC_HINT.format(nd=name), measured=est.ber, expected=ber_max))
        downs = _counter_rose(window, snap, name, _down_count)
        if downs is not None:
            out.append(finding("optics.link.down_events", p.severity("warning"), p.subject,
                               f"{name}: the PHY counted {downs[0]} link-down event{'s' if downs[0] > 1 else ''} in {fmt(downs[1])} s "
                               "(ETHTOOL_A_LINKSTATE_EXT_DOWN_CNT / link_down_events_phy), expected none",
                               _DOWN_HINT.format(nd=name), measured=downs[0], expected=0))
    return out


# ---------------------------------------------------------------------------
# InfiniBand ports through the opt-in link tool


def check_link_tool(inp: CheckInput) -> list[Finding]:
    """optics.link.effective_ber: the post-FEC BER the link tool reports above [optics]
    link_ber_max."""
    out: list[Finding] = []
    limit = inp.config.optics.link_ber_max
    for h in inp.snapshot.hcas:
        for p in h.ports:
            d = p.link_diag
            if d is None or d.effective_ber is None or d.effective_ber <= limit:
                continue
            raw = f", raw (pre-FEC) {d.raw_ber:.1e}" if d.raw_ber is not None else ""
            rec = f"; {d.tool} recommends: {d.recommendation}" if d.recommendation and not d.recommendation.lower().startswith("no issue") else ""
            out.append(finding("optics.link.effective_ber", "warning", port_subject(h.name, p.port),
                               f"effective (post-FEC) BER {d.effective_ber:.1e}{raw} from {d.tool}, above {limit:.0e} ([optics] link_ber_max){rec}",
                               f"clean or replace the cable/transceiver and check the switch port: `{d.tool} -d {h.pci_bus_id} -c -m`",
                               measured=d.effective_ber, expected=limit))
    return out
