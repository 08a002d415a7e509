"""The snapshot history: shared structure, thinning that keeps every link transition."""

from __future__ import annotations

import pytest

from agentd.collection.history import History, share, spans
from tests.support import service_snapshots as fixtures


def with_port_state(snap, state: str, **counters):
    h = snap.hcas[0]
    p = h.ports[0].model_copy(update={"state": state, "counters": {**h.ports[0].counters, **counters}})
    return snap.model_copy(update={"hcas": (h.model_copy(update={"ports": (p,)}), *snap.hcas[1:])})


def test_equal_components_are_shared():
    a, b = fixtures.snapshot(0.0), fixtures.snapshot(2.0)
    assert a.hcas[0] is not b.hcas[0]
    s = share(a, b)
    assert s.taken_at == 2.0 and s == b.model_copy(update={})
    assert s.hcas[0] is a.hcas[0] and s.netdevs[1] is a.netdevs[1] and s.pci is a.pci and s.nvml is a.nvml


def test_changed_counters_keep_the_rest_shared():
    a = fixtures.snapshot(0.0)
    b = with_port_state(fixtures.snapshot(2.0), "ACTIVE", port_xmit_data=5)
    s = share(a, b)
    assert s.hcas[0] is not a.hcas[0] and s.hcas[0].ports[0].counters["port_xmit_data"] == 5
    assert s.hcas[0].ports[0].hw_counters is a.hcas[0].ports[0].hw_counters
    assert s.hcas[1] is a.hcas[1]


def test_entries_are_spaced_but_transitions_are_kept():
    h = History(maxlen=1000, spacing_s=10.0)
    base = fixtures.snapshot(0.0)
    states = ["ACTIVE"] * 10 + ["DOWN"] + ["ACTIVE"] * 10 + ["DOWN", "ACTIVE"] + ["ACTIVE"] * 30
    for i, st in enumerate(states):
        h.append(with_port_state(base.model_copy(update={"taken_at": 2.0 * i}), st))
    seq = [s.hcas[0].ports[0].state for s in h.snapshots()]
    # every down->up cycle survives
    collapsed = [x for i, x in enumerate(seq) if i == 0 or x != seq[i - 1]]
    assert collapsed == ["ACTIVE", "DOWN", "ACTIVE", "DOWN", "ACTIVE"]
    assert len(h) < len(states) / 3
    assert h.snapshots()[-1].taken_at == 2.0 * (len(states) - 1)  # the newest is always there


def test_old_entries_are_thinned_and_the_cap_holds():
    h = History(maxlen=50, spacing_s=10.0, long_spacing_s=300.0, recent_s=600.0)
    base = fixtures.snapshot(0.0)
    for i in range(400):  # 4000 s at one entry per 10 s
        h.append(base.model_copy(update={"taken_at": 10.0 * i}))
    snaps = h.snapshots()
    assert len(snaps) <= 50
    old = [s for s in snaps if s.taken_at < snaps[-1].taken_at - 600]
    assert all(g >= 300 - 10 for g in spans(old))


