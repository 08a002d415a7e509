"""A node with devices behind an Intel VMD controller, end to end (issue 11).

VMD puts the root ports behind it into a PCI domain of its own, numbered from 0x10000, so
those devices have 5-digit domains: ``10000:e1:00.0``. Every layer must take them as the
bus ids they are: the readers, the baseline (a healthy node with no baseline records its
inventory), the inventory checks, the NCCL topology file, and ``agentd check``.

The simulated h100-ib node is rebuilt with two of its PCI trees moved into VMD domains:
the storage NIC mlx5_8 alone under a root port (``10000:e1:00.0``), and the GPU4/mlx5_4
switch pair (GPU ``10001:e4:00.0``, NIC ``10001:e3:00.0``).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from agentd.collection.collector import Collector
from agentd.config import AgentConfig, Timeouts
from agentd.host.fs import HostRoot
from agentd.judging.baseline import baseline_from_json, baseline_to_json
from agentd.judging.judge import judge
from agentd.nccl import render_all
from agentd.sim import PROFILES, Profile
from agentd.sim.pristine import write_profile_tree
from tests.support.cli import Ran, run_cli

HANG_GUARD_S = 120  # a guard against a wedged test, not a timing assertion
T0 = 1_000_000.0

VMD_NIC = "10000:e1:00.0"  # mlx5_8
VMD_GPU = "10001:e4:00.0"  # GPU behind a switch in a VMD domain
VMD_GPU_NIC = "10001:e3:00.0"  # mlx5_4, on the same switch
# host bridge "dddd:bb" -> its VMD replacement; every bus id below it moves with it
MOVED = {
    "0000:68": "10000:e0",
    "0000:69": "10000:e1",
    **{f"0000:{0x94 + i:02x}": f"10001:{0xE0 + i:02x}" for i in range(5)},
}


def _moved(value: object) -> object:
    if isinstance(value, str):
        for old, new in MOVED.items():
            if value == old or value.startswith(old + ":"):
                return new + value[len(old):]
        return value
    if isinstance(value, tuple):
        return tuple(_moved(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _moved(getattr(value, f.name)) for f in dataclasses.fields(value)})
    return value


def vmd_profile() -> Profile:
    p = _moved(PROFILES["h100-ib"])
    assert isinstance(p, Profile)
    return dataclasses.replace(p, name="h100-ib-vmd", host_bridges=tuple(sorted(p.host_bridges, key=lambda h: h.domain_bus)))


@pytest.fixture
def vmd_root(tmp_path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    write_profile_tree(vmd_profile(), root)
    assert (root / "sys/bus/pci/devices" / VMD_GPU).is_symlink()  # the tree really has VMD domains
    return root


def collect(root: Path, cfg: AgentConfig, t: float):
    c = Collector(HostRoot.at(root), cfg)
    c.run_sync()
    return c.snapshot(taken_at=t)


def remove_gpu(root: Path, bdf: str) -> None:
    """The GPU is gone from PCI and from NVML."""
    link = root / "sys/bus/pci/devices" / bdf
    shutil.rmtree(link.resolve())
    link.unlink()
    nvml = root / ".agentd/nvml.json"
    data = json.loads(nvml.read_text())
    data["gpus"] = [g for g in data["gpus"] if g["pci_bus_id"] != bdf]
    for i, g in enumerate(data["gpus"]):
        g["index"] = i
    nvml.write_text(json.dumps(data))


def test_readers_see_the_vmd_devices(vmd_root):
    snap = collect(vmd_root, AgentConfig(host_root=vmd_root, timeouts=Timeouts(nvml_s=0.3)), T0)
    assert {VMD_NIC, VMD_GPU, VMD_GPU_NIC} <= {d.bdf for d in snap.pci}
    assert VMD_GPU in {g.pci_bus_id for g in snap.gpus}
    assert (snap.hca("mlx5_8").pci_bus_id, snap.hca("mlx5_4").pci_bus_id) == (VMD_NIC, VMD_GPU_NIC)
    assert snap.pci_device(VMD_NIC).root_complex == "pci10000:e0"


def test_judge_records_a_baseline_for_a_healthy_vmd_node(vmd_root):
    cfg = AgentConfig(host_root=vmd_root, timeouts=Timeouts(nvml_s=0.3))
    s1 = collect(vmd_root, cfg, T0)
    j = judge(s1, (), cfg, None)
    assert j.status == "ok", [(f.code, f.subject) for f in j.findings if f.severity != "ok"]
    assert j.new_baseline is not None
    assert VMD_GPU in {g.pci_bus_id for g in j.new_baseline.gpus}
    assert {h.name: h.pci_bus_id for h in j.new_baseline.hcas}["mlx5_8"] == VMD_NIC
    baseline = baseline_from_json(baseline_to_json(j.new_baseline))  # what the next run reads back
    assert baseline == j.new_baseline

    s2 = collect(vmd_root, cfg, T0 + 10)
    assert judge(s2, (s1,), cfg, baseline).status == "ok"

    remove_gpu(vmd_root, VMD_GPU)
    s3 = collect(vmd_root, cfg, T0 + 20)
    gone = judge(s3, (s1, s2), cfg, baseline)
    assert ("inventory.gpu.missing", "critical", VMD_GPU) in {(f.code, f.severity, f.subject) for f in gone.findings}


def test_nccl_topology_of_a_vmd_node_passes_the_nccl_rule_check(vmd_root):
    cfg = AgentConfig(host_root=vmd_root, timeouts=Timeouts(nvml_s=0.3))
    snap = collect(vmd_root, cfg, T0)
    j = judge(snap, (), cfg, None)
    r = render_all(snap, j.findings, cfg, j.roles, topo_path="/run/agentd/nccl-topo.xml")
    assert r.topo_problems == ()
    assert r.topo_xml is not None
    lines = r.topo_xml.splitlines()
    for bdf in (VMD_GPU, VMD_GPU_NIC, VMD_NIC):
        line = next(x for x in lines if f'busid="{bdf}"' in x)
        # NCCL's own sysfs walk stops at a bridge in a VMD domain (checkBDFFormat takes
        # 4-digit domains only) and hangs the device off the CPU: the file says the same
        assert line.startswith('    <pci busid=') and line.endswith("/>"), line


def run_check(root: Path, cfg: Path, *extra: str) -> Ran:
    return run_cli("check", "--host-root", str(root), "--config", str(cfg), *extra)


def test_agentd_check_on_a_healthy_vmd_node_exits_0_and_keeps_the_baseline(vmd_root, tmp_path):
    state = tmp_path / "state"
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(f"""
[intervals]
check_rate_window_s = 0.2
[timeouts]
nvml_s = 1
[paths]
baseline = "{state / 'baseline.json'}"
state_dir = "{state}"
""")
    from tests.support.recorded_baseline import baseline_of, record_baseline

    # A root that is not the node is judged against the baseline recorded with it (docs/node-state.md).
    kept = record_baseline(vmd_root, baseline_of(vmd_root))
    p = run_check(vmd_root, cfg, "--format", "json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["status"] == "ok"
    assert not (state / "baseline.json").exists()
    recorded = json.loads(kept.read_text())
    assert VMD_GPU in {g["pci_bus_id"] for g in recorded["gpus"]}

    assert run_check(vmd_root, cfg).returncode == 0  # a new process reads the baseline back

    remove_gpu(vmd_root, VMD_GPU)
    p = run_check(vmd_root, cfg, "--format", "json")
    assert p.returncode == 2, p.stderr
    found = {(f["code"], f["subject"]) for f in json.loads(p.stdout)["findings"]}
    assert ("inventory.gpu.missing", VMD_GPU) in found
