"""RoCE carrier flaps between two polls are counted (issue 42, item 10).

A RoCE port whose link drops and comes back between two reads shows ACTIVE at every read,
and mlx5 need not move ``link_downed`` for it; the kernel counts each loss in its
netdev's ``carrier_down_count`` (and ``carrier_changes``), which agentd read and exported
but never judged. They now count toward ``ib.port.flapping`` with the IB flap judgement's
window and threshold.

Through `agentd check` on a simulated RoCE node (two collections, the carrier counts
advanced between them) and through the check over a history.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd import cli, sim
from agentd.judging.checks.ib import check_flapping
from tests.support.check_runs import between_collections
from tests.support.check_snapshots import cfg, inp, later, node, with_netdev

NETDEV = "ens4np0"  # mlx5_3's on h100-roce


def _bump(root: Path, netdev: str, downs: int) -> None:
    """``downs`` carrier losses, each followed by the carrier coming back."""
    d = root / "sys/class/net" / netdev
    for name, by in (("carrier_changes", 2 * downs), ("carrier_up_count", downs), ("carrier_down_count", downs)):
        f = d / name
        f.write_text(f"{int(f.read_text()) + by}\n")


def check(root: Path, tmp_path: Path, capsys, monkeypatch, between) -> tuple[int, dict[tuple[str, str], dict]]:
    between_collections(monkeypatch, between)
    conf = tmp_path / "agentd.toml"
    conf.write_text("[intervals]\ncheck_rate_window_s = 0.1\n[timeouts]\nnvml_s = 2\n")
    rc = cli.main(["check", "--host-root", str(root), "--config", str(conf), "--format", "json"])
    return rc, {(f["code"], f["subject"]): f for f in json.loads(capsys.readouterr().out)["findings"]}


@pytest.mark.tree
def test_carrier_flaps_between_polls_make_a_roce_port_flapping(tmp_path, capsys, monkeypatch):
    root = sim.build_tree("h100-roce", tmp_path / "root")
    rc, found = check(root, tmp_path, capsys, monkeypatch, lambda: _bump(root, NETDEV, 3))  # three drops, up at every read
    f = found.get(("ib.port.flapping", "mlx5_3:1"))
    assert f is not None, sorted(found)
    assert f["severity"] == "critical" and f"{NETDEV} carrier lost 3" in f["message"] and "link_downed +0" in f["message"]
    assert rc == 2


@pytest.mark.tree
def test_fewer_carrier_losses_than_the_threshold_are_not_flapping(tmp_path, capsys, monkeypatch):
    root = sim.build_tree("h100-roce", tmp_path / "root")
    rc, found = check(root, tmp_path, capsys, monkeypatch, lambda: _bump(root, NETDEV, 2))
    assert ("ib.port.flapping", "mlx5_3:1") not in found and rc == 0


def test_carrier_changes_count_half_where_there_is_no_down_count_and_the_ways_are_not_added():
    s = node(layer="Ethernet")
    nd = next(p.netdev for h in s.hcas for p in h.ports if p.netdev and h.name == "mlx5_3")
    base = with_netdev(s, nd, carrier_changes=10, carrier_down_count=None)
    flapped = later(with_netdev(s, nd, carrier_changes=16, carrier_down_count=None), 10)  # 6 changes: 3 downs
    [f] = [x for x in check_flapping(inp(flapped, [base])) if x.subject == "mlx5_3:1"]
    assert f.measured == 3
    both = later(with_netdev(s, nd, carrier_changes=16, carrier_down_count=3), 10)
    downs_only = with_netdev(s, nd, carrier_changes=10, carrier_down_count=0)
    [f] = [x for x in check_flapping(inp(both, [downs_only])) if x.subject == "mlx5_3:1"]
    assert f.measured == 3  # the same three losses, counted once
    reset = later(with_netdev(s, nd, carrier_changes=0, carrier_down_count=0), 10)  # the netdev was re-created
    assert check_flapping(inp(reset, [with_netdev(s, nd, carrier_changes=100, carrier_down_count=50)])) == []
    config = cfg(thresholds={"flap_window_s": 5})  # losses older than the window do not count
    assert [x for x in check_flapping(inp(flapped, [base], config=config)) if x.subject == "mlx5_3:1"] == []


def test_carrier_losses_survive_compaction_aging_and_a_restart():
    """The daemon's history keeps the carrier counts in compact and aged entries and in the
    state file, so flaps counted over the flap window are neither lost nor counted twice."""
    from agentd.collection.history import History

    s = node(layer="Ethernet")
    nd = next(p.netdev for h in s.hcas for p in h.ports if p.netdev and h.name == "mlx5_3")
    t0 = 1_700_000_000.0
    h = History(720, spacing_s=10.0, recent_s=60.0)
    for i in range(40):  # one loss every 100 s, the port up at every read; entries age after 60 s
        h.append(later(with_netdev(s, nd, carrier_changes=2 * (i // 10), carrier_down_count=i // 10), t0 + 10 * i - s.taken_at))
    now = later(with_netdev(s, nd, carrier_changes=6, carrier_down_count=3), t0 + 400 - s.taken_at)
    [f] = [x for x in check_flapping(inp(now, h.snapshots())) if x.subject == "mlx5_3:1"]
    assert f.measured == 3
    entries = json.loads(json.dumps(h.export(now.taken_at, flap_window_s=12 * 3600.0, rate_window_s=60.0)))
    fresh = History(720, spacing_s=10.0)
    fresh.seed(entries)
    [f] = [x for x in check_flapping(inp(now, fresh.snapshots())) if x.subject == "mlx5_3:1"]
    assert f.measured == 3
