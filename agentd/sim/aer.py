"""AER statistics files of simulated PCI functions (sysfs-bus-pci-devices-aer_stats).

The layout is the kernel's (drivers/pci/pcie/aer.c ``aer_stats_dev_attr``): one
``<name> <count>`` line per named error bit, in bit order, then the total. The names are
those of a 6.x kernel as published in node_exporter's sysfs fixture (tests/fixtures).
"""

from __future__ import annotations

from pathlib import Path

CORRECTABLE = ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF")
UNCORRECTABLE = (
    "Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF", "MalfTLP",
    "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr", "PoisonTLPBlocked",
)
# severity -> (file, names, total line)
FILES = {
    "correctable": ("aer_dev_correctable", CORRECTABLE, "TOTAL_ERR_COR"),
    "nonfatal": ("aer_dev_nonfatal", UNCORRECTABLE, "TOTAL_ERR_NONFATAL"),
    "fatal": ("aer_dev_fatal", UNCORRECTABLE, "TOTAL_ERR_FATAL"),
}


def aer_text(severity: str, counts: dict[str, int] | None = None) -> str:
    _, names, total = FILES[severity]
    counts = counts or {}
    lines = [f"{n} {counts.get(n, 0)}" for n in names]
    return "\n".join([*lines, f"{total} {sum(counts.get(n, 0) for n in names)}"]) + "\n"


def write_aer(dev_dir: Path) -> None:
    """Zero counts in all three files."""
    for severity, (name, _, _) in FILES.items():
        (dev_dir / name).write_text(aer_text(severity))


def advance(dev_dir: Path, severity: str, error: str, n: int) -> None:
    """Add ``n`` errors of type ``error`` (and to the total) in the device's file."""
    name, names, _ = FILES[severity]
    if error not in names:
        raise ValueError(f"{error!r} is not a {severity} AER error name")
    path = dev_dir / name
    counts = {}
    for line in path.read_text().splitlines()[:-1]:
        key, _, value = line.partition(" ")
        counts[key] = int(value)
    counts[error] = counts.get(error, 0) + n
    path.write_text(aer_text(severity, counts))
