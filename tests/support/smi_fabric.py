"""The ``Fabric`` blocks of ``nvidia-smi -q`` text, in the NVML reader's vocabulary (tests).

What users paste into bug reports and what vendors publish is ``nvidia-smi -q`` text, not
NVML structs; this parser turns those blocks into the same values the live reader
(agentd.host.nvml) puts on an NvmlGpu, so the checks are judged on real recorded text
(``apply_smi_fabric``). agentd itself never reads this text (it asks NVML), so the parser
lives with the tests. Pure: no I/O.

Layout (driver 535 prints State/Status only; 550+ add CliqueId, ClusterUUID and Health)::

    GPU 00000000:1B:00.0
        ...
        Fabric
            State                             : Completed
            Status                            : Success
            CliqueId                          : 2
            ClusterUUID                       : dc6e40c4-d722-4357-9ba6-5291dd461278
            Health
                Summary                       : Unhealthy
                Bandwidth                     : Full

Tolerated: ``grep -C`` fragments (no ``GPU`` header; ``--`` between them: keyed ``#0``,
``#1``, ... in order), ``N/A`` / ``Not Supported`` values, rows this parser does not know,
CRLF line ends, bytes that are not UTF-8.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from agentd.base.ids import normalize_bdf
from agentd.model import FabricHealth, IncorrectConfiguration, NvmlInfo

CONFIGURATION_NAMES: tuple[str, ...] = get_args(IncorrectConfiguration)


def normalize_cluster_uuid(text: str) -> str | None:
    """A printed cluster UUID in the form the NVML reader gives (lowercase 8-4-4-4-12);
    None when it is not one (``N/A``)."""
    t = text.strip()
    if len(t) != 36 or t.count("-") != 4:
        return None
    try:
        return str(uuid.UUID(t))
    except ValueError:
        return None


FabricState = Literal["not_supported", "not_started", "in_progress", "completed"]

_GPU_HEADER = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_ROW = re.compile(r"^([^:]*?)\s*:\s*(.*?)\s*$")
_STATES: dict[str, FabricState] = {
    "completed": "completed",
    "in progress": "in_progress",
    "not started": "not_started",
    "not supported": "not_supported",
}
_SUMMARIES: dict[str, Literal["healthy", "unhealthy", "limited_capacity"]] = {
    "healthy": "healthy",
    "unhealthy": "unhealthy",
    "limited capacity": "limited_capacity",
}
_UNKNOWN_VALUES = {"", "n/a", "not supported", "[not supported]", "unknown", "[unknown error]", "[n/a]"}
# Health rows: label (lowercase, spaces collapsed) -> FabricHealth field of a True/False row
_BOOL_ROWS = {
    "route recovery in progress": "route_recovery",
    "route unhealthy": "route_unhealthy",
    "access timeout recovery": "access_timeout_recovery",
    "partition assigned": "partition_assigned",
}
# Spellings of the configuration values other than the model's own names
_CONFIG_ALIASES = {
    "incorrect_sys_guid": "incorrect_sysguid",
    "incorrect_chassis_serial_number": "incorrect_chassis_sn",
    "incompatible_gpu_firmware": "incompatible_gpu_fw",
}


@dataclass(frozen=True)
class ParsedFabric:
    """One GPU's Fabric block. Every field None where the text says N/A or lacks the row."""

    state: FabricState | None = None
    status: str | None = None  # "success", else the text as printed ("Insufficient Resources"); only when completed
    cluster_uuid: str | None = None  # lowercase 8-4-4-4-12
    clique_id: int | None = None
    health: FabricHealth | None = None  # None: no Health block


def _label(s: str) -> str:
    return " ".join(s.split()).lower()


def _known(value: str) -> str | None:
    """The value, or None when it says nothing (N/A, Not Supported)."""
    return None if value.strip().lower() in _UNKNOWN_VALUES else value.strip()


def _bool(value: str) -> bool | None:
    return {"true": True, "yes": True, "false": False, "no": False}.get(value.strip().lower())


def _configuration(value: str) -> Any:
    v = _known(value)
    if v is None:
        return None
    name = re.sub(r"[^a-z0-9]+", "_", v.lower()).strip("_")
    name = _CONFIG_ALIASES.get(name, name)
    return name if name in CONFIGURATION_NAMES else "unknown"


