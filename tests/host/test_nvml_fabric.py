"""NVML fabric identity and health, link speed and C2C links: the pure decoding, and the
live reader against a scripted pynvml that uses nvidia-ml-py's own structs."""

from __future__ import annotations

import sys

import pytest

from agentd.host.fabric_health import decode_health, format_cluster_uuid
from agentd.host.nvml import read_nvml
from agentd.model import C2cLink, FabricHealth
from tests.host.test_nvml import FakeNVMLError, fake_pynvml, live_ctx

pynvml = pytest.importorskip("pynvml")

UUID_BYTES = bytes.fromhex("dc6e40c4d72243579ba65291dd461278")


def mask(**fields: int) -> int:
    """A healthMask built from nvidia-ml-py's own shift constants."""
    shifts = {
        "bw": pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW,
        "rr": pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY,
        "ru": pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY,
        "atr": pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY,
        "cfg": pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION,
        "part": pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_PARTITION_ASSIGNED,
        "gfm": pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_GFM_STATE,
    }
    return sum(v << shifts[k] for k, v in fields.items())


HEALTHY = mask(
    bw=pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE,
    rr=pynvml.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_FALSE,
    ru=pynvml.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE,
    atr=pynvml.NVML_GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_FALSE,
    cfg=pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE,
    part=pynvml.NVML_GPU_FABRIC_HEALTH_MASK_PARTITION_ASSIGNED_TRUE,
    gfm=pynvml.NVML_GPU_FABRIC_HEALTH_MASK_GFM_STATE_CONNECTED,
)


# ---------------------------------------------------------------------------
# decoding (pure)


def test_decode_healthy_mask_with_summary():
    h = decode_health(HEALTHY, pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY)
    assert h == FabricHealth(
        summary="healthy", degraded_bandwidth=False, route_recovery=False, route_unhealthy=False, access_timeout_recovery=False,
        incorrect_configuration="none", partition_assigned=True, gfm_connected=True, mask=HEALTHY,
    )


def test_decode_faults_and_not_supported_fields():
    m = mask(
        bw=pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE,
        ru=pynvml.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE,
        atr=pynvml.NVML_GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_TRUE,
        cfg=pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INSUFFICIENT_NVLINKS,
        part=pynvml.NVML_GPU_FABRIC_HEALTH_MASK_PARTITION_ASSIGNED_FALSE,
        gfm=pynvml.NVML_GPU_FABRIC_HEALTH_MASK_GFM_STATE_DISCONNECTED,
    )  # route recovery: NOT_SUPPORTED (0)
    h = decode_health(m, pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY)
    assert (h.summary, h.degraded_bandwidth, h.route_recovery, h.route_unhealthy, h.access_timeout_recovery) == ("unhealthy", True, None, True, True)
    assert (h.incorrect_configuration, h.partition_assigned, h.gfm_connected, h.mask) == ("insufficient_nvlinks", False, False, m)
    assert decode_health(0, pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY).summary == "limited_capacity"


@pytest.mark.parametrize(
    "const, name",
    [
        ("NOT_SUPPORTED", None),
        ("NONE", "none"),
        ("INCORRECT_SYSGUID", "incorrect_sysguid"),
        ("INCORRECT_CHASSIS_SN", "incorrect_chassis_sn"),
        ("NO_PARTITION", "no_partition"),
        ("INSUFFICIENT_NVLINKS", "insufficient_nvlinks"),
        ("INCOMPATIBLE_GPU_FW", "incompatible_gpu_fw"),
        ("INVALID_LOCATION", "invalid_location"),
        ("GPU_STATE_INVALID", "gpu_state_invalid"),
    ],
)
def test_decode_every_configuration_value(const, name):
    value = getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_{const}")
    assert decode_health(mask(cfg=value)).incorrect_configuration == name


