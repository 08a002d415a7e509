"""IB port error counters as rates over the history; resets and saturated PMA counters.

Every counter named in ``thresholds.counters`` is looked up in the port's ``counters/``
and then ``hw_counters/``. Its rate is measured over the snapshots of the last
``thresholds.rate_window_s`` (see common.py for the reset, saturation and minimum-evidence rules).
The finding code is ``ib.counter.<name>``: one stable code per counter.
"""

from __future__ import annotations

from agentd.base.pma import is_saturated, pma_max, pma_width
from agentd.judging.checks.common import (
    CheckInput,
    cap,
    changes,
    counter_change,
    earlier,
    exceeds,
    flat,
    fmt,
    in_window,
    port_index,
)
from agentd.judging.findings import finding, port_subject
from agentd.model import Finding, HistoryEntry, IbPort, PortReading

_CABLE = "reseat or replace the cable/transceiver and check the switch port (`mlxlink -d {hca} -p {port} -c`)"
_HINTS = {
    "symbol_error": "physical-layer bit errors: " + _CABLE,
    "link_error_recovery": "the link keeps retraining (this precedes link_downed): " + _CABLE,
    "link_downed": "the link went down: " + _CABLE,
    "port_rcv_errors": "malformed packets received: physical errors on this link or a faulty peer port; " + _CABLE,
    "port_rcv_remote_physical_errors": "packets marked bad upstream in the fabric: check the switch-side counters",
    "excessive_buffer_overrun_errors": "receive buffer overruns (credit/flow-control problem): check the switch port and VL setup",
    "local_link_integrity_errors": "the link integrity threshold was exceeded: " + _CABLE,
    "port_xmit_discards": "packets discarded on transmit (congestion or a down link): check fabric congestion and the peer port",
    "local_ack_timeout_err": "RDMA transport retries timed out: a peer is unreachable or the fabric drops packets",
    "rnr_nak_retry_err": "receiver-not-ready retries exhausted: a peer application stopped posting receives, or a peer node is stuck",
    "out_of_sequence": "packets arrived out of sequence (loss and retransmission): look for drops in the fabric",
    # AWS EFA (SRD): the fabric is the cloud's; the adapter and its peers are what a node can act on
    "rx_drops": "EFA dropped received packets: check the instance's EFA driver and that no peer floods it",
    "rdma_read_wr_err": "EFA RDMA read work requests failed: a peer is unreachable or its memory registration is gone",
    "rdma_write_wr_err": "EFA RDMA write work requests failed: a peer is unreachable or its memory registration is gone",
    "unresponsive_remote_events": "EFA SRD peers stopped answering: find the peer instance (its EFA, its health)",
    "impaired_remote_conn_events": "EFA SRD connections entered the impaired state (reduced rate): check the peers and the placement group",
    "retrans_pkts": "EFA SRD retransmits: packet loss on the path; check the placement group and peers",
}
_HINT_DEFAULT = "check the link and the fabric: " + _CABLE
# hw_counters entries that are settings, not counters (mlx5 "lifespan": the update period, ms)
NOT_COUNTERS = frozenset({"lifespan"})


def _value(p: PortReading | None, name: str) -> int | None:
    if p is None:
        return None
    v = p.counters.get(name)
    return v if v is not None else p.hw_counters.get(name)


def _per_hour(x: float) -> str:
    return f"{fmt(x)}/s" + (f" ({fmt(x * 3600)}/h)" if x < 1 else "")


# The PMA's physical-layer counters as a BER proxy: the kernel shows no FEC statistics of an
# InfiniBand port (issue 38), so symbol errors per bit at the port's rate stand in for the
# post-FEC bit error rate (NVSentinel's 120 symbol errors/h is about 1e-13 at NDR 400 Gb/s).
BER_PROXY = frozenset({"symbol_error"})


def _ber_proxy(name: str, rate: float, p: IbPort) -> str:
    if name not in BER_PROXY or not p.rate_gbps:
        return ""
    return f", a BER proxy of {rate / (p.rate_gbps * 1e9):.1e} at {fmt(p.rate_gbps)} Gb/s"


