"""What the node publishes for placement (docs/topology.md): its NVLink domain and its NIC
rails. Pure: (snapshot, roles, findings, [fabric]) -> Placement. The NFD labels, /topology,
`agentd topology` (and its Slurm block line) and the placement metrics all render this one
value, so they never disagree.

Rails. Each GPU gets one compute HCA: among the compute HCAs at the GPU's best PCIe path
type (PIX < PXB < PHB < NODE < SYS, agentd.host.topology), the first in natural order that
no GPU before it (index order) took; when every tied HCA is taken already, the least
shared one (natural order breaks ties). An HGX H100 (each GPU and its NIC under one PCIe
switch, PIX) pairs one to one; a GB200 tray (two GPUs and two HCAs per Grace, all NODE)
pairs GPU0-mlx5_0, GPU1-mlx5_1, ... instead of putting both GPUs of a Grace on its first
HCA. The port is the HCA's first active port (else its first port), the netdev that
port's. The PCIe roots are the host bridges (sysfs ``pci<domain>:<bus>``, the value DRA's
``resource.kubernetes.io/pcieRoot`` attribute uses).

Rail hash: ``rail_hash`` documents exactly what is hashed, so a site can recompute it.

Domain. The GPUs whose fabric registration completed with status success and report a
non-zero cluster UUID and clique id; when they all agree, the domain is
``<cluster_uuid>.<clique_id>`` (GPU feature discovery's ``nvidia.com/gpu.clique`` value).
No such GPU, or GPUs that disagree (``nvlink.domain.split``): no domain. Its health comes
from the findings that count (withheld ones say nothing) whose code starts with
``nvlink.fabric.``, ``nvlink.domain.`` or ``fabric.``: a critical one makes it unhealthy,
a warning degraded.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Literal, Sequence, cast

from agentd.base.ids import natural_key
from agentd.config import FabricSettings
from agentd.judging.fabric_role import domain_of, expects_multi_node
from agentd.judging.roles import HcaRoles
from agentd.model import Finding, Hca, IbPort, NodeSnapshot, PathName, PathType, Record, counted

DomainHealth = Literal["ok", "degraded", "unhealthy"]
DOMAIN_FINDING_PREFIXES = ("nvlink.fabric.", "nvlink.domain.", "fabric.")
RAIL_HASH_CHARS = 12


class Rail(Record):
    gpu: int  # NVML index
    gpu_bus_id: str  # sysfs spelling, 0000:1b:00.0
    nic: str  # RDMA device name, mlx5_0
    port: int | None = None  # None: the HCA lists no port
    netdev: str | None = None  # the port's netdev, when it has one
    path: PathName  # the GPU-NIC PCIe path type
    gpu_pcie_root: str | None = None  # host bridge, "pci0000:14"; None: not in the PCI tree
    nic_pcie_root: str | None = None


class NvlinkDomain(Record):
    id: str  # "<cluster_uuid>.<clique_id>", as nvidia.com/gpu.clique
    cluster_uuid: str
    clique_id: int
    gpus: int  # the node's GPUs in it
    health: DomainHealth


class Placement(Record):
    domain: NvlinkDomain | None = None
    multi_node: bool = False  # the node is expected in a multi-node domain (fabric_role.expects_multi_node)
    rails: tuple[Rail, ...] = ()
    rail_hash: str | None = None  # None: no rails


def _first_port(hca: Hca | None) -> IbPort | None:
    if hca is None or not hca.ports:
        return None
    ports = sorted(hca.ports, key=lambda p: p.port)
    return next((p for p in ports if p.is_active), ports[0])


def _root(snapshot: NodeSnapshot, bus_id: str | None) -> str | None:
    dev = snapshot.pci_device(bus_id.lower()) if bus_id else None
    return dev.root_complex if dev is not None else None


def rails(snapshot: NodeSnapshot, roles: HcaRoles | None) -> tuple[Rail, ...]:
    """Each GPU's compute HCA (module docstring); ``roles`` None: every HCA is compute."""
    uses: dict[str, int] = {}
    out: list[Rail] = []
    for gpu in sorted(snapshot.gpus, key=lambda g: g.index):
        paths = [(PathType[p], n) for n, p in gpu.nic_paths.items() if roles is None or roles.is_compute(n)]
        if not paths:
            continue
        best = min(p for p, _ in paths)
        tied = sorted((n for p, n in paths if p == best), key=natural_key)
        nic = min(tied, key=lambda n: (uses.get(n, 0), natural_key(n)))
        uses[nic] = uses.get(nic, 0) + 1
        hca = snapshot.hca(nic)
        port = _first_port(hca)
        out.append(Rail(
            gpu=gpu.index, gpu_bus_id=gpu.pci_bus_id, nic=nic, port=port.port if port else None,
            netdev=port.netdev if port else None, path=cast(PathName, best.name),
            gpu_pcie_root=_root(snapshot, gpu.pci_bus_id), nic_pcie_root=_root(snapshot, hca.pci_bus_id if hca else None),
        ))
    return tuple(out)


def rail_hash(rail_list: Iterable[Rail]) -> str | None:
    """The first 12 hex digits of SHA-256 over one line per rail, ``<gpu index>:<nic>:<port>``
    (the port empty when unknown), each ending in a newline, sorted bytewise (UTF-8; a
    name that is not UTF-8 as its raw bytes). Netdev names, bus ids and path types are not
    part of it: two nodes whose GPU i uses the same HCA port have the same hash. The shell
    equivalent: ``printf '%s\\n' 0:mlx5_0:1 1:mlx5_1:1 ... | LC_ALL=C sort | sha256sum | cut -c1-12``.
    None: no rails."""
    lines = sorted(f"{r.gpu}:{r.nic}:{'' if r.port is None else r.port}\n".encode("utf-8", "surrogateescape") for r in rail_list)
    if not lines:
        return None
    return hashlib.sha256(b"".join(lines)).hexdigest()[:RAIL_HASH_CHARS]


def domain_health(findings: Sequence[Finding]) -> DomainHealth:
    severities = {f.severity for f in counted(findings) if f.code.startswith(DOMAIN_FINDING_PREFIXES)}
    if "critical" in severities:
        return "unhealthy"
    return "degraded" if "warning" in severities else "ok"


def nvlink_domain(snapshot: NodeSnapshot, findings: Sequence[Finding]) -> NvlinkDomain | None:
    ids = [i for i in (domain_of(g) for g in snapshot.nvml.gpus) if i is not None]
    if not ids or len(set(ids)) != 1:
        return None
    uuid, clique = ids[0]
    return NvlinkDomain(id=f"{uuid}.{clique}", cluster_uuid=uuid, clique_id=clique, gpus=len(ids), health=domain_health(findings))


def placement(snapshot: NodeSnapshot, roles: HcaRoles | None, findings: Sequence[Finding], settings: FabricSettings) -> Placement:
    """The node's placement facts (module docstring). ``roles`` None: every HCA is compute."""
    rail_list = rails(snapshot, roles)
    return Placement(
        domain=nvlink_domain(snapshot, findings),
        multi_node=expects_multi_node(snapshot, settings),
        rails=rail_list,
        rail_hash=rail_hash(rail_list),
    )
