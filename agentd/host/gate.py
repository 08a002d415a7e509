"""The gate of reads that are firmware commands on the device (issue 36).

Some files and requests look like plain reads but make the driver run a firmware command:
mlx5's hwmon ``tempN_*`` (the MTMP register), a module EEPROM page (MCIA). Readers of
those take a ``Gate``: a predicate on the device's PCI bus id that says whether agentd
may read it now (the ``[collect] ignore`` list and the per-device back-off decide). A
refused device is not read at all, and is not an error.
"""

from __future__ import annotations

from collections.abc import Callable

Gate = Callable[[str], bool]  # PCI bus id (dddd:bb:dd.f) -> may agentd run firmware reads on it now


def allow_all(bus_id: str) -> bool:
    """The gate when nothing restricts firmware reads."""
    return True
