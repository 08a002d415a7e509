"""State that belongs to the node (DESIGN.md 3, docs/node-state.md, issue 13): a command
on a root that is not the node never reads or writes the node's baseline, NCCL files or
NFD file; a demo writes only beside its simulated root, whatever the config says; a
baseline of another node is ``baseline.foreign``, not lost GPUs and HCAs.

The configs here name paths under ``tmp/node/`` that stand for the node's own
(``/etc/nccl.env``, ``/var/lib/agentd/baseline.json``): each test asserts they stay untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentd import sim
from agentd.cli import main
from agentd.config import AgentConfig, Paths
from agentd.outputs.node_state import moved_paths, state_dir_for
from tests.support.cli import Ran, run_cli
from tests.support.daemon_harness import free_port, http_get, poll, stop_process

HANG_GUARD_S = 120  # a guard against a wedged test, not a timing assertion
NOT_THE_NODE = "is not this node"


def node_config(tmp: Path, extra: str = "") -> tuple[Path, dict[str, Path]]:
    """A config whose [paths] are the node's (under tmp/node, laid out as on a node)."""
    node = tmp / "node"
    paths = {
        "nccl_env": node / "etc/nccl.env",
        "nccl_conf": node / "etc/nccl.conf",
        "nccl_topo": node / "etc/nccl/topo.xml",
        "baseline": node / "var/lib/agentd/baseline.json",
        "state_dir": node / "var/lib/agentd",
        "nfd_features": node / "etc/kubernetes/node-feature-discovery/features.d/agentd",
    }
    cfg = tmp / "agentd.toml"
    body = "\n".join(f'{k} = "{v}"' for k, v in paths.items())
    cfg.write_text(f"[intervals]\ncheck_rate_window_s = 0.2\n[timeouts]\nnvml_s = 1\n[nccl]\nwrite_conf = true\n[paths]\n{body}\n{extra}")
    return cfg, paths


def node_files(tmp: Path) -> list[str]:
    """Everything under tmp/node (the node's paths): [] while nothing touched them."""
    return sorted(str(p) for p in (tmp / "node").rglob("*")) if (tmp / "node").exists() else []


def run_agentd(*args: str) -> Ran:
    return run_cli(*args)


def findings(p: Ran) -> set[tuple[str, str, str]]:
    return {(f["code"], f["severity"], f["subject"]) for f in json.loads(p.stdout)["findings"]}


# -- (a) agentd check on another root --------------------------------------------------
@pytest.mark.tree
def test_check_on_another_root_never_makes_the_node_baseline(tmp_path):
    """Issue 13: `agentd check --host-root OTHER` created the node's baseline from OTHER's
    inventory; the next plain `agentd check` then reported OTHER's GPUs and HCAs missing."""
    root = sim.build_tree("h100-ib", tmp_path / "other")
    cfg, paths = node_config(tmp_path)
    p = run_agentd("check", "--host-root", str(root), "--config", str(cfg), "--format", "json")
    assert p.returncode == 0, p.stderr
    assert not paths["baseline"].exists() and node_files(tmp_path) == []
    said = [line for line in p.stderr.splitlines() if NOT_THE_NODE in line]
    assert len(said) == 1 and "without a baseline" in said[0] and str(paths["baseline"]) in said[0], p.stderr

    node = run_agentd("check", "--config", str(cfg), "--format", "json")  # this machine's /, the node
    assert node.returncode in (0, 1, 2, 4), node.stderr  # 4: this machine has no GPU and no RDMA device
    assert [f for f in findings(node) if f[0].startswith("inventory.") and f[1] != "ok"] == []
    assert NOT_THE_NODE not in node.stderr


@pytest.mark.tree
def test_check_judges_against_the_recorded_baseline_read_only(tmp_path):
    from tests.support.recorded_baseline import baseline_of, record_baseline

    root = sim.build_tree("h100-ib", tmp_path / "other")
    recorded = record_baseline(root, baseline_of(root))
    before = recorded.read_bytes()
    cfg, paths = node_config(tmp_path)
    sim.apply_fault(root, "gpu_removed@gpu3")
    sim.apply_fault(root, "nic_removed@mlx5_5")
    p = run_agentd("check", "--host-root", str(root), "--config", str(cfg), "--format", "json")
    assert p.returncode == 2, p.stderr
    found = findings(p)
    assert ("inventory.hca.missing", "critical", "mlx5_5") in found
    assert any(code == "inventory.gpu.missing" for code, _, _ in found)
    assert f"against its recorded baseline {recorded}" in p.stderr
    sim.clear_fault(root, "gpu_removed@gpu3")
    sim.clear_fault(root, "nic_removed@mlx5_5")
    assert run_agentd("check", "--host-root", str(root), "--config", str(cfg)).returncode == 0
    assert recorded.read_bytes() == before and node_files(tmp_path) == []