def test_decode_unknown_values_and_no_health():
    assert decode_health(mask(cfg=0xE)).incorrect_configuration == "unknown"  # a newer driver's value
    assert decode_health(0) == FabricHealth(mask=0)  # nothing reported, v2 struct: no summary
    assert decode_health(HEALTHY, 0x7F).summary is None


def test_cluster_uuid_text():
    assert format_cluster_uuid(UUID_BYTES) == "dc6e40c4-d722-4357-9ba6-5291dd461278"
    assert format_cluster_uuid((pynvml.c_uint8 * 16)()) == "00000000-0000-0000-0000-000000000000"
    assert format_cluster_uuid(b"\x01" * 8) is None


# ---------------------------------------------------------------------------
# the live reader


def with_fabric(nv, *, state=3, status=0, clique=2, health=HEALTHY, summary=1, reject=()):
    """GPU 0 answers the fabric structs it is given, except the versions in ``reject``
    (ARGUMENT_VERSION_MISMATCH); GPU 1 answers in progress."""
    nv.c_nvmlGpuFabricInfo_v3_t = pynvml.c_nvmlGpuFabricInfo_v3_t
    nv.c_nvmlGpuFabricInfo_v2_t = nv.c_nvmlGpuFabricInfoV_t = pynvml.c_nvmlGpuFabricInfo_v2_t
    nv.c_nvmlGpuFabricInfo_t = pynvml.c_nvmlGpuFabricInfo_t
    nv.asked = []

    def fill(h, info):
        info.state, info.status, info.cliqueId = (state, status, clique) if h[1] == 0 else (2, 0, 0)
        info.clusterUuid[:] = list(UUID_BYTES)
        if hasattr(info, "healthMask"):
            info.healthMask = health
        if hasattr(info, "healthSummary"):
            info.healthSummary = summary

    def v(h, ref):
        info = ref._obj
        nv.asked.append(hex(info.version))
        if info.version in reject:
            raise FakeNVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        fill(h, info)

    def legacy(h, ref):
        nv.asked.append("legacy")
        fill(h, ref._obj)

    nv.nvmlDeviceGetGpuFabricInfoV = v
    nv.nvmlDeviceGetGpuFabricInfo = legacy
    return nv


def read(monkeypatch, nv):
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    ctx = live_ctx()
    return read_nvml(ctx), ctx


def test_v3_gives_domain_and_health_with_summary(monkeypatch):
    nv = with_fabric(fake_pynvml())
    info, ctx = read(monkeypatch, nv)
    g0, g1, _ = info.gpus
    assert (g0.fabric_state, g0.fabric_status, g0.fabric_cluster_uuid, g0.fabric_clique_id) == ("completed", "success", "dc6e40c4-d722-4357-9ba6-5291dd461278", 2)
    assert g0.fabric_health == decode_health(HEALTHY, 1) and g0.fabric_health.summary == "healthy"
    # not completed: no status and no domain (NVML: meaningful only once completed); health as read
    assert (g1.fabric_state, g1.fabric_status, g1.fabric_cluster_uuid, g1.fabric_clique_id) == ("in_progress", None, None, None)
    assert g1.fabric_health is not None
    assert nv.asked[0] == hex(pynvml.nvmlGpuFabricInfo_v3)
    assert [e.path for e in ctx.errors] == ["nvmlDeviceGetHandleByIndex(2)"]


def test_a_driver_without_v3_is_asked_v2_then_the_legacy_call(monkeypatch):
    v3, v2 = pynvml.nvmlGpuFabricInfo_v3, pynvml.nvmlGpuFabricInfo_v2
    info, ctx = read(monkeypatch, with_fabric(fake_pynvml(), reject=(v3,)))
    g0 = info.gpus[0]
    assert g0.fabric_health == decode_health(HEALTHY) and g0.fabric_health.summary is None  # v2: no summary
    assert g0.fabric_clique_id == 2
    nv = with_fabric(fake_pynvml(), reject=(v3, v2))
    info, ctx = read(monkeypatch, nv)
    g0 = info.gpus[0]
    assert (g0.fabric_state, g0.fabric_status, g0.fabric_clique_id, g0.fabric_health) == ("completed", "success", 2, None)
    assert nv.asked[:3] == [hex(v3), hex(v2), "legacy"]
    assert [e.path for e in ctx.errors] == ["nvmlDeviceGetHandleByIndex(2)"]


