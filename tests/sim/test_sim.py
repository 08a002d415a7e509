"""The simulator: trees in the kernel's layout, faults that apply and clear exactly.

Each profile is built once per module (building is the slow part); fault tests apply and
clear on that shared root and rebuild it if a test leaves it different from the profile.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentd import sim
from agentd.sim.build import pci_layout, pristine_root
from agentd.sim.fault_kinds import KINDS
from agentd.sim.faults import advancing_paths, touched_paths
from agentd.sim.net import format_mlnx_qos, parse_ethtool
from agentd.sim.pcicfg import CAP_EXP, SPEED_GEN, find_cap, read_acs_ctrl, read_class_code, read_link_status, read_port_type
from agentd.sim.tree import restore_path, snapshot_tree
from tests.support import cost
from tests.support.fixtures import OUTPUTS

PROFILES = sorted(sim.PROFILES)
MARKER = ".agentd/simulation.json"


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("sim")
    cache: dict[str, Path] = {}

    def get(profile: str) -> Path:
        if profile not in cache:
            with cost.shared():  # one tree per profile for the module; faults are cleared after each test
                cache[profile] = sim.build_tree(profile, base / profile)
        return cache[profile]

    return get


def _links(root: Path):
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                yield p


# ---------------------------------------------------------------------------
# layout


@pytest.mark.parametrize("profile", PROFILES)
def test_profile_builds_with_its_inventory(roots, profile):
    root, prof = roots(profile), sim.PROFILES[profile]
    assert json.loads((root / MARKER).read_text()) == {"profile": profile, "faults": []}
    gpus = [d for d in os.listdir(root / "sys/bus/pci/devices") if (root / "sys/bus/pci/devices" / d / "class").read_text().startswith("0x0302")]
    assert sorted(gpus) == prof.gpu_bdfs and len(gpus) == {"pcie-4gpu": 4, "gb200-nvl": 4}.get(profile, 8)
    assert sorted(os.listdir(root / "sys/class/infiniband")) == sorted(h.name for h in prof.hcas)
    nvml = json.loads((root / ".agentd/nvml.json").read_text())
    assert [g["pci_bus_id"] for g in nvml["gpus"]] == prof.gpu_bdfs
    assert {len(g["nvlinks"]) for g in nvml["gpus"]} == {prof.nvlinks_per_gpu}
    assert (root / "sys/module/nvidia_peermem/version").read_text() == prof.driver_version + "\n"
    assert ("Open Kernel Module" in (root / "proc/driver/nvidia/version").read_text()) == prof.open_module


@pytest.mark.parametrize("profile", PROFILES)
def test_symlinks_are_relative_and_resolve_inside_the_root(roots, profile):
    root = roots(profile)
    links = list(_links(root))
    assert len(links) > 50
    for link in links:
        target = os.readlink(link)
        assert not os.path.isabs(target), link
        assert not target.endswith("/") and not target.rstrip("./").endswith(".."), (link, target)
        real = os.path.realpath(link)
        assert real.startswith(str(root) + os.sep) and os.path.exists(real), (link, target)


@pytest.mark.parametrize("profile", PROFILES)
def test_class_links_point_at_pci_device_dirs(roots, profile):
    root, prof = roots(profile), sim.PROFILES[profile]
    layout = pci_layout(prof)
    for hca in prof.hcas:
        dev = root / layout[hca.bdf].rel
        link = root / "sys/class/infiniband" / hca.name / "device"
        assert os.readlink(link) == f"../../../{hca.bdf}"
        assert os.path.realpath(link) == str(dev)
        assert os.path.realpath(root / "sys/class/net" / hca.netdev / "device") == str(dev)
        assert os.readlink(root / "sys/class/infiniband" / hca.name).startswith("../../devices/pci")
    for bdf in os.listdir(root / "sys/bus/pci/devices"):
        real = Path(os.path.realpath(root / "sys/bus/pci/devices" / bdf))
        assert real.name == bdf and real == root / layout[bdf].rel and (real / "config").is_file()
    assert not (root / "sys/class/net/lo/device").exists() and not (root / "sys/class/net/lo/speed").exists()


@pytest.mark.parametrize("profile", PROFILES)
def test_config_space_matches_the_sysfs_attributes(roots, profile):
    root = roots(profile)
    for n in pci_layout(sim.PROFILES[profile]).values():
        d = root / n.rel
        cfg = (d / "config").read_bytes()
        assert len(cfg) == 4096
        assert read_class_code(cfg) == int((d / "class").read_text(), 16)
        assert int.from_bytes(cfg[0:2], "little") == int((d / "vendor").read_text(), 16)
        assert find_cap(cfg, CAP_EXP) is not None
        assert read_port_type(cfg) == n.port_type
        speed = (d / "current_link_speed").read_text().strip()
        assert read_link_status(cfg) == (SPEED_GEN[speed], int((d / "current_link_width").read_text()))
        assert read_acs_ctrl(cfg) == (0 if n.is_bridge else None)


def test_h100_gpu_and_nic_share_a_switch(roots):
    layout = pci_layout(sim.PROFILES["h100-ib"])
    gpu, nic = layout["0000:18:00.0"], layout["0000:17:00.0"]
    assert layout[layout[gpu.parent].parent].bdf == layout[layout[nic.parent].parent].bdf == "0000:15:00.0"
    assert gpu.rel == "sys/devices/pci0000:14/0000:14:01.0/0000:15:00.0/0000:16:01.0/0000:18:00.0"
    assert (roots("h100-ib") / gpu.rel / "current_link_speed").read_text() == "32.0 GT/s PCIe\n"


def test_ib_and_roce_ports(roots):
    ib = roots("h100-ib") / "sys/class/infiniband/mlx5_0/ports/1"
    assert [(ib / f).read_text().strip() for f in ("state", "phys_state", "rate", "link_layer")] == ["4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", "InfiniBand"]
    assert (ib / "gids/0").read_text().startswith("fe80:0000:0000:0000:")
    assert sorted(os.listdir(ib / "gid_attrs/types")) == ["0"] and os.listdir(ib / "gid_attrs/ndevs") == []
    assert (ib / "gids/15").read_text().strip() == ":".join(["0000"] * 8)
    assert {"port_xmit_data", "port_rcv_data", "link_downed", "symbol_error", "port_xmit_wait"} <= set(os.listdir(ib / "counters"))
    roce = roots("h100-roce") / "sys/class/infiniband/mlx5_0/ports/1"
    gids = [(roce / f"gids/{i}").read_text().strip() for i in range(4)]
    types = [(roce / f"gid_attrs/types/{i}").read_text().strip() for i in range(4)]
    assert gids[0] == gids[1] and gids[0].startswith("fe80:") and gids[2] == gids[3] == "0000:0000:0000:0000:0000:ffff:0a64:000b"
    assert types == ["IB/RoCE v1", "RoCE v2", "IB/RoCE v1", "RoCE v2"]
    assert (roce / "gid_attrs/ndevs/3").read_text().strip() == "ens1np0" and not (roce / "gid_attrs/types/4").exists()
    assert {"np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled", "out_of_sequence", "local_ack_timeout_err", "rnr_nak_retry_err", "lifespan"} <= set(os.listdir(roce / "hw_counters"))


def test_netdevs_ethtool_and_dcb(roots):
    root = roots("h100-roce")
    net = root / "sys/class/net"
    assert (net / "ens1np0/mtu").read_text() == "9000\n" and (net / "ens1np0/type").read_text() == "1\n"
    assert (net / "ens1np0/ecn/roce_np/enable/3").read_text() == "1\n" and (net / "ens1np0/ecn/roce_rp/enable/7").exists()
    assert (net / "eno1/mtu").read_text() == "1500\n"
    ib = roots("h100-ib") / "sys/class/net/ib3"
    assert (ib / "type").read_text() == "32\n" and (ib / "mtu").read_text() == "4092\n"
    stats = parse_ethtool((root / ".agentd/ethtool/ens1np0").read_text())
    assert {"rx_prio3_pause", "tx_prio7_pause_duration", "rx_vport_rdma_unicast_bytes", "rx_discards_phy", "tx_discards_phy"} <= set(stats)
    assert (root / ".agentd/dcb/ens1np0").read_text() == (OUTPUTS / "mlnx_qos.eth4-roce-trust-dscp-pfc3.txt").read_text()
    assert format_mlnx_qos(3) == (OUTPUTS / "mlnx_qos.eth4-roce-trust-dscp-pfc3.txt").read_text()


@pytest.mark.tree
def test_build_refuses_foreign_dirs_and_replaces_sim_roots(tmp_path):
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious/data").write_text("keep")
    with pytest.raises(ValueError, match="not a simulator root"):
        sim.build_tree("pcie-4gpu", tmp_path / "precious")
    assert (tmp_path / "precious/data").read_text() == "keep"
    with pytest.raises(ValueError, match="valid profiles: gb200-nvl, h100-ib, h100-roce, pcie-4gpu"):
        sim.build_tree("dgx-b300", tmp_path / "x")
    out = sim.build_tree("pcie-4gpu", tmp_path / "node", faults=["port_down=polling"])
    assert (out / "sys/class/infiniband/mlx5_0/ports/1/phys_state").read_text() == "2: Polling\n"
    assert sim.applied_faults(out) == ["port_down=polling"]
    again = sim.build_tree("pcie-4gpu", out)
    assert sim.applied_faults(again) == [] and (again / "sys/class/infiniband/mlx5_0/ports/1/state").read_text() == "4: ACTIVE\n"
    with pytest.raises(ValueError, match="no RoCE"):
        sim.build_tree("pcie-4gpu", tmp_path / "node", faults=["ecn_off"])
    assert list((tmp_path / "node").iterdir()) == []  # no half-faulted root left behind


# ---------------------------------------------------------------------------
# faults

GB200_ONLY = {"fabric_unassigned", "fabric_health", "fabric_domain_split", "c2c_down", "imex_down"}
NOT_ON = {
    "pcie-4gpu": {"ecn_off", "pfc_off", "pause_on", "pause_storm", "tclass_override", "trust_pcp", "dscp_map_lossy", "roce_lossy_traffic", "nvlink_down", "nvlink_errors", "fabric_incomplete", "fabric_status", "nvlink_slow", "fm_down",
                  "rx_power_low", "fec_errors", "link_down_reason"} | GB200_ONLY,
    "h100-ib": GB200_ONLY,
    "h100-roce": GB200_ONLY,
    "gb200-nvl": {"fm_down"},
}
CASES = [(p, k) for p in PROFILES for k in sim.FAULT_KINDS if k not in NOT_ON.get(p, set())]


@pytest.mark.slow  # every kind on every profile: ~200 cases, ~20 s of the fast loop's 60
@pytest.mark.parametrize("profile,kind", CASES, ids=[f"{p}-{k}" for p, k in CASES])
def test_fault_applies_and_clears(roots, profile, kind):
    root = roots(profile)
    before = snapshot_tree(root)
    applied = sim.apply_fault(root, kind)
    assert applied.kind == kind and sim.applied_faults(root) == [kind]
    during = snapshot_tree(root)
    changed = {k for k in before.keys() | during.keys() if before.get(k) != during.get(k)} - {MARKER}
    allowed = touched_paths(root, kind) + advancing_paths(root, kind)
    stray = {c for c in changed if not any(c == a or c.startswith(a + "/") for a in allowed)}
    sim.clear_fault(root, kind)
    after = snapshot_tree(root)
    advanced = set(advancing_paths(root, kind))
    diff = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    if diff - advanced or stray:
        roots(profile, fresh=True)  # keep a broken clear from failing the next cases too
    for rel in diff & advanced:
        # Advanced counters must not leak into the next case: another fault's clear may
        # legitimately restore them (gpu_removed restores a whole GPU's NVML entry).
        restore_path(pristine_root(profile), root, rel)
    assert changed, f"{kind} changed nothing"
    assert not stray, f"{kind} changed files clearing does not cover: {sorted(stray)[:5]}"
    assert not diff - advanced, f"{kind} not cleared: {sorted(diff - advanced)[:5]}"
    for rel in diff & advanced:  # documented counters stay advanced, and only upwards
        old, new = before[rel][1], after[rel][1]
        if isinstance(old, bytes) and old.strip().isdigit():
            assert int(new) > int(old), rel  # type: ignore[arg-type]


@pytest.mark.parametrize("profile,kind", [(p, k) for p, ks in NOT_ON.items() for k in sorted(ks)])
def test_fault_not_possible_on_profile_says_why(roots, profile, kind):
    with pytest.raises(ValueError, match=f"fault '{kind}' on profile {profile}: "):
        sim.apply_fault(roots(profile), kind)
    assert sim.applied_faults(roots(profile)) == []


@pytest.mark.tree
def test_fault_effects(tmp_path):
    r = sim.build_tree("h100-ib", tmp_path / "n")
    port = r / "sys/class/infiniband/mlx5_2/ports/1"
    sim.apply_fault(r, "port_down@mlx5_2")
    assert [(port / f).read_text() for f in ("state", "phys_state", "rate")] == ["1: DOWN\n", "3: Disabled\n", "40 Gb/sec (4X QDR)\n"]
    assert (r / "sys/class/net/ib2/carrier").read_text() == "0\n"
    sim.clear_fault(r, "port_down@mlx5_2:1")
    assert (port / "state").read_text() == "4: ACTIVE\n" and (port / "counters/link_downed").read_text() == "1\n"
    for value, rate in (("200", "200 Gb/sec (4X HDR)"), ("width", "200 Gb/sec (2X NDR)"), ("1X", "100 Gb/sec (1X NDR)")):
        sim.apply_fault(r, f"rate_degraded@mlx5_2={value}")
        assert (port / "rate").read_text() == rate + "\n"
        assert (r / "sys/class/net/ib2/speed").read_text() == f"{int(rate.split()[0]) * 1000}\n"
    sim.clear_fault(r, "rate_degraded@mlx5_2")
    assert sim.applied_faults(r) == [] and (port / "rate").read_text() == "400 Gb/sec (4X NDR)\n"
    sim.apply_fault(r, "flapping@ib2=4")
    assert (port / "counters/link_downed").read_text() == "5\n" and (r / "sys/class/net/ib2/carrier_changes").read_text() == "12\n"
    sim.apply_fault(r, "counter_saturated@mlx5_2")
    assert [(port / f"counters/{c}").read_text() for c in ("port_xmit_wait", "link_downed", "symbol_error")] == ["4294967295\n", "255\n", "65535\n"]
    sim.apply_fault(r, "counter_reset@mlx5_2")
    assert (port / "counters/port_xmit_data").read_text() == "0\n" and (port / "hw_counters/lifespan").read_text() == "12\n"
    sim.apply_fault(r, "acs_on@gpu4")
    dsp = pci_layout(sim.PROFILES["h100-ib"])["0000:98:00.0"].parent
    assert dsp == "0000:96:01.0" and read_acs_ctrl((r / f"sys/bus/pci/devices/{dsp}/config").read_bytes()) & 0x4
    sim.apply_fault(r, "pcie_downtrained@mlx5_1")
    for bdf in ("0000:38:00.0", "0000:37:00.0"):  # NIC and the switch port above it: one link
        assert (r / f"sys/bus/pci/devices/{bdf}/current_link_speed").read_text() == "16.0 GT/s PCIe\n"
    sim.apply_fault(r, "pcie_downtrained@gpu0")
    assert (r / "sys/bus/pci/devices/0000:18:00.0/current_link_width").read_text() == "8\n"
    sim.apply_fault(r, "unreadable_file@mlx5_3")
    with pytest.raises(IsADirectoryError):
        (r / "sys/class/infiniband/mlx5_3/ports/1/rate").read_bytes()
    sim.apply_fault(r, "garbage_file@sys/class/net/ib3/mtu")
    with pytest.raises(UnicodeDecodeError):
        (r / "sys/class/net/ib3/mtu").read_text()
    sim.clear_fault(r, "garbage_file@sys/class/net/ib3/mtu")
    assert (r / "sys/class/net/ib3/mtu").read_text() == "4092\n"


@pytest.mark.tree
def test_nvml_and_gdr_faults(tmp_path):
    r = sim.build_tree("h100-roce", tmp_path / "n")
    nvml = lambda: json.loads((r / ".agentd/nvml.json").read_text())  # noqa: E731
    sim.apply_fault(r, "nvlink_down@gpu3=7")
    sim.apply_fault(r, "nvlink_down@gpu3:2")
    assert [l["link"] for l in nvml()["gpus"][3]["nvlinks"] if l["state"] == "down"] == [2, 7]
    sim.clear_fault(r, "nvlink_down@gpu3=7")
    assert [l["link"] for l in nvml()["gpus"][3]["nvlinks"] if l["state"] == "down"] == [2]
    sim.apply_fault(r, "gpu_removed@gpu2")
    assert [g["index"] for g in nvml()["gpus"]] == list(range(7)) and not (r / "sys/bus/pci/devices/0000:4a:00.0").exists()
    sim.apply_fault(r, "gpu_lost@gpu5")
    sim.apply_fault(r, "nvml_hang=12.5")
    sim.apply_fault(r, "fabric_incomplete@gpu1=not_started")
    doc = nvml()
    assert doc["hang_s"] == 12.5 and doc["gpus"][1]["fabric_state"] == "not_started"
    assert next(g for g in doc["gpus"] if g["pci_bus_id"] == "0000:b9:00.0")["error"] == "GPU is lost"
    for spec in sim.applied_faults(r):
        sim.clear_fault(r, spec)
    assert nvml() == json.loads((pristine_root("h100-roce") / ".agentd/nvml.json").read_text())
    sim.apply_fault(r, "no_gdr")
    assert "Open" not in (r / "proc/driver/nvidia/version").read_text() and not (r / "sys/module/nvidia_peermem").exists()
    assert "nvidia_peermem" not in (r / "proc/modules").read_text() and "(POE)" in (r / "proc/modules").read_text()
    sim.apply_fault(r, "pause_storm@ens2np0")
    sim.apply_fault(r, "pause_storm@mlx5_1=5")
    assert parse_ethtool((r / ".agentd/ethtool/ens2np0").read_text())["rx_prio3_pause"] == 2112 + 10**7 + 5
    sim.apply_fault(r, "nic_removed@mlx5_6")
    assert not (r / "sys/class/infiniband/mlx5_6").exists() and not (r / "sys/class/net/ens7np0").exists()
    assert not (r / "sys/bus/pci/devices/0000:c9:00.0").exists() and not (r / ".agentd/dcb/ens7np0").exists()
    sim.clear_fault(r, "nic_removed@ens7np0")
    assert os.path.realpath(r / "sys/class/infiniband/mlx5_6/device") == os.path.realpath(r / "sys/bus/pci/devices/0000:c9:00.0")


BAD_SPECS = ["", "bogus", "port_down@", "port_down=", "port_down@mlx5_0;rm", "peermem_gone@mlx5_0", "peermem_gone=1",
             "flapping=abc", "flapping=0", "rate_degraded=fast", "pcie_downtrained=sideways", "mtu_mismatch=10", "ecn_off=9"]


@pytest.mark.parametrize("spec", BAD_SPECS)
def test_bad_spec_is_a_clear_value_error(spec):
    with pytest.raises(ValueError, match="valid kinds: port_down, rate_degraded, flapping") as e:
        sim.parse_fault(spec)
    assert "KIND[@TARGET][=VALUE]" in str(e.value)


@pytest.mark.parametrize("spec,why", [("port_down@mlx5_42", "HCAs: mlx5_0"), ("port_down@mlx5_0:2", "only port 1"),
                                      ("nvlink_down@gpu9", "has 8 GPUs"), ("mtu_mismatch@eth7", "valid: eno1"),
                                      ("rate_degraded=300", "not a speed"), ("unreadable_file@sys/nope/x", "not a regular file"),
                                      ("nvlink_down@gpu1:3=4", "link given twice")])
def test_bad_target_is_a_clear_value_error(roots, spec, why):
    with pytest.raises(ValueError, match=why):
        sim.apply_fault(roots("h100-ib"), spec)
    assert sim.applied_faults(roots("h100-ib")) == []


def test_every_kind_is_described():
    text = sim.describe_kinds()
    assert all(k in text for k in KINDS) and set(sim.FAULT_KINDS) >= {
        "port_down", "rate_degraded", "flapping", "peermem_gone", "dmabuf_only", "no_gdr", "pcie_downtrained", "acs_on",
        "mtu_mismatch", "ecn_off", "pause_storm", "nvlink_down", "nvlink_errors", "gpu_lost", "gpu_removed", "nic_removed",
        "counter_reset", "counter_saturated", "unreadable_file", "garbage_file", "nvml_hang", "ethtool_failure", "fabric_incomplete"}


# ---------------------------------------------------------------------------
# round trip through agentd's own readers (skipped until they exist)

EXPECT = {  # profile -> (compute port rate, compute netdev MTU, GPU count, GPU i -> NIC path)
    "h100-ib": (400.0, 4092, 8, {("0000:18:00.0", "mlx5_0"): "PIX", ("0000:18:00.0", "mlx5_4"): "SYS"}),
    "h100-roce": (400.0, 9000, 8, {("0000:db:00.0", "mlx5_7"): "PIX", ("0000:39:00.0", "mlx5_0"): "NODE"}),
    "pcie-4gpu": (200.0, 4092, 4, {("0000:16:00.0", "mlx5_1"): "SYS", ("0000:98:00.0", "mlx5_0"): "SYS", ("0000:b8:00.0", "mlx5_1"): "NODE"}),
    "gb200-nvl": (400.0, 4092, 4, {("0008:01:00.0", "mlx5_0"): "NODE", ("0019:01:00.0", "mlx5_3"): "NODE", ("0018:01:00.0", "mlx5_1"): "SYS"}),
}


def _collect(root: Path):
    collect = pytest.importorskip("agentd.collection.collector")
    from agentd.config import AgentConfig
    from agentd.host.fs import HostRoot

    return collect.collect_once(HostRoot.at(root), AgentConfig(host_root=root))


@pytest.mark.parametrize("profile", PROFILES)
def test_readers_see_the_profile(roots, profile):
    snap = _collect(roots(profile))
    prof = sim.PROFILES[profile]
    rate, mtu, ngpus, paths = EXPECT[profile]
    assert snap.read_errors == () and all(p.ok for p in snap.probes)
    assert len(snap.gpus) == ngpus and all(g.in_nvml for g in snap.gpus) and snap.nvml.available
    assert {g.name for g in snap.gpus} == {prof.gpu_name}
    assert all(len(g.nvlinks) == prof.nvlinks_per_gpu and all(l.state == "up" for l in g.nvlinks) for g in snap.nvml.gpus)
    for h in snap.hcas:
        spec = prof.hca(h.name)
        (port,) = h.ports
        assert (port.state, port.phys_state, port.link_layer, h.pci_bus_id) == ("ACTIVE", "LinkUp", spec.link_layer, spec.bdf)
        assert port.netdev == spec.netdev and port.counters["port_xmit_data"] > 0
        if spec.compute:
            assert (port.rate_gbps, port.width) == (rate, 4)
            assert snap.netdev(spec.netdev).mtu == mtu
    for name in prof.roce_netdevs:
        nd = snap.netdev(name)
        assert nd.pfc.enabled == (3,) and nd.ecn.np[3] and nd.ecn.rp[3] and nd.ethtool["rx_prio3_pause"] == 2112
    assert snap.netdev(prof.boot_nic.netdev).mtu == 1500 and snap.netdev("lo").is_virtual
    assert snap.gdr.peermem_loaded and snap.gdr.nvidia_open_module == prof.open_module and snap.gdr.dmabuf_kernel_ok
    assert len(snap.system.numa_nodes) == 2 and snap.system.arch == prof.arch
    assert snap.system.cpu_model == (None if prof.arch == "aarch64" else 143)
    by_bus = {g.pci_bus_id: g for g in snap.gpus}
    for (gpu, nic), path in paths.items():
        assert by_bus[gpu].nic_paths[nic] == path
    bridges = [d for d in snap.pci if d.is_bridge]
    assert bridges and all(d.acs_ctrl == 0 for d in bridges) and sum(d.is_nvswitch for d in snap.pci) == len(prof.nvswitch_bdfs)


def test_readers_see_roce_gid_index(roots):
    from tests.support.ib_oracles import roce_v2_gid_index

    snap = _collect(roots("h100-roce"))
    assert {roce_v2_gid_index(h.ports[0].gids) for h in snap.hcas} == {3}


@pytest.mark.tree
def test_readers_see_faults(tmp_path):
    root = sim.build_tree("h100-ib", tmp_path / "n", faults=["port_down@mlx5_1=polling", "unreadable_file@mlx5_2", "garbage_file@mlx5_3",
                                                               "acs_on@gpu5", "pcie_downtrained@gpu6", "nvlink_down@gpu7:17", "gpu_lost@gpu0"])
    snap = _collect(root)
    p1 = snap.hca("mlx5_1").ports[0]
    assert (p1.state, p1.phys_state, p1.rate_gbps) == ("DOWN", "Polling", 40.0)
    errors = {(e.path, e.kind) for e in snap.read_errors}
    assert ("sys/class/infiniband/mlx5_2/ports/1/rate", "unreadable") in errors
    assert ("sys/class/infiniband/mlx5_3/ports/1/state", "unparsable") in errors
    dsp = snap.pci_device(pci_layout(sim.PROFILES["h100-ib"])["0000:b9:00.0"].parent)
    assert dsp.pcie_port_type == "downstream" and dsp.acs_ctrl & 0x4
    assert snap.pci_device("0000:ca:00.0").current_link_width == 8
    assert [l.link for l in snap.nvml.gpus[7].nvlinks if l.state == "down"] == [17]
    assert snap.nvml.gpus[0].error == "GPU is lost" and snap.gpus[0].in_nvml is False
