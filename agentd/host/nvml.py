"""GPUs, NVLinks (state, speed, error counters), C2C links, fabric identity, state and
health, and PCIe replay counters from NVML.

Live (the running kernel's root: ``/``, or a container's ``/host``): nvidia-ml-py (``pynvml``), imported lazily so that agentd starts
on nodes without it. No library or no driver is a normal answer (``available=False``).
The caller runs this in a worker thread with a timeout: NVML calls can hang on a sick
driver and cannot be interrupted from Python.

Recorded (a capture or a simulated node): ``.agentd/nvml.json`` (schema in
docs/simulated-sources.md, format in docs/capture.md), validated by ``SimNvml``;
``hang_s`` makes the reader sleep first (a hung-driver test double) and ``init_error``
makes it answer as if nvmlInit failed. A root with no recorded answers has no NVML:
``available=False``, quietly.
"""

from __future__ import annotations

import ctypes
import json
import time
from typing import Any, Callable

from pydantic import Field, ValidationError, field_validator

from agentd.base import recorded
from agentd.base.ids import normalize_bdf
from agentd.host.fabric_health import decode_health, format_cluster_uuid
from agentd.host.fs import ReadContext
from agentd.model import C2cLink, NvLink, NvmlGpu, NvmlInfo

SIM_MAX_BYTES = 4 * 1024 * 1024
_sleep = time.sleep  # tests replace this to observe hang_s without waiting

# NVML_NVLINK_ERROR_* counter ids (nvml.h); names as the model's NvLink.errors keys.
_ERROR_COUNTERS = (
    ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT", 2),
    ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA", 3),
    ("replay", "NVML_NVLINK_ERROR_DL_REPLAY", 0),
    ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY", 1),
)
# Per-link error counters read as field values (NvLink.errors keys): Blackwell and later.
_LINK_ERROR_FIELDS = (
    ("effective", "NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS"),
    ("symbol", "NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS"),
)
_REMOTE_TYPES = {0: "gpu", 1: "cpu", 2: "nvswitch"}  # NVML_NVLINK_DEVICE_TYPE_{GPU,IBMNPU,SWITCH}
# nvmlDeviceGetNvLinkVersion answers an nvmlNvlinkVersion_t enum, not the generation
# (A100 answers 5 = NVML_NVLINK_VERSION_3_1, H100 6 = 4_0); NvLink.version is the generation.
_NVLINK_GENERATION = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}
_FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
# NVML return codes we branch on (stable across NVML versions).
_INVALID_ARGUMENT, _NOT_SUPPORTED, _FUNCTION_NOT_FOUND, _GPU_IS_LOST = 2, 3, 13, 15
_VERSION_MISMATCH = 25  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH: the driver does not know this struct version
_MAX_C2C_LINKS = 64  # a bound on a count read from the driver
# c_nvmlFieldValue_t.valueType (NVML_VALUE_TYPE_*) -> the member of its value union
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
_NO_LINK = (_INVALID_ARGUMENT, _NOT_SUPPORTED)


def normalize_bus_id(bus_id: str | bytes) -> str | None:
    """NVML's ``00000000:1B:00.0`` -> ``0000:1b:00.0``; None when it is not a PCI address."""
    return normalize_bdf(bus_id)


# ---------------------------------------------------------------------------
# simulated


class SimNvml(NvmlInfo):
    """``.agentd/nvml.json``: the NvmlInfo JSON plus two test knobs. Unknown keys are
    rejected (``extra="forbid"``), at any depth."""

    available: bool = True  # the file's presence means NVML answers
    hang_s: float | None = Field(default=None, ge=0)
    init_error: str | None = None
    # Processes using the GPUs ({"gpu": int, "pid": int, "name"?: str,
    # "used_memory_bytes"?: int}); read by `agentd bench nccl`'s idle check.
    processes: list[dict[str, Any]] = Field(default_factory=list)  # Any: JSON objects, read by agentd.host.gpuprocs

    @field_validator("gpus", mode="before")
    @classmethod
    def _normalize_bus_ids(cls, gpus: Any) -> Any:  # Any: the raw JSON, before validation
        if not isinstance(gpus, list):
            return gpus
        out = []
        for g in gpus:
            if isinstance(g, dict):
                g = dict(g)
                if isinstance(g.get("pci_bus_id"), str):
                    g["pci_bus_id"] = normalize_bus_id(g["pci_bus_id"]) or g["pci_bus_id"]
                if isinstance(g.get("nvlinks"), list):
                    g["nvlinks"] = [
                        {**l, "remote_pci_bus_id": normalize_bus_id(l["remote_pci_bus_id"]) or l["remote_pci_bus_id"]}
                        if isinstance(l, dict) and isinstance(l.get("remote_pci_bus_id"), str)
                        else l
                        for l in g["nvlinks"]
                    ]
            out.append(g)
        return out


