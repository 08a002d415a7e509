"""RoCE lossless configuration and congestion signals on the compute netdevs.

For each RoCE compute netdev (and, for a bond, each of its slaves, where mlx5 keeps the
ECN and DCB settings):
- ``roce.ecn.disabled`` (critical, when ``roce.require_ecn``): ECN notification point (np)
  or reaction point (rp) is off for ``roce.priority``; judged only where readable;
- ``roce.pfc.disabled`` (critical, when ``roce.require_pfc``): the PFC configuration was
  read and ``roce.priority`` is not among the enabled priorities;
- ``roce.pause.global`` (warning, when ``roce.require_pfc``): global (802.3x) pause is on
  (rx or tx): it pauses every priority at once, so congestion of any class stalls RDMA too;
  with PFC on ``roce.priority`` it belongs off (what NVIDIA's NIC configuration operator
  sets). Judged only where the pause parameters were read;
- ``roce.pfc.pause_storm`` (critical): ethtool ``rx_prio<N>_pause``/``tx_prio<N>_pause``
  frames per second above ``thresholds.pause_storm_per_s`` for any priority. A pause storm
  can stall the fabric with no drop counter moving (NVIDIA/daqiri#250). Measured over the
  short rate window (60 s), so the finding clears within a minute after the storm ends.
- ``roce.cnp.rate`` (ok): CNP sent/handled and ECN-marked packet rates from the port's
  hw_counters, when any is nonzero: congestion control at work, for the record. On
  firmware whose CNP counters stop in Programmable CC mode the message says so.
- ``roce.ecn.not_uniform`` (warning, when ``roce.require_ecn``): on firmware that applies
  congestion control to all priorities alike (agentd.judging.nic_firmware.cc_global), the
  ECN switches differ across priorities, so what the NIC does for ``roce.priority`` is not
  what its switch says; ``roce.ecn.disabled`` is then not judged (it is when they agree).
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
from agentd.judging.nic_firmware import cc_global, cnp_note, ecn_mixed
from agentd.model import Finding, Hca, HistoryEntry, Netdev

CNP_COUNTERS = (
    ("np_cnp_sent", "CNP sent"),
    ("rp_cnp_handled", "CNP handled"),
    ("np_ecn_marked_roce_packets", "ECN-marked"),
)


def judged_netdevs(inp: CheckInput) -> list[Netdev]:
    """The RoCE compute netdevs, and for a bond each of its slaves (where mlx5 keeps ECN,
    DCB and pause), sorted by name: what this check judges and ``[enforce]`` sets."""
    return [nd for nd, _ in _judged_netdevs(inp)]


def _judged_netdevs(inp: CheckInput) -> list[tuple[Netdev, Hca | None]]:
    """judged_netdevs, each with the HCA of its port (its firmware decides how ECN is read)."""
    out: dict[str, tuple[Netdev, Hca | None]] = {}
    for hca, _, nd in roce_compute_ports(inp):
        h = inp.snapshot.hca(hca)
        out.setdefault(nd.name, (nd, h))
        for slave in nd.bond_slaves:
            s = inp.snapshot.netdev(slave)
            if s is not None:
                out.setdefault(s.name, (s, h))
    return [out[n] for n in sorted(out)]


def _ecn_global(nd: Netdev, prio: int, why: str) -> Finding | None:
    mixed = ecn_mixed(nd)
    if not mixed:
        return None
    shown = "; ".join(f"roce_{side} on for {','.join(map(str, on))}, off for {','.join(map(str, off))}"
                      for side, (on, off) in mixed.items())
    return finding(
        "roce.ecn.not_uniform",
        "warning",
        netdev_subject(nd.name),
        f"ECN switches differ across priorities ({shown}) but {why}: what the NIC does for priority {prio} is not what "
        f"its switch says (roce.ecn.disabled is not judged)",
        f"set the same value on every priority, as the release notes advise: `for p in 0 1 2 3 4 5 6 7; do echo 1 > "
        f"/sys/class/net/{nd.name}/ecn/roce_np/enable/$p; echo 1 > /sys/class/net/{nd.name}/ecn/roce_rp/enable/$p; done`, "
        "or mlxconfig ROCE_CC_PRIO_MASK_P1=255",
        measured=shown,
        expected="the same on every priority",
    )


def _ecn(nd: Netdev, prio: int, hca: Hca | None = None) -> Finding | None:
    if nd.ecn is None:
        return None
    why = cc_global(hca)
    if why is not None and ecn_mixed(nd):
        return _ecn_global(nd, prio, why)
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


def pause_off(nd: Netdev) -> bool | None:
    """Global pause off (rx and tx) on ``nd``; None when its pause parameters were not read.
    The one rule for this check and for what ``[enforce] pause`` makes true."""
    if nd.pause is None:
        return None
    return not nd.pause.rx and not nd.pause.tx


def _global_pause(nd: Netdev) -> Finding | None:
    if pause_off(nd) is not False or nd.pause is None:
        return None
    shown = f"rx {'on' if nd.pause.rx else 'off'}, tx {'on' if nd.pause.tx else 'off'}"
    return finding(
        "roce.pause.global",
        "warning",
        netdev_subject(nd.name),
        f"global pause {shown}; expected off on a RoCE port with PFC (roce.require_pfc): it pauses every priority at once",
        f"turn it off: `ethtool -A {nd.name} rx off tx off` (persistently via your NIC configuration tooling); "
        "PFC on roce.priority keeps RDMA lossless without stalling the other classes",
        measured=shown,
        expected="rx off, tx off",
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
            note = cnp_note(inp.snapshot.hca(hca))
            out.append(finding("roce.cnp.rate", "ok", port_subject(hca, p.port),
                               "congestion notification: " + ", ".join(parts) + (f" ({note})" if note else ""),
                               measured=", ".join(parts)))
    return out


def check_roce(inp: CheckInput) -> list[Finding]:
    """roce.ecn.disabled, roce.ecn.not_uniform, roce.pfc.disabled, roce.pause.global, roce.pfc.pause_storm, roce.cnp.rate."""
    cfg = inp.config.roce
    window = changes(in_window(inp.history, inp.snapshot.taken_at, inp.config.thresholds.short_rate_window_s), lambda s: s.netdevs, lambda s: s.hcas)
    out: list[Finding] = []
    for nd, hca in _judged_netdevs(inp):
        for f in (
            _ecn(nd, cfg.priority, hca) if cfg.require_ecn else None,
            _pfc(nd, cfg.priority) if cfg.require_pfc else None,
            _global_pause(nd) if cfg.require_pfc else None,
            _pause_storm(inp, window, nd) if window else None,
        ):
            if f is not None:
                out.append(f)
    if window:
        out.extend(_cnp(inp, window))
    return out
