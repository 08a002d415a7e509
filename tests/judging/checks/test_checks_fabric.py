"""nvlink.fabric.unassigned/unhealthy/degraded, nvlink.domain.split, nvlink.link.slow,
nvlink.c2c.down, fabric.manager.down, fabric.imex.down (agentd.judging.checks.fabric)."""

from __future__ import annotations

import pytest

from agentd.judging.checks import run_checks
from agentd.judging.checks.fabric import check_fabric
from agentd.model import (
    C2cLink,
    FabricDaemons,
    FabricHealth,
    NodeSnapshot,
    NvLink,
    NvmlGpu,
    NvmlInfo,
    PciDevice,
)
from tests.support.check_snapshots import cfg, inp, node, one, only, problems, with_nvlink, with_nvml_gpu
from tests.support.fixtures import OUTPUTS
from tests.support.paths import DOCS
from tests.support.smi_fabric import apply_smi_fabric, parse_smi_fabric

UUID = "6d7d5c0a-1b2c-4d3e-8f40-1234567890ab"
ZERO = "00000000-0000-0000-0000-000000000000"
HEALTHY = FabricHealth(summary="healthy", degraded_bandwidth=False, route_recovery=False, route_unhealthy=False,
                       access_timeout_recovery=False, incorrect_configuration="none", gfm_connected=True)
NVSWITCHES = tuple(PciDevice(bdf=f"0000:{b:02x}:00.0", class_code=0x068000, vendor_id=0x10DE) for b in (5, 6, 7, 8))


def _gpus(s: NodeSnapshot, **changes) -> NodeSnapshot:
    gpus = tuple(g.model_copy(update=changes) for g in s.nvml.gpus)
    return s.model_copy(update={"nvml": s.nvml.model_copy(update={"gpus": gpus})})


def _speeds(s: NodeSnapshot, mb_s: int) -> NodeSnapshot:
    gpus = tuple(g.model_copy(update={"nvlinks": tuple(x.model_copy(update={"speed_mb_s": mb_s}) for x in g.nvlinks)})
                 for g in s.nvml.gpus)
    return s.model_copy(update={"nvml": s.nvml.model_copy(update={"gpus": gpus})})


def gb200(*, running: tuple[str, ...] = ("nvidia-imex",), complete: bool = True) -> NodeSnapshot:
    """A GB200 NVL compute tray as the checks see it: aarch64, 4 GPUs in one multi-node
    domain, links to the rack's switch trays at 53125 MB/s, two C2C links each, no NVSwitch
    on its own PCI bus."""
    s = _speeds(_gpus(node(gpus=4), fabric_cluster_uuid=UUID, fabric_clique_id=32766, fabric_health=HEALTHY,
                      c2c_links=(C2cLink(link=0, state="up", max_bw_mb_s=450000), C2cLink(link=1, state="up"))), 53125)
    return s.model_copy(update={"system": s.system.model_copy(update={"arch": "aarch64"}),
                                "daemons": FabricDaemons(asked=True, complete=complete, running=running)})


def hgx(*, running: tuple[str, ...] = ("nv-fabricmanager",), complete: bool = True) -> NodeSnapshot:
    """An HGX H100 board: NVSwitches on the PCI bus, fabric completed, clique 0 and a zero UUID."""
    s = _speeds(_gpus(node(), fabric_cluster_uuid=ZERO, fabric_clique_id=0, fabric_health=HEALTHY), 26562)
    return s.model_copy(update={"pci": s.pci + NVSWITCHES,
                                "daemons": FabricDaemons(asked=True, complete=complete, running=running)})


def codes(findings) -> set[str]:
    return {f.code for f in findings}


@pytest.mark.parametrize("make", [gb200, hgx, node], ids=["gb200", "hgx", "plain"])
def test_healthy_nodes_raise_nothing(make):
    assert check_fabric(inp(make())) == []
    assert problems(run_checks(inp(make()))) == []


def test_hgx_never_raises_unassigned_split_or_imex_by_default():
    s = with_nvml_gpu(hgx(running=()), 3, fabric_cluster_uuid=UUID, fabric_clique_id=7)  # one odd GPU
    found = codes(check_fabric(inp(s)))
    assert found == {"fabric.manager.down"}  # a single non-zero identity has nothing to split from


