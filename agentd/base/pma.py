"""IB PMA port counters: how wide each ``ports/N/counters/<name>`` file is, and when a
reading has saturated. The one table the checks (rates, ``ib.counter.saturated``) and
the metrics (``agentd_ib_port_pma_saturated``) share. A leaf: imports nothing.

The widths are the IBA PortCounters attribute's, as Linux prints them
(drivers/infiniband/core/sysfs.c, ``PORT_PMA_ATTR``): the error counters have fixed
widths of 4 to 16 bits, PortXmitWait 32. The data and packet counters are 32-bit in
PortCounters and 64-bit in PortCountersExtended; when the PMA has the extended set
(ClassPortInfo CapabilityMask ``IB_PMA_CLASS_CAP_EXT_WIDTH`` or ``..._NOIETF``, as every
ConnectX has) the kernel prints the 64-bit value under the same file name. The 64-bit
only counters (``unicast_*``, ``multicast_*``) are not listed: 2^64 packets is never
reached.

PMA counters do not wrap: they clamp at all ones (IBA performance management), so a
rate measured across that point is wrong and a saturated counter must be reset
(``perfquery -R``) to count again. The rule, for every counter here: a reading is
saturated when it is at (or, from a broken source, above) the all-ones value of its
width; a counter that may be either width has the narrowest width that holds the
reading (a value above 2^32-1 proves the 64-bit counter, which then is not saturated).
An extended counter passing exactly 2^32-1 reads as saturated for that one reading: the
same value means both, and the 32-bit meaning is the one that needs action.
"""

from __future__ import annotations

# name -> the widths (bits) its sysfs file may have, narrowest first
PMA_COUNTER_WIDTHS: dict[str, tuple[int, ...]] = {
    "symbol_error": (16,),
    "link_error_recovery": (8,),
    "link_downed": (8,),
    "port_rcv_errors": (16,),
    "port_rcv_remote_physical_errors": (16,),
    "port_rcv_switch_relay_errors": (16,),
    "port_xmit_discards": (16,),
    "port_xmit_constraint_errors": (8,),
    "port_rcv_constraint_errors": (8,),
    "local_link_integrity_errors": (4,),
    "excessive_buffer_overrun_errors": (4,),
    "VL15_dropped": (16,),
    "port_xmit_data": (32, 64),
    "port_rcv_data": (32, 64),
    "port_xmit_packets": (32, 64),
    "port_rcv_packets": (32, 64),
    "port_xmit_wait": (32,),
}


def pma_width(name: str, value: int | None = None) -> int | None:
    """Bits of ``name`` as read: the narrowest of its widths that holds ``value`` (the
    widest when none does; the narrowest when ``value`` is None). None: not a PMA counter."""
    widths = PMA_COUNTER_WIDTHS.get(name)
    if widths is None:
        return None
    if value is not None:
        for bits in widths:
            if value < 1 << bits:
                return bits
        return widths[-1]
    return widths[0]


def pma_max(name: str, value: int | None = None) -> int | None:
    """The all-ones value ``name`` stops at, for the width ``value`` shows (see pma_width)."""
    bits = pma_width(name, value)
    return None if bits is None else (1 << bits) - 1


def is_saturated(name: str, value: int | None) -> bool:
    """True when ``value`` of PMA counter ``name`` sits at its maximum and no longer counts."""
    if value is None:
        return False
    ceiling = pma_max(name, value)
    return ceiling is not None and value >= ceiling
