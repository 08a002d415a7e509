"""The history's typed contract: every entry but the newest is a CompactEntry (an AgedEntry
once older than every counter window) that keeps exactly what agentd.model.HistoryEntry
declares, and the checks judge it as they judge the whole snapshots it replaces."""

from __future__ import annotations

import typing

from agentd.collection.compact import AgedEntry, CompactEntry, is_aged, is_compact
from agentd.collection.history import History
from agentd.judging.checks.qos import check_roce_qos
from agentd.model import HISTORY_ETHTOOL, HistoryEntry, NodeSnapshot, PfcConfig
from tests.support import check_snapshots as cs

DEFAULT_MAP = {d: d >> 3 for d in range(64)}


def _members(protocol: type) -> set[str]:
    return {n for n in vars(protocol) if not n.startswith("_")}


def test_compact_entries_have_exactly_what_history_entry_declares():
    declared = _members(HistoryEntry)
    assert declared == set(CompactEntry.__slots__) | {"hca", "netdev", "pci_device"}
    # a whole snapshot has every one of them (so it is a HistoryEntry as it is)
    assert declared <= set(NodeSnapshot.model_fields) | {n for n in vars(NodeSnapshot) if not n.startswith("_")}


def test_compactness_is_the_entry_type():
    h = History(maxlen=100, spacing_s=10.0, recent_s=60.0)
    base = cs.node(t=0.0)
    for i in range(80):  # 800 s: the oldest entries outlive the 60 s window and are aged
        h.append(cs.at(base, 10.0 * i))
    *older, newest = h.snapshots()
    assert isinstance(newest, NodeSnapshot) and not is_compact(newest)
    assert all(isinstance(s, CompactEntry) and is_compact(s) for s in older)
    aged = [s for s in older if isinstance(s, AgedEntry)]
    assert aged and all(is_aged(s) for s in aged) and not any(is_aged(s) for s in older if s not in aged)
    assert all(s.taken_at < newest.taken_at - 60.0 for s in aged)


def _roce_node():
    s = cs.node(layer="Ethernet")
    for i in range(8):
        s = cs.with_netdev(s, f"eth{i}", pfc=PfcConfig(enabled=(3,), trust="dscp", source="dcbnl", dscp2prio=DEFAULT_MAP))
    return cs.with_ethtool(s, "eth2", **{f"tx_prio{p}_bytes": 0 for p in range(8)})


def _sent(s, per_prio):
    p = cs.port(s, "mlx5_2")
    nd = s.netdev("eth2")
    out = cs.with_counters(s, "mlx5_2", port_xmit_data=p.counters["port_xmit_data"] + 4_000_000_000 // 4)
    out = cs.with_ethtool(out, "eth2", **{f"tx_prio{k}_bytes": nd.ethtool[f"tx_prio{k}_bytes"] + v for k, v in per_prio.items()})
    return cs.later(out, 10)


def test_compact_entries_keep_the_statistics_lossy_traffic_is_measured_over():
    """400 MB/s of RDMA on a priority without PFC for 50 s, then 10 s on the lossless one:
    the 60 s window still says lossy, with compact entries as with whole snapshots (they
    kept the pause counters only, so the rate was the last step's alone)."""
    seq = [_roce_node()]
    for i in range(6):
        seq.append(_sent(seq[-1], {0: 4_000_000_000} if i < 5 else {3: 4_000_000_000}))
    h = History(maxlen=100, spacing_s=10.0)
    for s in seq[:-1]:
        h.append(s)
    current = seq[-1]
    whole = check_roce_qos(cs.inp(current, seq[:-1]))
    assert [f.code for f in whole] == ["roce.qos.lossy_traffic"]
    assert check_roce_qos(cs.inp(current, h.snapshots())) == whole
    kept = h.snapshots()[0].netdev("eth2").ethtool
    assert set(kept) == {k for k in HISTORY_ETHTOOL if k in seq[0].netdev("eth2").ethtool}


def test_history_entry_is_what_the_checks_are_given():
    from agentd.judging.checks.common import CheckInput

    assert typing.get_type_hints(CheckInput)["history"] == tuple[HistoryEntry, ...]