@pytest.mark.parametrize("ident", [{"fabric_clique_id": 0}, {"fabric_clique_id": None}, {"fabric_cluster_uuid": ZERO},
                                   {"fabric_cluster_uuid": None}], ids=["clique0", "clique-none", "uuid0", "uuid-none"])
def test_unassigned_on_a_multi_node_tray(ident):
    f = one(check_fabric(inp(with_nvml_gpu(gb200(), 2, **ident))), "nvlink.fabric.unassigned", "gpu2")
    assert f.severity == "critical" and "expected a non-zero clique id and cluster UUID" in f.message
    assert "nvidia-smi -q -i 2" in f.remediation and "NMX" in f.remediation


def test_unassigned_needs_completed_success():
    s = with_nvml_gpu(gb200(), 2, fabric_clique_id=0, fabric_state="completed", fabric_status="Insufficient Resources")
    assert only(check_fabric(inp(s)), "nvlink.fabric.unassigned") == []  # that is nvlink.fabric.incomplete's


@pytest.mark.parametrize("setting,make,raised", [
    ("yes", hgx, True), ("no", gb200, False), ("auto", gb200, True), ("auto", hgx, False)])
def test_multi_node_setting(setting, make, raised):
    s = _gpus(make(), fabric_clique_id=0)
    found = only(check_fabric(inp(s, config=cfg(fabric={"multi_node": setting}))), "nvlink.fabric.unassigned")
    assert bool(found) is raised
    if raised:
        assert len(found) == len(s.nvml.gpus)


def test_auto_multi_node_needs_grace():
    s = _gpus(node(gpus=4), fabric_clique_id=0, fabric_cluster_uuid=ZERO)  # x86, no local NVSwitch
    assert check_fabric(inp(s)) == []


@pytest.mark.parametrize("health,reason", [
    ({"summary": "unhealthy"}, "health summary unhealthy"),
    ({"route_unhealthy": True}, "route unhealthy"),
    ({"incorrect_configuration": "incorrect_chassis_sn"}, "incorrect configuration incorrect_chassis_sn"),
])
def test_unhealthy(health, reason):
    s = with_nvml_gpu(gb200(), 1, fabric_health=HEALTHY.model_copy(update={**health, "degraded_bandwidth": True}))
    found = check_fabric(inp(s))
    f = one(found, "nvlink.fabric.unhealthy", "gpu1")
    assert f.severity == "critical" and reason in f.message and "bandwidth degraded" in f.message
    assert only(found, "nvlink.fabric.degraded") == []  # listed in the unhealthy message instead


@pytest.mark.parametrize("health,reason", [
    ({"degraded_bandwidth": True}, "bandwidth degraded"),
    ({"summary": "limited_capacity"}, "limited capacity"),
    ({"route_recovery": True}, "route recovery in progress"),
    ({"access_timeout_recovery": True}, "access timeout recovery"),
    ({"gfm_connected": False}, "global fabric manager not connected"),
])
def test_degraded(health, reason):
    s = with_nvml_gpu(gb200(), 1, fabric_health=HEALTHY.model_copy(update=health))
    f = one(check_fabric(inp(s)), "nvlink.fabric.degraded", "gpu1")
    assert f.severity == "warning" and reason in f.message


def test_a_board_without_a_global_fabric_manager_is_not_degraded():
    # The global fabric manager belongs to NVL racks: an HGX board reporting it disconnected
    # is no fault of the board's; other conditions still count there.
    s = with_nvml_gpu(hgx(), 1, fabric_health=HEALTHY.model_copy(update={"gfm_connected": False}))
    assert only(check_fabric(inp(s)), "nvlink.fabric.degraded") == []
    s = with_nvml_gpu(hgx(), 1, fabric_health=HEALTHY.model_copy(update={"gfm_connected": False, "degraded_bandwidth": True}))
    f = one(check_fabric(inp(s)), "nvlink.fabric.degraded", "gpu1")
    assert "global fabric manager" not in f.message and "bandwidth degraded" in f.message


def test_health_not_reported_is_not_judged():
    s = with_nvml_gpu(gb200(), 1, fabric_health=FabricHealth())
    assert check_fabric(inp(s)) == []


