"""Fault effects on the node: GPUDirect RDMA prerequisites, NVML answers, GPUs, files.

Same contract as effects_link: apply / restores / advancing per fault kind.
"""

from __future__ import annotations

from typing import Any, Callable

from agentd.sim.node import driver_version_text, modules_text
from agentd.sim.pci import pci_device_paths
from agentd.sim.targets import Ctx, NvmlField, Restorable, Target
from agentd.sim.tree import remove_path

PEERMEM = "sys/module/nvidia_peermem"
MODULES = "proc/modules"
DRIVER_VERSION = "proc/driver/nvidia/version"
OSRELEASE = "proc/sys/kernel/osrelease"
GARBAGE = b"\xde\xad\xbe\xef\x00\xff\xfe 4: ACT\x80IVE \x00\x01garbage\n"
GPU_LOST = "GPU is lost"


# -- GPUDirect RDMA prerequisites ---------------------------------------------------


def _open_module_now(ctx: Ctx) -> bool:
    try:
        return "Open Kernel Module" in ctx.read(DRIVER_VERSION)
    except OSError:
        return ctx.profile.open_module


def _drop_peermem(ctx: Ctx, open_module: bool) -> None:
    remove_path(ctx.path(PEERMEM))
    ctx.path(MODULES).write_text(modules_text(False, open_module))


def peermem_gone_apply(ctx: Ctx, t: Target, v: object) -> None:
    _drop_peermem(ctx, _open_module_now(ctx))


def dmabuf_only_apply(ctx: Ctx, t: Target, v: object) -> None:
    """No peermem, but the open kernel module on a 6.x kernel: GDR needs DMA-BUF."""
    _drop_peermem(ctx, True)
    ctx.path(DRIVER_VERSION).write_text(driver_version_text(ctx.profile, True))
    if not ctx.profile.kernel_release.startswith("6."):
        ctx.write(OSRELEASE, "6.5.0-1024-nvidia")


def no_gdr_apply(ctx: Ctx, t: Target, v: object) -> None:
    """No peermem and the proprietary module (no DMA-BUF export): no GDR path at all."""
    _drop_peermem(ctx, False)
    ctx.path(DRIVER_VERSION).write_text(driver_version_text(ctx.profile, False))


def peermem_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    return [PEERMEM, MODULES]


def gdr_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    return [PEERMEM, MODULES, DRIVER_VERSION, OSRELEASE]


# -- NVML -------------------------------------------------------------------------------


def _nvml_gpu(ctx: Ctx, data: dict[str, Any], t: Target) -> dict[str, Any]:
    g = ctx.nvml_gpu(data, t.bdf)  # type: ignore[arg-type]
    if g is None:
        raise ValueError(f"{t.name} ({t.bdf}) is not in nvml.json (gpu_removed applied?)")
    return g


def _link(ctx: Ctx, t: Target, v: object, *, value_is_link: bool) -> int:
    if ctx.profile.nvlinks_per_gpu == 0:
        raise ValueError(f"{ctx.profile.gpu_name} GPUs of this profile have no NVLink")
    link = t.link
    if value_is_link and v is not None:
        if link is not None and link != v:
            raise ValueError(f"link given twice ({t.link} in the target, {v} as value)")
        link = v  # type: ignore[assignment]
    link = 0 if link is None else link
    if not 0 <= link < ctx.profile.nvlinks_per_gpu:
        raise ValueError(f"link {link} out of range 0-{ctx.profile.nvlinks_per_gpu - 1}")
    return link


def nvlink_down_apply(ctx: Ctx, t: Target, v: object) -> None:
    link = _link(ctx, t, v, value_is_link=True)
    data = ctx.nvml()
    _nvml_gpu(ctx, data, t)["nvlinks"][link]["state"] = "down"
    ctx.save_nvml(data)


def nvlink_down_restores(ctx: Ctx, t: Target, v: object) -> list[NvmlField]:
    return [NvmlField(t.bdf, ("nvlinks", _link(ctx, t, v, value_is_link=True), "state"))]


