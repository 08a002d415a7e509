"""The checks and the metrics read the same PMA saturation rule (agentd.base.pma): for
every counter and edge value, ``agentd_ib_port_pma_saturated`` exists (value 1) exactly
when ``ib.counter.saturated`` names the counter, and a 64-bit data counter above 2^32 still
has a rate."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentd.base.pma import PMA_COUNTER_WIDTHS
from agentd.config import AgentConfig
from agentd.judging.checks import CheckInput
from agentd.judging.checks.ib_counters import check_counters
from agentd.model import NodeSnapshot
from tests.support import service_snapshots as fixtures

HCA = "mlx5_0"


def with_counters(snap: NodeSnapshot, **counters: int) -> NodeSnapshot:
    hcas = []
    for h in snap.hcas:
        if h.name == HCA:
            h = h.model_copy(update={"ports": tuple(p.model_copy(update={"counters": dict(counters)}) for p in h.ports)})
        hcas.append(h)
    return snap.model_copy(update={"hcas": tuple(hcas)})


def metric_saturated(snap: NodeSnapshot, name: str) -> bool:
    text = fixtures.state(snap=snap, now=snap.taken_at).metrics_bytes().decode()
    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    hits = [s.value for s in samples if s.name == "agentd_ib_port_pma_saturated" and s.labels == {"device": HCA, "port": "1", "counter": name}]
    # A flag exists only for a saturated counter (value 1); the node count always exists.
    assert hits in ([], [1.0])
    count = [s.value for s in samples if s.name == "agentd_ib_pma_saturated_counters"]
    assert count == [float(len(hits))]
    return bool(hits)


def check_saturated(snap: NodeSnapshot, name: str, value: int) -> bool:
    found = [f for f in check_counters(CheckInput(snapshot=snap, history=(), config=AgentConfig()))
             if f.code == "ib.counter.saturated" and f.subject == f"{HCA}:1"]
    return bool(found) and f"{name}={value} (" in found[0].message


def _edges():
    for name, widths in sorted(PMA_COUNTER_WIDTHS.items()):
        for bits in widths:
            top = (1 << bits) - 1
            yield name, top - 1, False
            yield name, top, True
        yield name, 0, False
    for name in ("port_xmit_data", "port_rcv_packets"):
        yield name, 1 << 32, False


@pytest.mark.parametrize("name, value, saturated", list(_edges()))
def test_checks_and_metrics_agree(name, value, saturated):
    snap = with_counters(fixtures.snapshot(), **{name: value})
    assert metric_saturated(snap, name) is saturated
    assert check_saturated(snap, name, value) is saturated


def test_64bit_data_counter_above_2_to_the_32_has_a_rate():
    cfg = AgentConfig(thresholds={"counters": {"port_rcv_data": {"per_s": 1.0, "severity": "warning"}}})
    base = fixtures.snapshot()
    old = with_counters(base, port_rcv_data=(1 << 32) + 5)
    new = with_counters(base.model_copy(update={"taken_at": base.taken_at + 10}), port_rcv_data=(1 << 32) + 1005)
    found = check_counters(CheckInput(snapshot=new, history=(old,), config=cfg))
    assert [(f.code, f.measured) for f in found] == [("ib.counter.port_rcv_data", 100.0)]
