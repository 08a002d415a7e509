"""GPU fabric metrics (issue 16): NVLink domain identity, fabric health, NVLink speed,
NVLink-C2C links and the fabric daemons, at the defaults (folded: per-GPU series only where
not at their usual value) and with metrics.nvlink_per_link."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from agentd.config import AgentConfig
from agentd.model import C2cLink, FabricDaemons, FabricHealth, Gpu, NodeSnapshot, NvLink, NvmlGpu, NvmlInfo
from tests.support import service_snapshots as fixtures
from tests.support.service_snapshots import parse, pick

UUID = "6f1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d"
BUSES = ("0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0")
HEALTHY = FabricHealth(summary="healthy", degraded_bandwidth=False, route_recovery=False, route_unhealthy=False,
                       access_timeout_recovery=False, incorrect_configuration="none", gfm_connected=True)
RUNNING = FabricDaemons(asked=True, complete=True, running=("nvidia-imex",))


def tray(*, health: dict[int, FabricHealth | None] | None = None, speeds: dict[tuple[int, int], int | None] | None = None,
         identity: tuple[str | None, int | None] = (UUID, 32766), c2c_down: tuple[int, ...] = (),
         daemons: FabricDaemons = RUNNING) -> NodeSnapshot:
    """A GB200 compute tray as the model carries it: 4 GPUs, 18 NVLinks each, 2 C2C links each."""
    health = health or {}
    speeds = speeds or {}
    gpus, nvml = [], []
    for i, bus in enumerate(BUSES):
        links = tuple(NvLink(link=n, state="up", remote_type="nvswitch", version=5, speed_mb_s=speeds.get((i, n), 53125)) for n in range(18))
        c2c = tuple(C2cLink(link=n, state="down" if i in c2c_down and n == 0 else "up", max_bw_mb_s=450000) for n in range(2))
        gpus.append(Gpu(index=i, pci_bus_id=bus, name="NVIDIA GB200", uuid=f"GPU-{i}", in_nvml=True))
        nvml.append(NvmlGpu(index=i, pci_bus_id=bus, name="NVIDIA GB200", uuid=f"GPU-{i}", fabric_state="completed", fabric_status="success",
                            fabric_cluster_uuid=identity[0], fabric_clique_id=identity[1], fabric_health=health.get(i, HEALTHY),
                            nvlinks=links, c2c_links=c2c))
    return fixtures.snapshot(gpus=tuple(gpus), nvml=NvmlInfo(available=True, driver_version="570.124.06", gpus=tuple(nvml)), daemons=daemons)


def render(snap: NodeSnapshot, **config: object) -> bytes:
    return fixtures.state(snap=snap, config=AgentConfig(**config)).metrics_bytes()


def test_healthy_tray_names_its_domain_and_counts_the_rest():
    s = parse(render(tray()))
    domain = [lab for lab, _ in s["agentd_gpu_fabric_domain_info"]]
    assert [(d["gpu"], d["cluster_uuid"], d["clique_id"]) for d in domain] == [(str(i), UUID, "32766") for i in range(4)]
    assert domain[0]["pci_bus_id"] == "00000008:01:00.0"  # the dcgm-exporter spelling, joins with agentd_gpu_info
    assert s["agentd_gpu_fabric_health_gpus"] == [({"summary": "healthy"}, 4)]
    assert s["agentd_gpu_fabric_health_conditions"] == [({}, 0)]
    assert s["agentd_nvlink_speed_expected_bytes_per_second"] == [({}, 53125 * 1_000_000)]
    assert s["agentd_nvlink_slow_links"] == [({}, 0)]
    for folded in ("agentd_gpu_fabric_health_info", "agentd_gpu_fabric_health_condition", "agentd_nvlink_links_slow",
                   "agentd_nvlink_slowest_speed_bytes_per_second", "agentd_nvlink_speed_bytes_per_second"):
        assert folded not in s, folded
    assert len(s["agentd_gpu_c2c_link_up"]) == 8 and set(pick(s, "agentd_gpu_c2c_link_up")) == {1}
    assert pick(s, "agentd_gpu_c2c_link_max_bandwidth_bytes_per_second", gpu="2", link="1") == [450000 * 1_000_000]
    # a running daemon exports 1; one neither running nor expected by the role exports nothing
    assert dict((lab["daemon"], v) for lab, v in s["agentd_fabric_daemon_up"]) == {"nvidia-imex": 1}


def test_a_daemon_the_role_expects_exports_0_when_missing():
    gone = tray(daemons=FabricDaemons(asked=True, complete=True, running=()))
    assert "agentd_fabric_daemon_up" not in parse(render(gone))  # IMEX not required by default
    s = parse(render(gone, fabric={"imex": True, "fabric_manager": "required"}))
    assert dict((lab["daemon"], v) for lab, v in s["agentd_fabric_daemon_up"]) == {"nv-fabricmanager": 0, "nvidia-imex": 0}


def test_unhealthy_and_degraded_gpus_are_named_with_their_conditions():
    unhealthy = HEALTHY.model_copy(update={"summary": "unhealthy", "route_unhealthy": True, "incorrect_configuration": "no_partition"})
    degraded = HEALTHY.model_copy(update={"summary": "limited_capacity", "degraded_bandwidth": True, "gfm_connected": False})
    s = parse(render(tray(health={1: unhealthy, 2: degraded})))
    info = {lab["gpu"]: (lab["summary"], lab["incorrect_configuration"]) for lab, _ in s["agentd_gpu_fabric_health_info"]}
    assert info == {"1": ("unhealthy", "no_partition"), "2": ("limited_capacity", "none")}
    conds = {(lab["gpu"], lab["condition"]): v for lab, v in s["agentd_gpu_fabric_health_condition"]}
    assert conds == {("1", "route_unhealthy"): 1, ("1", "incorrect_configuration"): 1, ("2", "degraded_bandwidth"): 1, ("2", "gfm_disconnected"): 1}
    assert s["agentd_gpu_fabric_health_conditions"] == [({}, 4)]
    assert dict((lab["summary"], v) for lab, v in s["agentd_gpu_fabric_health_gpus"]) == {"healthy": 2, "unhealthy": 1, "limited_capacity": 1}


def test_nvlink_per_link_exports_every_condition_and_link_speed():
    degraded = HEALTHY.model_copy(update={"degraded_bandwidth": True})
    s = parse(render(tray(health={0: degraded}), metrics={"nvlink_per_link": True}))
    assert len(s["agentd_gpu_fabric_health_info"]) == 4
    assert pick(s, "agentd_gpu_fabric_health_condition", gpu="0", condition="degraded_bandwidth") == [1]
    assert pick(s, "agentd_gpu_fabric_health_condition", gpu="3", condition="gfm_disconnected") == [0]
    assert len(pick(s, "agentd_gpu_fabric_health_condition", gpu="3")) == 6  # partition not reported: absent, not 0
    assert len(s["agentd_nvlink_speed_bytes_per_second"]) == 4 * 18
    assert pick(s, "agentd_nvlink_links_slow", gpu="3") == [0]
    assert pick(s, "agentd_nvlink_slowest_speed_bytes_per_second", gpu="3") == [53125 * 1_000_000]


def test_slow_link_counts_against_the_fastest_or_the_configured_speed():
    s = parse(render(tray(speeds={(2, 5): 26562})))
    assert s["agentd_nvlink_slow_links"] == [({}, 1)]
    assert [(lab["gpu"], v) for lab, v in s["agentd_nvlink_links_slow"]] == [("2", 1)]
    assert pick(s, "agentd_nvlink_slowest_speed_bytes_per_second", gpu="2") == [26562 * 1_000_000]
    assert "agentd_nvlink_speed_bytes_per_second" not in s  # per link only with nvlink_per_link
    # Every link slow alike: only the configured speed can tell.
    slow_everywhere = {(i, n): 26562 for i in range(4) for n in range(18)}
    assert parse(render(tray(speeds=slow_everywhere)))["agentd_nvlink_slow_links"] == [({}, 0)]
    s = parse(render(tray(speeds=slow_everywhere), fabric={"nvlink_speed_mb_s": 53125}))
    assert s["agentd_nvlink_speed_expected_bytes_per_second"] == [({}, 53125 * 1_000_000)]
    assert s["agentd_nvlink_slow_links"] == [({}, 72)] and len(s["agentd_nvlink_links_slow"]) == 4


def test_down_links_and_links_without_speed_are_not_slow():
    snap = tray(speeds={(0, 1): 1})
    links = tuple(ln.model_copy(update={"state": "down"}) if ln.link == 1 else ln for ln in snap.nvml.gpus[0].nvlinks)
    nvml = snap.nvml.model_copy(update={"gpus": (snap.nvml.gpus[0].model_copy(update={"nvlinks": links}), *snap.nvml.gpus[1:])})
    assert parse(render(snap.model_copy(update={"nvml": nvml})))["agentd_nvlink_slow_links"] == [({}, 0)]
    old_driver = tray(speeds={(i, n): None for i in range(4) for n in range(18)})
    assert "agentd_nvlink_speed_expected_bytes_per_second" not in parse(render(old_driver))


def test_c2c_link_down_is_zero():
    s = parse(render(tray(c2c_down=(3,))))
    assert pick(s, "agentd_gpu_c2c_link_up", gpu="3", link="0") == [0]
    assert pick(s, "agentd_gpu_c2c_link_up", gpu="3", link="1") == [1]


@pytest.mark.parametrize("identity", [(None, None), ("00000000-0000-0000-0000-000000000000", 0)], ids=["unreported", "all-zero"])
def test_no_domain_identity_without_a_multi_node_domain(identity):
    s = parse(render(tray(identity=identity)))
    assert "agentd_gpu_fabric_domain_info" not in s


def test_partial_identity_is_shown_as_read():
    s = parse(render(tray(identity=(UUID, 0))))
    assert {lab["clique_id"] for lab, _ in s["agentd_gpu_fabric_domain_info"]} == {"0"}


def test_unsupported_health_and_unseen_daemons_export_nothing():
    snap = tray(health={i: FabricHealth() for i in range(4)}, daemons=FabricDaemons(asked=True, complete=False, running=("nvidia-imex",)))
    s = parse(render(snap))
    for absent in ("agentd_gpu_fabric_health_gpus", "agentd_gpu_fabric_health_info", "agentd_gpu_fabric_health_condition",
                   "agentd_gpu_fabric_health_conditions", "agentd_fabric_daemon_up"):
        assert absent not in s, absent
    none = fixtures.snapshot(gpus=(), nvml=NvmlInfo(), daemons=RUNNING)
    assert "agentd_fabric_daemon_up" not in parse(render(none))  # no GPUs: no fabric to serve


def test_h100_snapshot_without_the_new_fields_exports_no_fabric_series():
    s = parse(render(fixtures.snapshot()))
    assert not [name for name in s if name.startswith(("agentd_gpu_fabric_domain", "agentd_gpu_fabric_health", "agentd_nvlink_speed",
                                                        "agentd_nvlink_slow", "agentd_gpu_c2c", "agentd_fabric_daemon"))]


@pytest.mark.proc
@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package 'prometheus'; CI installs it)")
def test_promtool_check_metrics_is_clean_with_every_fabric_series():
    unhealthy = HEALTHY.model_copy(update={"summary": "unhealthy", "route_unhealthy": True})
    text = render(tray(health={1: unhealthy}, speeds={(2, 5): 26562}, c2c_down=(3,)), metrics={"nvlink_per_link": True})
    res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert res.returncode == 0 and not (res.stdout + res.stderr).strip(), (res.stdout + res.stderr).decode()
