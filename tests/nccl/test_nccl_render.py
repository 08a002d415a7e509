"""render_all: the pure entry point the daemon and `agentd render` call."""

from agentd.config import AgentConfig
from agentd.judging.findings import port_subject
from agentd.model import Hca
from agentd.nccl import NcclRender, render_all
from agentd.nccl.envfile import read_nccl_conf
from agentd.nccl.xmlcheck import check_topo_xml
from tests.support.check_snapshots import with_port
from tests.support.nccl_snapshots import bdf, config, critical, ib_node, pcie_node, roce_node, roles_for, unvalidated_config


def render(snap, findings=(), **nccl) -> NcclRender:
    cfg = config(**nccl)
    return render_all(snap, list(findings), cfg, roles_for(snap, cfg))


def test_ib_node_render_is_complete_and_valid():
    snap = ib_node()
    r = render(snap, ib_tc=106)
    assert r.ok and r.problems == () and r.topo_problems == ()
    assert r.env.get("NCCL_TOPO_FILE") == "/etc/nccl/topo.xml"
    assert check_topo_xml(r.topo_xml, existing_bus_ids={d.bdf for d in snap.pci}) == []
    assert read_nccl_conf(r.env_conf) == r.env.as_dict()
    assert "export NCCL_TOPO_FILE=/etc/nccl/topo.xml" in r.env_sh


def test_every_profile_renders_cleanly():
    for snap in (ib_node(), roce_node(), pcie_node()):
        r = render(snap)
        assert r.ok and r.topo_xml is not None and r.notes == (), (snap.system.hostname, r.notes)


def test_topo_disabled():
    r = render(ib_node(), write_topo=False)
    assert r.topo_xml is None and "NCCL_TOPO_FILE" not in r.env and r.ok


def test_topo_path_follows_config():
    cfg = config()
    cfg = cfg.model_copy(update={"paths": cfg.paths.model_copy(update={"nccl_topo": "/run/agentd/topo.xml"})})
    snap = ib_node()
    assert render_all(snap, [], cfg, roles_for(snap)).env.get("NCCL_TOPO_FILE") == "/run/agentd/topo.xml"


def test_no_gpus_no_topo_but_env_still_written():
    snap = ib_node().model_copy(update={"gpus": ()})
    r = render(snap)
    assert r.ok and r.topo_xml is None and "NCCL_TOPO_FILE" not in r.env
    assert r.notes == ("topology XML not written: the node has no GPUs",)
    assert r.env.get("NCCL_IB_HCA")


def test_xml_failing_its_check_is_dropped_not_written():
    snap = pcie_node()
    # an HCA on function 1 whose function 0 is absent: the NCCL lookup id does not exist here
    hca = Hca(name="mlx5_0", hca_type="MT4123", pci_bus_id=bdf(0xCA, 0, 1), ports=snap.hca("mlx5_1").ports)
    snap = snap.model_copy(update={"pci": tuple(d for d in snap.pci if d.bdf != bdf(0xCA, 0, 0)), "hcas": (hca,)})
    r = render(snap)
    assert r.topo_xml is None and "NCCL_TOPO_FILE" not in r.env
    assert any("does not exist on this host" in p for p in r.topo_problems)
    assert r.ok  # the env file is still good to write


def test_bad_override_blocks_the_render():
    # The config loader rejects this first; a config that bypassed it still never renders.
    snap = ib_node()
    cfg = unvalidated_config(overrides={"NCCL_NET_GDR_LEVEL": "NODE"})
    r = render_all(snap, [], cfg, roles_for(snap, cfg))
    assert not r.ok and "NODE" in r.problems[0]


def test_port_down_cycle_through_render_all():
    snap = ib_node()
    before = render(snap).env.get("NCCL_IB_HCA")
    during = render(with_port(snap, "mlx5_6", state="DOWN")).env.get("NCCL_IB_HCA")
    flagged = render(snap, [critical("ib.port.flapping", port_subject("mlx5_6", 1))]).env.get("NCCL_IB_HCA")
    after = render(snap).env.get("NCCL_IB_HCA")
    assert "mlx5_6:1" in before and "mlx5_6:1" not in during and "mlx5_6:1" not in flagged
    assert after == before


def test_header_time_defaults_to_snapshot_time_and_is_the_only_volatile_line():
    snap = ib_node()
    cfg = config()
    a = render_all(snap, [], cfg, roles_for(snap))
    b = render_all(snap.model_copy(update={"taken_at": snap.taken_at + 60}), [], cfg, roles_for(snap), generated_at=snap.taken_at + 90)
    assert "# generated: 2025-10-09T08:53:20Z" in a.env_sh
    diff = [(x, y) for x, y in zip(a.env_sh.splitlines(), b.env_sh.splitlines()) if x != y]
    assert len(diff) == 1 and diff[0][0].startswith("# generated: ")
    xdiff = [(x, y) for x, y in zip(a.topo_xml.splitlines(), b.topo_xml.splitlines()) if x != y]
    assert len(xdiff) == 1 and xdiff[0][0].startswith("<!-- generated: ")


def test_topo_path_argument_for_out_dir_renders():
    snap = ib_node()
    cfg = config()
    r = render_all(snap, [], cfg, roles_for(snap), topo_path="/tmp/out/nccl-topo.xml")
    assert r.env.get("NCCL_TOPO_FILE") == "/tmp/out/nccl-topo.xml" and r.topo_xml is not None
    r = render_all(snap, [], cfg, roles_for(snap), topo_path=None)
    assert "NCCL_TOPO_FILE" not in r.env


def test_topo_file_is_named_as_the_node_sees_it_when_agentd_runs_in_a_container():
    snap = ib_node()
    cfg = AgentConfig.model_validate({"host_root": "/host", "paths": {"nccl_topo": "/host/etc/nccl/topo.xml"}})
    r = render_all(snap, [], cfg, roles_for(snap, cfg))
    assert r.topo_xml is not None
    assert r.env.get("NCCL_TOPO_FILE") == "/etc/nccl/topo.xml"
    plain = render_all(snap, [], config(), roles_for(snap))
    assert plain.env.get("NCCL_TOPO_FILE") == "/etc/nccl/topo.xml"


def test_xml_with_warnings_only_is_written_and_the_warnings_are_notes():
    # a VM whose hypervisor hides every PCIe link capability: NCCL's own detection writes
    # link_speed="" / link_width="0" and carries on, and so does agentd
    snap = ib_node()
    blind = {"max_link_speed": None, "max_link_speed_gts": None, "max_link_width": None}
    snap = snap.model_copy(update={"pci": tuple(d.model_copy(update=blind) for d in snap.pci)})
    r = render(snap)
    assert r.ok and r.topo_problems == () and r.topo_xml is not None
    assert 'link_speed="" link_width="0"' in r.topo_xml
    assert r.env.get("NCCL_TOPO_FILE") == "/etc/nccl/topo.xml"
    topo_notes = [n for n in r.notes if n.startswith("topology XML: ")]
    assert any('link_speed="": NCCL assumes Gen3' in n for n in topo_notes)
    assert not any("not written" in n for n in r.notes)
    assert len(topo_notes) == len(set(topo_notes)) <= 4  # one note a kind, not one an element
