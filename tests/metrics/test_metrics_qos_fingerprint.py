"""Issue 17 metrics: the RoCE QoS chain (agentd_roce_qos_info), the IB service levels on
agentd_ib_port_info and the node fingerprint (agentd_node_fingerprint_info), rendered from
hand-built States as the daemon renders them."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from agentd.config import AgentConfig
from agentd.judging.placement import placement
from agentd.judging.roles import HcaRoles
from agentd.model import Hca, IbPort, NcclConf, NodeSnapshot, PfcConfig, RoceEcn, SoftwareVersions, TclassOverride
from agentd.nccl.topo import topology_hash
from tests.support import service_snapshots as fixtures

Labels = list[dict[str, str]]
DSCP_MAP = {d: d >> 3 for d in range(64)}  # mlx5's default dscp2prio: DSCP 26 -> priority 3


def series(snap: NodeSnapshot, name: str, **state: object) -> Labels:
    text = fixtures.state(snap=snap, **state).metrics_bytes().decode()
    return [s.labels for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name]


def roce_node(**kw: object) -> NodeSnapshot:
    """The fixture node with its Ethernet port ens1np0 (mlx5_1) in DSCP trust, PFC on 3."""
    snap = fixtures.snapshot(**kw)
    nds = tuple(n.model_copy(update={"pfc": PfcConfig(enabled=(3,), trust="dscp", source="dcbnl", dscp2prio=DSCP_MAP),
                                     "ecn": RoceEcn(np={3: True}, rp={3: True})}) if n.name == "ens1np0" else n
                for n in snap.netdevs)
    return snap.model_copy(update={"netdevs": nds})


def test_a_roce_compute_port_shows_its_whole_chain():
    snap = roce_node(nccl_conf=NcclConf(path="etc/nccl.conf", variables={"NCCL_IB_TC": "106"}))
    got = series(snap, "agentd_roce_qos_info", compute_hcas=("mlx5_0", "mlx5_1"))
    assert got == [{"device": "mlx5_1", "port": "1", "netdev": "ens1np0", "trust": "dscp", "source": "dcbnl", "tc": "106",
                    "tc_source": "/etc/nccl.conf", "dscp": "26", "priority": "3", "pfc": "on", "ecn": "on"}]


def test_the_chain_follows_the_link_that_breaks_it():
    snap = roce_node(nccl_conf=NcclConf(path="etc/nccl.conf", variables={"NCCL_IB_TC": "0"}))
    (got,) = series(snap, "agentd_roce_qos_info", compute_hcas=("mlx5_0", "mlx5_1"))
    assert (got["tc"], got["dscp"], got["priority"], got["pfc"], got["ecn"]) == ("0", "0", "0", "off", "")
    # a global tclass override replaces NCCL_IB_TC
    hcas = tuple(h.model_copy(update={"ports": tuple(p.model_copy(update={"tclass": TclassOverride(global_tclass=160)}) for p in h.ports)})
                 if h.name == "mlx5_1" else h for h in snap.hcas)
    (got,) = series(snap.model_copy(update={"hcas": hcas}), "agentd_roce_qos_info", compute_hcas=("mlx5_0", "mlx5_1"))
    assert (got["tc"], got["tc_source"], got["dscp"], got["priority"]) == ("160", "override", "40", "5")


def test_a_storage_netdev_keeps_its_trust_mode_without_a_chain():
    (got,) = series(roce_node(), "agentd_roce_qos_info")  # mlx5_1 is not a compute HCA here
    assert got == {"device": "mlx5_1", "port": "1", "netdev": "ens1np0", "trust": "dscp", "source": "dcbnl", "tc": "",
                   "tc_source": "", "dscp": "", "priority": "", "pfc": "", "ecn": ""}


def test_ib_ports_carry_the_sm_sl_and_the_configured_nccl_ib_sl():
    snap = fixtures.snapshot(nccl_conf=NcclConf(path="etc/nccl.conf", variables={"NCCL_IB_SL": "3"}))
    hcas = tuple(h.model_copy(update={"ports": tuple(p.model_copy(update={"sm_sl": 5}) for p in h.ports)}) for h in snap.hcas)
    got = {(lab["device"], lab["sm_sl"], lab["nccl_ib_sl"]) for lab in series(snap.model_copy(update={"hcas": hcas}), "agentd_ib_port_info")}
    assert got == {("mlx5_0", "5", "3"), ("mlx5_1", "5", "")}  # NCCL_IB_SL only on the compute IB port
    unset = {(lab["device"], lab["sm_sl"], lab["nccl_ib_sl"]) for lab in series(snap.model_copy(update={"nccl_conf": None}), "agentd_ib_port_info")}
    assert unset == {("mlx5_0", "", ""), ("mlx5_1", "", "")}


def test_the_fingerprint_names_versions_shape_and_output_hashes():
    snap = fixtures.snapshot(versions=SoftwareVersions(mlx5_core="5.8-4.1.5", rdma_core="50.0"))
    (got,) = series(snap, "agentd_node_fingerprint_info", topology_hash="0123456789ab")
    rails = placement(snap, HcaRoles(compute=("mlx5_0",), other=(), source="inferred"), (), AgentConfig().fabric).rail_hash
    assert rails
    assert got == {"hca_fw": "28.39.1002", "mlx5_core": "5.8-4.1.5", "rdma_core": "50.0", "nvidia_driver": "550.54.15", "vbios": "",
                   "kernel": "6.5.0", "compute_ports": "1", "mtu": "4092", "nccl_ib_hca": "1", "gpu_nic_map": rails,
                   "topology": "0123456789ab"}
    (bare,) = series(snap, "agentd_node_fingerprint_info", nccl_env=())
    assert (bare["nccl_ib_hca"], bare["topology"]) == ("", "")  # no NCCL files rendered


def test_hostile_firmware_strings_stay_one_bounded_parsable_label():
    def fw(value: str) -> str:
        hca = Hca(name="mlx5_0", fw_ver=value, pci_bus_id="0000:1b:00.0", ports=(IbPort(port=1, netdev="ibp27s0", link_layer="InfiniBand"),))
        (got,) = series(fixtures.snapshot(hcas=(hca,)), "agentd_node_fingerprint_info")
        return got["hca_fw"]

    long_a, long_b = "2" * 4000 + 'a"\\\n}', "2" * 4000 + "b"
    assert len(fw(long_a)) <= 128 and len(fw(long_b)) <= 128
    assert fw(long_a) != fw(long_b)  # the hash of the whole keeps different values apart
    assert fw('28.39"}\\x') == '28.39"}\\x'  # short values come back as they were


def test_the_topology_hash_ignores_the_header_and_follows_the_body():
    body = '<system version="1">\n  <cpu numaid="0" affinity="ff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">\n  </cpu>\n</system>\n'
    one = "<!-- NCCL topology of node1, written by agentd -->\n<!-- generated: from measurements taken 2025-01-01T00:00:00Z -->\n" + body
    two = "<!-- NCCL topology of node2, written by agentd -->\n<!-- generated: from measurements taken 2025-06-01T00:00:00Z -->\n" + body
    sealed = two + "<!-- agentd-sha256: " + "0" * 64 + " -->\n"  # the file as written carries a seal comment
    assert topology_hash(one) == topology_hash(two) == topology_hash(sealed)
    assert len(topology_hash(one)) == 12
    assert topology_hash(one.replace('numaid="0"', 'numaid="1"')) != topology_hash(one)
