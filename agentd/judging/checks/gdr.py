"""GPUDirect RDMA readiness: can a compute NIC register GPU memory? (nccl-spec.md section 3)

Two registration paths, as NCCL checks them:
- peer memory: one of NCCL's three version files exists (``GdrInfo.peermem_version_path``);
  ``lsmod`` showing nvidia_peermem is not enough (nccl#1939);
- DMA-BUF: open GPU kernel modules, Linux >= 5.12 and a CUDA driver >= 11.7 (when NVML
  says which; unknown is not held against it). The NIC-side probe NCCL runs
  (``ibv_reg_dmabuf_mr``) cannot be done from sysfs, so this is "possible", not "proven".

Judged only on nodes with GPUs and compute HCAs.
"""

from __future__ import annotations

from agentd.judging.checks.common import CheckInput
from agentd.judging.findings import NODE, finding
from agentd.model import Finding, GdrInfo, NodeSnapshot

DMABUF_MIN_CUDA = 11070  # CUDA driver API version 11.7
NCCL_PEERMEM_PATHS = (
    "/sys/kernel/mm/memory_peers/nv_mem/version",
    "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
    "/sys/module/nvidia_peermem/version",
)


def _cuda(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def dmabuf_blockers(g: GdrInfo, snap: NodeSnapshot) -> list[str]:
    """Why DMA-BUF cannot be used; empty when it is possible."""
    out = []
    if not g.nvidia_loaded:
        out.append("nvidia module not loaded")
    elif g.nvidia_open_module is False:
        out.append("proprietary (not open) GPU kernel module")
    elif g.nvidia_open_module is None:
        out.append("GPU kernel module flavour unknown")
    if g.dmabuf_kernel_ok is False:
        out.append(f"kernel {g.kernel_release or '?'} < 5.12")
    elif g.dmabuf_kernel_ok is None:
        out.append("kernel version unknown")
    cuda = snap.nvml.cuda_driver_version
    if cuda is not None and cuda < DMABUF_MIN_CUDA:
        out.append(f"CUDA driver {_cuda(cuda)} < 11.7")
    return out


def check_gdr(inp: CheckInput) -> list[Finding]:
    """gdr.path (ok), gdr.unavailable (critical), gdr.peermem.unregistered (warning)."""
    snap = inp.snapshot
    roles = inp.resolved_roles()
    if not snap.gpus or not roles.compute:
        return []
    g = snap.gdr
    out: list[Finding] = []
    peermem = g.peermem_version_path is not None
    blockers = dmabuf_blockers(g, snap)
    if g.peermem_loaded and not peermem:
        out.append(finding(
            "gdr.peermem.unregistered",
            "warning",
            NODE,
            "nvidia_peermem is loaded but none of NCCL's peer-memory version files exists "
            f"({', '.join(NCCL_PEERMEM_PATHS)}): NCCL will not use it",
            "reload it after the nvidia and mlx5/ib_core modules (`modprobe -r nvidia_peermem; modprobe nvidia_peermem`) "
            "and check dmesg for a symbol/ABI mismatch with the installed MOFED/DOCA",
            measured="loaded, unregistered",
            expected="registered",
        ))
    paths = []
    if peermem:
        paths.append(f"nvidia-peermem ({g.peermem_version_path}{', ' + g.peermem_version if g.peermem_version else ''})")
    if not blockers:
        paths.append(f"DMA-BUF (open GPU module, kernel {g.kernel_release or '>= 5.12'})")
    if paths:
        out.append(finding(
            "gdr.path",
            "ok",
            NODE,
            "GPUDirect RDMA possible via " + " and ".join(paths),
            measured="peermem" if peermem and blockers else "dmabuf" if not peermem else "peermem+dmabuf",
        ))
        return out
    peer_why = "nvidia_peermem loaded but not registered" if g.peermem_loaded else "nvidia_peermem not loaded"
    out.append(finding(
        "gdr.unavailable",
        "critical",
        NODE,
        f"no GPUDirect RDMA path for {len(snap.gpus)} GPUs and {len(roles.compute)} compute HCAs: "
        f"{peer_why}; DMA-BUF not possible ({', '.join(blockers)})",
        "load nvidia_peermem (`modprobe nvidia_peermem`), or use the open GPU kernel modules on Linux >= 5.12 "
        "with CUDA >= 11.7 for DMA-BUF; without GDR, NCCL stages every transfer through host memory",
        measured="none",
        expected="peermem or dmabuf",
    ))
    return out
