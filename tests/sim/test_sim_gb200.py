"""The gb200-nvl profile (a GB200 NVL72 compute tray) read back by agentd's collector, and
the exact effect of each fabric fault kind on what NVML and the process table say.

Applying and clearing every kind byte for byte on every profile is tests/sim/test_sim.py's
test_fault_applies_and_clears; here each kind's effect is checked field by field.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd import sim
from agentd.collection.collector import collect_once
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot
from agentd.model import NodeSnapshot
from agentd.sim.tree import snapshot_tree

GB = "gb200-nvl"
NVML = ".agentd/nvml.json"


@pytest.fixture(scope="module")
def gb200(tmp_path_factory) -> Path:
    return sim.build_tree(GB, tmp_path_factory.mktemp("gb200") / "root")


def collect(root: Path) -> NodeSnapshot:
    return collect_once(HostRoot.at(root), AgentConfig(host_root=root))


def nvml(root: Path) -> dict:
    return json.loads((root / NVML).read_text())


@pytest.mark.tree
def test_the_collector_reads_a_grace_tray(gb200):
    snap = collect(gb200)
    assert snap.read_errors == () and all(p.ok for p in snap.probes)
    assert snap.system.arch == "aarch64" and [n.cpulist for n in snap.system.numa_nodes] == ["0-71", "72-143"]
    assert [g.pci_bus_id for g in snap.gpus] == ["0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0"]
    assert {g.name for g in snap.gpus} == {"NVIDIA GB200"}
    compute = sorted(h.name for h in snap.hcas if sim.PROFILES[GB].hca(h.name).compute)  # type: ignore[union-attr]
    assert compute == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert {h.name: h.pci_bus_id for h in snap.hcas if h.name in ("mlx5_4", "mlx5_5")} == {"mlx5_4": "0006:03:00.0", "mlx5_5": "0006:03:00.1"}
    assert not any(d.is_nvswitch for d in snap.pci)  # the switches are in the rack's switch trays
    by_bus = {g.pci_bus_id: g for g in snap.gpus}
    # Each device has its own root port: same socket reads NODE, the other socket SYS.
    assert by_bus["0008:01:00.0"].nic_paths["mlx5_0"] == "NODE" and by_bus["0008:01:00.0"].nic_paths["mlx5_2"] == "SYS"
    assert by_bus["0019:01:00.0"].nic_paths["mlx5_3"] == "NODE"
    gpu_dev = next(d for d in snap.pci if d.bdf == "0008:01:00.0")
    assert (gpu_dev.current_link_speed, gpu_dev.current_link_width) == ("32.0 GT/s PCIe", 16)


def test_nvml_reports_the_rack_fabric(gb200):
    snap = collect(gb200)
    uuids = {g.fabric_cluster_uuid for g in snap.nvml.gpus}
    assert len(uuids) == 1 and None not in uuids and {g.fabric_clique_id for g in snap.nvml.gpus} == {32766}
    for g in snap.nvml.gpus:
        assert (g.fabric_state, g.fabric_status) == ("completed", "success")
        assert g.fabric_health is not None and g.fabric_health.summary == "healthy" and g.fabric_health.incorrect_configuration == "none"
        assert not any((g.fabric_health.degraded_bandwidth, g.fabric_health.route_recovery, g.fabric_health.route_unhealthy, g.fabric_health.access_timeout_recovery))
        assert g.fabric_health.partition_assigned and g.fabric_health.gfm_connected
        assert len(g.nvlinks) == 18 and {(l.state, l.version, l.speed_mb_s, l.remote_type, l.remote_pci_bus_id) for l in g.nvlinks} == {("up", 5, 53125, "nvswitch", None)}
        assert [c.state for c in g.c2c_links] == ["up"] * 5 and {c.max_bw_mb_s for c in g.c2c_links} == {44712}


@pytest.mark.tree
def test_h100_links_have_a_speed_and_no_fabric_identity(tmp_path):
    snap = collect(sim.build_tree("h100-ib", tmp_path / "root"))
    for g in snap.nvml.gpus:
        assert {l.speed_mb_s for l in g.nvlinks} == {26562}
        assert (g.fabric_state, g.fabric_status) == ("completed", "success")
        assert (g.fabric_cluster_uuid, g.fabric_clique_id, g.fabric_health, g.c2c_links) == (None, None, None, ())


@pytest.mark.tree
@pytest.mark.parametrize(
    "profile,procs",
    # kthreadd as PID 2 makes the table the node's whole one; names cut to the kernel's 15 bytes
    [("gb200-nvl", {"1": "systemd", "2": "kthreadd", "2433": "nvidia-imex"}), ("h100-ib", {"1": "systemd", "2": "kthreadd", "2417": "nv-fabricmanage"}),
     ("pcie-4gpu", {"1": "systemd", "2": "kthreadd"})],
)
def test_process_table(profile, procs, tmp_path):
    root = sim.build_tree(profile, tmp_path / "root")
    found = {p.name: (p / "comm").read_text() for p in (root / "proc").iterdir() if p.name.isdigit()}
    assert found == {pid: comm + "\n" for pid, comm in procs.items()}


def _gpu_fields(root: Path, i: int) -> dict:
    return nvml(root)["gpus"][i]


# kind spec -> (profile, {gpu index: {field: value}} expected while applied, other GPUs unchanged)
ZERO = "00000000-0000-0000-0000-000000000000"
EFFECTS = {
    "fabric_status": (GB, {i: {"fabric_state": "completed", "fabric_status": "Insufficient Resources"} for i in range(4)}),
    "fabric_status@gpu1=Timeout": (GB, {1: {"fabric_status": "Timeout"}}),
    "fabric_unassigned": (GB, {i: {"fabric_clique_id": 0, "fabric_cluster_uuid": ZERO} for i in range(4)}),
    "fabric_unassigned@gpu2=clique": (GB, {2: {"fabric_clique_id": 0}}),
    "fabric_unassigned@gpu0=uuid": (GB, {0: {"fabric_cluster_uuid": ZERO}}),
    "fabric_domain_split@gpu3": (GB, {3: {"fabric_clique_id": 32767}}),
    "fabric_incomplete@gpu0": (GB, {0: {"fabric_state": "in_progress", "fabric_status": None}}),
    "fabric_status@gpu0=Insufficient Resources": ("h100-ib", {0: {"fabric_status": "Insufficient Resources"}}),
}


@pytest.mark.tree
@pytest.mark.parametrize("spec", sorted(EFFECTS))
def test_fabric_field_faults(spec, tmp_path):
    profile, want = EFFECTS[spec]
    root = sim.build_tree(profile, tmp_path / "root")
    before = nvml(root)
    sim.apply_fault(root, spec)
    during = nvml(root)
    for i, (g0, g1) in enumerate(zip(before["gpus"], during["gpus"])):
        expected = {**g0, **want.get(i, {})}
        assert g1 == expected, i
    sim.clear_fault(root, spec)
    assert nvml(root) == before


@pytest.mark.tree
@pytest.mark.parametrize("value", ["degraded_bandwidth", "route_recovery", "route_unhealthy", "access_timeout_recovery", "incorrect_configuration", "unhealthy", "limited_capacity", "gfm_disconnected"])
def test_fabric_health_changes_one_condition(value, gb200):
    field, to = {
        "incorrect_configuration": ("incorrect_configuration", "insufficient_nvlinks"),
        "unhealthy": ("summary", "unhealthy"),
        "limited_capacity": ("summary", "limited_capacity"),
        "gfm_disconnected": ("gfm_connected", False),
    }.get(value, (value, True))
    spec = f"fabric_health@gpu1={value}"
    before = snapshot_tree(gb200)
    healthy = _gpu_fields(gb200, 1)["fabric_health"]
    sim.apply_fault(gb200, spec)
    try:
        snap = collect(gb200)
        assert snap.nvml.gpus[1].fabric_health.model_dump() == {**healthy, field: to}  # type: ignore[union-attr]
        assert all(g.fabric_health.summary == "healthy" for i, g in enumerate(snap.nvml.gpus) if i != 1)  # type: ignore[union-attr]
    finally:
        sim.clear_fault(gb200, spec)
    assert snapshot_tree(gb200) == before


def test_fabric_health_default_is_route_unhealthy_on_every_gpu(gb200):
    sim.apply_fault(gb200, "fabric_health")
    try:
        assert {g["fabric_health"]["route_unhealthy"] for g in nvml(gb200)["gpus"]} == {True}
    finally:
        sim.clear_fault(gb200, "fabric_health")
    assert {g["fabric_health"]["route_unhealthy"] for g in nvml(gb200)["gpus"]} == {False}


@pytest.mark.tree
@pytest.mark.parametrize("profile,spec,link,speed", [(GB, "nvlink_slow", 0, 26562), (GB, "nvlink_slow@gpu2:7=40000", 7, 40000), ("h100-ib", "nvlink_slow@gpu0:3", 3, 13281)])
def test_nvlink_slow_lowers_one_link(profile, spec, link, speed, tmp_path):
    root = sim.build_tree(profile, tmp_path / "root")
    gpu = 2 if "gpu2" in spec else 0
    before = nvml(root)
    sim.apply_fault(root, spec)
    snap = collect(root)
    speeds = [(g.index, l.link, l.speed_mb_s, l.state) for g in snap.nvml.gpus for l in g.nvlinks if l.speed_mb_s != sim.PROFILES[profile].nvlink_speed_mb_s]
    assert speeds == [(gpu, link, speed, "up")]
    sim.clear_fault(root, spec)
    assert nvml(root) == before


def test_c2c_down(gb200):
    before = nvml(gb200)
    sim.apply_fault(gb200, "c2c_down@gpu1:4")
    try:
        down = [(g.index, c.link) for g in collect(gb200).nvml.gpus for c in g.c2c_links if c.state == "down"]
        assert down == [(1, 4)]
    finally:
        sim.clear_fault(gb200, "c2c_down@gpu1:4")
    assert nvml(gb200) == before
    with pytest.raises(ValueError, match="C2C link 5 out of range 0-4"):
        sim.apply_fault(gb200, "c2c_down@gpu0:5")


@pytest.mark.tree
@pytest.mark.parametrize("profile,kind,pid", [(GB, "imex_down", 2433), ("h100-ib", "fm_down", 2417), ("h100-roce", "fm_down", 2417)])
def test_daemon_down_removes_its_process(profile, kind, pid, tmp_path):
    root = sim.build_tree(profile, tmp_path / "root")
    before = snapshot_tree(root)
    sim.apply_fault(root, kind)
    assert not (root / f"proc/{pid}").exists() and (root / "proc/1/comm").read_text() == "systemd\n"
    sim.clear_fault(root, kind)
    assert snapshot_tree(root) == before


@pytest.mark.parametrize(
    "profile,spec,why",
    [
        (GB, "fm_down", "nv-fabricmanager does not run on this profile"),
        ("h100-ib", "imex_down", "nvidia-imex does not run on this profile"),
        ("h100-ib", "fabric_unassigned", "report no fabric cluster UUID or clique id"),
        ("h100-roce", "fabric_health", "report no fabric cluster UUID or clique id"),
        ("h100-ib", "c2c_down", "no NVLink-C2C link"),
        ("pcie-4gpu", "fabric_status", "in no NVLink fabric"),
        ("pcie-4gpu", "nvlink_slow", "have no NVLink"),
    ],
)
@pytest.mark.tree
def test_kinds_that_do_not_apply_say_why(profile, spec, why, tmp_path):
    root = sim.build_tree(profile, tmp_path / "root")
    with pytest.raises(ValueError, match=f"fault '{spec}' on profile {profile}: .*{why}"):
        sim.apply_fault(root, spec)
    assert sim.applied_faults(root) == []


def test_fabric_status_refuses_success():
    with pytest.raises(ValueError, match="'success' is the healthy status"):
        sim.parse_fault("fabric_status=success")
