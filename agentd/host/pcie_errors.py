"""PCIe error counters (AER statistics) and current links of the functions that matter.

The kernel's AER statistics (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats,
drivers/pci/pcie/aer.c ``aer_stats_dev_attr``) are three files per AER-capable function,
``aer_dev_correctable``, ``aer_dev_nonfatal`` and ``aer_dev_fatal``: one line
``<ErrorName> <u64>`` per error bit the kernel names (an unnamed bit appears as
``dev_cor_errs_bit[N] <n>`` only when non-zero), then ``TOTAL_ERR_COR <n>`` /
``TOTAL_ERR_NONFATAL <n>`` / ``TOTAL_ERR_FATAL <n>``. Counts are what the device *saw*:
an endpoint's errors are often counted at its link partner (the port above), which is why
the bridges on the parent chains are read too.

Read here (the medium-tier ``pci_errors`` probe; the slow ``pci`` probe walks the tree):
every GPU, every HCA PCI function and every bridge on their parent chains. For HCAs and
bridges the current link speed/width is re-read as well, so a link that retrains between
two slow polls shows in the history; GPU links are not (GPUs lower their speed when idle).

An absent file is unknown (None), never 0: no AER capability, AER disabled, or a kernel
before 4.19. A file that does not parse (no or a wrong TOTAL line, a count that is not a
decimal u64, odd bytes, a cut read) is a ReadError and its severity None.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from agentd.base.ids import VENDOR_NVIDIA
from agentd.host.fs import ReadContext, parse_decimal
from agentd.host.pci import DEVICES_DIR, WIDTH_UNKNOWN, parse_link_speed
from agentd.model import AerCounts, PciDevice, PcieAer, PciLinkRead

# file -> the kernel's total line name
AER_FILES = (
    ("correctable", "aer_dev_correctable", "TOTAL_ERR_COR"),
    ("nonfatal", "aer_dev_nonfatal", "TOTAL_ERR_NONFATAL"),
    ("fatal", "aer_dev_fatal", "TOTAL_ERR_FATAL"),
)
# A real file is under 600 bytes (27 named bits at most); a longer one is not the ABI.
AER_MAX_BYTES = 4096
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*(?:\[\d{1,2}\])?")


# Texts up to this long are memoised: a real file is under 600 bytes, so a tree of odd
# (long, all different) files costs the memo at most AER_MEMO x this, never more.
AER_MEMO_MAX_BYTES = 1024
AER_MEMO = 128


def parse_aer(text: str, total_name: str) -> AerCounts:
    """One aer_dev_* file's text -> AerCounts; ValueError with the reason when it is not the ABI.

    Memoised on the text (pure, and AerCounts is frozen): a node has a few hundred of these
    files, nearly all alike (every count 0), read again at every full read (docs/performance.md,
    "Reading files")."""
    if len(text) <= AER_MEMO_MAX_BYTES:
        return _parse_aer_memo(text, total_name)
    return _parse_aer(text, total_name)


def _parse_aer(text: str, total_name: str) -> AerCounts:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ValueError("empty")
    by_type: dict[str, int] = {}
    total: int | None = None
    for n, line in enumerate(lines, 1):
        name, sep, value = line.partition(" ")
        count = parse_decimal(value) if sep else None
        if not _NAME_RE.fullmatch(name) or count is None or count >= 1 << 64:
            raise ValueError(f"line {n} is not '<name> <count>': {line[:60]!r}")
        if n == len(lines):
            if name != total_name:
                raise ValueError(f"last line is {name!r}, expected {total_name}")
            total = count
        elif name.startswith("TOTAL_"):
            raise ValueError(f"{name} before the last line")
        elif name in by_type:
            raise ValueError(f"{name} appears twice")
        else:
            by_type[name] = count
    assert total is not None
    return AerCounts(total=total, by_type=by_type)


_parse_aer_memo = lru_cache(maxsize=AER_MEMO)(_parse_aer)


def read_aer(ctx: ReadContext, dev_dir: str) -> PcieAer | None:
    """The three AER files of one function; None when none exists."""
    parts: dict[str, AerCounts | None] = {}
    present = False
    for severity, name, total_name in AER_FILES:
        path = f"{dev_dir}/{name}"
        data = ctx.raw(path, max_bytes=AER_MAX_BYTES + 1)
        if data is None:
            parts[severity] = None
            continue
        present = True
        try:
            if len(data) > AER_MAX_BYTES:
                raise ValueError(f"longer than {AER_MAX_BYTES} bytes")
            parts[severity] = parse_aer(data.decode("ascii"), total_name)
        except UnicodeDecodeError:
            ctx.error(path, "unparsable", "not ASCII text")
            parts[severity] = None
        except ValueError as e:
            ctx.error(path, "unparsable", str(e))
            parts[severity] = None
    return PcieAer(**parts) if present else None


def watched(pci: Iterable[PciDevice], hca_bus_ids: Iterable[str]) -> dict[str, bool]:
    """bdf -> whether its link is re-read: every NVIDIA GPU (False), HCA (True) and bridge
    on their parent chains (True), in bus order of the PCI tree."""
    devs = {d.bdf: d for d in pci}
    roots: dict[str, bool] = {d.bdf: False for d in devs.values() if d.is_gpu and d.vendor_id == VENDOR_NVIDIA}
    for bus in hca_bus_ids:
        if bus in devs:
            roots.setdefault(bus, True)
    out = dict(roots)
    for bdf in roots:
        for parent in devs[bdf].parent_chain:
            out[parent] = True
    return {d: out[d] for d in devs if d in out}


def read_pcie_errors(ctx: ReadContext, pci: Iterable[PciDevice], hca_bus_ids: Iterable[str]) -> tuple[PciLinkRead, ...]:
    """AER statistics of the watched functions; the current link of the non-GPU ones."""
    out = []
    for bdf, link in watched(pci, hca_bus_ids).items():
        dev_dir = f"{DEVICES_DIR}/{bdf}"
        aer = read_aer(ctx, dev_dir)
        if not link:
            out.append(PciLinkRead(bdf=bdf, aer=aer))
            continue
        speed = ctx.text(f"{dev_dir}/current_link_speed") or None
        width = ctx.integer(f"{dev_dir}/current_link_width")
        out.append(PciLinkRead(
            bdf=bdf, aer=aer, link_read=True, current_link_speed=speed, current_link_speed_gts=parse_link_speed(speed),
            current_link_width=None if width == WIDTH_UNKNOWN else width,
        ))
    return tuple(out)
