"""The snapshot history: shared structure, thinning that keeps every link transition."""

from __future__ import annotations

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
