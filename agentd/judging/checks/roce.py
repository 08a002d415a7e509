"""RoCE lossless configuration and congestion signals on the compute netdevs.

For each RoCE compute netdev (and, for a bond, each of its slaves, where mlx5 keeps the
ECN and DCB settings):
- ``roce.ecn.disabled`` (critical, when ``roce.require_ecn``): ECN notification point (np)
  or reaction point (rp) is off for ``roce.priority``; judged only where readable;
- ``roce.pfc.disabled`` (critical, when ``roce.require_pfc``): the PFC configuration was
  read and ``roce.priority`` is not among the enabled priorities;
- ``roce.pfc.pause_storm`` (critical): ethtool ``rx_prio<N>_pause``/``tx_prio<N>_pause``
  frames per second above ``thresholds.pause_storm_per_s`` for any priority. A pause storm
  can stall the fabric with no drop counter moving (NVIDIA/daqiri#250). Measured over the
  short rate window (60 s), so the finding clears within a minute after the storm ends.
- ``roce.cnp.rate`` (ok): CNP sent/handled and ECN-marked packet rates from the port's
  hw_counters, when any is nonzero: congestion control at work, for the record.
"""

from __future__ import annotations

from agentd.judging.checks.common import (
    CheckInput,
    changes,
    counter_change,
    exceeds,
    fmt,
    in_window,
    port_index,
    roce_compute_ports,
)
from agentd.judging.findings import finding, netdev_subject, port_subject
from agentd.model import Finding, HistoryEntry, Netdev

CNP_COUNTERS = (
    ("np_cnp_sent", "CNP sent"),
    ("rp_cnp_handled", "CNP handled"),
    ("np_ecn_marked_roce_packets", "ECN-marked"),
)


def _judged_netdevs(inp: CheckInput) -> list[Netdev]:
    out: dict[str, Netdev] = {}
    for _, _, nd in roce_compute_ports(inp):
        out.setdefault(nd.name, nd)
        for slave in nd.bond_slaves:
            s = inp.snapshot.netdev(slave)
            if s is not None:
                out.setdefault(s.name, s)
    return [out[n] for n in sorted(out)]


def _ecn(nd: Netdev, prio: int) -> Finding | None:
    if nd.ecn is None:
        return None
    state = {side: table.get(prio) for side, table in (("np", nd.ecn.np), ("rp", nd.ecn.rp))}
    off = [side for side, on in state.items() if on is False]
    if not off:
        return None
    shown = ", ".join(f"{side} {'on' if on else 'off' if on is False else 'unknown'}" for side, on in state.items())
    return finding(
        "roce.ecn.disabled",
        "critical",
        netdev_subject(nd.name),
        f"ECN for priority {prio}: {shown}; expected np and rp on (roce.priority {prio})",
        f"enable it: `echo 1 > /sys/class/net/{nd.name}/ecn/roce_{off[0]}/enable/{prio}` (both roce_np and roce_rp), "
        "persistently via your NIC configuration tooling; without ECN, DCQCN cannot slow senders down",
        measured=shown,
        expected="np on, rp on",
    )


def _pfc(nd: Netdev, prio: int) -> Finding | None:
    if nd.pfc is None or prio in nd.pfc.enabled:
        return None
    enabled = ",".join(map(str, nd.pfc.enabled)) or "none"
    return finding(
        "roce.pfc.disabled",
        "critical",
        netdev_subject(nd.name),
        f"PFC enabled on priorities {enabled}, expected priority {prio} (roce.priority)"
        + (f"; trust {nd.pfc.trust}" if nd.pfc.trust else ""),
        f"enable PFC on priority {prio} to match the switch (`mlnx_qos -i {nd.name} --pfc ...` or `dcb pfc set dev "
        f"{nd.name} prio-pfc {prio}:on`); without it RoCE traffic is lossy and retransmits",
        measured=enabled,
        expected=str(prio),
    )


def _pause_storm(inp: CheckInput, window: list[HistoryEntry], nd: Netdev) -> Finding | None:
    if nd.ethtool is None:
        return None
    limit = inp.config.thresholds.pause_storm_per_s
    worst: tuple[float, str, int] | None = None
    for direction in ("rx", "tx"):
        for prio in range(8):
            key = f"{direction}_prio{prio}_pause"
            if key not in nd.ethtool:
                continue
            pts = []
            for s in window:
                old = s.netdev(nd.name)
                pts.append((s.taken_at, (old.ethtool or {}).get(key) if old is not None else None))
            change = counter_change([*pts, (inp.snapshot.taken_at, nd.ethtool[key])])
            if exceeds(change, limit) and (worst is None or (change.rate or 0) > worst[0]):
                worst = (change.rate or 0.0, direction, prio)
    if worst is None:
        return None
    rate, direction, prio = worst
    meaning = ("this NIC receives pause frames: the switch (or a peer behind it) cannot take its traffic"
               if direction == "rx" else
               "this NIC sends pause frames: the host cannot drain its receive buffers (PCIe, memory, a stuck consumer)")
    return finding(
        "roce.pfc.pause_storm",
        "critical",
        netdev_subject(nd.name),
        f"{direction}_prio{prio}_pause at {fmt(rate)} frames/s, threshold {fmt(limit)}/s "
        f"(thresholds.pause_storm_per_s): {meaning}",
        "find the congested or stuck end (switch port counters, `ethtool -S` on peers); enable the PFC watchdog on "
        "the switch; a sustained storm stalls the whole priority",
        measured=rate,
        expected=limit,
    )


def _cnp(inp: CheckInput, window: list[HistoryEntry]) -> list[Finding]:
    indexes = [port_index(s) for s in window]
    out = []
    for hca, p, _nd in roce_compute_ports(inp):
        parts = []
        for name, label in CNP_COUNTERS:
            if name not in p.hw_counters:
                continue
            pts = []
            for s, ix in zip(window, indexes, strict=True):
                old = ix.get((hca, p.port))
                pts.append((s.taken_at, old.hw_counters.get(name) if old is not None else None))
            rate = counter_change([*pts, (inp.snapshot.taken_at, p.hw_counters[name])]).rate
            if rate:
                parts.append(f"{label} {fmt(rate)}/s")
        if parts:
            out.append(finding("roce.cnp.rate", "ok", port_subject(hca, p.port),
                               "congestion notification: " + ", ".join(parts), measured=", ".join(parts)))
    return out


def check_roce(inp: CheckInput) -> list[Finding]:
    """roce.ecn.disabled, roce.pfc.disabled, roce.pfc.pause_storm, roce.cnp.rate."""
    cfg = inp.config.roce
    window = changes(in_window(inp.history, inp.snapshot.taken_at, inp.config.thresholds.short_rate_window_s), lambda s: s.netdevs, lambda s: s.hcas)
    out: list[Finding] = []
    for nd in _judged_netdevs(inp):
        for f in (
            _ecn(nd, cfg.priority) if cfg.require_ecn else None,
            _pfc(nd, cfg.priority) if cfg.require_pfc else None,
            _pause_storm(inp, window, nd) if window else None,
        ):
            if f is not None:
                out.append(f)
    if window:
        out.extend(_cnp(inp, window))
    return out