@pytest.mark.tree
def test_baseline_commands_on_another_root_leave_the_node_baseline_alone(tmp_path):
    from tests.support.recorded_baseline import baseline_of, record_baseline

    root = sim.build_tree("h100-ib", tmp_path / "other")
    cfg, paths = node_config(tmp_path)
    paths["baseline"].parent.mkdir(parents=True)
    paths["baseline"].write_text("the node's baseline\n")
    reset = run_agentd("baseline", "reset", "--host-root", str(root), "--config", str(cfg))
    assert reset.returncode == 3 and NOT_THE_NODE in reset.stderr
    show = run_agentd("baseline", "show", "--host-root", str(root), "--config", str(cfg))
    assert show.returncode == 0 and "no recorded baseline" in show.stdout
    record_baseline(root, baseline_of(root))
    show = run_agentd("baseline", "show", "--host-root", str(root), "--config", str(cfg))
    assert show.returncode == 0 and json.loads(show.stdout)["hostname"] == "sim-h100-ib-01"
    assert paths["baseline"].read_text() == "the node's baseline\n"
    kept = Path(f"{root}-out") / "baseline.json"  # what `agentd run --host-root` on it keeps
    kept.parent.mkdir()
    kept.write_text("{}")
    show = run_agentd("baseline", "show", "--host-root", str(root), "--config", str(cfg))
    assert show.returncode == 0 and str(kept) in show.stderr  # said, not shown
    reset = run_agentd("baseline", "reset", "--host-root", str(root), "--config", str(cfg))
    assert reset.returncode == 3 and str(kept) in reset.stderr and kept.read_text() == "{}"


# -- (b) the daemon on a simulated node ------------------------------------------------
@pytest.mark.e2e
def test_simulate_writes_only_beside_its_root_whatever_the_config_says(tmp_path):
    """Issue 13: `agentd run --simulate` with the package's config (explicit /etc paths)
    wrote the simulated node's NCCL_IB_HCA and topology into the node's /etc/nccl.env."""
    cfg, paths = node_config(tmp_path)
    root = tmp_path / "sim" / "root"
    port = free_port()
    log = tmp_path / "agentd.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_") and k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    with open(log, "wb") as f:
        proc = subprocess.Popen([sys.executable, "-m", "agentd", "run", "--config", str(cfg), "--simulate", "h100-ib", "--sim-dir", str(root),
                                 "--listen", f"127.0.0.1:{port}"], stdout=f, stderr=subprocess.STDOUT, env=env)
        try:
            def written() -> bool:
                try:
                    healthy = http_get(f"http://127.0.0.1:{port}/health", timeout=2)[0] == 200
                except OSError:
                    return False
                return healthy and any(tmp_path.rglob("baseline.json")) and any(tmp_path.rglob("nccl.env"))

            assert poll(written, 60.0, 0.1), log.read_text(errors="replace")[-3000:]
        finally:
            stop_process(proc)
    assert node_files(tmp_path) == []
    out = state_dir_for(root)
    moved = moved_paths(Paths(**{k: v for k, v in paths.items()}), out)
    for key in ("nccl_env", "nccl_conf", "nccl_topo", "baseline", "nfd_features"):
        assert Path(str(moved[key])).parent == out
        assert Path(str(moved[key])).exists(), (key, sorted(p.name for p in out.iterdir()))
    text = log.read_text(errors="replace")
    assert NOT_THE_NODE in text and f"go to {out}/" in text


