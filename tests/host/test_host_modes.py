"""Host modes: which kernel answers for a host root (DESIGN.md section 3, docs/capture.md).

live: the root's boot id is the running kernel's (``/``, a container's ``/host``);
offline: a capture or a copied tree (recorded answers only); simulated: the simulator's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentd import sim
from agentd.base import recorded
from agentd.host.fs import BOOT_ID, HostRoot, ReadContext
from agentd.host.nvml import read_nvml
from tests.support.cli import run_cli
from tests.support.paths import REPO

RUNNING_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _tree(root: Path, boot_id: str | None) -> Path:
    (root / "sys").mkdir(parents=True, exist_ok=True)
    if boot_id is not None:
        p = root / BOOT_ID
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(boot_id + "\n")
    return root


def _running_boot_id() -> str:
    if not RUNNING_BOOT_ID.is_file():
        pytest.skip("this kernel has no /proc/sys/kernel/random/boot_id")
    return RUNNING_BOOT_ID.read_text().strip()


def test_slash_is_live():
    h = HostRoot.at("/")
    assert (h.mode, h.is_live, h.answers) == ("live", True, None)
    assert h.mode_reason


def test_a_root_with_the_running_boot_id_is_live(tmp_path):
    """What a container sees under /host: the node's /proc, so the node's boot id."""
    h = HostRoot.at(_tree(tmp_path, _running_boot_id()))
    assert h.is_live and h.mode == "live"
    assert "running kernel" in h.mode_reason


def test_a_root_with_another_boot_id_is_offline(tmp_path):
    h = HostRoot.at(_tree(tmp_path, "0f0f0f0f-1111-2222-3333-444444444444"))
    assert (h.mode, h.is_live) == ("offline", False)
    assert "0f0f0f0f-1111-2222-3333-444444444444" in h.mode_reason and "not the running kernel" in h.mode_reason


def test_a_root_without_a_boot_id_is_offline(tmp_path):
    h = HostRoot.at(_tree(tmp_path, None))
    assert h.mode == "offline" and BOOT_ID in h.mode_reason


def test_a_boot_id_reached_through_a_symlink_out_of_the_root_does_not_make_it_live(tmp_path):
    """``proc -> /proc`` in a copied tree would read the running kernel's boot id: the
    read is confined to the root like every other, so the root stays offline."""
    _running_boot_id()
    _tree(tmp_path, None)
    (tmp_path / "proc").symlink_to("/proc")
    h = HostRoot.at(tmp_path)
    assert h.mode == "offline"


@pytest.mark.tree
def test_a_simulated_tree_is_simulated_and_reads_its_recorded_answers(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "node")
    h = HostRoot.at(root)
    assert (h.mode, h.answers) == ("simulated", recorded.DIR)
    assert "h100-ib" in h.mode_reason
    info = read_nvml(ReadContext(h, "nvml"))
    assert info.available and len(info.gpus) == 8


def test_a_capture_is_offline_even_with_the_running_boot_id(tmp_path):
    """Replaying a capture on the node it was taken on must use what it recorded."""
    root = _tree(tmp_path, _running_boot_id())
    doc = recorded.manifest("capture", agentd_version="0.1.0", created="2026-11-23T10:00:00+00:00")
    (root / recorded.DIR).mkdir()
    (root / recorded.MANIFEST).write_text(json.dumps(doc))
    (root / recorded.DIR / recorded.NVML).write_text(json.dumps({"driver_version": "550.90.07", "gpus": []}))
    h = HostRoot.at(root)
    assert (h.mode, h.answers) == ("offline", recorded.DIR)
    assert "capture" in h.mode_reason and "2026-11-23T10:00:00" in h.mode_reason
    info = read_nvml(ReadContext(h, "nvml"))
    assert info.available and info.driver_version == "550.90.07"


@pytest.mark.parametrize(
    "manifest, problem",
    [
        ({"format": recorded.FORMAT, "version": recorded.VERSION + 1, "kind": "capture"}, "newer"),
        ({"format": "something-else", "version": 1, "kind": "capture"}, "not an"),
        ({"format": recorded.FORMAT, "version": 1, "kind": "photo"}, "unknown kind"),
        ("{not json", "not JSON"),
    ],
)
def test_a_manifest_this_agentd_cannot_read_is_said_and_its_answers_are_not_read(tmp_path, manifest, problem):
    root = _tree(tmp_path, "0f0f0f0f-1111-2222-3333-444444444444")
    (root / recorded.DIR).mkdir()
    (root / recorded.MANIFEST).write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    (root / recorded.DIR / recorded.NVML).write_text(json.dumps({"driver_version": "550.90.07", "gpus": []}))
    h = HostRoot.at(root)
    assert h.mode == "offline" and h.answers is None
    assert problem in h.mode_reason
    assert not read_nvml(ReadContext(h, "nvml")).available


def test_the_configured_mode_wins_and_says_so(tmp_path):
    h = HostRoot.at("/", "offline")
    assert not h.is_live and "host_mode = 'offline'" in h.mode_reason
    info = read_nvml(ReadContext(h, "nvml"))
    assert not info.available and "offline" in (info.error or "")
    with pytest.raises(ValueError):
        HostRoot.at("/", "sideways")


@pytest.mark.tree
def test_inspect_shows_the_mode_and_why(tmp_path):
    root = sim.build_tree("pcie-4gpu", tmp_path / "node")
    out = run_cli("inspect", "--host-root", str(root), "--format", "json")
    doc = json.loads(out.stdout)
    assert doc["host_mode"]["mode"] == "simulated" and "pcie-4gpu" in doc["host_mode"]["reason"]
    text = run_cli("inspect", "--host-root", str(root)).stdout
    assert "mode simulated: " in text


# ---------------------------------------------------------------------------
# The DaemonSet's view: this machine's /sys and /proc bind-mounted under a directory.


def _normalized(doc: dict) -> dict:
    """What must be equal between two inspections of the same node a moment apart:
    everything but the root's name, timings and counter values (ethtool statistics are
    compared by name)."""
    doc = dict(doc)
    for k in ("host_root", "taken_at"):
        doc.pop(k)
    doc["host_mode"] = doc["host_mode"]["mode"]
    doc["probes"] = sorted((p["name"], p["ok"]) for p in doc["probes"])
    doc["netdevs"] = [{**n, "ethtool": sorted(n["ethtool"]) if n.get("ethtool") is not None else None} for n in doc["netdevs"]]
    for h in doc["hcas"]:
        for p in h["ports"]:
            p["counters"] = sorted(p["counters"])
            p["hw_counters"] = sorted(p["hw_counters"])
    return doc


@pytest.mark.proc
def test_inspect_through_a_bind_mounted_host_equals_inspect_of_slash(tmp_path):
    if shutil.which("unshare") is None or not Path("/proc/self/ns/mnt").exists():
        pytest.skip("needs unshare(1) to bind-mount /sys and /proc in a private mount namespace")
    host = tmp_path / "host"
    for d in ("sys", "proc", "etc"):
        (host / d).mkdir(parents=True)
    inspect = [sys.executable, "-m", "agentd", "inspect", "--format", "json", "--host-root"]
    script = f'mount --bind /sys "{host}/sys" && mount --bind /proc "{host}/proc"'
    if Path("/etc/machine-id").is_file():  # as packaging/k8s/daemonset.yaml mounts it
        (host / "etc/machine-id").touch()
        script += f' && mount --bind /etc/machine-id "{host}/etc/machine-id"'
    script += ' && exec "$@"'
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    # a private mount namespace: the binds vanish with the process
    mounted = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *inspect, str(host)], capture_output=True, text=True, timeout=120, env=env)
    if mounted.returncode != 0 and ("mount" in mounted.stderr or "unshare" in mounted.stderr):
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.strip()[:200]}")
    assert mounted.returncode == 0, mounted.stderr
    plain = subprocess.run([*inspect, "/"], capture_output=True, text=True, timeout=120, env=env)
    through, direct = json.loads(mounted.stdout), json.loads(plain.stdout)
    assert through["host_mode"]["mode"] == "live" and "running kernel" in through["host_mode"]["reason"]
    assert _normalized(through) == _normalized(direct)


@pytest.mark.tree
def test_a_copied_tree_without_recorded_answers_is_not_judged_nvml_blind(tmp_path):
    """NVIDIA GPUs on PCI and no NVML answer: on the node that is nvml.blind; in a copy of
    its sysfs nobody could ask NVML, which says nothing about the node."""
    from agentd.collection.collector import collect_once
    from agentd.config import AgentConfig
    from agentd.judging.judge import judge

    root = sim.build_tree("h100-ib", tmp_path / "node")
    shutil.rmtree(root / recorded.DIR)
    h = HostRoot.at(root)
    assert h.mode == "offline" and h.answers is None
    snap = collect_once(h, AgentConfig(host_root=root))
    assert not snap.nvml.available and not snap.nvml.asked
    codes = {f.code for f in judge(snap, (), AgentConfig(host_root=root), None).findings}
    assert "nvml.blind" not in codes
    # the same tree with the recorded answer saying NVML failed is blind
    live_like = sim.build_tree("h100-ib", tmp_path / "node2", faults=["nvml_init_error"])
    snap2 = collect_once(HostRoot.at(live_like), AgentConfig(host_root=live_like))
    assert "nvml.blind" in {f.code for f in judge(snap2, (), AgentConfig(host_root=live_like), None).findings}


def test_an_offline_root_takes_its_architecture_from_the_recorded_uname(tmp_path):
    """A capture of a kernel without proc/sys/kernel/arch: uname(2) answered on the node."""
    from agentd.host.system import read_system

    root = _tree(tmp_path, None)
    (root / recorded.DIR).mkdir()
    (root / recorded.MANIFEST).write_text(json.dumps(recorded.manifest("capture", agentd_version="0.1.0", created="2026-11-23T10:00:00+00:00")))
    (root / recorded.DIR / recorded.UNAME).write_text(json.dumps({"sysname": "Linux", "machine": "aarch64"}))
    assert read_system(ReadContext(HostRoot.at(root), "system")).arch == "aarch64"
    (root / recorded.DIR / recorded.UNAME).write_text("[1, 2")
    ctx = ReadContext(HostRoot.at(root), "system")
    assert read_system(ctx).arch is None and [e.kind for e in ctx.errors] == ["unparsable"]
