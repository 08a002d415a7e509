"""Hand-built snapshots and States for the service tests (no host readers needed)."""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from agentd.collection.collector import PROBE_TIERS
from agentd.config import AgentConfig, Intervals
from agentd.daemon.exposition import REGISTRY
from agentd.daemon.state import State
from agentd.judging.expected import Expected
from agentd.model import (
    Finding,
    GdrInfo,
    Gpu,
    Hca,
    IbPort,
    Netdev,
    NodeSnapshot,
    NvLink,
    NvmlGpu,
    NvmlInfo,
    PciDevice,
    PfcConfig,
    ProbeStatus,
    ReadError,
    RoceEcn,
    SystemInfo,
)
from agentd.records import FileStatus, TierRun

PROBES = tuple(PROBE_TIERS)  # every probe the collector has, from its catalogue
Samples = dict[str, list[tuple[dict[str, str], float]]]  # sample name -> (labels, value) of each series


def parse(text: bytes) -> Samples:
    """An exposition's samples by name (prometheus_client's parser: what a scraper reads)."""
    out: Samples = {}
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def pick(s: Samples, name: str, **labels: str) -> list[float]:
    """The values of ``name``'s series that carry ``labels``."""
    return [v for lab, v in s.get(name, []) if all(lab.get(k) == want for k, want in labels.items())]


def probes(now: float, *, stale: dict[str, float] | None = None, never: tuple[str, ...] = ()) -> tuple[ProbeStatus, ...]:
    """ProbeStatus per probe; ``stale`` maps probe -> age of its last success."""
    out = []
    for name in PROBES:
        if name in never:
            out.append(ProbeStatus(name=name, ok=False, duration_s=5.0, finished_at=now, timed_out=True, error="no answer within 5.0s"))
            continue
        age = (stale or {}).get(name)
        if age is None:
            out.append(ProbeStatus(name=name, ok=True, duration_s=0.01, finished_at=now, last_success_at=now, last_success_mono=now, files_read=12))
        else:
            out.append(ProbeStatus(name=name, ok=False, duration_s=5.0, finished_at=now, timed_out=True, stale=True, last_success_at=now - age, last_success_mono=now - age, error="no answer within 5.0s"))
    return tuple(out)


