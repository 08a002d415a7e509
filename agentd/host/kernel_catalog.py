"""Kernel log messages -> events: which GPU, NIC or PCIe fault a /dev/kmsg record reports.

Extraction only (no judgement, no I/O): what kind of fault a line reports, its code and the
PCI device it is about. How much a kind/code matters is agentd.judging.kernel_policy's
business. The wording matched is the drivers' own, as published in real logs (see
tests/fixtures/kmsg and tests/fixtures/SOURCES.md):

- NVRM (nvidia.ko): ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., <text>`` (the bus id
  without a function, sometimes without ``PCI:``, pid/name optional or ``'<unknown>'``).
  "Fallen off the bus" also comes without an Xid: ``NVRM: GPU 0000:29:00.0: GPU has fallen
  off the bus.``, ``NVRM: GPU at 0000:01:00.0 has fallen off the bus.`` and the three-line
  ``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``NVRM: (PCI ID: ...) installed in this system has``
  / ``NVRM: fallen off the bus and is not responding to commands.`` (one record with
  embedded newlines, or several records once a log shipper splits it). A line without a bus
  id is attributed to the GPU the driver named within the last ``CONTEXT_RECORDS`` records
  (``NVRM: GPU at PCI:0000:9b:00: GPU-<uuid>`` heads the driver's multi-line reports).
  An Xid 79 is one event (kind "xid", code "79"); an off-bus line for the same GPU within
  ``CONTEXT_RECORDS`` records after it is the same fault and gives nothing.
- nvidia-nvswitch: ``nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, ...``. The
  driver repeats an SXid as ``..., Data {0x.., 0x..}``: that line is not counted again.
- nvidia-peermem: ``nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context``.
- mlx5_core: ``mlx5_core 0000:5a:00.0: <func>:<line>:(pid N): <text>`` (device from the
  prefix, else from the record's ``DEVICE=+pci:...``).
- PCIe AER (drivers/pci/pcie/aer.c). Counted from the root port's "error received" line
  (``AER: [Multiple ]Corrected error received: 0000:01:00.0``, ``... id=00e5`` on kernels
  before 4.19, ``Correctable error message received from 0000:06:00.0`` on 6.x), one per
  error message the root port took in, named after its source device. The "PCIe Bus Error:
  severity=..." lines that follow are details of the same message, printed once for every
  device that logged it (the port and the endpoint: one or two per error), so counting them
  would count one error twice; they give nothing. Firmware-first (APEI/GHES) platforms print
  only "PCIe Bus Error" lines: those errors are not counted here (a known gap).

Lines from these drivers that match no known pattern but say something went wrong (an
error word: error, fail, timeout, invalid, ...) are events with code "other"; their
ordinary informational lines (module load, firmware version, link up) and every unrelated
line give None.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from agentd.base.ids import normalize_bdf

MAX_MATCH_CHARS = 4096  # a line is matched on its head only: a 1 MB record costs nothing
DETAIL_CHARS = 200
CONTEXT_RECORDS = 8  # how many records a GPU named by the driver stays the subject


@dataclass(frozen=True)
class Extracted:
    kind: str  # "xid" | "sxid" | "gpu_off_bus" | "nvrm" | "peermem" | "mlx5" | "aer"
    code: str
    device: str | None  # PCI bus id, sysfs spelling "dddd:bb:dd.f"; None when unnamed
    detail: str  # the message, one line, at most DETAIL_CHARS


# A bus id as the drivers print it: with or without domain, with or without function.
_LOOSE_BDF = r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_LOOSE_BDF_RE = re.compile(r"(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.([0-7]))?")

_XID_RE = re.compile(r"NVRM: Xid \(([^)]{0,64})\): (\d{1,6})\b")
_XID_ANY_RE = re.compile(r"NVRM: Xid\b")
_NVRM_RE = re.compile(r"^\s*NVRM:")
_THE_GPU_RE = re.compile(rf"NVRM: The NVIDIA GPU ({_LOOSE_BDF})\b")
_NVRM_GPU_BDF_RE = re.compile(rf"NVRM: GPU (?:at )?(?:PCI:)?({_LOOSE_BDF})\b")
_ANY_PCI_RE = re.compile(rf"PCI:({_LOOSE_BDF})\b")
_OFF_BUS_RE = re.compile(r"fallen off the bus", re.IGNORECASE)
_PROBE_FAILED_RE = re.compile(r"NVRM: The NVIDIA probe routine failed")

_SXID_RE = re.compile(r"nvidia-nvswitch\d*: SXid \(([^)]{0,64})\): (\d{1,6})\b(.{0,8})")
_NVSWITCH_RE = re.compile(r"^\s*nvidia-nvswitch\d*:")

_PEERMEM_RE = re.compile(r"^\s*nvidia-peermem\b")
_PEERMEM_INVALID_CTX_RE = re.compile(r"detected invalid context")

_MLX5_RE = re.compile(r"^\s*mlx5_|\(mlx5_core\)")
_MLX5_DEV_RE = re.compile(r"^\s*mlx5_core ([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\b")
# First match wins: the more specific health lines before the generic ones.
_MLX5_CODES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("health_compromised", re.compile(r"health compromised", re.IGNORECASE)),
    ("unrecoverable", re.compile(r"unrecoverable", re.IGNORECASE)),
    ("fatal_error", re.compile(r"Fatal error \d+ detected")),
    ("fw_syndrome", re.compile(r"Health issue observed|print_health_info:.*(?:synd 0x|assert_var)")),
    ("cmd_timeout", re.compile(r"leak of a command resource|wait_func\w*:.*\btimeout\b")),
    ("slot_power", re.compile(r"insufficient power on the PCIe slot")),
    ("module_temp", re.compile(r"Port module event.*High Temperature", re.IGNORECASE)),
    ("cable", re.compile(r"Port module event.*Cable error|Port module event\[error\]")),
    ("module_unplugged", re.compile(r"Port module event.*Cable unplugged")),
    ("high_temp", re.compile(r"High temperature on sensors")),
    ("tx_timeout", re.compile(r"transmit queue \d* ?timed out")),
    ("cmd_failed", re.compile(r"mlx5_cmd_out_err:.*\bfailed\b")),
)

_AER_RECEIVED_RE = re.compile(
    r"AER: (?:Multiple )?"
    r"(Corrected|Correctable|Uncorrected \(Non-Fatal\)|Uncorrectable \(Non-Fatal\)"
    r"|Uncorrected \(Fatal\)|Uncorrectable \(Fatal\)) error (?:message )?received"
    r"(?::| from) (?:(" + _LOOSE_BDF + r")|id=([0-9a-fA-F]{1,4}))"
)
_DEV_PREFIX_RE = re.compile(r"^\s*\S+ ([0-9a-fA-F]{4,8}):[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b")

_ERRORISH_RE = re.compile(
    r"\b(?:error|errors|fail|failed|failure|fatal|timeout|timed out|invalid|unable|lost|"
    r"not responding|exception|corrupt\w*)\b",
    re.IGNORECASE,
)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]+")


def _bdf(text: str | None, domain: str | None = None) -> str | None:
    """A driver's bus id in any of its spellings -> ``dddd:bb:dd.f`` (function 0 when the
    driver leaves it out, as NVRM does; ``domain`` when it leaves that out)."""
    if not text:
        return None
    s = text.strip()
    if s.upper().startswith("PCI:"):
        s = s[4:]
    m = _LOOSE_BDF_RE.fullmatch(s)
    if m is None:
        return None
    dom, bus, dev, fn = m.groups()
    return normalize_bdf(f"{dom or domain or '0000'}:{bus}:{dev}.{fn or '0'}")


def _field_device(fields: Mapping[str, str] | None) -> str | None:
    """``DEVICE=+pci:0000:5a:00.0`` of a /dev/kmsg record -> ``0000:5a:00.0``."""
    if not fields:
        return None
    dev = fields.get("DEVICE", "")
    if not isinstance(dev, str) or not dev.startswith("+pci:"):
        return None
    return normalize_bdf(dev[5:])


def _detail(message: str) -> str:
    return _CONTROL_RE.sub(" ", message[: DETAIL_CHARS * 4]).strip()[:DETAIL_CHARS]


def _aer_code(severity: str) -> str:
    if "Fatal" not in severity:
        return "corrected"
    return "nonfatal" if "Non-Fatal" in severity else "fatal"


class Extractor:
    """Stateful across records (the driver prints some faults over several lines), pure.

    Feed it the records of one boot in order; the state is the GPU the NVIDIA driver named
    last (for off-bus lines that name none) and the last Xid 79, each forgotten after
    ``CONTEXT_RECORDS`` records."""

    def __init__(self) -> None:
        self._gpu: str | None = None
        self._gpu_ttl = 0
        self._xid79: str | None = None
        self._xid79_ttl = 0

    def feed(self, message: str, fields: Mapping[str, str] | None = None) -> Extracted | None:
        if self._gpu_ttl > 0:
            self._gpu_ttl -= 1
            if self._gpu_ttl == 0:
                self._gpu = None
        if self._xid79_ttl > 0:
            self._xid79_ttl -= 1
            if self._xid79_ttl == 0:
                self._xid79 = None
        text = message[:MAX_MATCH_CHARS]
        if "NVRM" in text and _NVRM_RE.match(text):
            return self._nvrm(text, fields)
        if "nvswitch" in text and _NVSWITCH_RE.match(text):
            return self._nvswitch(text, fields)
        if "peermem" in text and _PEERMEM_RE.match(text):
            return self._peermem(text, fields)
        if "AER" in text:
            return self._aer(text, fields)
        if "mlx5" in text and _MLX5_RE.search(text):
            return self._mlx5(text, fields)
        return None

    def _remember_gpu(self, bdf: str | None) -> None:
        if bdf is not None:
            self._gpu = bdf
            self._gpu_ttl = CONTEXT_RECORDS + 1

    def _nvrm(self, text: str, fields: Mapping[str, str] | None) -> Extracted | None:
        detail = _detail(text)
        m = _XID_RE.search(text)
        if m is not None:
            # "PCI:0000:01:00", "0000:03:00", "PCI:0000:01:00 GPU-I:05" (a MIG instance)
            device = _bdf((m.group(1).split() or [""])[0]) or _field_device(fields)
            self._remember_gpu(device)
            code = str(int(m.group(2)))
            if code == "79":
                self._xid79 = device
                self._xid79_ttl = CONTEXT_RECORDS + 1
            return Extracted("xid", code, device, detail)
        if _XID_ANY_RE.search(text):  # an Xid line we cannot read: counted, not lost
            return Extracted("nvrm", "other", _field_device(fields), detail)
        named = _NVRM_GPU_BDF_RE.search(text) or _THE_GPU_RE.search(text)
        device = _bdf(named.group(1)) if named else None
        if device is None:
            pci = _ANY_PCI_RE.search(text)
            device = _bdf(pci.group(1)) if pci else None
        if _OFF_BUS_RE.search(text):
            device = device or self._gpu or _field_device(fields)
            self._remember_gpu(device)
            if device is not None and device == self._xid79:
                return None  # the Xid 79 already reported it
            return Extracted("gpu_off_bus", "off_bus", device, detail)
        if named is not None:
            self._remember_gpu(device)
        if _PROBE_FAILED_RE.search(text):
            return Extracted("nvrm", "probe_failed", device or _field_device(fields), detail)
        if _ERRORISH_RE.search(text):
            return Extracted("nvrm", "other", device or self._gpu or _field_device(fields), detail)
        return None

    def _nvswitch(self, text: str, fields: Mapping[str, str] | None) -> Extracted | None:
        m = _SXID_RE.search(text)
        if m is not None:
            if m.group(3).startswith(", Data"):
                return None  # the register dump of an SXid already counted
            device = _bdf(m.group(1)) or _field_device(fields)
            return Extracted("sxid", str(int(m.group(2))), device, _detail(text))
        if _ERRORISH_RE.search(text):
            return Extracted("sxid", "other", _field_device(fields), _detail(text))
        return None

    def _peermem(self, text: str, fields: Mapping[str, str] | None) -> Extracted | None:
        if _PEERMEM_INVALID_CTX_RE.search(text):
            return Extracted("peermem", "invalid_context", _field_device(fields), _detail(text))
        if _ERRORISH_RE.search(text):
            return Extracted("peermem", "other", _field_device(fields), _detail(text))
        return None

    def _mlx5(self, text: str, fields: Mapping[str, str] | None) -> Extracted | None:
        m = _MLX5_DEV_RE.match(text)
        device = normalize_bdf(m.group(1)) if m else _field_device(fields)
        for code, pattern in _MLX5_CODES:
            if pattern.search(text):
                return Extracted("mlx5", code, device, _detail(text))
        if _ERRORISH_RE.search(text):
            return Extracted("mlx5", "other", device, _detail(text))
        return None

    def _aer(self, text: str, fields: Mapping[str, str] | None) -> Extracted | None:
        m = _AER_RECEIVED_RE.search(text)
        if m is None:
            return None  # "PCIe Bus Error" and status lines: details of a counted error
        port = _DEV_PREFIX_RE.match(text)
        domain = port.group(1) if port else None
        if domain is None:
            dev = _field_device(fields)
            domain = dev.split(":")[0] if dev else None
        if m.group(2):
            device = _bdf(m.group(2), domain)
        else:  # requester id: bus << 8 | device << 3 | function (before Linux 4.19)
            rid = int(m.group(3), 16)
            device = normalize_bdf(f"{domain or '0000'}:{rid >> 8:02x}:{(rid >> 3) & 0x1F:02x}.{rid & 7}")
        return Extracted("aer", _aer_code(m.group(1)), device, _detail(text))