# -- (c) agentd render on another root -------------------------------------------------
@pytest.mark.tree
def test_render_on_another_root_writes_no_node_file(tmp_path, capsys):
    """Issue 13: `agentd render --host-root OTHER` without --out-dir wrote the node's NCCL files."""
    root = sim.build_tree("h100-ib", tmp_path / "other")
    cfg, paths = node_config(tmp_path)
    assert main(["render", "--host-root", str(root), "--config", str(cfg)]) == 3
    err = capsys.readouterr().err
    assert NOT_THE_NODE in err and "--out-dir" in err
    assert main(["render", "--host-root", str(root), "--config", str(cfg), "--diff"]) == 3
    assert node_files(tmp_path) == []
    out = tmp_path / "rendered"
    assert main(["render", "--host-root", str(root), "--config", str(cfg), "--out-dir", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["nccl-topo.xml", "nccl.conf", "nccl.env"]
    assert node_files(tmp_path) == []


# -- a baseline of another node --------------------------------------------------------
@pytest.mark.tree
def test_a_baseline_of_another_node_is_foreign_not_missing_devices(tmp_path):
    from tests.support.recorded_baseline import baseline_of, record_baseline

    other = sim.build_tree("pcie-4gpu", tmp_path / "pcie")
    root = sim.build_tree("h100-ib", tmp_path / "other")
    record_baseline(root, baseline_of(other))  # another node's inventory, hostname sim-pcie-4gpu-01
    cfg, _ = node_config(tmp_path)
    p = run_agentd("check", "--host-root", str(root), "--config", str(cfg), "--format", "json")
    assert p.returncode == 1, p.stderr
    bad = {f for f in findings(p) if f[1] != "ok"}
    assert bad == {("baseline.foreign", "warning", "node")}, bad
    msg = next(f["message"] for f in json.loads(p.stdout)["findings"] if f["code"] == "baseline.foreign")
    assert "sim-pcie-4gpu-01" in msg and "sim-h100-ib-01" in msg


@pytest.mark.tree
def test_machine_id_decides_which_node_a_baseline_is(tmp_path):
    from tests.support.recorded_baseline import baseline_of, record_baseline

    root = sim.build_tree("h100-ib", tmp_path / "other")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/machine-id").write_text("a" * 32 + "\n")
    own = baseline_of(root)
    assert own.machine_id == "a" * 32 and own.hostname == "sim-h100-ib-01"
    cfg, _ = node_config(tmp_path)
    record_baseline(root, own.model_copy(update={"machine_id": "b" * 32}))  # same hostname, another machine
    p = run_agentd("check", "--host-root", str(root), "--config", str(cfg), "--format", "json")
    assert p.returncode == 1 and {f for f in findings(p) if f[1] != "ok"} == {("baseline.foreign", "warning", "node")}
    record_baseline(root, own.model_copy(update={"hostname": "renamed"}))  # same machine, renamed: its own
    sim.apply_fault(root, "gpu_removed@gpu3")
    p = run_agentd("check", "--host-root", str(root), "--config", str(cfg), "--format", "json")
    assert p.returncode == 2 and any(c == "inventory.gpu.missing" for c, _, _ in findings(p))
    assert not any(c == "baseline.foreign" for c, _, _ in findings(p))


@pytest.mark.tree
def test_a_baseline_from_before_identities_is_adopted():
    import tempfile

    from agentd.collection.collector import Collector
    from agentd.host.fs import HostRoot
    from agentd.judging.baseline import NodeIdentity
    from agentd.judging.judge import judge

    with tempfile.TemporaryDirectory() as d:
        root = sim.build_tree("h100-ib", Path(d) / "root")
        cfg = AgentConfig(host_root=root)
        c = Collector(HostRoot.at(root), cfg)
        c.run_sync()
        snap = c.snapshot()
    first = judge(snap, (), cfg, None).new_baseline
    assert first is not None
    old = first.model_copy(update={"hostname": None, "machine_id": None, "host_root": None})
    me = NodeIdentity(machine_id="c" * 32, hostname="sim-h100-ib-01", host_root="/")
    j = judge(snap, (), cfg, old, me)
    assert j.status == "ok"  # a healthy node is never judged sick for an old baseline
    assert j.new_baseline is not None and (j.new_baseline.machine_id, j.new_baseline.hostname, j.new_baseline.host_root) == ("c" * 32, "sim-h100-ib-01", "/")
    assert j.new_baseline.gpus == old.gpus and j.new_baseline.hcas == old.hcas
    assert judge(snap, (), cfg, j.new_baseline, me).new_baseline is None  # adopted once


# -- the rule ------------------------------------------------------------------------
def test_every_state_path_moves_beside_the_root_keeping_its_name(tmp_path):
    out = state_dir_for(tmp_path / "capture")
    assert out == tmp_path / "capture-out"
    moved = moved_paths(Paths(nccl_env=Path("/etc/nccl.env"), nccl_topo=Path("/etc/nccl/topo.xml"),
                              nfd_features=Path("/etc/kubernetes/node-feature-discovery/features.d/agentd")), out)
    assert moved == {"state_dir": str(out), "nccl_env": str(out / "nccl.env"), "nccl_conf": str(out / "nccl.conf"),
                     "nccl_topo": str(out / "topo.xml"), "baseline": str(out / "baseline.json"), "nfd_features": str(out / "agentd")}
    assert moved_paths(Paths(), out)["nfd_features"] is None
    clash = moved_paths(Paths(nccl_env=Path("/a/x"), nccl_conf=Path("/b/x")), out)
    assert (clash["nccl_env"], clash["nccl_conf"]) == (str(out / "x"), str(out / "nccl_conf-x"))
    with pytest.raises(ValueError):
        state_dir_for("/")
