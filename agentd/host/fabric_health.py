"""GPU fabric identity and health as NVML encodes them, decoded into the model's terms.

Pure functions shared by the live NVML reader (agentd.host.nvml) and the tests: the
``healthMask`` of ``nvmlGpuFabricInfo_v2+`` (2-bit fields, 4 for the configuration, at the
shifts of nvml.h's ``NVML_GPU_FABRIC_HEALTH_MASK_*``), the v3+ ``healthSummary``, and the
16-byte ``clusterUuid``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Literal

from agentd.model import FabricHealth, IncorrectConfiguration

# (field, shift, width) from nvml.h / nvidia-ml-py's NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_*/WIDTH_*.
_DEGRADED_BW = (0, 0x3)
_ROUTE_RECOVERY = (2, 0x3)
_ROUTE_UNHEALTHY = (4, 0x3)
_ACCESS_TIMEOUT_RECOVERY = (6, 0x3)
_INCORRECT_CONFIGURATION = (8, 0xF)
_PARTITION_ASSIGNED = (12, 0x3)
_GFM_STATE = (14, 0x3)

# NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_*: 0 is NOT_SUPPORTED.
_CONFIGURATIONS: dict[int, IncorrectConfiguration] = {
    1: "none",
    2: "incorrect_sysguid",
    3: "incorrect_chassis_sn",
    4: "no_partition",
    5: "insufficient_nvlinks",
    6: "incompatible_gpu_fw",
    7: "invalid_location",
    8: "gpu_state_invalid",
}
# NVML_GPU_FABRIC_HEALTH_SUMMARY_*: 0 is NOT_SUPPORTED.
_SUMMARIES: dict[int, Literal["healthy", "unhealthy", "limited_capacity"]] = {1: "healthy", 2: "unhealthy", 3: "limited_capacity"}


def _field(mask: int, at: tuple[int, int]) -> int:
    shift, width = at
    return (mask >> shift) & width


def _tristate(value: int) -> bool | None:
    """``*_TRUE`` (1) / ``*_FALSE`` (2); ``*_NOT_SUPPORTED`` (0) and anything else: None."""
    return {1: True, 2: False}.get(value)


def decode_health(mask: int, summary: int | None = None) -> FabricHealth:
    """``healthMask`` (and the v3 ``healthSummary``, None for a v2 struct) as a FabricHealth.
    A condition the GPU does not report (NOT_SUPPORTED) is None; the raw mask is kept."""
    mask = int(mask) & 0xFFFFFFFF
    config_value = _field(mask, _INCORRECT_CONFIGURATION)
    config: IncorrectConfiguration | None = None if config_value == 0 else _CONFIGURATIONS.get(config_value, "unknown")
    gfm = _field(mask, _GFM_STATE)  # CONNECTED 1, DISCONNECTED 2
    return FabricHealth(
        summary=None if summary is None else _SUMMARIES.get(int(summary)),
        degraded_bandwidth=_tristate(_field(mask, _DEGRADED_BW)),
        route_recovery=_tristate(_field(mask, _ROUTE_RECOVERY)),
        route_unhealthy=_tristate(_field(mask, _ROUTE_UNHEALTHY)),
        access_timeout_recovery=_tristate(_field(mask, _ACCESS_TIMEOUT_RECOVERY)),
        incorrect_configuration=config,
        partition_assigned=_tristate(_field(mask, _PARTITION_ASSIGNED)),
        gfm_connected=_tristate(gfm),
        mask=mask,
    )


def format_cluster_uuid(raw: bytes | Iterable[int]) -> str | None:
    """NVML's 16-byte ``clusterUuid`` as lowercase 8-4-4-4-12 text (all zeros kept as
    read); None when it is not 16 bytes."""
    try:
        data = bytes(raw)
    except (TypeError, ValueError):
        return None
    if len(data) != 16:
        return None
    return str(uuid.UUID(bytes=data))
