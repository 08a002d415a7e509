"""A synthetic node with 64 InfiniBand HCAs, for benchmarks: cost per device at scale.

``hca64-16gpu``: 16x H100 SXM behind 4 NVSwitches and 64x ConnectX-7 NDR InfiniBand
compute HCAs (``mlx5_0``..``mlx5_63``, IPoIB ``ib0``..``ib63``): four HCAs and one GPU
share each Broadcom PEX Gen5 switch (PIX), four switches per socket, four sockets, 448
CPUs. No such box ships; it exists to show how collection cost and series grow with
the number of devices (about 3.5x h100-ib's HCAs and ports, 2x its GPUs).

Bus numbers stay in PCI domain 0000: NVSwitch tree on 01-06, the bootstrap NIC on 0a;
group ``i`` behind host bridge ``0x10 + 0x0c*i``: switch USP on +1, its downstream
ports on +2 (devices 00-03 for the HCAs, 04 for the GPU), HCAs on +3..+6, GPU on +7.

Like ``profile_large``, it is not in ``agentd.sim.PROFILES`` unless something calls
``register()`` (idempotent); the benchmarks do.
"""

from __future__ import annotations

from agentd.sim.profile_large import ndr_compute_hca
from agentd.sim.profiles import (
    PROFILES,
    BootNic,
    Endpoint,
    HcaSpec,
    HostBridge,
    Profile,
    RootPort,
    Switch,
)

NAME = "hca64-16gpu"
GPUS = 16
HCAS_PER_GPU = 4
SOCKETS = 4
CPUS_PER_SOCKET = 56  # cores; two threads each
GROUP_BUSES = tuple(0x10 + 0x0C * i for i in range(GPUS))  # 0x10 .. 0xc4 (+7 = 0xcb)


def _cpulists() -> tuple[str, ...]:
    n = CPUS_PER_SOCKET
    total = SOCKETS * n
    return tuple(f"{s * n}-{s * n + n - 1},{total + s * n}-{total + s * n + n - 1}" for s in range(SOCKETS))


def _group(hb: int, numa: int, nics: list[Endpoint], gpu: Endpoint) -> HostBridge:
    """Root port hb:01.0 -> switch USP (hb+1):00.0 -> DSPs (hb+2):0N.0, one per device."""
    dsps = tuple((f"0000:{hb + 2:02x}:{j:02x}.0", ep) for j, ep in enumerate([*nics, gpu]))
    sw = Switch(usp=f"0000:{hb + 1:02x}:00.0", dsps=dsps)
    return HostBridge(f"0000:{hb:02x}", numa, (RootPort(f"0000:{hb:02x}:01.0", sw),))


def hca64_16gpu() -> Profile:
    nvsw = Switch(
        usp="0000:01:00.0",
        dsps=tuple((f"0000:02:0{i}.0", Endpoint(f"0000:{3 + i:02x}:00.0", "nvswitch-gen3", "nvswitch")) for i in range(4)),
    )
    boot = BootNic("eno1", "0000:0a:00.0", "7c:c2:55:3e:40:d0")
    hbs = [HostBridge("0000:00", 0, (RootPort("0000:00:01.0", nvsw), RootPort("0000:00:1c.0", Endpoint(boot.bdf, "i350", "nic", "eno1"))))]
    hcas: list[HcaSpec] = []
    for g, hb in enumerate(GROUP_BUSES):
        numa = g * SOCKETS // GPUS
        nics: list[Endpoint] = []
        for k in range(HCAS_PER_GPU):
            i = g * HCAS_PER_GPU + k
            name, bdf = f"mlx5_{i}", f"0000:{hb + 3 + k:02x}:00.0"
            nics.append(Endpoint(bdf, "connectx-7", "hca", name))
            hcas.append(ndr_compute_hca(name, bdf, f"ib{i}", node_guid=f"a088:c203:02{i:02x}:{0x7f10 + 0x11 * i:04x}", lid=0x200 + i))
        gpu = Endpoint(f"0000:{hb + 3 + HCAS_PER_GPU:02x}:00.0", "h100-sxm", "gpu")
        hbs.append(_group(hb, numa, nics, gpu))
    return Profile(
        name=NAME,
        description="16x H100 SXM + 4 NVSwitch, 64x ConnectX-7 NDR IB (4 per GPU, PIX), 4 sockets (synthetic, for benchmarks)",
        hostname=f"sim-{NAME}-01",
        nr_cpus=2 * SOCKETS * CPUS_PER_SOCKET,
        numa_cpulists=_cpulists(),
        host_bridges=tuple(hbs),
        hcas=tuple(hcas),
        boot_nic=boot,
        gpu_name="NVIDIA H100 80GB HBM3",
        nvlinks_per_gpu=18,
    )


PROFILE = hca64_16gpu()


def register() -> Profile:
    """Add the profile to agentd.sim.PROFILES (idempotent) and return it."""
    return PROFILES.setdefault(NAME, PROFILE)
