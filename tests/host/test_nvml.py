"""NVML: simulated nvml.json, the live path against a scripted pynvml, and the real
nvidia-ml-py on a machine without a driver."""

from __future__ import annotations

import ctypes
import json
import re
import sys
import types
from pathlib import Path

import pytest

from agentd.host import nvml
from agentd.host.fs import HostRoot, ReadContext
from agentd.host.nvml import normalize_bus_id, read_nvml
from agentd.host.runner import Lane
from agentd.model import NvLink, NvmlGpu, NvmlInfo
from tests.support.fixtures import OUTPUTS
from tests.support.recorded_root import answers_dir

H100_Q = OUTPUTS / "nvidia-smi-q.h100-sxm-8gpu.535.161.08.txt"


def live_ctx() -> ReadContext:
    return ReadContext(HostRoot.at("/"), "nvml")


def sim_ctx(root: Path, doc: dict | str | None) -> ReadContext:
    d = answers_dir(root)
    if doc is not None:
        (d / "nvml.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return ReadContext(HostRoot.at(root), "nvml")


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("00000000:1B:00.0", "0000:1b:00.0"),
        (b"00000000:DB:00.0\0", "0000:db:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("00000001:0A:1F.7", "0001:0a:1f.7"),
        ("not a bus id", None),
    ],
)
def test_normalize_bus_id(raw, expected):
    assert normalize_bus_id(raw) == expected


# ---------------------------------------------------------------------------
# simulated nvml.json


def h100_info_from_nvidia_smi() -> NvmlInfo:
    """NvmlInfo for the real 8x H100 `nvidia-smi -q` dump, 18 NVSwitch links per GPU."""
    text = H100_Q.read_text()
    driver = re.search(r"^Driver Version\s+: (\S+)", text, re.M).group(1)
    major, minor = re.search(r"^CUDA Version\s+: (\d+)\.(\d+)", text, re.M).groups()
    gpus = []
    for i, block in enumerate(re.split(r"^GPU (?=0000)", text, flags=re.M)[1:]):
        field = lambda name: re.search(rf"^\s+{name}\s+: (.+)$", block, re.M).group(1).strip()  # noqa: E731
        state = re.search(r"Fabric\n\s+State\s+: (.+)\n\s+Status\s+: (.+)", block)
        links = tuple(NvLink(link=n, state="up", remote_type="nvswitch", version=4, errors={"crc_flit": 0, "replay": 0, "recovery": 0}) for n in range(18))
        gpus.append(
            NvmlGpu(
                index=i,
                pci_bus_id=normalize_bus_id(field("Bus Id")),
                name=field("Product Name"),
                uuid=field("GPU UUID"),
                nvlinks=links,
                fabric_state=state.group(1).strip().lower(),
                fabric_status=state.group(2).strip().lower(),
                vbios_version=field("VBIOS Version"),
            )
        )
    return NvmlInfo(available=True, driver_version=driver, cuda_driver_version=int(major) * 1000 + int(minor) * 10, gpus=tuple(gpus))


def test_sim_round_trip_real_h100_node(tmp_path):
    info = h100_info_from_nvidia_smi()
    assert len(info.gpus) == 8 and info.cuda_driver_version == 12020
    assert info.gpus[0].pci_bus_id == "0000:19:00.0" and info.gpus[7].pci_bus_id == "0000:db:00.0"
    ctx = sim_ctx(tmp_path, info.model_dump_json())
    assert read_nvml(ctx) == info
    assert ctx.errors == []


def test_sim_vbios_version_per_gpu(tmp_path):
    # the recorded key, with the value the real H100 dump prints ("VBIOS Version : 96.00.74.00.0D")
    doc = {"gpus": [{"index": 0, "pci_bus_id": "0000:19:00.0", "vbios_version": "96.00.74.00.0D"}, {"index": 1, "pci_bus_id": "0000:3b:00.0"}]}
    info = read_nvml(sim_ctx(tmp_path, doc))
    assert [g.vbios_version for g in info.gpus] == ["96.00.74.00.0D", None]
    assert h100_info_from_nvidia_smi().gpus[0].vbios_version == "96.00.74.00.0D"


