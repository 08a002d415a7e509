"""Which processes hold a compute context on which GPU (for the benchmark's idle check).

Live (the running kernel's root): NVML ``nvmlDeviceGetComputeRunningProcesses`` per GPU, through
nvidia-ml-py imported lazily. No library or driver answers ``available=False``.

Recorded root (a capture or a simulated node): ``.agentd/nvml.json`` may carry an optional ``processes`` list,
``[{"gpu": 0, "pid": 4242, "name": "python", "used_memory_bytes": 1073741824}]``; absent
means idle GPUs. Other keys of that file are not looked at here.

The caller runs this in a worker thread with a timeout, as any NVML call can hang.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from agentd.base import recorded
from agentd.host.fs import HostRoot, ReadContext


@dataclass(frozen=True)
class GpuProcess:
    gpu: int  # NVML index
    pid: int
    name: str | None = None
    used_memory_bytes: int | None = None


@dataclass(frozen=True)
class GpuProcesses:
    available: bool  # False: could not ask (no NVML, no recorded answer)
    processes: tuple[GpuProcess, ...] = ()
    gpus: int | None = None  # GPUs NVML reported
    error: str | None = None
    errors: tuple[str, ...] = field(default_factory=tuple)  # per-GPU query failures


def _recorded(host: HostRoot, path: str) -> GpuProcesses:
    ctx = ReadContext(host, "gpuprocs")
    text = ctx.text(path, max_bytes=4 * 1024 * 1024)
    if text is None:
        return GpuProcesses(available=False, error=f"no recorded NVML answer ({path}) under this {host.mode} host root")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        return GpuProcesses(available=False, error=f"{path} is not valid JSON: {e}")
    if not isinstance(data, dict):
        return GpuProcesses(available=False, error=f"{path} is not a JSON object")
    if data.get("init_error"):
        return GpuProcesses(available=False, error=str(data["init_error"]))
    procs: list[GpuProcess] = []
    problems: list[str] = []
    for i, p in enumerate(data.get("processes") or []):
        try:
            procs.append(GpuProcess(gpu=int(p["gpu"]), pid=int(p["pid"]), name=p.get("name"), used_memory_bytes=p.get("used_memory_bytes")))
        except (TypeError, KeyError, ValueError):
            problems.append(f"processes[{i}]: needs integer 'gpu' and 'pid'")
    gpus = data.get("gpus")
    return GpuProcesses(available=True, processes=tuple(procs), gpus=len(gpus) if isinstance(gpus, list) else None, errors=tuple(problems))


def _comm(host: HostRoot, pid: int) -> str | None:
    return ReadContext(host, "gpuprocs").text(f"proc/{pid}/comm", max_bytes=256)


def _live(host: HostRoot) -> GpuProcesses:
    try:
        import pynvml
    except ImportError as e:
        return GpuProcesses(available=False, error=f"nvidia-ml-py is not installed ({e})")
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError) as e:
        return GpuProcesses(available=False, error=f"NVML init failed: {e}")
    procs: list[GpuProcess] = []
    problems: list[str] = []
    try:
        count = int(pynvml.nvmlDeviceGetCount())
        for i in range(count):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                running = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
            except pynvml.NVMLError as e:
                problems.append(f"gpu{i}: {e}")
                continue
            for p in running:
                mem = getattr(p, "usedGpuMemory", None)
                procs.append(GpuProcess(gpu=i, pid=int(p.pid), name=_comm(host, int(p.pid)), used_memory_bytes=int(mem) if isinstance(mem, int) else None))
    except pynvml.NVMLError as e:
        return GpuProcesses(available=False, error=f"NVML query failed: {e}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    return GpuProcesses(available=True, processes=tuple(procs), gpus=count, errors=tuple(problems))


def gpu_processes(host: HostRoot) -> GpuProcesses:
    """Processes using the node's GPUs. Never raises."""
    try:
        if host.is_live:
            return _live(host)
        path = host.recorded(recorded.NVML)
        if path is not None:
            return _recorded(host, path)
    except Exception as e:
        return GpuProcesses(available=False, error=f"{type(e).__name__}: {e}")
    return GpuProcesses(available=False, error=f"no NVML: an {host.mode} host root without recorded answers")
