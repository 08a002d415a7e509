"""Every simulator profile and every fault kind round-trips through `agentd inspect`.

The simulator writes kernel-layout trees; inspect reads them back with the real readers.
For each fault the JSON must show the fault's effect, and after clearing it the JSON must
be what it was before (counters that a real link would also have advanced aside).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd import sim
from agentd.cli import main

# Keep the NVML probe's timeout short so the nvml_hang fault is seen quickly.
FAST_NVML = {"AGENTD_TIMEOUTS__NVML_S": "0.5", "AGENTD_TIMEOUTS__PROBE_S": "5"}


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    for k, v in FAST_NVML.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AGENTD_CONFIG", raising=False)


def inspect_json(root: Path, capsys) -> dict:
    capsys.readouterr()
    rc = main(["inspect", "--host-root", str(root), "--format", "json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    return json.loads(out)


def port(doc, hca="mlx5_0", n=1):
    h = next(h for h in doc["hcas"] if h["name"] == hca)
    return next(p for p in h["ports"] if p["port"] == n)


def netdev(doc, name):
    return next(n for n in doc["netdevs"] if n["name"] == name)


def pci(doc, bdf):
    return next(d for d in doc["pci"] if d["bdf"] == bdf)


def gpu0(doc):
    return next(g for g in doc["gpus"] if g["index"] == 0)


EXPECTED_PROFILE = {
    "h100-ib": dict(gpus=8, compute=[f"mlx5_{i}" for i in range(8)], other=["mlx5_8", "mlx5_9"], rate=400.0, layer="InfiniBand"),
    "h100-roce": dict(gpus=8, compute=[f"mlx5_{i}" for i in range(8)], other=[], rate=400.0, layer="Ethernet"),
    "pcie-4gpu": dict(gpus=4, compute=["mlx5_0", "mlx5_1"], other=[], rate=200.0, layer="InfiniBand"),
    "gb200-nvl": dict(gpus=4, compute=[f"mlx5_{i}" for i in range(4)], other=[f"mlx5_{i}" for i in range(4, 8)], rate=400.0, layer="InfiniBand"),
}


@pytest.mark.tree
@pytest.mark.parametrize("profile", sorted(sim.PROFILES))
def test_profile_round_trips(profile, tmp_path, capsys):
    root = sim.build_tree(profile, tmp_path / "root")
    doc = inspect_json(root, capsys)
    exp = EXPECTED_PROFILE[profile]
    assert doc["read_errors"] == []
    assert len(doc["gpus"]) == exp["gpus"]
    assert [g["index"] for g in doc["gpus"]] == list(range(exp["gpus"]))
    for g in doc["gpus"]:
        assert g["pci_bus_id"] == g["pci_bus_id"].lower() and len(g["pci_bus_id"]) == 12
        assert set(g["nic_paths"]) == set(exp["compute"] + exp["other"])
        assert set(g["nic_paths"].values()) <= {"PIX", "PXB", "PHB", "NODE", "SYS"}
    roles = {h["name"]: h["role"] for h in doc["hcas"]}
    assert [n for n, r in roles.items() if r == "compute"] == exp["compute"]
    assert [n for n, r in roles.items() if r == "other"] == exp["other"]
    for name in exp["compute"]:
        p = port(doc, name)
        assert (p["state"], p["phys_state"], p["rate_gbps"], p["link_layer"]) == ("ACTIVE", "LinkUp", exp["rate"], exp["layer"])
        assert p["netdev"] and p["mtu"] == netdev(doc, p["netdev"])["mtu"]
    if profile.startswith("h100"):
        # one GPU/NIC pair per PCIe switch: each GPU has exactly one PIX compute NIC
        for g in doc["gpus"]:
            assert sum(1 for h in exp["compute"] if g["nic_paths"][h] == "PIX") == 1
    elif profile == "gb200-nvl":
        # every device on a root port of its own: the socket's NICs NODE, the other's SYS
        for g in doc["gpus"]:
            assert sorted(g["nic_paths"].values()) == ["NODE"] * 4 + ["SYS"] * 4
    else:
        # NICs on opposite sockets: every GPU is SYS from one NIC
        for g in doc["gpus"]:
            assert sorted(g["nic_paths"].values()) == ["NODE", "SYS"]
    if profile == "h100-roce":
        nd = netdev(doc, port(doc, "mlx5_0")["netdev"])
        assert nd["mtu"] == 9000 and nd["ecn"]["np"]["3"] and nd["ecn"]["rp"]["3"] and 3 in nd["pfc"]["enabled"]
        v2 = [gid for gid in port(doc, "mlx5_0")["gids"] if gid["type"] == "RoCE v2" and gid["gid"].startswith("0000:0000:0000:0000:0000:ffff")]
        assert [gid["index"] for gid in v2] == [3]


# fault -> (profile, check on the inspect document)
FAULTS = {
    "port_down": ("h100-ib", lambda d: port(d)["state"] == "DOWN" and port(d)["phys_state"] == "Disabled"),
    "rate_degraded": ("h100-ib", lambda d: (port(d)["rate_gbps"], port(d)["width"]) == (200.0, 2)),
    "flapping": ("h100-ib", lambda d: port(d)["counters"]["link_downed"] >= 3),
    "peermem_gone": ("h100-ib", lambda d: not d["gdr"]["peermem_loaded"] and d["gdr"]["peermem_version_path"] is None),
    "dmabuf_only": ("h100-ib", lambda d: not d["gdr"]["peermem_loaded"] and d["gdr"]["nvidia_open_module"] and d["gdr"]["dmabuf_kernel_ok"]),
    "no_gdr": ("h100-ib", lambda d: not d["gdr"]["peermem_loaded"] and d["gdr"]["nvidia_open_module"] is False),
    "pcie_downtrained": ("h100-ib", lambda d: pci(d, gpu0(d)["pci_bus_id"])["current_link_width"] < pci(d, gpu0(d)["pci_bus_id"])["max_link_width"]),
    "acs_on": ("h100-ib", lambda d: pci(d, pci(d, gpu0(d)["pci_bus_id"])["parent_chain"][-1])["acs_ctrl"] & 0x4),
    "mtu_mismatch": ("h100-roce", lambda d: netdev(d, port(d)["netdev"])["mtu"] == 1500),
    "ecn_off": ("h100-roce", lambda d: not netdev(d, port(d)["netdev"])["ecn"]["np"]["3"] and not netdev(d, port(d)["netdev"])["ecn"]["rp"]["3"]),
    "pfc_off": ("h100-roce", lambda d: netdev(d, port(d)["netdev"])["pfc"]["enabled"] == []),
    "pause_storm": ("h100-roce", lambda d: netdev(d, port(d)["netdev"])["ethtool"]["rx_prio3_pause"] >= 10**7),
    "pause_on": ("h100-roce", lambda d: netdev(d, port(d)["netdev"])["pause"] == {"autoneg": False, "rx": True, "tx": True}),
    "nvlink_down": ("h100-ib", lambda d: d["nvml"]["gpus"][0]["nvlinks"][0]["state"] == "down"),
    "nvlink_errors": ("h100-ib", lambda d: d["nvml"]["gpus"][0]["nvlinks"][0]["errors"]["crc_flit"] > 0),
    "gpu_lost": ("h100-ib", lambda d: gpu0(d)["in_nvml"] is False),
    "gpu_removed": ("h100-ib", lambda d: len(d["gpus"]) == 7),
    "nic_removed": ("h100-ib", lambda d: "mlx5_0" not in [h["name"] for h in d["hcas"]]),
    "counter_reset": ("h100-ib", lambda d: port(d)["counters"]["port_xmit_data"] == 0),
    "counter_saturated": ("h100-ib", lambda d: port(d)["counters"]["port_xmit_wait"] == 2**32 - 1 and port(d)["counters"]["link_downed"] == 255),
    "unreadable_file": ("h100-ib", lambda d: any(e["kind"] == "unreadable" and "mlx5_0" in e["path"] for e in d["read_errors"])),
    "garbage_file": ("h100-ib", lambda d: any(e["kind"] == "unparsable" and "mlx5_0" in e["path"] for e in d["read_errors"])),
    "nvml_hang": ("h100-ib", lambda d: any(p["name"] == "nvml" and p["timed_out"] for p in d["probes"])),
    "nvml_init_error": ("h100-ib", lambda d: d["nvml"]["available"] is False),
    "ethtool_failure": ("h100-roce", lambda d: any(e["source"] == "ethtool" for e in d["read_errors"])),
    "fabric_incomplete": ("h100-ib", lambda d: d["nvml"]["gpus"][0]["fabric_state"] != "completed"),
    "aer_uncorrectable": ("h100-ib", lambda d: pci(d, gpu0(d)["pci_bus_id"])["aer"]["nonfatal"]["by_type"]["CmpltTO"] == 1),
    "aer_correctable": ("h100-ib", lambda d: pci(d, gpu0(d)["pci_bus_id"])["aer"]["correctable"]["total"] == 1000),
    "pcie_replay": ("h100-ib", lambda d: d["nvml"]["gpus"][0]["pcie_replay_errors"] == 1000),
    "xid": ("h100-ib", lambda d: [(e["kind"], e["code"], e["device"]) for e in d["kernel"]["events"]] == [("xid", "79", gpu0(d)["pci_bus_id"])]),
    "fell_off_bus_multiline": ("h100-ib", lambda d: [(e["kind"], e["device"]) for e in d["kernel"]["events"]] == [("gpu_off_bus", gpu0(d)["pci_bus_id"])]),
    "mlx5_cmd_timeout": ("h100-ib", lambda d: [c["count"] for c in d["kernel"]["counts"] if c["code"] == "cmd_timeout"] == [5]),
    "mlx5_access_reg": ("h100-ib", lambda d: [c["count"] for c in d["kernel"]["counts"] if c["code"] == "cmd_failed"] == [2]),
    "fabric_status": ("gb200-nvl", lambda d: d["nvml"]["gpus"][0]["fabric_status"] == "Insufficient Resources"),
    "fabric_unassigned": ("gb200-nvl", lambda d: d["nvml"]["gpus"][0]["fabric_clique_id"] == 0),
    "fabric_health": ("gb200-nvl", lambda d: d["nvml"]["gpus"][0]["fabric_health"]["route_unhealthy"] is True),
    "fabric_domain_split": ("gb200-nvl", lambda d: d["nvml"]["gpus"][0]["fabric_clique_id"] != d["nvml"]["gpus"][1]["fabric_clique_id"]),
    "nvlink_slow": ("gb200-nvl", lambda d: d["nvml"]["gpus"][0]["nvlinks"][0]["speed_mb_s"] == 26562),
    "c2c_down": ("gb200-nvl", lambda d: d["nvml"]["gpus"][0]["c2c_links"][0]["state"] == "down"),
    # The process table is read by the fabric daemons reader (issue 16): the document's
    # "daemons" section lists what runs.
    "fm_down": ("h100-ib", lambda d: d["daemons"]["complete"] and "nv-fabricmanager" not in d["daemons"]["running"]),
    "imex_down": ("gb200-nvl", lambda d: d["daemons"]["complete"] and "nvidia-imex" not in d["daemons"]["running"]),
    "tclass_override": ("h100-roce", lambda d: port(d)["tclass"] == {"global_tclass": 0, "rules": []}),
    "trust_pcp": ("h100-roce", lambda d: netdev(d, port(d)["netdev"])["pfc"]["trust"] == "pcp"),
    "dscp_map_lossy": ("h100-roce", lambda d: netdev(d, port(d)["netdev"])["pfc"]["dscp2prio"]["26"] == 0),
    "nccl_tc_mismatch": ("h100-roce", lambda d: d["nccl_conf"]["variables"]["NCCL_IB_TC"] == "0"),
    "roce_lossy_traffic": ("h100-roce", lambda d: netdev(d, port(d)["netdev"])["ethtool"]["tx_prio0_bytes"] >= 10**11),
    # issue 38: the physical layer (hwmon, ethtool netlink, the module's EEPROM pages)
    "module_hot": ("h100-roce", lambda d: [t["temperature_c"] for t in d["hcas"][0]["temperatures"] if t["kind"] == "module"] == [78.0]
                   and netdev(d, port(d)["netdev"])["module"]["temperature_c"] == 78.0),
    "rx_power_low": ("h100-roce", lambda d: netdev(d, port(d)["netdev"])["module"]["lanes"][0]["rx_power_flags"] == ["low_alarm", "low_warning"]),
    "fec_errors": ("h100-roce", lambda d: netdev(d, port(d)["netdev"])["phy"]["fec"]["uncorrectable_blocks"] >= 1),
    "link_down_reason": ("h100-roce", lambda d: netdev(d, port(d)["netdev"])["phy"]["ext_state"] == "no_cable" and port(d)["state"] == "DOWN"),
}

# Fields a real link also advances (the fault moves counters forward, clearing does not
# rewind them), and the collection's own bookkeeping.
VOLATILE = ("taken_at", "probes")
# Faults that only advance counters: the counters stay where they are after clearing (a
# rate over time clears the finding, which the daemon tests cover).
COUNTER_FAULTS = {"roce_lossy_traffic", "flapping", "nvlink_errors", "pause_storm", "aer_uncorrectable", "aer_correctable", "pcie_replay", "fec_errors"}
# Faults that print to the kernel log: a log only grows, clearing leaves the lines.
LOG_FAULTS = {"xid", "fell_off_bus_multiline", "mlx5_cmd_timeout", "mlx5_access_reg"}


def comparable(doc: dict) -> dict:
    d = {k: v for k, v in doc.items() if k not in VOLATILE and k != "kernel"}
    for h in d["hcas"]:
        for p in h["ports"]:
            p.pop("counters")
            p.pop("hw_counters")
    for n in d["netdevs"]:
        for k in ("carrier_changes", "carrier_up_count", "carrier_down_count", "ethtool"):
            n.pop(k, None)
        for k in ("fec", "link_down_events"):  # the PHY's counters
            (n.get("phy") or {}).pop(k, None)
    for g in d["nvml"]["gpus"]:
        g.pop("pcie_replay_errors", None)
        for link in g["nvlinks"]:
            link.pop("errors")
    for dev in d["pci"]:
        dev.pop("aer", None)
    return d


def test_every_fault_kind_is_covered():
    assert set(FAULTS) == set(sim.FAULT_KINDS)


@pytest.mark.tree
@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_fault_round_trips(kind, tmp_path, capsys):
    profile, shows_fault = FAULTS[kind]
    root = sim.build_tree(profile, tmp_path / "root")
    spec = "nvml_hang=3" if kind == "nvml_hang" else kind
    before = inspect_json(root, capsys)
    assert not shows_fault(before)
    sim.apply_fault(root, spec)
    during = inspect_json(root, capsys)
    assert shows_fault(during), kind
    sim.clear_fault(root, spec)
    after = inspect_json(root, capsys)
    if kind not in COUNTER_FAULTS | LOG_FAULTS:
        assert not shows_fault(after)
    assert comparable(after) == comparable(before)