def test_domain_split():
    other = "11111111-2222-4333-8444-555555555555"
    s = with_nvml_gpu(gb200(), 3, fabric_cluster_uuid=other)
    f = one(check_fabric(inp(s)), "nvlink.domain.split", "node")
    assert f.severity == "critical" and f.measured == 2 and f.expected == 1
    assert f"{UUID}.32766: gpu0,1,2" in f.message and f"{other}.32766: gpu3" in f.message


def test_split_only_among_gpus_with_an_identity():
    s = with_nvml_gpu(gb200(), 3, fabric_clique_id=0)  # unassigned, not a second domain
    found = check_fabric(inp(s))
    assert only(found, "nvlink.domain.split") == [] and one(found, "nvlink.fabric.unassigned", "gpu3")
    s = with_nvml_gpu(gb200(), 3, fabric_clique_id=5, fabric_state="in_progress")  # not registered yet
    assert only(check_fabric(inp(s)), "nvlink.domain.split") == []


def test_slow_link_against_the_fastest():
    s = with_nvlink(gb200(), 2, 7, speed_mb_s=26562)
    f = one(check_fabric(inp(s)), "nvlink.link.slow", "gpu2:link7")
    assert f.severity == "warning" and f.measured == 26562 and f.expected == 53125
    assert "fastest active NVLink" in f.message and "nvidia-smi nvlink -s -i 2" in f.remediation


def test_slow_links_against_config():
    s = gb200()
    assert check_fabric(inp(s, config=cfg(fabric={"nvlink_speed_mb_s": 53125}))) == []
    found = only(check_fabric(inp(s, config=cfg(fabric={"nvlink_speed_mb_s": 100000}))), "nvlink.link.slow")
    assert len(found) == 4 * 18 and "fabric.nvlink_speed_mb_s" in found[0].message


def test_slow_ignores_down_links_and_unreported_speeds():
    s = with_nvlink(gb200(), 2, 7, speed_mb_s=None)
    s = with_nvlink(s, 2, 8, state="down", speed_mb_s=1000)
    assert check_fabric(inp(s)) == []
    assert check_fabric(inp(node())) == []  # no speed reported anywhere


def test_c2c_down():
    g = gb200()
    s = with_nvml_gpu(g, 0, c2c_links=(C2cLink(link=0, state="up"), C2cLink(link=1, state="down")))
    f = one(check_fabric(inp(s)), "nvlink.c2c.down", "gpu0")
    assert f.severity == "critical" and "link 1 down" in f.message and f.measured == 1 and f.expected == 2


def test_fabric_manager_down():
    f = one(check_fabric(inp(hgx(running=("nvlsm",)))), "fabric.manager.down", "node")
    assert f.severity == "critical" and "4 NVSwitches" in f.message
    assert "systemctl status nvidia-fabricmanager" in f.remediation


@pytest.mark.parametrize("setting,make,raised", [
    ("auto", gb200, False), ("required", gb200, True), ("off", hgx, False), ("auto", hgx, True)])
def test_fabric_manager_setting(setting, make, raised):
    s = make(running=())
    found = only(check_fabric(inp(s, config=cfg(fabric={"fabric_manager": setting}))), "fabric.manager.down")
    assert bool(found) is raised


def test_imex_only_when_configured():
    assert check_fabric(inp(gb200(running=()))) == []  # never by default
    f = one(check_fabric(inp(gb200(running=()), config=cfg(fabric={"imex": True}))), "fabric.imex.down", "node")
    assert f.severity == "critical" and "systemctl status nvidia-imex" in f.remediation
    assert check_fabric(inp(gb200(), config=cfg(fabric={"imex": True}))) == []


@pytest.mark.parametrize("make", [gb200, hgx])
def test_incomplete_process_table_never_raises_daemon_findings(make):
    s = make(running=(), complete=False)
    config = cfg(fabric={"imex": True, "fabric_manager": "required"})
    assert codes(check_fabric(inp(s, config=config))) & {"fabric.manager.down", "fabric.imex.down"} == set()


def test_lost_gpus_and_unavailable_nvml_are_skipped():
    s = with_nvml_gpu(gb200(), 1, error="GPU is lost", fabric_clique_id=0, fabric_health=FabricHealth(summary="unhealthy"),
                      c2c_links=(C2cLink(link=0, state="down"),))
    assert check_fabric(inp(s)) == []
    blind = gb200().model_copy(update={"nvml": NvmlInfo(available=False, error="Driver Not Loaded")})
    assert check_fabric(inp(blind)) == []