def test_completed_with_an_error_status_and_a_zero_domain(monkeypatch):
    nv = with_fabric(fake_pynvml(), status=999, clique=0)
    info, _ = read(monkeypatch, nv)
    g0 = info.gpus[0]
    assert (g0.fabric_status, g0.fabric_clique_id) == ("Unknown Error", 0)


def test_fabric_not_supported_is_quiet(monkeypatch):
    nv = fake_pynvml()
    nv.c_nvmlGpuFabricInfo_v3_t = pynvml.c_nvmlGpuFabricInfo_v3_t
    nv.nvmlDeviceGetGpuFabricInfoV = lambda h, ref: (_ for _ in ()).throw(FakeNVMLError(3))
    info, ctx = read(monkeypatch, nv)
    assert [(g.fabric_state, g.fabric_health) for g in info.gpus[:2]] == [("not_supported", None)] * 2  # gpu 3: lost before
    assert [e.path for e in ctx.errors] == ["nvmlDeviceGetHandleByIndex(2)"]


def field_values(answers):
    """nvmlDeviceGetFieldValues over nvidia-ml-py's own c_nvmlFieldValue_t: ``answers``
    maps (gpu, field id, scope id) to an int, or to an NVML return code as ("err", code)."""
    calls = []

    def get(h, pairs):
        calls.append((h[1], list(pairs)))
        values = (pynvml.c_nvmlFieldValue_t * len(pairs))()
        for v, (fid, scope) in zip(values, pairs):
            v.fieldId, v.scopeId = fid, scope
            a = answers.get((h[1], fid, scope), ("err", pynvml.NVML_ERROR_NOT_SUPPORTED))
            if isinstance(a, tuple):
                v.nvmlReturn = a[1]
            else:
                v.valueType, v.value.uiVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, a
        return values

    return get, calls


def with_fields(nv, answers):
    for name in ("NVML_FI_DEV_NVLINK_GET_SPEED", "NVML_FI_DEV_C2C_LINK_COUNT", "NVML_FI_DEV_C2C_LINK_GET_STATUS", "NVML_FI_DEV_C2C_LINK_GET_MAX_BW"):
        setattr(nv, name, getattr(pynvml, name))
    nv.nvmlDeviceGetFieldValues, calls = field_values(answers)
    return nv, calls


SPEED, C2C_COUNT, C2C_STATUS, C2C_BW = (
    pynvml.NVML_FI_DEV_NVLINK_GET_SPEED, pynvml.NVML_FI_DEV_C2C_LINK_COUNT, pynvml.NVML_FI_DEV_C2C_LINK_GET_STATUS, pynvml.NVML_FI_DEV_C2C_LINK_GET_MAX_BW,
)


def test_link_speeds_in_one_call_per_gpu(monkeypatch):
    answers = {(0, SPEED, n): 26562 for n in range(17)} | {(0, SPEED, 3): 13281, (0, SPEED, 4): 0}
    nv, calls = with_fields(fake_pynvml(), answers)
    info, _ = read(monkeypatch, nv)
    g0, g1, _ = info.gpus
    speeds = {link.link: link.speed_mb_s for link in g0.nvlinks}
    assert speeds[0] == 26562 and speeds[3] == 13281
    assert speeds[4] is None  # 0: not reported
    assert speeds[5] is None  # down: not asked
    speed_calls = [(gpu, pairs) for gpu, pairs in calls if pairs and pairs[0][0] == SPEED]
    assert [gpu for gpu, _ in speed_calls] == [0, 1]  # one call per GPU (gpu 3 is lost before)
    assert speed_calls[0][1] == [(SPEED, n) for n in range(17) if n != 5]
    assert all(link.speed_mb_s is None for link in g1.nvlinks)  # NOT_SUPPORTED per field


