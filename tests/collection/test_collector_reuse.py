"""Doing only what changed: a journaled probe whose files answer the same keeps its output
object; any change (a file's bytes, a directory entry, a dependency) makes it read in full."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd import sim
from agentd.collection.collector import PROBES, Collector
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = Path(sim.build_tree("h100-ib", tmp_path_factory.mktemp("reuse") / "root"))
    # a process table (the daemons probe reads it), where the profile does not write one
    for pid, comm in (("1", "systemd"), ("2741", "nv-fabricmanage")):
        if not (root / "proc" / pid / "comm").exists():
            (root / "proc" / pid).mkdir(parents=True, exist_ok=True)
            (root / "proc" / pid / "comm").write_text(comm + "\n")
    return root


def _collector(root: Path) -> Collector:
    return Collector(HostRoot.at(root), AgentConfig())


@pytest.mark.tree
def test_steady_node_keeps_every_file_probes_output_and_snapshot_content(tree: Path) -> None:
    c = _collector(tree)
    c.run_sync()
    first = dict(c.outputs)
    snap1 = c.snapshot()
    c.run_sync()
    snap2 = c.snapshot()
    for spec in PROBES:
        out = c.outputs[spec.name]
        if spec.name in ("nvml", "kernel"):
            # NVML is asked every time (simulated hangs must hang); the kernel log is a
            # stream read on; an answer with nothing new keeps the previous object.
            assert not out.reused
            assert out.data is first[spec.name].data, spec.name
            continue
        assert out.reused, spec.name
        assert out.data is first[spec.name].data, spec.name
        assert out.status.files_read == first[spec.name].status.files_read > 0 or spec.name in ("ethtool", "dcb"), spec.name
    # every probe's status is new, the content is the very same objects
    assert snap2.taken_at >= snap1.taken_at
    for part in ("pci", "hcas", "netdevs", "gpus", "system", "gdr", "kernel"):
        assert getattr(snap2, part) is getattr(snap1, part), part


@pytest.mark.tree
def test_a_changed_file_is_read_in_full_and_reported(tree: Path, tmp_path: Path) -> None:
    root = Path(sim.build_tree("h100-ib", tmp_path / "root"))
    c = _collector(root)
    c.run_sync()
    before = c.snapshot()
    pci = c.outputs["pci"].data
    port = next(p for h in before.hcas if h.name == "mlx5_2" for p in h.ports)
    assert port.state.upper().endswith("ACTIVE")
    sim.apply_fault(root, "port_down@mlx5_2")
    c.run_sync(["ib", "netdev"])
    assert not c.outputs["ib"].reused
    after = c.snapshot()
    port = next(p for h in after.hcas if h.name == "mlx5_2" for p in h.ports)
    assert "DOWN" in port.state.upper()
    # the probes that were not run keep their outputs (a new snapshot is assembled from them)
    assert c.outputs["pci"].data is pci and after.pci == before.pci
    sim.clear_fault(root, "port_down@mlx5_2")
    c.run_sync(["ib"])
    restored = next(p for h in c.snapshot().hcas if h.name == "mlx5_2" for p in h.ports)
    assert restored.state.upper().endswith("ACTIVE")


@pytest.mark.tree
def test_a_new_directory_entry_is_seen(tmp_path: Path) -> None:
    root = Path(sim.build_tree("h100-ib", tmp_path / "root"))
    c = _collector(root)
    c.run_sync(["pci"])
    c.run_sync(["pci"])
    assert c.outputs["pci"].reused and not c.outputs["pci"].errors
    (root / "sys/bus/pci/devices/not-a-bus-id").mkdir()  # the listing answers differently now
    c.run_sync(["pci"])
    out = c.outputs["pci"]
    assert not out.reused
    assert [e.kind for e in out.errors if e.path.endswith("not-a-bus-id")] == ["unparsable"]


@pytest.mark.tree
def test_a_dependency_that_changed_makes_the_dependent_read_in_full(tmp_path: Path) -> None:
    root = Path(sim.build_tree("h100-roce", tmp_path / "root"))
    c = _collector(root)
    c.run_sync()
    netdevs = c.outputs["netdev"].data
    c.run_sync(["netdev", "ethtool"])
    assert c.outputs["netdev"].data is netdevs and c.outputs["ethtool"].reused
    sim.apply_fault(root, "port_down@mlx5_2")
    c.run_sync(["netdev", "ethtool"])
    assert c.outputs["netdev"].data is not netdevs
    assert not c.outputs["ethtool"].reused


def test_a_failed_run_is_never_reused(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = _collector(tree)
    c.run_sync(["pci"])
    import agentd.collection.collector as col

    spec = col.PROBE_BY_NAME["pci"]
    boom = col.ProbeSpec(spec.name, spec.tier, lambda ctx, o: (_ for _ in ()).throw(RuntimeError("boom")), spec.empty)
    monkeypatch.setitem(col.PROBE_BY_NAME, "pci", boom)
    # the replay would say "same": force a full run by age, which fails
    monkeypatch.setattr(col, "FULL_READ_EVERY_S", 0.0)
    c.run_sync(["pci"])
    assert not c.outputs["pci"].status.ok and c.outputs["pci"].journal is None
    monkeypatch.setitem(col.PROBE_BY_NAME, "pci", spec)
    monkeypatch.setattr(col, "FULL_READ_EVERY_S", 300.0)  # the files are unchanged: only the failure forbids reuse
    c.run_sync(["pci"])
    assert c.outputs["pci"].status.ok and not c.outputs["pci"].reused


def test_a_refresh_of_a_steady_node_reuses_the_nccl_render(tree: Path) -> None:
    from agentd.outputs.evaluate import Evaluator

    c = _collector(tree)
    c.run_sync()
    snap = c.snapshot()
    ev = Evaluator()
    first = ev(snap, (), c.config, None, refresh_s=0.0)  # refresh_s 0: every call evaluates again
    second = ev(snap, (), c.config, None, refresh_s=0.0)
    assert second is not first and second.findings == first.findings
    assert second.render is first.render  # same content, same config, equal findings: not rendered again
    other = c.config.model_copy(update={"nccl": c.config.nccl.model_copy(update={"ib_tc": 106})})
    third = ev(snap, (), other, None, refresh_s=0.0)
    assert third.render is not first.render and ("NCCL_IB_TC", "106") in third.nccl_env


# -- the quick check: the fast tier's signals every scheduled cycle, the whole journal every medium interval


def _mtu(c: Collector, name: str) -> int | None:
    return next(n.mtu for n in c.outputs["netdev"].data if n.name == name)


def _quick(c: Collector, names: list[str]) -> None:
    import asyncio

    asyncio.run(c.run(names, quick=True))


@pytest.mark.tree
def test_a_quick_check_reads_only_the_signals_and_the_whole_journal_when_due(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import agentd.collection.collector as col

    root = Path(sim.build_tree("h100-ib", tmp_path / "root"))
    c = Collector(HostRoot.at(root), AgentConfig.model_validate({"intervals": {"medium_s": 3600}}))
    c.run_sync()
    full = {n: c.outputs[n].status.files_read for n in ("ib", "netdev")}
    netdevs = c.outputs["netdev"].data
    (root / "sys/class/net/ib0/mtu").write_text("2044\n")  # not a signal: a quick check does not see it
    reads = []
    from agentd.host import fs

    real = fs.read_bounded
    monkeypatch.setattr(fs, "read_bounded", lambda p, *a: (reads.append(p), real(p, *a))[1])
    _quick(c, ["ib", "netdev"])
    monkeypatch.setattr(fs, "read_bounded", real)
    assert 0 < len(reads) <= sum(full.values()) / 2, (len(reads), full)
    for name in ("ib", "netdev"):
        out = c.outputs[name]
        assert out.reused and out.status.files_read == full[name]  # the gauge keeps the probe's whole count
    assert c.outputs["netdev"].data is netdevs
    # a run that is not quick (an event, a reload) replays the whole journal: the MTU is seen
    c.run_sync(["netdev"])
    assert not c.outputs["netdev"].reused and _mtu(c, "ib0") == 2044
    # a signal is seen by the quick check
    sim.apply_fault(root, "port_down@mlx5_2")
    _quick(c, ["ib", "netdev"])
    assert not c.outputs["ib"].reused
    assert any("DOWN" in p.state.upper() for h in c.outputs["ib"].data if h.name == "mlx5_2" for p in h.ports)
    # once the whole journal is older than the medium interval, a quick check replays all of it
    (root / "sys/class/net/ib0/mtu").write_text("4092\n")
    monkeypatch.setattr(col.time, "monotonic", lambda real=col.time.monotonic: real() + 3600)
    _quick(c, ["netdev"])
    assert not c.outputs["netdev"].reused and _mtu(c, "ib0") == 4092


@pytest.mark.tree
def test_a_quick_check_sees_a_flap_between_two_cycles(tmp_path: Path) -> None:
    """The carrier went down and up again between two checks: state reads the same, the
    kernel's carrier_changes count does not."""
    root = Path(sim.build_tree("h100-roce", tmp_path / "root"))
    c = Collector(HostRoot.at(root), AgentConfig.model_validate({"intervals": {"medium_s": 3600}}))
    c.run_sync()
    name = next(n.name for n in c.outputs["netdev"].data if n.carrier_changes is not None and not n.is_virtual)
    path = root / "sys/class/net" / name / "carrier_changes"
    path.write_text(f"{int(path.read_text()) + 2}\n")
    _quick(c, ["netdev"])
    assert not c.outputs["netdev"].reused
    assert next(n.carrier_changes for n in c.outputs["netdev"].data if n.name == name) == int(path.read_text())
