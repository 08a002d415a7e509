"""A larger synthetic node for benchmarks: 16 GPUs, 18 NICs, 4 sockets, NVSwitch.

``large-16gpu-18nic``: 16x H100 SXM behind 4 NVSwitches, 16x ConnectX-7 NDR InfiniBand
compute HCAs (``mlx5_0``..``mlx5_15``, IPoIB ``ib0``..``ib15``), each sharing a Broadcom
PEX Gen5 switch with one GPU (PIX, as on h100-ib), and 2x ConnectX-6 Dx 100GbE storage
NICs (``mlx5_16``, ``mlx5_17``) on CPU root ports. Four sockets (NUMA 0-3), four GPU/NIC
pairs per socket, 448 CPUs. No such box ships today; it exists to measure how collection
cost grows with the number of devices (about twice h100-ib's PCI functions and ports).

Bus numbers stay in PCI domain 0000: NVSwitch tree on 01-06, the bootstrap NIC on 0a,
pair ``i`` behind host bridge ``0x10 + 0x0e*i`` (switch on +1/+2, NIC on +3, GPU on +4),
storage NICs behind host bridges f0 and f4.

Registering: ``PROFILES`` in agentd.sim.profiles is a plain dict, so this module adds
itself with ``register()`` (idempotent). It is not imported by agentd.sim itself, so the
three stock profiles stay the only ones unless something calls ``register()`` (the
benchmarks do; see bench/README.md for making it a built-in profile).
"""

from __future__ import annotations

from agentd.sim.profiles import (
    PROFILES,
    BootNic,
    Endpoint,
    HcaSpec,
    HostBridge,
    Profile,
    RootPort,
    Switch,
    _switch_pair,
    storage_nic,
)

NAME = "large-16gpu-18nic"
GPUS = 16
SOCKETS = 4
CPUS_PER_SOCKET = 56  # cores; two threads each
PAIR_BUSES = tuple(0x10 + 0x0E * i for i in range(GPUS))  # 0x10 .. 0xe2 (+4 = 0xe6)
STORAGE_BUSES = ((0xF0, 0), (0xF4, 1))


def _cpulists() -> tuple[str, ...]:
    n = CPUS_PER_SOCKET
    total = SOCKETS * n
    return tuple(f"{s * n}-{s * n + n - 1},{total + s * n}-{total + s * n + n - 1}" for s in range(SOCKETS))


def ndr_compute_hca(name: str, bdf: str, netdev: str, *, node_guid: str, lid: int) -> HcaSpec:
    """A ConnectX-7 NDR InfiniBand compute HCA as the benchmark profiles use it."""
    return HcaSpec(
        name=name, bdf=bdf, netdev=netdev, link_layer="InfiniBand", rate="400 Gb/sec (4X NDR)", compute=True,
        hca_type="MT4129", fw_ver="28.41.1000", board_id="MT_0000000838", node_guid=node_guid, mtu=4092, lid=lid,
    )


def large_16gpu_18nic() -> Profile:
    nvsw = Switch(
        usp="0000:01:00.0",
        dsps=tuple((f"0000:02:0{i}.0", Endpoint(f"0000:{3 + i:02x}:00.0", "nvswitch-gen3", "nvswitch")) for i in range(4)),
    )
    boot = BootNic("eno1", "0000:0a:00.0", "7c:c2:55:3e:30:c0")
    hbs = [HostBridge("0000:00", 0, (RootPort("0000:00:01.0", nvsw), RootPort("0000:00:1c.0", Endpoint(boot.bdf, "i350", "nic", "eno1"))))]
    hcas: list[HcaSpec] = []
    for i, hb in enumerate(PAIR_BUSES):
        numa = i * SOCKETS // GPUS
        nic_bdf, gpu_bdf = f"0000:{hb + 3:02x}:00.0", f"0000:{hb + 4:02x}:00.0"
        name = f"mlx5_{i}"
        hbs.append(_switch_pair(hb, numa, Endpoint(nic_bdf, "connectx-7", "hca", name), Endpoint(gpu_bdf, "h100-sxm", "gpu")))
        hcas.append(ndr_compute_hca(name, nic_bdf, f"ib{i}", node_guid=f"a088:c203:01{0x42 + i:02x}:{0x6f10 + 0x11 * i:04x}", lid=0x100 + i))
    for k, (hb, numa) in enumerate(STORAGE_BUSES):
        bridge, hca = storage_nic(f"mlx5_{GPUS + k}", hb, numa, node_guid=f"b83f:d203:012a:{0x2a1c + k:04x}", ipv4=f"10.201.{k}.11")
        hbs.append(bridge)
        hcas.append(hca)
    hbs.sort(key=lambda h: h.domain_bus)
    return Profile(
        name=NAME,
        description="16x H100 SXM + 4 NVSwitch, 16x ConnectX-7 NDR IB (PIX, one per GPU), 2x ConnectX-6 Dx 100GbE storage, 4 sockets (synthetic, for benchmarks)",
        hostname=f"sim-{NAME}-01",
        nr_cpus=2 * SOCKETS * CPUS_PER_SOCKET,
        numa_cpulists=_cpulists(),
        host_bridges=tuple(hbs),
        hcas=tuple(hcas),
        boot_nic=boot,
        gpu_name="NVIDIA H100 80GB HBM3",
        nvlinks_per_gpu=18,
    )


PROFILE = large_16gpu_18nic()


def register() -> Profile:
    """Add the profile to agentd.sim.PROFILES (idempotent) and return it."""
    return PROFILES.setdefault(NAME, PROFILE)
