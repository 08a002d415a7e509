"""The history across a restart (issue 15): what History.export keeps and History.seed puts
back is what the checks need, so a restart neither forgets a flapping port nor counts its
flaps again, and rates go on from the counters read before it."""

from __future__ import annotations

import json

from agentd.collection.history import EXPORT_MAX_ENTRIES, History, is_compact
from agentd.judging.checks.ib import check_flapping, check_ports
from agentd.judging.checks.ib_counters import check_counters
from agentd.judging.checks.pcie_errors import check_aer
from agentd.model import AerCounts, PcieAer
from tests.support.check_snapshots import STORAGE_BDF, at, inp, node, one, only, port, with_counters, with_pci, with_port

T = 1_700_000_000.0
FLAP, RATE = 12 * 3600.0, 600.0


def restarted(h: History, now: float) -> History:
    """A new History seeded from ``h`` through JSON, as the state file carries it."""
    entries = json.loads(json.dumps(h.export(now, flap_window_s=FLAP, rate_window_s=RATE)))
    fresh = History(720, spacing_s=10.0)
    assert fresh.seed(entries) == len(entries)
    return fresh


def flapping_history(t0: float = T) -> tuple[History, list]:
    """mlx5_4:1 goes DOWN and ACTIVE three times (link_downed +1 each), 10 s apart."""
    base, h, snaps = node(), History(720, spacing_s=10.0), []
    states = ["ACTIVE", "DOWN", "ACTIVE", "DOWN", "ACTIVE", "DOWN", "ACTIVE"]
    downed = [0, 1, 1, 2, 2, 3, 3]
    for i, (st, d) in enumerate(zip(states, downed, strict=True)):
        s = at(with_counters(with_port(base, "mlx5_4", state=st), "mlx5_4", link_downed=d), t0 + 10 * i)
        snaps.append(h.append(s))
    return h, snaps


def test_a_restart_keeps_a_flapping_port_and_does_not_count_it_again():
    h, snaps = flapping_history()
    last = snaps[-1]
    fresh = restarted(h, last.taken_at)
    assert all(is_compact(s) for s in fresh.snapshots())
    now = at(last, last.taken_at + 30)  # the first collection after the restart: ACTIVE, link_downed 3
    before = one(check_flapping(inp(now, h.snapshots())), "ib.port.flapping", "mlx5_4:1")
    after = one(check_flapping(inp(now, fresh.snapshots())), "ib.port.flapping", "mlx5_4:1")
    assert after.severity == "critical" and after.measured == before.measured == 3
    # it goes into the seeded history like any collection, and one more ACTIVE adds nothing
    fresh.append(now)
    again = at(last, last.taken_at + 60)
    assert one(check_flapping(inp(again, fresh.snapshots())), "ib.port.flapping", "mlx5_4:1").measured == 3


def test_link_downed_goes_on_from_the_last_reading():
    h, snaps = flapping_history()
    fresh = restarted(h, snaps[-1].taken_at)
    # two more while agentd was down: counted once, from the persisted reading of 3
    now = at(with_counters(snaps[-1], "mlx5_4", link_downed=5), snaps[-1].taken_at + 40)
    f = one(check_flapping(inp(now, fresh.snapshots())), "ib.port.flapping", "mlx5_4:1")
    assert f.measured == 5 and "link_downed +5" in f.message
    assert port(fresh.snapshots()[-1], "mlx5_4").counters["link_downed"] == 3


def test_a_port_seen_active_before_the_restart_is_still_judged_so():
    h, snaps = flapping_history()
    fresh = restarted(h, snaps[-1].taken_at)
    storage = f"mlx5_{8}"
    now = at(with_port(snaps[-1], storage, state="DOWN"), snaps[-1].taken_at + 20)
    assert one(check_ports(inp(now, fresh.snapshots())), "ib.port.down", f"{storage}:1").severity == "warning"
    assert one(check_ports(inp(now, ())), "ib.port.down", f"{storage}:1").severity == "ok"


def _aer(total: int) -> PcieAer:
    return PcieAer(correctable=AerCounts(total=total, by_type={"RxErr": total}), nonfatal=AerCounts(total=0), fatal=AerCounts(total=0))


def test_rates_go_on_across_a_restart():
    base, h = node(), History(720, spacing_s=10.0)
    for i in range(30):  # symbol errors and corrected AER errors rising for 290 s
        s = with_counters(base, "mlx5_2", symbol_error=10 * i)
        h.append(at(with_pci(s, STORAGE_BDF, aer=_aer(40 * i)), T + 10 * i))
    last = h.snapshots()[-1]
    fresh = restarted(h, last.taken_at)
    now = at(last, last.taken_at + 15)  # nothing rose while agentd was down
    for check in (check_counters, check_aer):
        before = sorted((f.code, str(f.subject), f.severity) for f in check(inp(now, h.snapshots())))
        after = sorted((f.code, str(f.subject), f.severity) for f in check(inp(now, fresh.snapshots())))
        assert before and after == before
    assert only(check_counters(inp(now, ())), "ib.counter.symbol_error") == []