def nvlink_errors_apply(ctx: Ctx, t: Target, n: int) -> None:
    link = _link(ctx, t, None, value_is_link=False)
    data = ctx.nvml()
    errors = _nvml_gpu(ctx, data, t)["nvlinks"][link]["errors"]
    errors["crc_flit"] += n
    errors["crc_data"] += n // 100
    errors["replay"] += n // 10
    ctx.save_nvml(data)


def pcie_replay_apply(ctx: Ctx, t: Target, n: int) -> None:
    data = ctx.nvml()
    g = _nvml_gpu(ctx, data, t)
    g["pcie_replay_errors"] = (g.get("pcie_replay_errors") or 0) + n
    ctx.save_nvml(data)


def nvml_file(ctx: Ctx, t: Target, v: object) -> list[str]:
    return [".agentd/nvml.json"]


def gpu_lost_apply(ctx: Ctx, t: Target, v: object) -> None:
    data = ctx.nvml()
    _nvml_gpu(ctx, data, t)["error"] = GPU_LOST
    ctx.save_nvml(data)


def gpu_lost_restores(ctx: Ctx, t: Target, v: object) -> list[NvmlField]:
    return [NvmlField(t.bdf, ("error",))]


def gpu_removed_apply(ctx: Ctx, t: Target, v: object) -> None:
    """Gone from PCI and from NVML; NVML renumbers the GPUs after it, as a re-init would."""
    for rel in pci_device_paths(ctx.layout[t.bdf]):  # type: ignore[index]
        p = ctx.path(rel)
        if p.is_symlink() or p.exists():
            remove_path(p)
    data = ctx.nvml()
    data["gpus"] = [g for g in data["gpus"] if g["pci_bus_id"] != t.bdf]
    for i, g in enumerate(data["gpus"]):
        g["index"] = i
    ctx.save_nvml(data)


def gpu_removed_restores(ctx: Ctx, t: Target, v: object) -> list[Restorable]:
    return pci_device_paths(ctx.layout[t.bdf]) + [NvmlField(t.bdf, ())]  # type: ignore[index]


def nvml_hang_apply(ctx: Ctx, t: Target, seconds: float) -> None:
    data = ctx.nvml()
    data["hang_s"] = seconds
    ctx.save_nvml(data)


def nvml_init_error_apply(ctx: Ctx, t: Target, text: str) -> None:
    data = ctx.nvml()
    data["init_error"] = text
    ctx.save_nvml(data)


def top_field(key: str) -> Callable[[Ctx, Target, object], list[NvmlField]]:
    return lambda ctx, t, v: [NvmlField(None, (key,))]


def fabric_apply(ctx: Ctx, t: Target, state: str) -> None:
    if not ctx.profile.nvswitch_bdfs:
        raise ValueError("the profile has no NVSwitch, so no fabric to be incomplete")
    data = ctx.nvml()
    for i in t.gpus:
        g = ctx.nvml_gpu(data, ctx.profile.gpu_bdfs[i])
        if g is not None:
            g["fabric_state"] = state
            g["fabric_status"] = None  # nvidia-smi shows "Status: N/A" until registration ends
    ctx.save_nvml(data)


def fabric_restores(ctx: Ctx, t: Target, v: object) -> list[NvmlField]:
    bdfs = [ctx.profile.gpu_bdfs[i] for i in t.gpus]
    return [NvmlField(b, (k,)) for b in bdfs for k in ("fabric_state", "fabric_status")]


# -- files ---------------------------------------------------------------------------------


def unreadable_apply(ctx: Ctx, t: Target, v: object) -> None:
    """A directory where the file was: open() works, read() fails with EISDIR (root ignores chmod 000)."""
    for rel in t.files:
        p = ctx.path(rel)
        remove_path(p)
        p.mkdir(parents=True)


def garbage_apply(ctx: Ctx, t: Target, v: object) -> None:
    for rel in t.files:
        p = ctx.path(rel)
        remove_path(p)
        p.write_bytes(GARBAGE)


def files_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    return list(t.files)