class _Block:
    def __init__(self) -> None:
        self.rows: dict[str, str] = {}
        self.health: dict[str, str] = {}
        self.seen = False

    def parsed(self) -> ParsedFabric:
        rows = self.rows
        state_text = _known(rows.get("state", ""))
        state = None if state_text is None else _STATES.get(_label(state_text))
        status: str | None = None
        if state == "completed":
            s = _known(rows.get("status", ""))
            status = None if s is None else ("success" if s.lower() == "success" else s)
        clique_text = _known(rows.get("cliqueid", ""))
        clique = int(clique_text) if clique_text is not None and clique_text.isascii() and clique_text.isdigit() else None
        uuid_text = _known(rows.get("clusteruuid", ""))
        health = None
        if self.health:
            h = self.health
            summary = _known(h.get("summary", ""))
            bandwidth = _known(h.get("bandwidth", ""))
            fields: dict[str, Any] = {
                "summary": None if summary is None else _SUMMARIES.get(_label(summary)),
                "degraded_bandwidth": None if bandwidth is None else {"full": False, "degraded": True}.get(bandwidth.lower()),
                "incorrect_configuration": _configuration(h.get("incorrect configuration", "")),
            }
            for row, field in _BOOL_ROWS.items():
                fields[field] = _bool(h.get(row, ""))
            health = FabricHealth(**fields)
        return ParsedFabric(
            state=state,
            status=status,
            cluster_uuid=None if uuid_text is None else normalize_cluster_uuid(uuid_text),
            clique_id=clique,
            health=health,
        )


def parse_smi_fabric(text: str | bytes) -> dict[str, ParsedFabric]:
    """Fabric blocks of ``nvidia-smi -q`` output by GPU: the normalised PCI bus id
    (``0000:1b:00.0``), or ``#<n>`` for the n-th block with no GPU header (grep output).
    GPUs without a Fabric block are left out. Never raises on odd text."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    out: dict[str, ParsedFabric] = {}
    headerless = 0
    key: str | None = None
    block = _Block()
    fabric_indent: int | None = None
    health_indent: int | None = None

    def flush() -> None:
        nonlocal headerless
        if block.seen:
            if key is None:
                out[f"#{headerless}"] = block.parsed()
                headerless += 1
            else:
                out[key] = block.parsed()

    for raw in text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "").split("\n"):
        line = raw.rstrip()
        if not line.strip():
            continue
        m = _GPU_HEADER.match(line)
        if m is not None:
            flush()
            key, block, fabric_indent, health_indent = normalize_bdf(m.group(1)), _Block(), None, None
            continue
        if line.strip() == "--":  # grep's separator between context groups
            if key is None:
                flush()
                block = _Block()
            fabric_indent = health_indent = None
            continue
        indent = len(line) - len(line.lstrip())
        stripped = line.strip()
        if health_indent is not None and indent <= health_indent:
            health_indent = None
        if fabric_indent is not None and indent <= fabric_indent:
            fabric_indent = None
        if stripped == "Fabric":
            fabric_indent, health_indent = indent, None
            block.seen = True
            continue
        if fabric_indent is not None and stripped == "Health":
            health_indent = indent
            continue
        row = _ROW.match(stripped)
        if row is None:
            continue
        label, value = _label(row.group(1)), row.group(2)
        if health_indent is not None:
            block.health[label] = value
        elif fabric_indent is not None:
            block.rows[label] = value
        elif label in ("cliqueid", "clusteruuid"):  # a fragment cut above its Fabric line
            block.rows[label] = value
            block.seen = True
    flush()
    return out


def apply_smi_fabric(nvml: NvmlInfo, parsed: Mapping[str, ParsedFabric]) -> NvmlInfo:
    """``nvml`` with each GPU's fabric fields replaced by its parsed block (matched by PCI
    bus id; GPUs without one are kept as they are)."""
    gpus = []
    for g in nvml.gpus:
        p = parsed.get(g.pci_bus_id)
        if p is None:
            gpus.append(g)
            continue
        gpus.append(
            g.model_copy(
                update={
                    "fabric_state": p.state,
                    "fabric_status": p.status,
                    "fabric_cluster_uuid": p.cluster_uuid,
                    "fabric_clique_id": p.clique_id,
                    "fabric_health": p.health,
                }
            )
        )
    return nvml.model_copy(update={"gpus": tuple(gpus)})