def test_odd_data_never_raises():
    bare = NvmlGpu(index=0, pci_bus_id="0009:01:00.0", fabric_state="completed", fabric_status=None,
                   nvlinks=(NvLink(link=0, state="up"), NvLink(link=1, state="up", speed_mb_s=0)),
                   fabric_health=FabricHealth(), c2c_links=())
    s = gb200()
    s = s.model_copy(update={"nvml": s.nvml.model_copy(update={"gpus": (bare,)})})
    found = check_fabric(inp(s))
    assert codes(found) == {"nvlink.fabric.unassigned"}  # a Grace tray's GPU with no identity
    assert check_fabric(inp(s.model_copy(update={"nvml": NvmlInfo()}))) == []


def test_every_code_is_documented():
    import re

    doc = (DOCS / "findings.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z0-9_.]+)` \|", doc, re.M))
    assert {"nvlink.fabric.unassigned", "nvlink.fabric.unhealthy", "nvlink.fabric.degraded", "nvlink.domain.split",
            "nvlink.link.slow", "nvlink.c2c.down", "fabric.manager.down", "fabric.imex.down"} <= documented


# ---------------------------------------------------------------------------
# judged from real recorded text: the Fabric blocks of published `nvidia-smi -q` outputs
# (tests/fixtures/SOURCES.md), put on the GPUs of a node in order, through every check

def _from_text(s: NodeSnapshot, name: str, *, every_gpu: bool = False) -> NodeSnapshot:
    blocks = list(parse_smi_fabric((OUTPUTS / name).read_bytes()).values())
    gpus = s.nvml.gpus
    by_bus = {g.pci_bus_id: blocks[0 if every_gpu else i] for i, g in enumerate(gpus) if every_gpu or i < len(blocks)}
    return s.model_copy(update={"nvml": apply_smi_fabric(s.nvml, by_bus)})


def _fabric_codes(s: NodeSnapshot) -> set[tuple[str, str, str]]:
    return {(f.code, f.severity, f.subject) for f in run_checks(inp(s)) if f.code.startswith(("nvlink.", "fabric."))}


def test_real_h100_535_output_on_an_hgx_board_is_healthy():
    s = _from_text(hgx(), "nvidia-smi-q.h100-sxm-8gpu.535.161.08.txt")
    assert {g.fabric_state for g in s.nvml.gpus} == {"completed"} and len(s.nvml.gpus) == 8
    assert _fabric_codes(s) == set()


def test_real_gb200_unhealthy_summary_is_critical_with_full_bandwidth():
    # kubernetes-sigs/dra-driver-nvidia-gpu#626: Completed/Success, clique 2, Summary Unhealthy, Bandwidth Full
    s = _from_text(gb200(), "nvidia-smi-q-fabric.gb200-unhealthy.grep-c3.txt", every_gpu=True)
    assert _fabric_codes(s) == {("nvlink.fabric.unhealthy", "critical", f"gpu{i}") for i in range(4)}
    f = one(run_checks(inp(s)), "nvlink.fabric.unhealthy", "gpu0")
    assert "health summary unhealthy" in f.message and "bandwidth" not in f.message


def test_real_insufficient_resources_with_zero_identity_is_incomplete_not_unassigned():
    # Azure/azhpc-images#506: Completed, Insufficient Resources, clique 0, all-zero UUID
    s = _from_text(gb200(), "nvidia-smi-q-fabric.insufficient-resources.txt", every_gpu=True)
    assert _fabric_codes(s) == {("nvlink.fabric.incomplete", "critical", f"gpu{i}") for i in range(4)}
    assert "Insufficient Resources" in one(run_checks(inp(s)), "nvlink.fabric.incomplete", "gpu2").message


def test_real_in_progress_block_is_incomplete_and_its_na_health_is_not_judged():
    # NVIDIA/gpu-operator#2511: In Progress, every other row N/A
    s = _from_text(gb200(), "nvidia-smi-q-fabric.in-progress-na.txt", every_gpu=True)
    assert _fabric_codes(s) == {("nvlink.fabric.incomplete", "critical", f"gpu{i}") for i in range(4)}