def test_sim_accepts_nvidia_smi_bus_ids_and_defaults_available(tmp_path):
    doc = {
        "driver_version": "535.161.08",
        "gpus": [{"index": 0, "pci_bus_id": "00000000:1B:00.0", "nvlinks": [{"link": 0, "state": "down", "remote_pci_bus_id": "00000000:05:00.0"}]}],
    }
    info = read_nvml(sim_ctx(tmp_path, doc))
    assert info.available is True
    assert info.gpus[0].pci_bus_id == "0000:1b:00.0"
    assert info.gpus[0].nvlinks[0].remote_pci_bus_id == "0000:05:00.0"


def test_sim_unknown_key_is_unparsable_and_named(tmp_path):
    doc = {"gpus": [{"index": 0, "pci_bus_id": "0000:19:00.0", "nvlinks": [{"link": 0, "state": "up", "speed_gbps": 26.5}]}]}
    ctx = sim_ctx(tmp_path, doc)
    info = read_nvml(ctx)
    assert info.available is False
    [err] = ctx.errors
    assert (err.source, err.path, err.kind) == ("nvml", ".agentd/nvml.json", "unparsable")
    assert "gpus.0.nvlinks.0.speed_gbps" in err.detail


def test_sim_unknown_top_level_key(tmp_path):
    ctx = sim_ctx(tmp_path, {"driver": "535"})
    read_nvml(ctx)
    assert "'driver'" in ctx.errors[0].detail


def test_sim_bad_value_is_unparsable(tmp_path):
    ctx = sim_ctx(tmp_path, {"gpus": [{"index": 0, "pci_bus_id": "0000:19:00.0", "fabric_state": "done"}]})
    assert read_nvml(ctx).available is False
    assert ctx.errors[0].kind == "unparsable" and "fabric_state" in ctx.errors[0].detail


@pytest.mark.parametrize("garbage", ["{not json", "\x00\x01\x02", "[1, 2", ""])
def test_sim_garbage_json(tmp_path, garbage):
    ctx = sim_ctx(tmp_path, garbage)
    info = read_nvml(ctx)
    assert info.available is False and info.error
    assert [e.kind for e in ctx.errors] == ["unparsable"]


def test_sim_init_error(tmp_path):
    ctx = sim_ctx(tmp_path, {"init_error": "Driver Not Loaded", "gpus": []})
    assert read_nvml(ctx) == NvmlInfo(available=False, error="Driver Not Loaded")
    assert ctx.errors == []


