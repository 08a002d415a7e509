"""Refuse to benchmark busy GPUs: the simulated NVML answer's ``processes`` and the verdict."""

from __future__ import annotations

import json

from agentd.host.fs import HostRoot
from agentd.host.gpuprocs import GpuProcess, GpuProcesses, gpu_processes
from agentd.ncclbench.safety import check_idle
from tests.support.recorded_root import answers_dir


def sim_root(tmp_path, doc) -> HostRoot:
    d = answers_dir(tmp_path)
    (tmp_path / "sys").mkdir()
    (d / "nvml.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return HostRoot.at(tmp_path)


def test_simulated_processes_are_read(tmp_path):
    host = sim_root(tmp_path, {"gpus": [{"index": 0, "pci_bus_id": "0000:1b:00.0"}, {"index": 1, "pci_bus_id": "0000:2b:00.0"}],
                               "processes": [{"gpu": 1, "pid": 4242, "name": "python", "used_memory_bytes": 1 << 30}]})  # fmt: skip
    ans = gpu_processes(host)
    assert ans.available and ans.gpus == 2
    assert ans.processes == (GpuProcess(gpu=1, pid=4242, name="python", used_memory_bytes=1 << 30),)


def test_simulated_without_processes_is_idle_and_bad_entries_are_reported(tmp_path):
    ans = gpu_processes(sim_root(tmp_path, {"gpus": [], "processes": [{"gpu": "x"}]}))
    assert ans.available and ans.processes == () and ans.errors
    assert gpu_processes(sim_root(tmp_path / "b", "{not json")).available is False
    assert gpu_processes(sim_root(tmp_path / "c", {"init_error": "Driver Not Loaded"})).error == "Driver Not Loaded"


def test_non_live_non_simulated_root_has_no_answer(tmp_path):
    (tmp_path / "sys").mkdir()
    assert gpu_processes(HostRoot.at(tmp_path)).available is False


def test_busy_gpus_refuse_unless_forced():
    busy = GpuProcesses(available=True, gpus=8, processes=(GpuProcess(gpu=3, pid=77, name="train"), GpuProcess(gpu=5, pid=78)))
    v = check_idle(busy, gpus=range(8))
    assert not v.ok and "gpu3: pid 77 (train)" in v.reason and "--force" in v.reason and len(v.busy) == 2
    forced = check_idle(busy, gpus=range(8), force=True)
    assert forced.ok and "running anyway" in forced.reason
    assert check_idle(busy, gpus=[0, 1]).ok  # the run would not touch gpu3/gpu5
    assert check_idle(busy, gpus=range(8), ignore_pids=[77, 78]).ok


def test_unknown_gpu_state_refuses_unless_forced():
    unknown = GpuProcesses(available=False, error="NVML init failed: Driver Not Loaded")
    v = check_idle(unknown)
    assert not v.ok and "cannot verify" in v.reason and "Driver Not Loaded" in v.reason
    assert check_idle(unknown, force=True).ok
    assert check_idle(GpuProcesses(available=True, gpus=8)).ok


class _FakeNvml:
    """Just enough of nvidia-ml-py for gpu_processes on a live root."""

    class NVMLError(Exception):
        pass

    class _Proc:
        def __init__(self, pid, mem):
            self.pid, self.usedGpuMemory = pid, mem

    def __init__(self):
        self.shutdown = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlDeviceGetCount(self):
        return 3

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        if h == 2:
            raise self.NVMLError("GPU is lost")
        return [self._Proc(1, 2048)] if h == 1 else []


def test_live_nvml_query(monkeypatch):
    fake = _FakeNvml()
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake)
    ans = gpu_processes(HostRoot.at("/"))
    assert ans.available and ans.gpus == 3 and fake.shutdown
    assert ans.processes == (GpuProcess(gpu=1, pid=1, name=ans.processes[0].name, used_memory_bytes=2048),)
    assert ans.processes[0].name  # /proc/1/comm of this machine
    assert ans.errors == ("gpu2: GPU is lost",)
    assert not check_idle(ans, gpus=range(3)).ok