def _validation_detail(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:5]:
        loc = ".".join(str(x) for x in err["loc"]) or "<root>"
        parts.append(f"unknown key {loc!r}" if err["type"] == "extra_forbidden" else f"{loc}: {err['msg']}")
    more = f" (+{e.error_count() - 5} more)" if e.error_count() > 5 else ""
    return "; ".join(parts) + more


# The last recorded answer parsed: (host root, path, its text, its hang_s, the NvmlInfo).
# A simulated or captured node answers the same text every medium cycle: it is parsed and
# validated once (docs/performance.md, "Few wakes"; NvmlInfo is the collector's to share:
# an equal answer keeps the previous object anyway). One entry, replaced whole.
_last_recorded: tuple[str, str, str, float, NvmlInfo] | None = None


def _read_recorded(ctx: ReadContext, path: str) -> NvmlInfo:
    text = ctx.text(path, max_bytes=SIM_MAX_BYTES)
    if text is None:
        return NvmlInfo(available=False, error=f"no recorded NVML answer ({path}) under this {ctx.host.mode} host root")
    root = str(ctx.host.root)
    last = _last_recorded
    if last is not None and last[0] == root and last[1] == path and last[2] == text:
        if last[3]:
            _sleep(last[3])  # a simulated hang hangs every time
        return last[4]
    info = _parse_recorded(ctx, path, text)
    if info is not None:
        return info
    return NvmlInfo(available=False, error=f"{path} does not match the schema")


def _parse_recorded(ctx: ReadContext, path: str, text: str) -> NvmlInfo | None:
    """The NvmlInfo of a recorded answer's text (kept as ``_last_recorded``), or None
    when it does not match the schema (a read error says why)."""
    global _last_recorded
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        # JSONDecodeError is a ValueError; so is an integer past int()'s digit limit.
        # Nesting deeper than the recursion limit raises RecursionError.
        ctx.error(path, "unparsable", f"not JSON: {e}")
        return NvmlInfo(available=False, error=f"{path} is not valid JSON")
    try:
        sim = SimNvml.model_validate(data)
    except ValidationError as e:
        ctx.error(path, "unparsable", _validation_detail(e))
        return None
    except RecursionError:
        ctx.error(path, "unparsable", "nested too deeply")
        return None
    if sim.hang_s:
        _sleep(sim.hang_s)
    if sim.init_error is not None:
        info = NvmlInfo(available=False, error=sim.init_error)
    else:
        info = NvmlInfo.model_validate(sim.model_dump(exclude={"hang_s", "init_error", "processes"}))
    _last_recorded = (str(ctx.host.root), path, text, sim.hang_s or 0.0, info)
    return info


# ---------------------------------------------------------------------------
# live

# pynvml has no type hints: its module, device handles and ctypes answers are Any to mypy.
# Named here so each use says which it is; every answer is converted (int(), _text) where read.
Pynvml = Any  # Any: the pynvml module (untyped)
NvmlHandle = Any  # Any: a pynvml device handle (c_nvmlDevice_t)
NvmlAnswer = Any  # Any: what a pynvml call returns (ctypes structs, ints, bytes)


def _text(v: object) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _field_value(v: NvmlAnswer) -> int | None:
    """An integer from one c_nvmlFieldValue_t; None when NVML answered an error for it."""
    if int(v.nvmlReturn) != 0:
        return None
    member = _VALUE_MEMBERS.get(int(v.valueType))
    if member is None:
        return None
    return int(getattr(v.value, member))


