"""Fault effects on the node: GPUDirect RDMA prerequisites, NVML answers, GPUs, files.

Same contract as effects_link: apply / restores / advancing per fault kind.
"""

from __future__ import annotations

from typing import Callable

from agentd.base.jsontypes import JsonObject
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


def _nvml_gpu(ctx: Ctx, data: JsonObject, t: Target) -> JsonObject:
    g = ctx.nvml_gpu(data, t.the_bdf)
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


def _fabric_gpus(ctx: Ctx, t: Target, data: JsonObject) -> list[JsonObject]:
    if not ctx.profile.has_fabric:
        raise ValueError("the profile's GPUs are in no NVLink fabric (no NVSwitch, local or in the rack)")
    found = (ctx.nvml_gpu(data, ctx.profile.gpu_bdfs[i]) for i in t.gpus)
    return [g for g in found if g is not None]


def _fabric_identity(ctx: Ctx) -> None:
    if not ctx.profile.rack_nvlink:
        raise ValueError("the profile's GPUs report no fabric cluster UUID or clique id (a GB200 NVL profile's do)")


def fabric_apply(ctx: Ctx, t: Target, state: str) -> None:
    data = ctx.nvml()
    for g in _fabric_gpus(ctx, t, data):
        g["fabric_state"] = state
        g["fabric_status"] = None  # nvidia-smi shows "Status: N/A" until registration ends
    ctx.save_nvml(data)


def fabric_restores(ctx: Ctx, t: Target, v: object) -> list[NvmlField]:
    return _gpus_fields(ctx, t, ("fabric_state", "fabric_status"))


def _gpus_fields(ctx: Ctx, t: Target, keys: tuple[str, ...]) -> list[NvmlField]:
    return [NvmlField(ctx.profile.gpu_bdfs[i], (k,)) for i in t.gpus for k in keys]


def fabric_status_apply(ctx: Ctx, t: Target, status: str) -> None:
    data = ctx.nvml()
    for g in _fabric_gpus(ctx, t, data):
        g["fabric_state"] = "completed"
        g["fabric_status"] = status
    ctx.save_nvml(data)


ZERO_UUID = "00000000-0000-0000-0000-000000000000"
UNASSIGNED = {"clique": ("fabric_clique_id",), "uuid": ("fabric_cluster_uuid",), "both": ("fabric_clique_id", "fabric_cluster_uuid")}


def fabric_unassigned_apply(ctx: Ctx, t: Target, what: str) -> None:
    _fabric_identity(ctx)
    data = ctx.nvml()
    for g in _fabric_gpus(ctx, t, data):
        if "fabric_clique_id" in UNASSIGNED[what]:
            g["fabric_clique_id"] = 0
        if "fabric_cluster_uuid" in UNASSIGNED[what]:
            g["fabric_cluster_uuid"] = ZERO_UUID
    ctx.save_nvml(data)


def fabric_unassigned_restores(ctx: Ctx, t: Target, what: str) -> list[NvmlField]:
    return _gpus_fields(ctx, t, UNASSIGNED[what])


# fabric_health VALUE -> (field of fabric_health, value it gets)
HEALTH_FAULTS: dict[str, tuple[str, object]] = {
    "degraded_bandwidth": ("degraded_bandwidth", True),
    "route_recovery": ("route_recovery", True),
    "route_unhealthy": ("route_unhealthy", True),
    "access_timeout_recovery": ("access_timeout_recovery", True),
    "incorrect_configuration": ("incorrect_configuration", "insufficient_nvlinks"),
    "unhealthy": ("summary", "unhealthy"),
    "limited_capacity": ("summary", "limited_capacity"),
    "gfm_disconnected": ("gfm_connected", False),
}


def fabric_health_apply(ctx: Ctx, t: Target, what: str) -> None:
    _fabric_identity(ctx)
    data = ctx.nvml()
    key, value = HEALTH_FAULTS[what]
    for g in _fabric_gpus(ctx, t, data):
        g["fabric_health"][key] = value
    ctx.save_nvml(data)


def fabric_health_restores(ctx: Ctx, t: Target, what: str) -> list[NvmlField]:
    return _gpus_fields(ctx, t, ("fabric_health",))


def fabric_split_apply(ctx: Ctx, t: Target, v: object) -> None:
    """The GPU lands in another clique of the same cluster: clique id + 1."""
    _fabric_identity(ctx)
    if len(ctx.profile.gpu_bdfs) < 2:
        raise ValueError("a single GPU cannot disagree with the others")
    data = ctx.nvml()
    g = _nvml_gpu(ctx, data, t)
    g["fabric_clique_id"] = (g["fabric_clique_id"] or 0) + 1
    ctx.save_nvml(data)


def fabric_split_restores(ctx: Ctx, t: Target, v: object) -> list[NvmlField]:
    return [NvmlField(t.bdf, ("fabric_clique_id",))]


def nvlink_slow_default(ctx: Ctx, t: Target) -> int:
    return ctx.profile.nvlink_speed_mb_s // 2


def nvlink_slow_apply(ctx: Ctx, t: Target, speed: int) -> None:
    link = _link(ctx, t, None, value_is_link=False)
    data = ctx.nvml()
    _nvml_gpu(ctx, data, t)["nvlinks"][link]["speed_mb_s"] = speed
    ctx.save_nvml(data)


def nvlink_slow_restores(ctx: Ctx, t: Target, v: object) -> list[NvmlField]:
    return [NvmlField(t.bdf, ("nvlinks", _link(ctx, t, None, value_is_link=False), "speed_mb_s"))]


def _c2c_link(ctx: Ctx, t: Target) -> int:
    n = ctx.profile.c2c_links_per_gpu
    if n == 0:
        raise ValueError("the profile's GPUs have no NVLink-C2C link (Grace systems only)")
    link = 0 if t.link is None else t.link
    if not 0 <= link < n:
        raise ValueError(f"C2C link {link} out of range 0-{n - 1}")
    return link


def c2c_down_apply(ctx: Ctx, t: Target, v: object) -> None:
    link = _c2c_link(ctx, t)
    data = ctx.nvml()
    _nvml_gpu(ctx, data, t)["c2c_links"][link]["state"] = "down"
    ctx.save_nvml(data)


def c2c_down_restores(ctx: Ctx, t: Target, v: object) -> list[NvmlField]:
    return [NvmlField(t.bdf, ("c2c_links", _c2c_link(ctx, t), "state"))]


# -- processes -------------------------------------------------------------------------------


def _pid_dir(ctx: Ctx, comm: str) -> str:
    pid = ctx.profile.pid_of(comm)
    if pid is None:
        raise ValueError(f"{comm} does not run on this profile")
    return f"proc/{pid}"


def process_down_apply(comm: str) -> Callable[[Ctx, Target, object], None]:
    """The process has exited: its proc/<pid> directory is gone."""
    return lambda ctx, t, v: remove_path(ctx.path(_pid_dir(ctx, comm)))


def process_restores(comm: str) -> Callable[[Ctx, Target, object], list[str]]:
    return lambda ctx, t, v: [_pid_dir(ctx, comm)]


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