EFFECTIVE, SYMBOL = pynvml.NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS, pynvml.NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS


def test_per_link_error_counters_join_the_links_errors_in_the_same_call(monkeypatch):
    answers = {(0, SPEED, 0): 53125, (0, EFFECTIVE, 0): 7, (0, SYMBOL, 0): 1200, (0, SYMBOL, 5): 3}
    nv, calls = with_fields(fake_pynvml(), answers)
    for name in ("NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS", "NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS"):
        setattr(nv, name, getattr(pynvml, name))
    info, _ = read(monkeypatch, nv)
    g0 = info.gpus[0]
    by_link = {link.link: link for link in g0.nvlinks}
    assert by_link[0].speed_mb_s == 53125 and by_link[0].errors["effective"] == 7 and by_link[0].errors["symbol"] == 1200
    assert by_link[5].errors["symbol"] == 3 and by_link[5].speed_mb_s is None  # a down link's counter is read, its speed not
    assert "effective" not in by_link[1].errors  # not supported: left out, never 0
    gpu0_calls = [pairs for gpu, pairs in calls if gpu == 0 and any(f in (SPEED, EFFECTIVE, SYMBOL) for f, _ in pairs)]
    assert len(gpu0_calls) == 1  # speeds and counters in one call


def test_c2c_links_only_where_a_count_is_answered(monkeypatch):
    answers = {(0, C2C_COUNT, 0): 2, (0, C2C_STATUS, 0): 1, (0, C2C_BW, 0): 450000, (0, C2C_STATUS, 1): 0, (1, C2C_COUNT, 0): 0}
    nv, calls = with_fields(fake_pynvml(), answers)
    info, ctx = read(monkeypatch, nv)
    g0, g1, _ = info.gpus
    assert g0.c2c_links == (C2cLink(link=0, state="up", max_bw_mb_s=450000), C2cLink(link=1, state="down"))
    assert g1.c2c_links == ()
    assert [pairs for gpu, pairs in calls if gpu == 1 and pairs[0][0] != SPEED] == [[(C2C_COUNT, 0)]]  # no per-link call
    assert [e.path for e in ctx.errors] == ["nvmlDeviceGetHandleByIndex(2)"]


def test_field_values_unsupported_or_failing_leave_nothing(monkeypatch):
    nv, _ = with_fields(fake_pynvml(), {})
    nv.nvmlDeviceGetFieldValues = lambda h, pairs: (_ for _ in ()).throw(FakeNVMLError(3))
    info, ctx = read(monkeypatch, nv)
    assert all(link.speed_mb_s is None for g in info.gpus for link in g.nvlinks)
    assert all(g.c2c_links == () for g in info.gpus)
    assert [e.path for e in ctx.errors] == ["nvmlDeviceGetHandleByIndex(2)"]
    nv = fake_pynvml()  # an nvidia-ml-py without the field ids
    info, _ = read(monkeypatch, nv)
    assert info.available and all(g.c2c_links == () for g in info.gpus)


def test_gpu_lost_while_reading_fields_marks_the_gpu(monkeypatch):
    nv, _ = with_fields(fake_pynvml(), {})

    def lost(h, pairs):
        if h[1] == 1:
            raise FakeNVMLError(15)
        return (pynvml.c_nvmlFieldValue_t * len(pairs))()

    nv.nvmlDeviceGetFieldValues = lost
    info, _ = read(monkeypatch, nv)
    assert [(g.index, g.error) for g in info.gpus] == [(0, None), (1, "GPU is lost"), (3, "GPU is lost")]
