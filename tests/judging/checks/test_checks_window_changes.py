"""Rate checks read each history window through ``changes``: entries that repeat their
predecessor's parts (the history shares unchanged parts) are skipped. That must change no
finding, only the cost: these tests judge the same node with the daemon's shared history
and with a copy of it in which no entry shares anything with another."""

from __future__ import annotations

import copy
import os
import random

import pytest

from agentd.collection.history import History
from agentd.config import AgentConfig
from agentd.judging.checks import run_checks
from agentd.judging.checks.common import changes, in_window
from agentd.model import AerCounts, NodeSnapshot, PcieAer
from tests.support.check_snapshots import (
    inp,
    later,
    layout,
    node,
    port,
    with_counters,
    with_ethtool,
    with_nvlink,
    with_nvml_gpu,
    with_pci,
    with_port,
)

NIC = layout(0)["nic"]


def _aer(fatal: int, cor: int) -> PcieAer:
    return PcieAer(correctable=AerCounts(total=cor, by_type={"RxErr": cor}), nonfatal=AerCounts(total=0, by_type={}),
                   fatal=AerCounts(total=fatal, by_type={"DLP": fatal}))


def _step(s: NodeSnapshot, rng: random.Random, ethernet: bool) -> NodeSnapshot:
    """The next reading: mostly nothing moved; sometimes one counter rose or was reset."""
    s = later(s, rng.choice((10.0, 15.0, 30.0)))
    kind = rng.choice(("steady",) * 5 + ("ib", "ib_reset", "nvlink", "aer", "replay", "flap", "width")
                      + (("pause", "cnp") if ethernet else ()))
    hca = f"mlx5_{rng.randrange(2)}"
    if kind == "ib":
        v = port(s, hca).counters.get("symbol_error", 0)
        s = with_counters(s, hca, symbol_error=v + rng.choice((1, 5, 50, 400)))
    elif kind == "ib_reset":
        s = with_counters(s, hca, symbol_error=0, link_error_recovery=0)
    elif kind == "flap":  # the port goes down (link_downed rises) or comes back
        p = port(s, "mlx5_1")
        down = p.state == "ACTIVE"
        s = with_port(s, "mlx5_1", state="DOWN" if down else "ACTIVE", phys_state="Disabled" if down else "LinkUp",
                      counters={**p.counters, "link_downed": p.counters.get("link_downed", 0) + int(down)})
    elif kind == "width":  # the NIC's link retrains narrower, or back
        d = s.pci_device(NIC)
        assert d is not None
        s = with_pci(s, NIC, current_link_width=8 if d.current_link_width == 16 else 16)
    elif kind == "nvlink":
        g = s.nvml.gpus[0]
        errors = dict(g.nvlinks[3].errors)
        errors["crc_flit"] += rng.choice((1, 10, 1000))
        s = with_nvlink(s, 0, 3, errors=errors)
    elif kind == "aer":
        d = s.pci_device(NIC)
        assert d is not None and d.aer is not None
        s = with_pci(s, NIC, aer=_aer(d.aer.fatal.total + rng.choice((0, 1)), d.aer.correctable.total + rng.choice((1, 200))))  # type: ignore[union-attr]
    elif kind == "replay":
        g = s.nvml.gpus[1]
        s = with_nvml_gpu(s, 1, pcie_replay_errors=(g.pcie_replay_errors or 0) + rng.choice((1, 100, 5000)))
    elif kind == "pause":
        nd = s.netdev("eth0")
        assert nd is not None and nd.ethtool is not None
        s = with_ethtool(s, "eth0", rx_prio3_pause=nd.ethtool["rx_prio3_pause"] + rng.choice((10, 100000)))
    elif kind == "cnp":
        v = port(s, "mlx5_0").hw_counters.get("np_cnp_sent", 0)
        s = with_counters(s, "mlx5_0", hw=True, np_cnp_sent=v + rng.choice((5, 50000)))
    return s


def _start(ethernet: bool) -> NodeSnapshot:
    s = node(gpus=2, layer="Ethernet" if ethernet else "InfiniBand")
    s = with_pci(s, NIC, aer=_aer(0, 0))
    s = with_nvml_gpu(s, 1, pcie_replay_errors=0)
    s = with_counters(s, "mlx5_0", symbol_error=0, link_error_recovery=0)
    if ethernet:
        s = with_counters(s, "mlx5_0", hw=True, np_cnp_sent=0)
    return s


def _unshared(history: tuple[NodeSnapshot, ...]) -> tuple[NodeSnapshot, ...]:
    """The same entries, each copied on its own: no part is the object of another entry."""
    return tuple(copy.deepcopy(s) for s in history)


def _key(findings: list) -> list[tuple[str, str, str, str]]:
    return [(f.code, f.subject, f.severity, f.message) for f in findings]


# Three seeds cover both link layers in CI; TEST_SEEDS=12 (or more) for a deeper run.
SEEDS = int(os.environ.get("TEST_SEEDS", "3"))
COMPARE_EVERY = 10  # steps between comparisons with an unshared copy (deep copies of the whole history)


@pytest.mark.parametrize("seed", range(SEEDS))
def test_shared_history_judges_like_an_unshared_copy(seed: int) -> None:
    rng = random.Random(seed)
    ethernet = seed % 2 == 1
    config = AgentConfig()
    h = History(maxlen=720, spacing_s=1.0)
    s = _start(ethernet)
    fired: set[str] = set()
    collapsed = False
    for step in range(80):
        hist = h.snapshots()
        shared = run_checks(inp(s, hist, config))
        if step % COMPARE_EVERY == COMPARE_EVERY - 1:
            assert _key(shared) == _key(run_checks(inp(s, _unshared(hist), config)))
        fired |= {f.code for f in shared}
        window = in_window(hist, s.taken_at, config.thresholds.rate_window_s)
        collapsed |= len(changes(window, lambda e: e.hcas, lambda e: e.nvml.gpus, lambda e: e.pci)) < len(window)
        h.append(s)
        s = _step(s, rng, ethernet)
    assert collapsed  # the shared history did skip repeated entries
    assert fired & {"ib.counter.symbol_error", "nvlink.link.errors", "pcie.aer.fatal", "pcie.aer.correctable", "gpu.pcie.replay"}
    assert fired & {"ib.port.flapping", "pcie.link.retrained"}


def test_changes_keeps_the_first_of_each_run_of_shared_parts() -> None:
    a = node(gpus=1)
    b = later(a, 10)  # the very same parts
    c = later(with_counters(a, "mlx5_0", symbol_error=7), 20)
    d = later(c, 30)
    e = later(a, 40)  # equal to a's values, but a's objects: kept (only the predecessor counts)
    window = [a, b, c, d, e]
    assert changes(window, lambda s: s.hcas) == [a, c, e]
    assert changes(window, lambda s: s.hcas, lambda s: s.netdevs) == [a, c, e]
    assert changes(window, lambda s: s.netdevs) == [a]  # netdevs never changed
    assert changes([], lambda s: s.hcas) == []