def test_sim_hang_s_is_honoured(tmp_path, monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(nvml, "_sleep", slept.append)
    ctx = sim_ctx(tmp_path, {"hang_s": 0.05, "driver_version": "550.54.15"})
    assert read_nvml(ctx).driver_version == "550.54.15"
    assert slept == [0.05]


def test_sim_same_answer_is_parsed_once_and_still_hangs(tmp_path, monkeypatch):
    """A recorded answer whose text did not change is the previous NvmlInfo (parsed
    once), a simulated hang still hangs on every read, and a changed answer is parsed."""
    slept: list[float] = []
    monkeypatch.setattr(nvml, "_sleep", slept.append)
    parsed: list[str] = []
    real = nvml.SimNvml.model_validate
    monkeypatch.setattr(nvml.SimNvml, "model_validate", lambda data: parsed.append("x") or real(data))
    doc = {"hang_s": 0.05, "driver_version": "550.54.15", "gpus": [{"index": 0, "pci_bus_id": "00000000:1B:00.0"}]}
    first = read_nvml(sim_ctx(tmp_path, doc))
    again = read_nvml(sim_ctx(tmp_path, None))
    assert again is first and first.gpus[0].pci_bus_id == "0000:1b:00.0"
    assert slept == [0.05, 0.05] and len(parsed) == 1
    changed = read_nvml(sim_ctx(tmp_path, {**doc, "driver_version": "550.90.07"}))
    assert changed.driver_version == "550.90.07" and len(parsed) == 2
    bad = sim_ctx(tmp_path, {**doc, "driver": "x"})
    assert read_nvml(bad).available is False and bad.errors  # a bad answer is reported on every read
    bad_again = sim_ctx(tmp_path, None)
    assert read_nvml(bad_again).available is False and bad_again.errors


def test_sim_hang_s_really_sleeps_in_a_worker_lane(tmp_path):
    ctx = sim_ctx(tmp_path, {"hang_s": 0.05, "init_error": "hung then failed"})
    fut, started = Lane("nvml").submit(read_nvml, ctx)
    assert started
    assert fut.result(timeout=30) == NvmlInfo(available=False, error="hung then failed")


def test_sim_negative_hang_is_rejected(tmp_path):
    ctx = sim_ctx(tmp_path, {"hang_s": -1})
    read_nvml(ctx)
    assert "hang_s" in ctx.errors[0].detail


def test_sim_root_without_nvml_json(tmp_path):
    ctx = sim_ctx(tmp_path, None)
    info = read_nvml(ctx)
    assert not info.available and ".agentd/nvml.json" in (info.error or "") and "simulated" in (info.error or "")
    assert ctx.errors == []


def test_copied_tree_has_no_nvml(tmp_path):
    (tmp_path / "sys").mkdir()
    ctx = ReadContext(HostRoot.at(tmp_path), "nvml")
    info = read_nvml(ctx)
    assert info.available is False and ctx.errors == []


# ---------------------------------------------------------------------------
# live path against a scripted pynvml


class FakeNVMLError(Exception):
    STRINGS = {2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions", 12: "NVML Shared Library Not Found", 15: "GPU is lost", 999: "Unknown Error"}

    def __init__(self, value: int):
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return self.STRINGS.get(self.value, f"NVML error {self.value}")


class FabricInfoV(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("clusterUuid", ctypes.c_uint8 * 16), ("status", ctypes.c_uint), ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint), ("healthMask", ctypes.c_uint32)]


class Pci:
    def __init__(self, bus_id):
        self.busId = bus_id


def fake_pynvml(init_error: int | None = None) -> types.ModuleType:
    """4 GPUs: 0 H100 (18 links, link 5 down, link 17 not supported, fabric completed),
    1 H100 (fabric in progress), 2 lost before a handle, 3 lost while reading its links."""
    nv = types.ModuleType("pynvml")
    nv.NVMLError = FakeNVMLError
    nv.NVML_NVLINK_MAX_LINKS = 36
    nv.NVML_NVLINK_ERROR_DL_REPLAY, nv.NVML_NVLINK_ERROR_DL_RECOVERY = 0, 1
    nv.NVML_NVLINK_ERROR_DL_CRC_FLIT, nv.NVML_NVLINK_ERROR_DL_CRC_DATA = 2, 3
    nv.calls = {"init": 0, "shutdown": 0}
    buses = {0: "00000000:19:00.0", 1: b"00000000:3B:00.0", 3: "00000000:5D:00.0"}

    def init():
        nv.calls["init"] += 1
        if init_error is not None:
            raise FakeNVMLError(init_error)

    def handle(i):
        if i == 2:
            raise FakeNVMLError(15)
        return ("h", i)

    def link_state(h, link):
        if h[1] == 3 and link == 2:
            raise FakeNVMLError(15)
        if link >= 18:
            raise FakeNVMLError(2)
        if h[1] == 0 and link == 17:
            raise FakeNVMLError(3)
        return 0 if (h[1] == 0 and link == 5) else 1

    def error_counter(h, link, counter):
        if counter == 3:
            raise FakeNVMLError(3)  # CRC data: not supported on this GPU
        return {0: 7, 1: 1}.get(counter, 0) if (h[1] == 0 and link == 5) else 0

    def fabric(h, ref):
        info = ref._obj
        info.state, info.status = (3, 0) if h[1] == 0 else (2, 0)

    nv.nvmlInit = init
    nv.nvmlShutdown = lambda: nv.calls.__setitem__("shutdown", nv.calls["shutdown"] + 1)
    nv.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    nv.nvmlSystemGetCudaDriverVersion_v2 = lambda: 12040
    nv.nvmlDeviceGetCount = lambda: 4
    nv.nvmlDeviceGetHandleByIndex = handle
    nv.nvmlDeviceGetPciInfo = lambda h: Pci(buses[h[1]])
    nv.nvmlDeviceGetName = lambda h: "NVIDIA H100 80GB HBM3"
    nv.nvmlDeviceGetUUID = lambda h: f"GPU-0000000{h[1]}-aaaa-bbbb-cccc-dddddddddddd"
    nv.nvmlDeviceGetNvLinkState = link_state
    nv.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, link: Pci(f"00000000:{5 + link % 4:02X}:00.0")
    nv.nvmlDeviceGetNvLinkRemoteDeviceType = lambda h, link: 2
    nv.nvmlDeviceGetNvLinkVersion = lambda h, link: 6  # NVML_NVLINK_VERSION_4_0
    nv.nvmlDeviceGetNvLinkErrorCounter = error_counter
    nv.c_nvmlGpuFabricInfoV_t = FabricInfoV
    nv.nvmlDeviceGetGpuFabricInfoV = fabric
    return nv


def test_live_with_scripted_nvml(monkeypatch):
    fake = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    ctx = live_ctx()
    info = read_nvml(ctx)
    assert (info.available, info.driver_version, info.cuda_driver_version) == (True, "550.54.15", 12040)
    assert [g.index for g in info.gpus] == [0, 1, 3]  # gpu 2 has no handle, so no bus id
    g0, g1, g3 = info.gpus
    assert g0.pci_bus_id == "0000:19:00.0" and g1.pci_bus_id == "0000:3b:00.0"
    assert g0.name == "NVIDIA H100 80GB HBM3" and g0.uuid.startswith("GPU-00000000")
    assert [link.link for link in g0.nvlinks] == list(range(17))  # 17: not supported; 18+: invalid
    assert len(g1.nvlinks) == 18
    down = [link for link in g0.nvlinks if link.state == "down"]
    assert [link.link for link in down] == [5]
    assert down[0].errors == {"crc_flit": 0, "replay": 7, "recovery": 1}  # crc_data not supported
    assert g0.nvlinks[1] == NvLink(link=1, state="up", remote_pci_bus_id="0000:06:00.0", remote_type="nvswitch", version=4, errors={"crc_flit": 0, "replay": 0, "recovery": 0})
    assert (g0.fabric_state, g0.fabric_status) == ("completed", "success")
    assert (g1.fabric_state, g1.fabric_status) == ("in_progress", None)
    assert g0.error is None and g3.error == "GPU is lost"
    assert g3.pci_bus_id == "0000:5d:00.0"
    [err] = ctx.errors
    assert (err.source, err.path, err.kind, err.detail) == ("nvml", "nvmlDeviceGetHandleByIndex(2)", "unreadable", "GPU is lost")
    assert fake.calls == {"init": 1, "shutdown": 1}


def test_live_pcie_replay_counter(monkeypatch):
    fake = fake_pynvml()

    def replay(h):
        if h[1] == 1:
            raise FakeNVMLError(3)  # not supported: unknown, quietly
        return 42

    fake.nvmlDeviceGetPcieReplayCounter = replay
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    ctx = live_ctx()
    g0, g1, g3 = read_nvml(ctx).gpus
    assert (g0.pcie_replay_errors, g1.pcie_replay_errors, g3.pcie_replay_errors) == (42, None, None)
    assert [e.path for e in ctx.errors] == ["nvmlDeviceGetHandleByIndex(2)"]
    fake.nvmlDeviceGetPcieReplayCounter = lambda h: (_ for _ in ()).throw(FakeNVMLError(999))
    ctx = live_ctx()
    assert read_nvml(ctx).gpus[0].pcie_replay_errors is None
    assert "nvmlDeviceGetPcieReplayCounter(0)" in [e.path for e in ctx.errors]


def test_live_vbios_version(monkeypatch):
    fake = fake_pynvml()

    def vbios(h):
        if h[1] == 1:
            raise FakeNVMLError(999)  # any failure: unknown, and no read error
        return b"96.00.74.00.0D" if h[1] == 0 else "96.00.74.00.0D "

    fake.nvmlDeviceGetVbiosVersion = vbios
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    ctx = live_ctx()
    g0, g1, g3 = read_nvml(ctx).gpus
    assert (g0.vbios_version, g1.vbios_version, g3.vbios_version) == ("96.00.74.00.0D", None, "96.00.74.00.0D")  # bytes decoded, str stripped
    assert g0.nvlinks and g1.nvlinks  # the rest of the GPU is read
    assert [e.path for e in ctx.errors] == ["nvmlDeviceGetHandleByIndex(2)"]


def test_live_without_vbios_api_leaves_it_unknown(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    assert read_nvml(live_ctx()).gpus[0].vbios_version is None


def test_live_without_replay_api_leaves_it_unknown(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    assert read_nvml(live_ctx()).gpus[0].pcie_replay_errors is None


def test_live_fabric_error_status(monkeypatch):
    fake = fake_pynvml()

    def fabric(h, ref):
        ref._obj.state, ref._obj.status = 3, 999

    fake.nvmlDeviceGetGpuFabricInfoV = fabric
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    info = read_nvml(live_ctx())
    assert (info.gpus[0].fabric_state, info.gpus[0].fabric_status) == ("completed", "Unknown Error")


def test_live_without_fabric_api_or_remote_type(monkeypatch):
    fake = fake_pynvml()
    del fake.nvmlDeviceGetGpuFabricInfoV, fake.nvmlDeviceGetNvLinkRemoteDeviceType
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    g0 = read_nvml(live_ctx()).gpus[0]
    assert g0.fabric_state is None and g0.nvlinks[0].remote_type is None


@pytest.mark.parametrize("code, recorded", [(12, False), (9, False), (4, True)])
def test_live_init_failure_is_an_answer(monkeypatch, code, recorded):
    fake = fake_pynvml(init_error=code)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    ctx = live_ctx()
    info = read_nvml(ctx)
    assert info.available is False and info.error
    assert bool(ctx.errors) is recorded  # no library/driver is normal; no permission is not
    assert fake.calls["shutdown"] == 0


def test_live_without_nvidia_ml_py(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    info = read_nvml(live_ctx())
    assert info.available is False and "nvidia-ml-py" in info.error


def test_live_unexpected_binding_error_does_not_raise(monkeypatch):
    fake = fake_pynvml()
    fake.nvmlDeviceGetCount = lambda: (_ for _ in ()).throw(RuntimeError("boom"))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    ctx = live_ctx()
    info = read_nvml(ctx)
    assert info.available is False and "boom" in info.error
    assert fake.calls["shutdown"] == 1


# ---------------------------------------------------------------------------
# the real library


def test_real_nvidia_ml_py_on_this_machine():
    pytest.importorskip("pynvml")
    ctx = live_ctx()
    info = read_nvml(ctx)  # must not raise, driver or not
    if info.available:  # a GPU machine: NVML answered
        assert info.driver_version and all(g.pci_bus_id for g in info.gpus)
    else:
        assert info.error  # e.g. "NVML Shared Library Not Found"
        assert ctx.errors == []