class _Live:
    def __init__(self, ctx: ReadContext, nv: Pynvml):
        self.ctx = ctx
        self.nv = nv

    def code(self, e: BaseException) -> int | None:
        return getattr(e, "value", None) if isinstance(e, self.nv.NVMLError) else None

    def msg(self, e: BaseException) -> str:
        try:
            return str(e) or type(e).__name__
        except Exception:
            return f"NVML error {self.code(e)}"

    def call(self, api: str, fn: Callable[[], NvmlAnswer], quiet: tuple[int, ...] = ()) -> NvmlAnswer:
        """fn() or None; NVML errors other than ``quiet`` codes become ReadErrors.
        GPU_IS_LOST propagates: the caller marks the whole GPU."""
        try:
            return fn()
        except self.nv.NVMLError as e:
            c = self.code(e)
            if c == _GPU_IS_LOST:
                raise
            if c not in quiet:
                self.ctx.error(api, "unreadable", self.msg(e))
            return None

    def opt(self, fn: Callable[[], NvmlAnswer]) -> NvmlAnswer:
        """fn() or None on any NVML error but GPU_IS_LOST: for optional per-link details."""
        try:
            return fn()
        except self.nv.NVMLError as e:
            if self.code(e) == _GPU_IS_LOST:
                raise
            return None

    def link(self, h: NvmlHandle, i: int, gpu: int) -> NvLink | None:
        nv = self.nv
        state = self.call(f"nvmlDeviceGetNvLinkState(gpu{gpu}, {i})", lambda: nv.nvmlDeviceGetNvLinkState(h, i), _NO_LINK)
        if state is None:
            return None
        remote = None
        pci = self.opt(lambda: nv.nvmlDeviceGetNvLinkRemotePciInfo(h, i))
        if pci is not None:
            remote = normalize_bus_id(_text(getattr(pci, "busId", "")))
        remote_type = None
        if hasattr(nv, "nvmlDeviceGetNvLinkRemoteDeviceType"):
            t = self.opt(lambda: nv.nvmlDeviceGetNvLinkRemoteDeviceType(h, i))
            remote_type = None if t is None else _REMOTE_TYPES.get(int(t), "unknown")
        version = self.opt(lambda: nv.nvmlDeviceGetNvLinkVersion(h, i))
        errors: dict[str, int] = {}
        for key, const, default in _ERROR_COUNTERS:
            cid = getattr(nv, const, default)
            v = self.call(f"nvmlDeviceGetNvLinkErrorCounter(gpu{gpu}, {i}, {key})", lambda: nv.nvmlDeviceGetNvLinkErrorCounter(h, i, cid), _NO_LINK)  # noqa: B023 - self.call runs the lambda at once, in this iteration
            if v is not None:
                errors[key] = int(v)
        return NvLink(
            link=i,
            state="up" if int(state) == 1 else "down",
            remote_pci_bus_id=remote,
            remote_type=remote_type,
            version=None if version is None else _NVLINK_GENERATION.get(int(version)),
            errors=errors,
        )

    def _fabric_calls(self) -> list[tuple[Callable[..., NvmlAnswer], type[NvmlAnswer]]]:
        """(function, struct type) to try, newest first: v3 (health summary), v2 (health
        mask) through nvmlDeviceGetGpuFabricInfoV, then the legacy call (identity only)."""
        nv = self.nv
        calls: list[tuple[Callable[..., NvmlAnswer], type[NvmlAnswer]]] = []
        fn_v = getattr(nv, "nvmlDeviceGetGpuFabricInfoV", None)
        if fn_v is not None:
            seen: set[int] = set()
            for name in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfo_v2_t", "c_nvmlGpuFabricInfoV_t"):
                t = getattr(nv, name, None)
                if t is not None and id(t) not in seen:  # c_nvmlGpuFabricInfoV_t is the v2 struct
                    seen.add(id(t))
                    calls.append((fn_v, t))
        fn = getattr(nv, "nvmlDeviceGetGpuFabricInfo", None)
        if fn is not None and hasattr(nv, "c_nvmlGpuFabricInfo_t"):
            calls.append((fn, nv.c_nvmlGpuFabricInfo_t))
        return calls

    def fabric(self, h: NvmlHandle) -> dict[str, Any]:  # Any: NvmlGpu fields by name
        """The NvmlGpu fabric fields: state, status, cluster UUID, clique id, health. A
        driver that does not know a struct version (ARGUMENT_VERSION_MISMATCH) or the V
        call (FUNCTION_NOT_FOUND) is asked with the next older one."""
        nv = self.nv
        info: NvmlAnswer = None
        for fn, struct in self._fabric_calls():
            candidate = struct()
            try:
                fn(h, ctypes.byref(candidate))
            except nv.NVMLError as e:
                c = self.code(e)
                if c == _GPU_IS_LOST:
                    raise
                if c == _NOT_SUPPORTED:
                    return {"fabric_state": "not_supported"}
                if c in (_VERSION_MISMATCH, _FUNCTION_NOT_FOUND):
                    continue
                self.ctx.error("nvmlDeviceGetGpuFabricInfo", "unreadable", self.msg(e))
                return {}
            info = candidate
            break
        if info is None:
            return {}  # older driver: no fabric API
        state = _FABRIC_STATES.get(int(info.state))
        out: dict[str, Any] = {"fabric_state": state}  # Any: NvmlGpu fields by name, validated by NvmlGpu
        names = {f[0] for f in getattr(type(info), "_fields_", ())}
        if state not in (None, "not_supported") and "healthMask" in names:
            summary = int(info.healthSummary) if "healthSummary" in names else None
            out["fabric_health"] = decode_health(int(info.healthMask), summary)
        if state != "completed":
            return out  # NVML: status (and the domain) are meaningful only once the probe completed
        status = int(info.status)
        out["fabric_status"] = "success" if status == 0 else self.msg(nv.NVMLError(status))
        out["fabric_cluster_uuid"] = format_cluster_uuid(info.clusterUuid)
        out["fabric_clique_id"] = int(info.cliqueId)
        return out

    def field_values(self, h: NvmlHandle, wanted: list[tuple[int, int]]) -> list[int | None] | None:
        """One nvmlDeviceGetFieldValues call for (field id, scope id) pairs: each value, or
        None where NVML answered an error for it; None when the call itself failed
        (no such API, an older driver). GPU_IS_LOST propagates."""
        fn = getattr(self.nv, "nvmlDeviceGetFieldValues", None)
        if fn is None or not wanted:
            return None
        try:
            values = fn(h, wanted)
        except self.nv.NVMLError as e:
            if self.code(e) == _GPU_IS_LOST:
                raise
            return None
        try:
            out = [_field_value(v) for v in values]
        except (AttributeError, TypeError, ValueError):
            return None
        return out if len(out) == len(wanted) else None

    def link_fields(self, h: NvmlHandle, links: list[NvLink]) -> list[NvLink]:
        """Field values of the GPU's links, all in one call: the current speed (MB/s,
        NVML_FI_DEV_NVLINK_GET_SPEED) of each active link, and the error counters newer
        GPUs keep per link (NVML_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS and _SYMBOL_ERRORS,
        into ``errors`` as ``effective`` and ``symbol``; the BER fields are not read). A
        field the GPU does not support is left out; the links unchanged when the call is."""
        wanted: list[tuple[int, int]] = []
        keys: list[tuple[int, str]] = []
        fid = getattr(self.nv, "NVML_FI_DEV_NVLINK_GET_SPEED", None)
        if fid is not None:
            for link in links:
                if link.state == "up":
                    wanted.append((int(fid), link.link))
                    keys.append((link.link, "speed"))
        for key, const in _LINK_ERROR_FIELDS:
            eid = getattr(self.nv, const, None)
            if eid is not None:
                for link in links:
                    wanted.append((int(eid), link.link))
                    keys.append((link.link, key))
        values = self.field_values(h, wanted)
        if values is None:
            return links
        speeds: dict[int, int] = {}
        errors: dict[int, dict[str, int]] = {}
        for (n, key), v in zip(keys, values, strict=True):
            if v is None:
                continue
            if key == "speed":
                if v > 0:  # 0: not reported
                    speeds[n] = v
            else:
                errors.setdefault(n, {})[key] = v
        return [
            link.model_copy(update={"speed_mb_s": speeds.get(link.link), "errors": {**link.errors, **errors.get(link.link, {})}})
            if link.link in speeds or link.link in errors else link
            for link in links
        ]

    def c2c_links(self, h: NvmlHandle) -> tuple[C2cLink, ...]:
        """NVLink-C2C links (Grace systems): the count, then each link's status and max
        bandwidth in one call. () on GPUs that answer no count or 0."""
        nv = self.nv
        ids = [getattr(nv, n, None) for n in ("NVML_FI_DEV_C2C_LINK_COUNT", "NVML_FI_DEV_C2C_LINK_GET_STATUS", "NVML_FI_DEV_C2C_LINK_GET_MAX_BW")]
        if any(i is None for i in ids):
            return ()
        count_id, status_id, bw_id = (int(i) for i in ids if i is not None)
        got = self.field_values(h, [(count_id, 0)])
        count = got[0] if got else None
        if not count or count <= 0:
            return ()
        count = min(count, _MAX_C2C_LINKS)
        wanted = [pair for n in range(count) for pair in ((status_id, n), (bw_id, n))]
        values = self.field_values(h, wanted)
        if values is None:
            return ()
        out = []
        for n in range(count):
            status, bw = values[2 * n], values[2 * n + 1]
            if status is None:
                continue
            out.append(C2cLink(link=n, state="up" if status == 1 else "down", max_bw_mb_s=bw if bw is not None and bw > 0 else None))
        return tuple(out)

    def gpu(self, i: int) -> NvmlGpu | None:
        nv = self.nv
        api = f"nvmlDeviceGetHandleByIndex({i})"
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
            api = f"nvmlDeviceGetPciInfo({i})"
            bus = normalize_bus_id(_text(nv.nvmlDeviceGetPciInfo(h).busId))
        except nv.NVMLError as e:
            # Without a bus id there is nothing to hang a record on; the PCI reader still
            # sees the device, so the GPU shows up as missing from NVML.
            self.ctx.error(api, "unreadable", self.msg(e))
            return None
        if bus is None:
            self.ctx.error(f"nvmlDeviceGetPciInfo({i})", "unparsable", "bus id is not a PCI address")
            return None
        fields: dict[str, Any] = {"index": i, "pci_bus_id": bus}  # Any: NvmlGpu fields by name, validated by NvmlGpu
        try:
            name = self.call(f"nvmlDeviceGetName({i})", lambda: nv.nvmlDeviceGetName(h))
            fields["name"] = None if name is None else _text(name)
            uuid = self.call(f"nvmlDeviceGetUUID({i})", lambda: nv.nvmlDeviceGetUUID(h))
            fields["uuid"] = None if uuid is None else _text(uuid)
            # Optional: a GPU or driver that cannot tell its VBIOS is no read error.
            vbios = self.opt(lambda: nv.nvmlDeviceGetVbiosVersion(h)) if hasattr(nv, "nvmlDeviceGetVbiosVersion") else None
            fields["vbios_version"] = (_text(vbios).strip() or None) if vbios is not None else None
            max_links = int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))
            links = [link for link in (self.link(h, n, i) for n in range(max_links)) if link is not None]
            fields["nvlinks"] = tuple(self.link_fields(h, links))
            fields.update(self.fabric(h))
            fields["c2c_links"] = self.c2c_links(h)
            if hasattr(nv, "nvmlDeviceGetPcieReplayCounter"):
                replay = self.call(f"nvmlDeviceGetPcieReplayCounter({i})", lambda: nv.nvmlDeviceGetPcieReplayCounter(h), (_NOT_SUPPORTED,))
                fields["pcie_replay_errors"] = None if replay is None else int(replay)
        except nv.NVMLError as e:  # GPU_IS_LOST from any call above
            fields["error"] = self.msg(e)
        return NvmlGpu(**fields)

    def read(self) -> NvmlInfo:
        nv = self.nv
        driver = self.call("nvmlSystemGetDriverVersion", nv.nvmlSystemGetDriverVersion)
        cuda_fn = getattr(nv, "nvmlSystemGetCudaDriverVersion_v2", None) or nv.nvmlSystemGetCudaDriverVersion
        cuda = self.call("nvmlSystemGetCudaDriverVersion", cuda_fn)
        count = self.call("nvmlDeviceGetCount", nv.nvmlDeviceGetCount) or 0
        gpus = []
        for i in range(int(count)):
            g = self.gpu(i)
            if g is not None:
                gpus.append(g)
        return NvmlInfo(
            available=True,
            driver_version=None if driver is None else _text(driver),
            cuda_driver_version=None if cuda is None else int(cuda),
            gpus=tuple(gpus),
        )


