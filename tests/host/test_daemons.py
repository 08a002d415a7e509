"""Fabric daemons from ROOT/proc/<pid>/comm (agentd.host.daemons), the collector's
``daemons`` probe, and what a capture keeps of the process table."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from agentd import sim
from agentd.cli import main
from agentd.collection.collector import PROBE_TIERS, Collector
from agentd.config import AgentConfig
from agentd.host import daemons
from agentd.host.daemons import read_daemons
from agentd.host.fs import HostRoot, ReadContext
from agentd.judging import fabric_role
from agentd.model import FabricDaemons


def proc(root: Path, table: dict[str, bytes]) -> Path:
    for pid, comm in table.items():
        (root / "proc" / pid).mkdir(parents=True, exist_ok=True)
        (root / "proc" / pid / "comm").write_bytes(comm)
    return root


def ctx(root: Path) -> ReadContext:
    return ReadContext(HostRoot.at(root, "offline"), "daemons")


def test_the_names_are_the_judging_layers_names():
    assert daemons.DAEMON_NAMES == fabric_role.DAEMON_NAMES
    assert (daemons.FABRIC_MANAGER, daemons.IMEX, daemons.NVLSM) == (fabric_role.FABRIC_MANAGER, fabric_role.IMEX, fabric_role.NVLSM)


def test_running_daemons_by_their_kernel_names(tmp_path):
    # the kernel keeps 15 bytes of a name: nv-fabricmanager shows as nv-fabricmanage
    proc(tmp_path, {"1": b"systemd\n", "2": b"kthreadd\n", "812": b"nv-fabricmanage\n", "90210": b"nvidia-imex\n", "77": b"bash\n", "78": b"\xff\xfeodd\n", "79": b"nvlsmx\n"})
    (tmp_path / "proc" / "80").mkdir()  # exited before its comm was read
    (tmp_path / "proc" / "sys").mkdir()
    os.symlink("812", tmp_path / "proc" / "self")
    c = ctx(tmp_path)
    assert read_daemons(c) == FabricDaemons(asked=True, complete=True, running=("nv-fabricmanager", "nvidia-imex"))
    assert c.errors == []


def test_full_names_count_too_and_pid_1_may_be_one(tmp_path):
    proc(tmp_path, {"1": b"nvidia-imex\n", "5": b"nv-fabricmanager\n", "6": b"nvlsm"})
    assert read_daemons(ctx(tmp_path)).running == ("nv-fabricmanager", "nvidia-imex", "nvlsm")


def test_a_container_pid_namespace_is_not_the_whole_node(tmp_path):
    # A container's own /proc: its entrypoint is PID 1, no kernel thread is visible, so an
    # absent fabric manager says nothing (it would run outside the namespace).
    proc(tmp_path, {"1": b"agentd\n", "7": b"python3\n"})
    assert read_daemons(ctx(tmp_path)) == FabricDaemons(asked=True, complete=False)
    # PID 2 that is not kthreadd: still not the initial namespace
    proc(tmp_path, {"2": b"sh\n"})
    assert read_daemons(ctx(tmp_path)).complete is False


def test_kthreadd_as_pid_2_makes_the_table_whole(tmp_path):
    proc(tmp_path, {"2": b"kthreadd\n"})
    assert read_daemons(ctx(tmp_path)) == FabricDaemons(asked=True, complete=True)


def test_no_proc_was_not_asked(tmp_path):
    (tmp_path / "sys").mkdir()
    assert read_daemons(ctx(tmp_path)) == FabricDaemons(asked=False)


def test_a_pid_leading_out_of_the_root_is_not_followed(tmp_path):
    outside = proc(tmp_path / "outside", {"9": b"nvlsm\n"})
    root = proc(tmp_path / "root", {"1": b"init\n"})
    os.symlink(os.path.relpath(outside / "proc" / "9", root / "proc"), root / "proc" / "9")
    c = ctx(root)
    assert read_daemons(c).running == ()
    assert [e.kind for e in c.errors] == ["escape"]


def test_the_scan_is_bounded(tmp_path, monkeypatch):
    proc(tmp_path, {"1": b"init\n", "10": b"bash\n", "200": b"nvidia-imex\n"})
    monkeypatch.setattr(daemons, "MAX_PIDS", 2)  # lowest pids first: 1 and 10
    assert read_daemons(ctx(tmp_path)).running == ()
    big = b"nvidia-imex" + b"x" * 100_000
    proc(tmp_path, {"3": big})
    monkeypatch.setattr(daemons, "MAX_PIDS", 65536)
    assert read_daemons(ctx(tmp_path)).running == ("nvidia-imex",)  # pid 200; pid 3's name is cut, not matched


# ---------------------------------------------------------------------------
# the collector's probe


@pytest.mark.tree
def test_probe_is_slow_and_scans_only_nodes_with_nvidia_devices(tmp_path):
    assert PROBE_TIERS["daemons"] == "slow"
    gpu = proc(Path(sim.build_tree("h100-ib", tmp_path / "gpu")), {"1": b"systemd\n", "4242": b"nv-fabricmanage\n"})
    c = Collector(HostRoot.at(gpu), AgentConfig())
    c.run_sync(["pci", "daemons"])
    assert c.snapshot().daemons == FabricDaemons(asked=True, complete=True, running=("nv-fabricmanager",))
    cpu = proc(tmp_path / "cpu", {"1": b"systemd\n"})  # no PCI devices at all
    (cpu / "sys/bus/pci/devices").mkdir(parents=True)
    c = Collector(HostRoot.at(cpu), AgentConfig())
    c.run_sync(["pci", "daemons"])
    assert c.snapshot().daemons == FabricDaemons(asked=False)
    assert c.outputs["daemons"].status.files_read == 0


# ---------------------------------------------------------------------------
# capture


@pytest.mark.tree
def test_a_capture_keeps_kthreadd_and_the_daemons_only(tmp_path, capsys):
    root = proc(Path(sim.build_tree("h100-ib", tmp_path / "node")), {"1": b"systemd\n", "77": b"sshd\n", "812": b"nv-fabricmanage\n", "900": b"nvidia-imex\n"})
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(f'[paths]\nbaseline = "{tmp_path / "baseline.json"}"\nstate_dir = "{tmp_path}"\n')
    out = tmp_path / "node.tar.gz"
    assert main(["capture", "--config", str(cfg), "--host-root", str(root), "--out", str(out)]) == 0
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
    pids = {n.split("/")[1] for n in names if n.startswith("proc/") and n.split("/")[1].isdigit()}
    assert pids == {"2", "812", "900", "2417"}  # kthreadd, the test's daemons and the profile's fabric manager
    assert "proc/77" not in names and "proc/812/comm" in names
    with tarfile.open(out) as tar:
        tar.extractall(tmp_path / "replay", filter="data")
    c = Collector(HostRoot.at(tmp_path / "replay"), AgentConfig())
    c.run_sync(["pci", "daemons"])
    assert c.snapshot().daemons == FabricDaemons(asked=True, complete=True, running=("nv-fabricmanager", "nvidia-imex"))


@pytest.mark.parametrize("comm", [b"nv-fabricmanager\n", b"nv-fabricmanage\n", b"nv-fabricmanage"])
def test_daemon_name_forms(comm):
    assert daemons.daemon_name(comm) == "nv-fabricmanager"