def snapshot(now: float | None = None, **kw) -> NodeSnapshot:
    now = time.time() if now is None else now
    ib_port = IbPort(
        port=1, state="ACTIVE", state_id=4, phys_state="LinkUp", phys_state_id=5,
        rate_raw="400 Gb/sec (4X NDR)", rate_gbps=400.0, width=4, generation="NDR", link_layer="InfiniBand",
        counters={"port_xmit_data": 1000, "port_rcv_data": 2000, "symbol_error": 65535, "link_downed": 1, "weird_counter": 7},
        hw_counters={"lifespan": 12, "out_of_sequence": 3, "np_cnp_sent": 5, "req_cqe_error": 2},
        netdev="ibp27s0",
    )
    roce_port = IbPort(
        port=1, state="DOWN", state_id=1, phys_state="Disabled", phys_state_id=3, rate_raw="40 Gb/sec (4X QDR)",
        rate_gbps=40.0, width=4, link_layer="Ethernet", counters={}, hw_counters={"rp_cnp_handled": 9}, netdev="ens1np0",
    )
    pci = (
        PciDevice(bdf="0000:18:00.0", class_code=0x060400, vendor_id=0x1000, device_id=0xC030, parent_chain=(), root_complex="pci0000:17",
                  current_link_speed_gts=32.0, current_link_width=16, max_link_speed_gts=32.0, max_link_width=16, acs_ctrl=0x5D),
        PciDevice(bdf="0000:1b:00.0", class_code=0x020700, vendor_id=0x15B3, device_id=0x1021, numa_node=0, parent_chain=("0000:18:00.0",),
                  root_complex="pci0000:17", current_link_speed_gts=32.0, current_link_width=16, max_link_speed_gts=32.0, max_link_width=16, driver="mlx5_core"),
        PciDevice(bdf="0000:1c:00.0", class_code=0x030200, vendor_id=0x10DE, device_id=0x2330, numa_node=0, parent_chain=("0000:18:00.0",),
                  root_complex="pci0000:17", current_link_speed_gts=16.0, current_link_width=16, max_link_speed_gts=32.0, max_link_width=16, driver="nvidia"),
        PciDevice(bdf="0000:9a:00.0", class_code=0x020000, vendor_id=0x15B3, device_id=0x1021, numa_node=1, root_complex="pci0000:99"),
    )
    data = dict(
        taken_at=now,
        host_root="/tmp/x",
        system=SystemInfo(hostname="node1", arch="x86_64"),
        pci=pci,
        gpus=(Gpu(index=0, pci_bus_id="0000:1c:00.0", name="NVIDIA H100 80GB HBM3", uuid="GPU-1234", numa_node=0,
                  nic_paths={"mlx5_0": "PIX", "mlx5_1": "SYS"}, in_nvml=True),),
        hcas=(
            Hca(name="mlx5_0", hca_type="MT4129", fw_ver="28.39.1002", board_id="MT_0000000838", node_guid="a088:c203:0011:2233",
                pci_bus_id="0000:1b:00.0", numa_node=0, driver="mlx5_core", ports=(ib_port,)),
            Hca(name="mlx5_1", hca_type="MT4129", pci_bus_id="0000:9a:00.0", numa_node=1, ports=(roce_port,)),
        ),
        netdevs=(
            Netdev(name="ibp27s0", type=32, mtu=4092, operstate="up", carrier=True, carrier_changes=2, pci_bus_id="0000:1b:00.0"),
            Netdev(name="ens1np0", type=1, mtu=1500, operstate="down", carrier=False, carrier_changes=5, carrier_up_count=2,
                   carrier_down_count=3, speed_mbps=400000, address="b8:ce:f6:00:00:01", pci_bus_id="0000:9a:00.0",
                   ecn=RoceEcn(np={3: True, 4: False}, rp={3: False}), pfc=PfcConfig(enabled=(3,), trust="dscp", source="dcbnl"),
                   ethtool={"rx_prio3_pause": 10, "tx_prio3_pause": 4, "rx_prio3_pause_duration": 1500, "tx_prio3_bytes": 99, "rx_prio3_packets": 3, "rx_bytes": 1}),
            Netdev(name='we"ird\\name', type=1, operstate="unknown", is_virtual=True),
        ),
        gdr=GdrInfo(peermem_loaded=True, peermem_version_path="sys/kernel/mm/memory_peers/nv_mem/version", peermem_version="1.0",
                    nvidia_loaded=True, nvidia_driver_version="550.54.15", nvidia_open_module=False, kernel_release="6.5.0", dmabuf_kernel_ok=True),
        nvml=NvmlInfo(available=True, driver_version="550.54.15", cuda_driver_version=12040, gpus=(
            NvmlGpu(index=0, pci_bus_id="0000:1c:00.0", name="NVIDIA H100 80GB HBM3", uuid="GPU-1234", fabric_state="completed", fabric_status="success",
                    nvlinks=(NvLink(link=0, state="up", remote_pci_bus_id="0000:05:00.0", remote_type="nvswitch", version=4, errors={"crc_flit": 0, "replay": 2}),
                             NvLink(link=1, state="down")),),
        )),
        probes=probes(now),
        read_errors=(ReadError(source="ib_counters", path="sys/class/infiniband/mlx5_0/ports/1/counters/x", kind="unparsable", detail="x"),),
    )
    data.update(kw)
    return NodeSnapshot(**data)


FINDINGS = (
    Finding(code="ib.port.down", severity="critical", subject="mlx5_1:1", message="port mlx5_1:1 is DOWN (expected ACTIVE)"),
    Finding(code="mtu.mismatch", severity="warning", subject="ens1np0", message="MTU 1500, expected 9000"),
)
_IV = Intervals()
LIMITS = {name: _IV.stale_after * getattr(_IV, f"{tier}_s") for name, tier in PROBE_TIERS.items()}  # the default stale limits


def state(*, ready: bool = True, findings=(), snap: NodeSnapshot | None = None, now: float | None = None, **kw) -> State:
    now = time.time() if now is None else now
    snap = snapshot(now) if snap is None and ready else snap
    base = dict(
        seq=1 if ready else 0, generated_at=now, generated_mono=now, started_at=now - 10, config=AgentConfig(), ready=ready, snapshot=snap,
        findings=tuple(findings), stale_limits=LIMITS, compute_hcas=("mlx5_0",), hca_roles_source="inferred",
        expected=Expected(port_rate_gbps={("mlx5_0", 1): 400.0}, port_width={("mlx5_0", 1): 4}, netdev_mtu={"ens1np0": 9000}),
        files=(FileStatus(name="nccl.env", path="/etc/nccl.env", ok=True, last_write_at=now - 5, failures_total=0),
               FileStatus(name="topo.xml", path="/etc/nccl/topo.xml", ok=False, failures_total=3, drift=True, error="EROFS")),
        nccl_env=(("NCCL_IB_HCA", "=mlx5_0:1"), ("NCCL_NET_GDR_LEVEL", "PIX")),
        tiers=(TierRun("fast", 0.01, now, 0.005), TierRun("medium", 0.2, now - 1, 0.1)),
        udev_events={("net", "change"): 3}, process={"rss_bytes": 40e6, "cpu_seconds": 1.5, "open_fds": 12, "threads": 9},
    )
    base.update(kw)
    base.setdefault("render_metrics", REGISTRY.render)
    return State(**base)
