"""Which RDMA driver family a device belongs to, from what sysfs says of it.

A leaf module (imports nothing from agentd). The family decides how a device is read and
judged (docs/nic-families.md): what its port state means, which counter directories it
has, which firmware ranges change what its counters mean.

The PCI function's driver (``device/driver``, read with the HCA inventory) names the
family first: the RDMA device of an auxiliary driver (bnxt_re, irdma, mana_ib, ionic) has
the PCI function of its Ethernet driver as its parent (``bnxt_en``, ``ice``/``i40e``,
``mana``, ``ionic``). Before the inventory is read, or where the driver link is absent,
the device name's prefix decides: the kernel's own names (``mlx5_0``, ``efa_0``,
``bnxt_re0``, ``irdma0``, ``ionic_0``, ``mana_0``) and rdma-core's predictable ones, whose
prefix is the link layer (``ibp``/``rocep``: unknown family; ``rdmap``: a port of
unspecified link layer, which on the nodes agentd serves is AWS EFA).
"""

from __future__ import annotations

from typing import Literal

Family = Literal["mlx5", "mlx4", "efa", "bnxt_re", "irdma", "ionic", "mana", "hfi1", "unknown"]

# PCI driver of the RDMA device's parent function -> family.
BY_DRIVER: dict[str, Family] = {
    "mlx5_core": "mlx5",
    "mlx4_core": "mlx4",
    "efa": "efa",
    "bnxt_en": "bnxt_re",
    "ice": "irdma",
    "i40e": "irdma",  # i40iw's successor irdma drives X722 too
    "ionic": "ionic",
    "mana": "mana",
    "hfi1": "hfi1",
}

# Device name prefix -> family (longest first where they share a start).
BY_PREFIX: tuple[tuple[str, Family], ...] = (
    ("mlx5_", "mlx5"),
    ("mlx4_", "mlx4"),
    ("efa_", "efa"),
    ("rdmap", "efa"),
    ("bnxt_re", "bnxt_re"),
    ("irdma", "irdma"),
    ("i40iw", "irdma"),
    ("ionic", "ionic"),
    ("mana", "mana"),
    ("hfi1", "hfi1"),
)


def rdma_family(driver: str | None, name: str) -> Family:
    """The family of an RDMA device from its parent function's driver, else its name."""
    if driver is not None and driver in BY_DRIVER:
        return BY_DRIVER[driver]
    for prefix, family in BY_PREFIX:
        if name.startswith(prefix):
            return family
    return "unknown"