def _busy_sequence(layer: str, steps: int):
    """Snapshots 10 s apart where counters rise (error, PMA-saturating, reset, pause and
    NVLink error counters) for the first 25 steps and then stop (so later rates come from
    the older, compact entries alone), a port flaps and a netdev loses carrier."""
    from tests.support import check_snapshots as cs

    snap = cs.node(layer=layer, t=1000.0)
    nd = "eth1" if layer == "Ethernet" else "ib1"
    out = []
    for step in range(steps):
        i = min(step, 25)
        s = cs.at(snap, 1000.0 + 10.0 * step)
        s = cs.with_counters(s, "mlx5_0", symbol_error=7 * i, link_downed=i // 3, port_xmit_data=10**12 + 10**9 * i)
        s = cs.with_counters(s, "mlx5_2", port_rcv_errors=(5 * i if i < 20 else i - 20))  # a reset at 20
        s = cs.with_counters(s, "mlx5_3", hw=True, local_ack_timeout_err=50 * i, np_cnp_sent=1000 * i)
        s = cs.with_counters(s, "mlx5_4", symbol_error=min(65535, 60000 + 900 * i))  # runs into its PMA maximum
        s = cs.with_port(s, "mlx5_1", state="DOWN" if step % 5 == 2 else "ACTIVE")
        s = cs.with_nvlink(s, 1, 3, errors={"crc_flit": 40 * i, "crc_data": i, "replay": 0, "recovery": 0})
        if layer == "Ethernet":
            s = cs.with_ethtool(s, "eth0", rx_prio3_pause=10**6 * i, tx_prio3_pause=3 * i, rx_bytes=10**9 + i)
        s = cs.with_netdev(s, nd, carrier=step % 7 != 4)
        out.append(s)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("rate_window_s", [600.0, 120.0])
def test_compact_entries_judge_like_the_snapshots_they_replace(rate_window_s):
    """Every check that reads the history finds the same with the compact entries as with
    the whole snapshots the history kept (rates, resets, saturation, flaps, seen-active,
    pause storms, CNP and NVLink error rates). The sequence outlives every counter window:
    its old entries are aged, and flaps are judged across them."""
    from agentd.collection.history import is_aged
    from agentd.judging.judge import judge
    from tests.support import check_snapshots as cs

    config = cs.cfg(thresholds={"short_rate_window_s": 100.0, "rate_window_s": rate_window_s})
    th = config.thresholds
    for layer in ("InfiniBand", "Ethernet"):
        seq = _busy_sequence(layer, 70)
        # as the daemon builds it, but thinned from 120 s on even when rates look back 600 s
        h = History(maxlen=1000, spacing_s=10.0, recent_s=120.0, counters_s=max(th.rate_window_s, th.short_rate_window_s))
        whole = {}
        codes: set[str] = set()
        for cur in seq:
            compact = h.snapshots()
            kept = tuple(whole[s.taken_at] for s in compact)
            got = judge(cur, compact, config, None).findings
            assert got == judge(cur, kept, config, None).findings
            codes |= {f.code for f in got}
            whole[cur.taken_at] = cur
            h.append(cur)
        assert len(h.snapshots()) < len(seq)  # thinned beyond recent_s: the comparison covers thinning too
        assert any(is_aged(s) for s in h.snapshots())  # 700 s outlive either window
        expected = {"ib.counter.symbol_error", "ib.counter.reset", "ib.counter.saturated", "ib.port.flapping", "nvlink.link.errors"}
        if layer == "Ethernet":
            expected |= {"roce.pfc.pause_storm", "roce.cnp.rate"}
        assert expected <= codes, expected - codes


def test_compact_entries_share_what_did_not_change():
    from tests.support import check_snapshots as cs

    h = History(maxlen=100, spacing_s=10.0)
    base = cs.node(t=0.0)
    for i in range(4):
        h.append(cs.at(base, 10.0 * i))
    a, b, c, last = h.snapshots()
    assert last.hcas is not b.hcas and last.hcas[0].ports[0].counters == b.hcas[0].ports[0].counters  # the newest stays whole
    assert b.hcas is a.hcas and c.nvml is b.nvml and c.netdevs is a.netdevs
    changed = cs.with_counters(cs.at(base, 40.0), "mlx5_0", symbol_error=12)
    h.append(changed)
    h.append(cs.at(changed, 50.0))
    d = h.snapshots()[-2]
    assert d.hcas[0].ports[0].counters["symbol_error"] == 12 and d.hcas[1] is c.hcas[1]


def test_link_states_are_reused_for_the_very_same_parts():
    from agentd.collection.history import link_states

    h = History(maxlen=100, spacing_s=10.0)
    a = fixtures.snapshot(0.0)
    sig = h.link_states(a)
    assert sig == link_states(a)
    same_parts = a.model_copy(update={"taken_at": 2.0})  # what share() makes of a steady node
    assert h.link_states(same_parts) is sig
    down = with_port_state(a, "DOWN")  # a new hcas tuple
    new = h.link_states(down)
    assert new is not sig and new == link_states(down) and new != sig
    assert h.link_states(down) is new
    back = h.link_states(a)  # the old parts again: computed anew (one slot), never stale
    assert back == sig and back is not sig


def _every_counter_moves(snap, k: int):
    """``snap`` with every IB counter and hw_counter, the PFC pause counters and every
    NVLink error counter at a new value (a busy node), ``link_downed`` rising every 5th."""
    from tests.support import check_snapshots as cs

    for h in snap.hcas:
        for p in h.ports:
            vals = {n: v + 1000 + k for n, v in p.counters.items()}
            vals["link_downed"] = k // 5
            snap = cs.with_counters(snap, h.name, p.port, **vals)
            if p.hw_counters:
                snap = cs.with_counters(snap, h.name, p.port, hw=True, **{n: v + 1000 + k for n, v in p.hw_counters.items()})
    for n in snap.netdevs:
        if n.ethtool is not None:
            snap = cs.with_ethtool(snap, n.name, rx_prio3_pause=1000 + k, tx_prio3_pause=2000 + k)
    for g in snap.nvml.gpus:
        for link in g.nvlinks:
            snap = cs.with_nvlink(snap, g.index, link.link, errors={e: 1000 + k for e in link.errors})
    return snap


def test_entries_older_than_every_counter_window_keep_states_and_link_downed_and_share_the_rest():
    """A busy node (every counter moves every cycle): entries older than the longest
    counter window keep port, netdev and NVLink states, link_downed and the PCI functions;
    a run of them with the same states and link_downed shares every part, so such a run
    costs only the entry objects."""
    from agentd.collection.history import is_aged
    from agentd.model import AerCounts, PcieAer
    from tests.support import check_snapshots as cs

    base = cs.node(layer="Ethernet", t=0.0)
    nic = next(d.bdf for d in base.pci if d.class_code == cs.NIC_CLASS)
    base = cs.with_pci(base, nic, aer=PcieAer(correctable=AerCounts(total=2)))
    h = History(maxlen=1000, spacing_s=10.0, long_spacing_s=10.0, recent_s=100.0, counters_s=200.0)
    for k in range(64):
        s = _every_counter_moves(cs.at(base, 10.0 * k), k)
        if k == 20:
            s = cs.with_port(s, "mlx5_1", state="DOWN")
        h.append(s)
    snaps = h.snapshots()
    now = snaps[-1].taken_at
    aged = [s for s in snaps if is_aged(s)]
    assert aged and all(s.taken_at < now - 200 for s in aged)
    assert not [s for s in snaps if s.taken_at >= now - 200 and is_aged(s)]  # the counter window keeps its counters
    recent = snaps[-2].hcas[0].ports[0]
    assert len(recent.counters) > 10 and len(recent.hw_counters) > 0
    for s in aged:
        p = s.hca("mlx5_0").ports[0]
        assert dict(p.counters) == {"link_downed": int(s.taken_at // 50)} and not p.hw_counters
        assert all(n.ethtool is None for n in s.netdevs) and all(not link.errors for g in s.nvml.gpus for link in g.nvlinks)
        assert s.hca("mlx5_1").ports[0].state == ("DOWN" if s.taken_at == 200.0 else "ACTIVE")
        assert [d.aer for d in s.pci] == [PcieAer(correctable=AerCounts(total=2))]  # AER presence, the PCIe links
    # within a run of equal link_downed the aged entries are the very same parts
    runs = [(a, b) for a, b in zip(aged, aged[1:]) if a.taken_at // 50 == b.taken_at // 50 and 200.0 not in (a.taken_at, b.taken_at)]
    assert runs
    for a, b in runs:
        assert a.hcas is b.hcas and a.netdevs is b.netdevs and a.nvml is b.nvml and a.pci is b.pci


def test_aged_entries_export_and_seed_back():
    from agentd.collection.history import is_aged
    from tests.support import check_snapshots as cs

    base = cs.node(t=0.0)
    h = History(maxlen=1000, spacing_s=10.0, long_spacing_s=10.0, recent_s=100.0)
    for k in range(64):
        h.append(_every_counter_moves(cs.at(base, 10.0 * k), k))
    now = h.snapshots()[-1].taken_at
    assert any(is_aged(s) for s in h.snapshots())
    entries = h.export(now, flap_window_s=3600.0, rate_window_s=100.0)
    fresh = History(1000, spacing_s=10.0)
    assert fresh.seed(entries) == len(entries)
    first = fresh.snapshots()[0]
    assert first.taken_at == 0.0 and dict(first.hca("mlx5_0").ports[0].counters) == {"link_downed": 0}


def test_a_reload_that_shortens_the_windows_ages_entries_by_the_new_ones():
    from agentd.collection.history import is_aged
    from tests.support import check_snapshots as cs

    base = cs.node(t=0.0)
    h = History(maxlen=1000, spacing_s=10.0, recent_s=600.0)
    for k in range(40):
        h.append(_every_counter_moves(cs.at(base, 10.0 * k), k))
    assert not any(is_aged(s) for s in h.snapshots())  # 400 s: all within the 600 s window
    h.configure(1000, 10.0, recent_s=60.0, counters_s=100.0)
    for k in range(40, 64):
        h.append(_every_counter_moves(cs.at(base, 10.0 * k), k))
    now = h.snapshots()[-1].taken_at
    assert {is_aged(s) for s in h.snapshots() if s.taken_at < now - 100} == {True}
    assert not any(is_aged(s) for s in h.snapshots() if s.taken_at >= now - 100)
