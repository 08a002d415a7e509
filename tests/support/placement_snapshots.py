"""Snapshots for the placement outputs (labels, /topology, Slurm, metrics).

``gb200_tray()`` is a GB200 NVL72 compute tray as agentd's snapshot holds it: two Grace
CPUs (aarch64, NUMA 0 and 1), four "NVIDIA GB200" GPUs, each behind its own root port in
its own PCI domain, four ConnectX-7 NDR InfiniBand compute HCAs (mlx5_0..3) and two
BlueField-3 Ethernet ports (mlx5_4, mlx5_5, not compute); the bus ids are the real ones of
leptonai/gpud pkg/nvidia-query/testdata/lspci.gb200 (tests/fixtures/SOURCES.md lists that
file for the simulator's profile). Each GPU sees its Grace's HCAs at NODE distance (another
root complex of its NUMA node) and the other Grace's at SYS, the path types
agentd.host.topology gives this layout. The NVLinks go to the
rack's switch trays (no NVSwitch on the tray's own PCI bus), and the fabric put all four
GPUs in one domain.
"""

from __future__ import annotations

from typing import Any

from agentd.judging.roles import HcaRoles
from agentd.model import (
    Finding,
    Gpu,
    Hca,
    IbPort,
    NodeSnapshot,
    NumaNode,
    NvLink,
    NvmlGpu,
    NvmlInfo,
    PciDevice,
    SystemInfo,
)

T0 = 1_700_000_000.0
CLUSTER_UUID = "3f1c9a52-7d4e-4b8a-9c21-5e6f7a8b9c0d"
CLIQUE_ID = 32766
DOMAIN_ID = f"{CLUSTER_UUID}.{CLIQUE_ID}"
GPU_BUS = ("0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0")
HCA_BUS = ("0000:03:00.0", "0002:03:00.0", "0010:03:00.0", "0012:03:00.0")
BF3_BUS = ("0006:03:00.0", "0016:03:00.0")
COMPUTE = HcaRoles(compute=("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"), other=("mlx5_4", "mlx5_5"), source="config")


def _dev(bdf: str, cls: int, numa: int, chain: tuple[str, ...] = ()) -> PciDevice:
    vendor = 0x10DE if cls == 0x030200 else 0x15B3 if cls == 0x020700 else 0x10DE
    return PciDevice(bdf=bdf, class_code=cls, vendor_id=vendor, numa_node=numa, parent_chain=chain,
                     root_complex=f"pci{bdf[:4]}:00")


def _rp(bdf: str) -> str:
    return f"{bdf[:4]}:00:00.0"


def gb200_tray(*, hostname: str = "gb200-tray-01", uuid: str = CLUSTER_UUID, clique: int = CLIQUE_ID, **gpu_changes: Any) -> NodeSnapshot:
    pci: list[PciDevice] = []
    gpus: list[Gpu] = []
    nvml: list[NvmlGpu] = []
    hcas: list[Hca] = []
    for i, bus in enumerate(HCA_BUS):
        numa = i // 2
        pci += [_dev(_rp(bus), 0x060400, numa), _dev(bus, 0x020700, numa, (_rp(bus),))]
        hcas.append(Hca(name=f"mlx5_{i}", hca_type="MT4129", pci_bus_id=bus, numa_node=numa, ports=(
            IbPort(port=1, state="ACTIVE", rate_gbps=400.0, width=4, link_layer="InfiniBand", netdev=f"ibp{i}s0"),)))
    for j, bus in enumerate(BF3_BUS):
        pci += [_dev(_rp(bus), 0x060400, j), _dev(bus, 0x020000, j, (_rp(bus),))]
        hcas.append(Hca(name=f"mlx5_{4 + j}", hca_type="MT41692", pci_bus_id=bus, numa_node=j, ports=(
            IbPort(port=1, state="ACTIVE", rate_gbps=400.0, width=4, link_layer="Ethernet", netdev=f"enP{6 + 10 * j}s3f0np0"),)))
    for i, bus in enumerate(GPU_BUS):
        numa = i // 2
        pci += [_dev(_rp(bus), 0x060400, numa), _dev(bus, 0x030200, numa, (_rp(bus),))]
        paths: dict[str, Any] = {f"mlx5_{k}": "NODE" if k // 2 == numa else "SYS" for k in range(4)}
        paths |= {f"mlx5_{4 + k}": "NODE" if k == numa else "SYS" for k in range(2)}
        gpus.append(Gpu(index=i, pci_bus_id=bus, name="NVIDIA GB200", uuid=f"GPU-{i:04d}", numa_node=numa, nic_paths=paths,
                        in_nvml=True))
        nvml.append(NvmlGpu(
            index=i, pci_bus_id=bus, name="NVIDIA GB200", uuid=f"GPU-{i:04d}",
            nvlinks=tuple(NvLink(link=k, state="up", remote_type="nvswitch", version=5, speed_mb_s=53125) for k in range(18)),
            fabric_state="completed", fabric_status="success", fabric_cluster_uuid=uuid, fabric_clique_id=clique,
        ).model_copy(update=gpu_changes.get(f"gpu{i}", {})))
    return NodeSnapshot(
        taken_at=T0, host_root="/",
        system=SystemInfo(hostname=hostname, arch="aarch64", numa_nodes=(NumaNode(node=0), NumaNode(node=1))),
        pci=tuple(pci), gpus=tuple(gpus), hcas=tuple(hcas),
        nvml=NvmlInfo(available=True, driver_version="570.124.06", gpus=tuple(nvml)),
    )


def fabric_finding(code: str, severity: str, subject: str = "gpu0", **extra: Any) -> Finding:
    return Finding(code=code, severity=severity, subject=subject, message=f"{code} (test)", **extra)  # type: ignore[arg-type]