def test_the_export_is_bounded_and_keeps_every_state_change():
    base, h = node(), History(100_000, spacing_s=10.0)
    n = 3000  # ten hours, a state change every 60 s
    for i in range(n):
        h.append(at(with_port(base, "mlx5_4", state="DOWN" if i % 12 == 6 else "ACTIVE"), T + 10 * i))
    now = T + 10 * (n - 1)
    entries = h.export(now, flap_window_s=FLAP, rate_window_s=RATE)
    assert len(entries) == EXPORT_MAX_ENTRIES
    assert entries[-1]["taken_at"] == now
    small = h.export(now, flap_window_s=FLAP, rate_window_s=RATE, max_entries=1000, rate_points=12)
    recent = [e for e in small if e["taken_at"] >= now - RATE]
    older = [e for e in small if e["taken_at"] < now - RATE]
    assert len(older) == 1 + 2 * ((n * 10 - RATE) // 120)  # the first, then every DOWN and ACTIVE after it
    assert 12 <= len(recent) <= 12 + 2 * 5 + 1
    fresh = History(720, spacing_s=10.0)
    assert fresh.seed(small) == len(small)
    # older entries carry the port states and link_downed only
    assert all(not p.hw_counters and set(p.counters) == {"link_downed"}
               for s in fresh.snapshots()[1:len(older)] for h_ in s.hcas for p in h_.ports)
    assert all(not s.nvml.gpus for s in fresh.snapshots()[1:len(older)])
    assert all(len(p.counters) > 1 for s in fresh.snapshots()[len(older):] for h_ in s.hcas for p in h_.ports)
    cycles = sum(1 for a, b in zip(fresh.snapshots(), fresh.snapshots()[1:]) if port(a, "mlx5_4").state == "DOWN" and port(b, "mlx5_4").state == "ACTIVE")
    assert cycles == sum(1 for i in range(1, n) if i % 12 == 7 and T + 10 * i >= now - FLAP)


def test_unchanged_lists_are_written_once():
    h, snaps = flapping_history()
    entries = h.export(snaps[-1].taken_at, flap_window_s=FLAP, rate_window_s=RATE)
    assert all(e["pci"] == "=" and e["gpus"] == "=" for e in entries[1:])
    # a port changed each time: its HCA is written, the others stand for the previous ones
    assert [sum(x != "=" for x in e["hcas"]) for e in entries[1:]] == [1] * (len(entries) - 1)
    assert [x["name"] for x in entries[3]["hcas"] if x != "="] == ["mlx5_4"]


def test_malformed_entries_are_skipped_never_raised():
    h, snaps = flapping_history()
    good = json.loads(json.dumps(h.export(snaps[-1].taken_at, flap_window_s=FLAP, rate_window_s=RATE)))
    bad_port = json.loads(json.dumps(good[2]))
    bad_port["hcas"][4]["ports"][0]["counters"] = {"link_downed": "many"}
    entries = [
        "not an entry", {"taken_at": "yesterday"}, {**good[0], "taken_at": float("nan")}, {"taken_at": T},
        good[0], good[1], bad_port, {**good[3], "hcas": "="}, good[4], {**good[5], "taken_at": good[0]["taken_at"]}, good[6],
        {**good[0], "hcas": [{"name": "x", "ports": [{"port": 1, "surprise": True}]}]}, {"taken_at": T + 1000, "host_root": "/"},
    ]
    fresh = History(720, spacing_s=10.0)
    taken = fresh.seed(entries)
    assert [s.taken_at for s in fresh.snapshots()] == [good[i]["taken_at"] for i in (0, 1, 4, 6)] and taken == 4
    assert History(720, spacing_s=10.0).seed("garbage") == 0  # type: ignore[arg-type]
    assert History(720, spacing_s=10.0).seed([{**good[1], "pci": "="}]) == 0  # "=" with nothing before it


def test_seeded_entries_go_in_front_and_the_first_collection_is_kept_whole():
    h, snaps = flapping_history()
    exported = h.export(snaps[-1].taken_at, flap_window_s=FLAP, rate_window_s=RATE)
    fresh = History(720, spacing_s=10.0)
    first = at(snaps[-1], snaps[-1].taken_at + 30)
    fresh.append(first)
    assert fresh.seed(exported) == len(exported)
    assert fresh.snapshots()[-1] is first and not is_compact(first)
    newer = History(720, spacing_s=10.0)
    newer.append(at(snaps[0], T - 1000))
    assert newer.seed(exported) == 0  # not older than what is there: not taken