def _rate_findings(inp: CheckInput, window: list[HistoryEntry], indexes: list[dict[tuple[str, int], PortReading]],
                   hca: str, p: IbPort, compute: bool) -> list[Finding]:
    out: list[Finding] = []
    for name, th in inp.config.thresholds.counters.items():
        current = _value(p, name)
        if current is None:
            continue
        ceiling = pma_max(name, current) if name in p.counters else None
        pts = [(s.taken_at, _value(ix.get((hca, p.port)), name)) for s, ix in zip(window, indexes, strict=True)]
        if (ceiling is None or current < ceiling) and flat((v for _, v in pts), current):
            continue  # (a counter at its ceiling is judged: saturated)
        change = counter_change([*pts, (inp.snapshot.taken_at, current)], ceiling)
        if not exceeds(change, th.per_s):
            continue
        rate = change.rate or 0.0
        out.append(finding(
            f"ib.counter.{name}",
            th.severity if compute else cap(th.severity, "warning"),
            port_subject(hca, p.port),
            f"{name} rose {change.delta} in {fmt(change.seconds)} s = {_per_hour(rate)}{_ber_proxy(name, rate, p)}, "
            f"threshold {_per_hour(th.per_s)} (thresholds.counters.{name})",
            _HINTS.get(name, _HINT_DEFAULT).format(hca=hca, port=p.port),
            measured=rate,
            expected=th.per_s,
        ))
    return out


def _saturated(window: list[HistoryEntry], indexes: list[dict[tuple[str, int], PortReading]], now: float,
               hca: str, p: IbPort) -> Finding | None:
    parts = []
    for name in sorted(p.counters):
        value = p.counters[name]
        if not is_saturated(name, value):
            continue
        bits = pma_width(name, value)
        change = counter_change(
            [*((s.taken_at, _value(ix.get((hca, p.port)), name)) for s, ix in zip(window, indexes, strict=True)), (now, value)],
            pma_max(name, value),
        )
        rose = f", rose >= {change.delta} in the last {fmt(change.seconds)} s" if change.delta > 0 else ""
        parts.append(f"{name}={value} ({bits}-bit max{rose})")
    if not parts:
        return None
    return finding(
        "ib.counter.saturated",
        "warning",
        port_subject(hca, p.port),
        f"counters stuck at their PMA maximum, their rate is unknown: {'; '.join(parts)}",
        f"these are error counters that ran up: find the cause, then reset them so they count again "
        f"(`perfquery -R -P {p.port} -C {hca}`); data counters: use the 64-bit extended counters",
        measured=", ".join(parts),
    )


def _reset(previous: HistoryEntry | None, hca: str, p: IbPort) -> Finding | None:
    if previous is None:
        return None
    h = previous.hca(hca)
    old = next((q for q in h.ports if q.port == p.port), None) if h is not None else None
    if old is None:
        return None
    names = sorted(
        n for table_new, table_old in ((p.counters, old.counters), (p.hw_counters, old.hw_counters))
        for n, v in table_new.items() if n in table_old and v < table_old[n] and n not in NOT_COUNTERS
    )
    if not names:
        return None
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return finding(
        "ib.counter.reset",
        "warning",
        port_subject(hca, p.port),
        f"{len(names)} counter{'s' if len(names) > 1 else ''} went backwards since the previous snapshot ({shown}): reset; "
        "their rates are measured again from now on",
        "expected after a driver reload or `perfquery -R`; otherwise find out what resets the counters",
        measured=len(names),
    )


def check_counters(inp: CheckInput) -> list[Finding]:
    """ib.counter.<name> rates, ib.counter.reset, ib.counter.saturated."""
    snap = inp.snapshot
    roles = inp.resolved_roles()
    window = changes(in_window(inp.history, snap.taken_at, inp.config.thresholds.rate_window_s), lambda s: s.hcas)
    indexes = [port_index(s) for s in window]
    older = earlier(inp.history, snap.taken_at)
    previous = older[-1] if older else None
    out: list[Finding] = []
    for h in snap.hcas:
        for p in h.ports:
            if window:
                out.extend(_rate_findings(inp, window, indexes, h.name, p, roles.is_compute(h.name)))
            for extra in (_saturated(window, indexes, snap.taken_at, h.name, p), _reset(previous, h.name, p)):
                if extra is not None:
                    out.append(extra)
    return out
