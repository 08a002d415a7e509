"""Expected and minimum bus bandwidth per collective and size, by detected fabric.

Defaults are published figures, cited per entry (tests/ncclbench/data/SOURCES.md lists them):

- ``nvswitch-nvlink4`` (8x H100/H200 SXM, NVLink4, 18 links, 450 GB/s per direction):
  all_reduce peaks at ~480 GB/s busbw with NVLink SHARP (NVIDIA/nccl-tests#212, NCCL
  maintainer: "On 8 GPUs, you should reach a peak busBw of ~480GB/s"; NVIDIA/nccl#1374
  quoting GTC S62129; 8x H200: 475 GB/s, NVIDIA/nccl-tests#272). Other collectives see
  the effective NVLink rate, ~370 GB/s (#212: 450 GB/s line rate less ~20% protocol
  overhead). Azure's health checks accept >= 460 (H100) and >= 431 (H200) at 16 GiB
  (Azure/azurehpc-health-checks conf/nd96isr_h100_v5.conf, nd96isr_h200_v5.conf).
- ``nvswitch-nvlink3`` (8x A100 SXM, NVLink3, 12 links, 300 GB/s per direction):
  all_reduce 232.5 GB/s measured on one node (NVIDIA/nccl-tests#175); Azure accepts
  >= 228 at 8 GiB (conf/nd96asr_v4.conf). Other collectives: the same link-bound rate.
- ``pcie``: no NVLink; NCCL's busbw is bounded by what CPU, memory and PCIe deliver
  (NVIDIA/nccl#1639: 28 GB/s on 8 GPUs on PCIe Gen5 called good). agentd expects 45% of
  the GPUs' PCIe per-direction rate (28 / 63 GB/s for Gen5 x16).
- ``net`` transport (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 on one node: every byte goes
  through the compute HCAs and GPUDirect RDMA, as Azure's IB loopback check does):
  Azure accepts all_reduce >= 40 GB/s on 8x NDR and >= 18 GB/s on 8x HDR at 16/8 GiB
  (customTests/azure_nccl_allreduce_ib_loopback.nhc and the conf files above), i.e.
  0.0125 and 0.01125 GB/s per Gb/s of compute port rate. agentd takes 0.0125 GB/s per
  Gb/s as the minimum for InfiniBand and for RoCE alike (no published RoCE figure) and
  expects 1.25x that.

Size dependence (agentd's model, not a published curve): small messages are latency
bound, so ``expected(S) = peak * S / (S + S_half)`` with S_half 16 MiB on NVSwitch and
the net path, 4 MiB on PCIe. Only sizes >= ``judge_min_bytes`` (default 256 MiB) get a
minimum, ``min_fraction`` (default 0.75) of the expected value there; smaller sizes are
reported with their expected value but never judged. ``bench.min_busbw_gbps`` (config,
per op) replaces the minimum at the largest measured size of that op; an operator's
``expected_busbw_gbps`` (per op) replaces the peak.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from agentd.model import NodeSnapshot, Record

MiB = 1024 * 1024


class Fabric(Record):
    intra: str  # nvswitch-nvlink4 | nvswitch-nvlink3 | nvlink | pcie | unknown
    net: str | None = None  # ib-ndr | ib-hdr | ib-<rate>g | roce-400 | roce-200 | roce-100 | roce-<rate>g
    gpu_name: str | None = None
    gpus: int = 0
    net_ports: int = 0
    net_rate_gbps: float = 0.0  # sum of the active compute ports' rates, Gb/s
    pcie_gbps: float | None = None  # slowest GPU's PCIe per-direction rate, GB/s

    @property
    def label(self) -> str:
        return self.intra if self.net is None else f"{self.intra}+{self.net}"


class Expectation(Record):
    op: str
    size_bytes: int
    expected_gbps: float | None = None
    min_gbps: float | None = None
    source: str = ""


@dataclass(frozen=True)
class ExpectPolicy:
    min_fraction: float = 0.75
    judge_min_bytes: int = 256 * MiB
    expected_busbw_gbps: Mapping[str, float] = field(default_factory=dict)  # op -> peak override
    min_busbw_gbps: Mapping[str, float] = field(default_factory=dict)  # op -> minimum at the largest size


# fabric -> (op -> peak GB/s, default for other ops, S_half bytes, source)
_NVLINK4 = ({"all_reduce": 480.0}, 370.0, 16 * MiB, "8x H100/H200 NVSwitch: nccl-tests#212, nccl#1374, nccl-tests#272")
_NVLINK3 = ({"all_reduce": 232.5}, 232.5, 16 * MiB, "8x A100 NVSwitch: nccl-tests#175, azurehpc-health-checks nd96asr_v4")
NET_MIN_GBPS_PER_GBPS = 0.0125  # azurehpc-health-checks IB loopback: 40 GB/s on 8x 400 Gb/s
NET_EXPECTED_FACTOR = 1.25
PCIE_EFFICIENCY = 0.45  # nccl#1639: 28 GB/s busbw on PCIe Gen5 x16 (63 GB/s per direction)


def _pcie_gbps(gts: float | None, width: int | None) -> float | None:
    if not gts or not width:
        return None
    encoding = 128 / 130 if gts >= 8.0 else 0.8  # 128b/130b from Gen3, 8b/10b before
    return gts * width * encoding / 8.0


def _net_label(link_layer: str | None, rate: float, generation: str | None) -> str:
    if link_layer == "Ethernet":
        return f"roce-{rate:g}" if rate in (100.0, 200.0, 400.0, 800.0) else f"roce-{rate:g}g"
    if generation:
        return f"ib-{generation.lower()}"
    return f"ib-{rate:g}g"


def detect_fabric(snap: NodeSnapshot, compute_hcas: Iterable[str] | None = None) -> Fabric:
    """What connects the GPUs (intra) and which network the compute HCAs speak (net)."""
    gpus = [g for g in snap.gpus]
    names = {g.name for g in gpus if g.name} | {g.name for g in snap.nvml.gpus if g.name}
    gpu_name = sorted(names)[0] if names else None
    has_switch = any(d.is_nvswitch for d in snap.pci)
    links_up = [sum(1 for l in g.nvlinks if l.state == "up") for g in snap.nvml.gpus]
    versions = {l.version for g in snap.nvml.gpus for l in g.nvlinks if l.version}
    upper = (gpu_name or "").upper()
    if any(links_up) or has_switch:
        gen = max(versions) if versions else (4 if ("H100" in upper or "H200" in upper) else 3 if "A100" in upper else None)
        switched = has_switch or any(l.remote_type == "nvswitch" for g in snap.nvml.gpus for l in g.nvlinks)
        if switched and gen == 4 and ("H100" in upper or "H200" in upper):
            intra = "nvswitch-nvlink4"
        elif switched and gen == 3 and "A100" in upper:
            intra = "nvswitch-nvlink3"
        else:
            intra = "nvlink"
    elif gpus:
        intra = "pcie"
    else:
        intra = "unknown"
    rates = []
    for g in gpus:
        dev = snap.pci_device(g.pci_bus_id)
        if dev is not None:
            r = _pcie_gbps(dev.current_link_speed_gts, dev.current_link_width)
            if r:
                rates.append(r)
    wanted = set(compute_hcas) if compute_hcas is not None else None
    ports = [
        p
        for h in snap.hcas
        if wanted is None or h.name in wanted
        for p in h.ports
        if p.is_active and p.rate_gbps
    ]
    net = None
    if ports:
        fastest = max(ports, key=lambda p: p.rate_gbps or 0.0)
        net = _net_label(fastest.link_layer, float(fastest.rate_gbps or 0.0), fastest.generation)
    return Fabric(
        intra=intra,
        net=net,
        gpu_name=gpu_name,
        gpus=len(gpus),
        net_ports=len(ports),
        net_rate_gbps=float(sum(p.rate_gbps or 0.0 for p in ports)),
        pcie_gbps=min(rates) if rates else None,
    )


def _peak(fabric: Fabric, transport: str, op: str) -> tuple[float | None, int, str]:
    """(peak GB/s, S_half bytes, source) of the default table; peak None: no default."""
    if transport == "net":
        if fabric.net is None or fabric.net_rate_gbps <= 0 or op != "all_reduce":
            return None, 16 * MiB, ""
        peak = NET_MIN_GBPS_PER_GBPS * NET_EXPECTED_FACTOR * fabric.net_rate_gbps
        return peak, 16 * MiB, f"{fabric.net} x{fabric.net_ports} loopback: azurehpc-health-checks IB loopback scaled by port rate"
    if fabric.intra == "nvswitch-nvlink4":
        table, other, half, src = _NVLINK4
    elif fabric.intra == "nvswitch-nvlink3":
        table, other, half, src = _NVLINK3
    elif fabric.intra == "pcie" and fabric.pcie_gbps:
        return PCIE_EFFICIENCY * fabric.pcie_gbps, 4 * MiB, f"PCIe {fabric.pcie_gbps:.1f} GB/s per direction x {PCIE_EFFICIENCY}: nccl#1639"
    else:
        return None, 16 * MiB, ""
    return table.get(op, other), half, src


def expectations(
    fabric: Fabric,
    measured: Iterable[tuple[str, int]],
    policy: ExpectPolicy = ExpectPolicy(),
    transport: str = "nvlink",
) -> list[Expectation]:
    """One Expectation per measured (op, size)."""
    pairs = sorted(set(measured))
    largest: dict[str, int] = {}
    for op, size in pairs:
        largest[op] = max(largest.get(op, 0), size)
    out: list[Expectation] = []
    for op, size in pairs:
        peak, half, source = _peak(fabric, transport, op)
        if op in policy.expected_busbw_gbps:
            peak, source = float(policy.expected_busbw_gbps[op]), "config bench.expected_busbw_gbps"
        expected = None if peak is None else peak * size / (size + half)
        minimum = None
        if expected is not None and size >= policy.judge_min_bytes:
            minimum = policy.min_fraction * expected
        if op in policy.min_busbw_gbps and size == largest[op]:
            minimum, source = float(policy.min_busbw_gbps[op]), (source + "; " if source else "") + "minimum from config bench.min_busbw_gbps"
        out.append(Expectation(op=op, size_bytes=size, expected_gbps=expected, min_gbps=minimum, source=source))
    return out
