"""Expected values and the managed-file writes of the daemon pipeline."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from agentd.config import AgentConfig
from agentd.judging.expected import Expected, expected_values
from agentd.judging.roles import HcaRoles
from agentd.outputs.evaluate import Evaluation, Evaluator
from agentd.outputs.writer import FileKeeper, NfdKeeper, planned_files
from tests.support import service_snapshots as fixtures

ROLES = HcaRoles(("mlx5_0", "mlx5_1"), (), "config")


def ev(env_sh="export NCCL_IB_HCA==mlx5_0:1\n", topo="<system/>\n", problems=()):
    render = SimpleNamespace(env_sh=env_sh, env_conf="NCCL_IB_HCA==mlx5_0:1\n", topo_xml=topo)
    return Evaluation(findings=(), status="ok", roles=ROLES, expected=Expected(), render=render, nccl_problems=tuple(problems))


def cfg(tmp_path, **nccl):
    return AgentConfig(paths={"nccl_env": str(tmp_path / "nccl.env"), "nccl_conf": str(tmp_path / "nccl.conf"),
                              "nccl_topo": str(tmp_path / "topo.xml")}, nccl=nccl)


def test_expected_values_follow_config_then_inference():
    snap = fixtures.snapshot()
    e = expected_values(snap, ROLES, AgentConfig())
    assert e.port_rate_gbps[("mlx5_0", 1)] == 400.0 and e.port_width[("mlx5_0", 1)] == 4
    assert e.netdev_mtu == {"ens1np0": 9000}  # RoCE port of a compute HCA
    e = expected_values(snap, ROLES, AgentConfig(expect={"rate_gbps": 200, "width": 2, "ipoib_mtu": 2044}))
    assert e.port_rate_gbps[("mlx5_0", 1)] == 200 and e.port_width[("mlx5_1", 1)] == 2
    assert e.netdev_mtu["ibp27s0"] == 2044


def test_planned_files_follow_config(tmp_path):
    assert [n for n, _, _ in planned_files(ev(), cfg(tmp_path))] == ["nccl.env", "topo.xml"]
    assert [n for n, _, _ in planned_files(ev(), cfg(tmp_path, write_conf=True, write_topo=False))] == ["nccl.env", "nccl.conf"]
    assert planned_files(ev(), cfg(tmp_path, enabled=False)) == []


def test_written_once_then_only_on_change(tmp_path):
    k, c = FileKeeper(), cfg(tmp_path)
    st = {s.name: s for s in k.write(ev(), c)}
    assert st["nccl.env"].changed and st["nccl.env"].ok and st["nccl.env"].last_write_at
    assert (tmp_path / "nccl.env").read_text().startswith("export NCCL_IB_HCA==mlx5_0:1")
    st = {s.name: s for s in k.write(ev(), c)}
    assert not st["nccl.env"].changed
    st = {s.name: s for s in k.write(ev(env_sh="export NCCL_IB_HCA==mlx5_1:1\n"), c)}
    assert st["nccl.env"].changed and "mlx5_1" in (tmp_path / "nccl.env").read_text()


def test_render_problems_write_nothing_and_are_reported(tmp_path):
    k, c = FileKeeper(), cfg(tmp_path)
    k.write(ev(), c)
    before = (tmp_path / "nccl.env").read_bytes()
    st = {s.name: s for s in k.write(ev(env_sh="export X=1\n", problems=["NCCL_IB_HCA would be empty"]), c)}
    assert not st["nccl.env"].ok and "NCCL_IB_HCA would be empty" in st["nccl.env"].error
    assert (tmp_path / "nccl.env").read_bytes() == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_failed_write_keeps_the_old_file_and_counts(tmp_path):
    k, c = FileKeeper(), cfg(tmp_path)
    k.write(ev(), c)
    before = (tmp_path / "nccl.env").read_bytes()
    os.chmod(tmp_path, 0o555)
    try:
        st = {s.name: s for s in k.write(ev(env_sh="export NCCL_IB_HCA==mlx5_1:1\n"), c)}
    finally:
        os.chmod(tmp_path, 0o755)
    assert not st["nccl.env"].ok and st["nccl.env"].failures_total == 1 and st["nccl.env"].error
    assert (tmp_path / "nccl.env").read_bytes() == before


def test_failed_write_to_an_impossible_path(tmp_path):
    (tmp_path / "file").write_text("x")
    c = AgentConfig(paths={"nccl_env": str(tmp_path / "file" / "nccl.env"), "nccl_topo": str(tmp_path / "topo.xml")})
    st = {s.name: s for s in FileKeeper().write(ev(), c)}
    assert not st["nccl.env"].ok and st["nccl.env"].failures_total == 1


def test_drift_is_detected_and_restored(tmp_path):
    k, c = FileKeeper(), cfg(tmp_path)
    k.write(ev(), c)
    p = tmp_path / "nccl.env"
    p.write_text(p.read_text().replace("mlx5_0", "mlx5_9"))
    st = {s.name: s for s in k.write(ev(), c)}
    assert st["nccl.env"].drift_total == 1 and st["nccl.env"].changed
    assert "mlx5_0" in p.read_text()


def test_evaluator_reuses_the_last_evaluation_only_for_identical_inputs():
    from agentd.collection.history import share

    calls = []

    def fn(snap, hist, config, baseline, **_):
        calls.append(snap.taken_at)
        return ev()

    e, c = Evaluator(fn), AgentConfig()
    a = fixtures.snapshot(0.0)
    e(a, (), c, None, refresh_s=60)
    b = share(a, fixtures.snapshot(2.0))  # same content: shared parts
    e(b, (a,), c, None, refresh_s=60)
    assert calls == [0.0] and e.hits == 1
    e(b, (a,), c, None, refresh_s=0)  # too old: evaluated again
    assert calls == [0.0, 2.0]
    changed = share(b, fixtures.snapshot(4.0, netdevs=fixtures.snapshot().netdevs[:1]))
    e(changed, (a, b), c, None, refresh_s=60)
    assert calls[-1] == 4.0
    e(changed, (a, b), AgentConfig(), None, refresh_s=60)  # another config object
    assert len(calls) == 4


def test_nfd_labels_written_on_change_and_kept_alive(tmp_path):

    path = tmp_path / "features.d" / "agentd"
    c = AgentConfig(paths={"nfd_features": str(path)})
    k, snap = NfdKeeper(), fixtures.snapshot()
    st = k.write(snap, ev(), "ok", c, 1000.0)
    assert st.ok and st.changed and "agentd.io/fabric-health=ok" in path.read_text()
    assert not k.write(snap, ev(), "ok", c, 1001.0).changed  # same labels, expiry far away
    assert k.write(snap, ev(), "critical", c, 1002.0).changed
    assert "fabric-health=critical" in path.read_text()
    assert k.write(snap, ev(), "critical", c, 1002.0 + 3600).changed  # refreshed before expiry
    assert NfdKeeper().write(snap, ev(), "ok", AgentConfig(), 0.0) is None


def test_maintenance_keeps_the_nccl_files_as_they_are_and_labels_the_node(tmp_path):
    from agentd.outputs.writer import Writer

    c = AgentConfig(paths={"nccl_env": str(tmp_path / "nccl.env"), "nccl_conf": str(tmp_path / "nccl.conf"),
                           "nccl_topo": str(tmp_path / "topo.xml"), "nfd_features": str(tmp_path / "features")})
    w, snap = Writer(), fixtures.snapshot()
    w.write(ev(), c, snap, "ok", None)
    before = (tmp_path / "nccl.env").read_bytes()
    (tmp_path / "topo.xml").write_text("edited by hand during the work\n")  # drift, too, is left alone
    statuses, _ = w.write(ev(env_sh="export NCCL_IB_HCA==mlx5_1:1\n"), c, snap, "maintenance", None, True)
    assert (tmp_path / "nccl.env").read_bytes() == before
    assert (tmp_path / "topo.xml").read_text() == "edited by hand during the work\n"
    assert not any(s.changed for s in statuses if s.name != "nfd-features")
    assert "agentd.io/fabric-health=maintenance" in (tmp_path / "features").read_text()
    w.write(ev(env_sh="export NCCL_IB_HCA==mlx5_1:1\n"), c, snap, "ok", None)  # maintenance over
    assert "mlx5_1" in (tmp_path / "nccl.env").read_text()


def test_withheld_findings_label_nothing(tmp_path):
    from agentd.judging.findings import finding, gpu_subject
    from agentd.outputs.nfd import nfd_labels

    snap = fixtures.snapshot()
    gdr = finding("gdr.unavailable", "critical", gpu_subject(0), "no GPUDirect RDMA")
    assert nfd_labels(None, [gdr], snap)["agentd.io/fabric-health"] == "critical"
    assert nfd_labels(None, [gdr], snap)["agentd.io/gdr"] == "none"  # a critical gdr.* finding says no GDR
    observed = gdr.model_copy(update={"withheld": "observe"})
    assert nfd_labels(None, [observed], snap) == nfd_labels(None, [], snap)


async def test_a_steady_publish_judges_without_a_worker_thread(monkeypatch):
    """Publisher.judge: when the collector's snapshot content is the last one's (``steady``
    gives it) and the evaluation would be reused, nothing goes to a worker thread; any
    change (content, config) takes the thread path again."""
    import asyncio

    from agentd.collection.history import History
    from agentd.daemon.publisher import Publisher

    hops, judged = [], []
    real = asyncio.to_thread

    async def to_thread(fn, *args):
        hops.append(fn)
        return await real(fn, *args)

    monkeypatch.setattr(asyncio, "to_thread", to_thread)

    def fn(snap, hist, config, baseline, **_):
        judged.append(snap.taken_at)
        return ev()

    pub, history, config = Publisher(evaluate=fn, log=None), History(720, 10.0), AgentConfig()
    pub.baseline_read_from = config.paths.baseline  # no baseline file to read here
    content = fixtures.snapshot(1.0)

    def at(t):
        return content.model_copy(update={"taken_at": t})

    s1, e1 = await pub.judge(lambda: at(1.0), history, config, lambda: None)
    assert len(hops) == 1 and judged == [1.0]
    s2, e2 = await pub.judge(lambda: at(2.0), history, config, lambda: at(2.0))
    assert len(hops) == 1 and e2 is e1 and s2.taken_at == 2.0  # on the loop, evaluation reused
    assert all(getattr(s2, f) is getattr(s1, f) for f in ("pci", "hcas", "netdevs", "gpus", "nvml", "system"))
    assert history.snapshots()[-1] is s2
    changed = fixtures.snapshot(3.0, netdevs=content.netdevs[:1])
    await pub.judge(lambda: changed, history, config, lambda: None)  # the collector saw a change
    assert len(hops) == 2 and judged[-1] == 3.0
    other = AgentConfig()
    await pub.judge(lambda: changed.model_copy(update={"taken_at": 4.0}), history, other, lambda: changed.model_copy(update={"taken_at": 4.0}))
    assert len(hops) == 3 and judged[-1] == 4.0  # another config object: judged again, in a thread


async def test_a_steady_publish_skips_the_writer_for_up_to_a_medium_interval(tmp_path, monkeypatch):
    """The very inputs of a write that changed and failed nothing: its statuses again, no
    hand-off to the writer lane, until ``intervals.medium_s`` has passed; then the files are
    checked (someone's edit is restored); any other input writes at once."""
    import agentd.daemon.publisher as publisher
    from agentd.daemon.publisher import Publisher
    from agentd.outputs.writer import Writer

    class Counting(Writer):
        calls = 0

        def write(self, *args):
            self.calls += 1
            return super().write(*args)

    config = AgentConfig(paths={"nccl_env": str(tmp_path / "nccl.env"), "nccl_topo": str(tmp_path / "topo.xml"),
                                "baseline": str(tmp_path / "baseline.json")}, intervals={"medium_s": 60})
    writer = Counting()
    pub = Publisher(writer=writer, log=None)
    pub.baseline_read_from = config.paths.baseline
    snap, e = fixtures.snapshot(), ev()
    later = snap.model_copy(update={"taken_at": snap.taken_at + 2})  # a steady publish: same content, new time

    first = await pub.write(e, snap, config, {})
    assert writer.calls == 1 and {s.name: s for s in first}["nccl.env"].changed
    second = await pub.write(e, later, config, {})
    assert writer.calls == 2 and not any(s.changed for s in second)  # nothing changed: the next ones are quiet
    assert await pub.write(e, later, config, {}) == second and writer.calls == 2
    path = tmp_path / "nccl.env"
    path.write_text(path.read_text().replace("mlx5_0", "mlx5_9"))  # someone edits the file
    assert await pub.write(e, later, config, {}) == second and writer.calls == 2  # not seen yet
    # another input writes at once: maintenance, another evaluation, other snapshot content
    await pub.write(e, later, config, {}, maintenance=True)
    assert writer.calls == 3
    await pub.write(e, later, config, {})
    await pub.write(ev(), later, config, {})
    assert writer.calls == 5
    other = fixtures.snapshot(snap.taken_at, netdevs=snap.netdevs[:1])
    await pub.write(e, other, config, {})
    assert writer.calls == 6
    # quiet again; past the medium interval the writer checks the files: the edit is restored
    path.write_text(path.read_text().replace("mlx5_0", "mlx5_9"))
    await pub.write(e, other, config, {})
    calls = writer.calls
    assert await pub.write(e, other, config, {}) is not None and writer.calls == calls
    monkeypatch.setattr(publisher.time, "monotonic", lambda real=publisher.time.monotonic: real() + 61)
    statuses = {s.name: s for s in await pub.write(e, other, config, {})}
    assert writer.calls == calls + 1
    assert statuses["nccl.env"].changed and "mlx5_0" in path.read_text() and "mlx5_9" not in path.read_text()