# Init failures that mean "no NVML on this node", not "NVML is broken".
_ABSENT = (9, 12)  # NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIBRARY_NOT_FOUND


def _read_live(ctx: ReadContext) -> NvmlInfo:
    try:
        import pynvml
    except ImportError as e:
        return NvmlInfo(available=False, error=f"nvidia-ml-py is not installed ({e})")
    live = _Live(ctx, pynvml)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        if live.code(e) not in _ABSENT:
            ctx.error("nvmlInit", "unreadable", live.msg(e))
        return NvmlInfo(available=False, error=live.msg(e))
    except OSError as e:
        ctx.error("nvmlInit", "unavailable", str(e))
        return NvmlInfo(available=False, error=str(e))
    try:
        return live.read()
    except Exception as e:
        ctx.error("nvml", "unreadable", f"{type(e).__name__}: {e}")
        return NvmlInfo(available=False, error=f"NVML read failed: {type(e).__name__}: {e}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def read_nvml(ctx: ReadContext) -> NvmlInfo:
    """NVML inventory, NVLinks and fabric state. Never raises."""
    if ctx.host.is_live:
        return _read_live(ctx)
    path = ctx.host.recorded(recorded.NVML)
    if path is not None:
        return _read_recorded(ctx, path)
    return NvmlInfo(available=False, error=f"no NVML: an {ctx.host.mode} host root without recorded answers", asked=False)
