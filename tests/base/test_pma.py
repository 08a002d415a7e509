"""agentd.base.pma: the one table of IB PMA counter widths and the one saturation rule."""

from __future__ import annotations

import pytest

from agentd.base.pma import PMA_COUNTER_WIDTHS, is_saturated, pma_max, pma_width

# Linux drivers/infiniband/core/sysfs.c, PORT_PMA_ATTR(name, counter, width, offset), and
# PORT_PMA_ATTR_EXT for the 64-bit PortCountersExtended data/packet counters printed
# under the same names when the PMA has them.
KERNEL_WIDTHS = {
    "symbol_error": (16,), "link_error_recovery": (8,), "link_downed": (8,), "port_rcv_errors": (16,),
    "port_rcv_remote_physical_errors": (16,), "port_rcv_switch_relay_errors": (16,), "port_xmit_discards": (16,),
    "port_xmit_constraint_errors": (8,), "port_rcv_constraint_errors": (8,), "local_link_integrity_errors": (4,),
    "excessive_buffer_overrun_errors": (4,), "VL15_dropped": (16,),
    "port_xmit_data": (32, 64), "port_rcv_data": (32, 64), "port_xmit_packets": (32, 64), "port_rcv_packets": (32, 64),
    "port_xmit_wait": (32,),
}
EXTENDED = sorted(n for n, w in KERNEL_WIDTHS.items() if len(w) > 1)
FIXED = sorted(n for n, w in KERNEL_WIDTHS.items() if len(w) == 1)


def test_table_is_the_kernels():
    assert PMA_COUNTER_WIDTHS == KERNEL_WIDTHS


@pytest.mark.parametrize("name", FIXED)
def test_fixed_width_counter_edges(name):
    (bits,) = KERNEL_WIDTHS[name]
    top = (1 << bits) - 1
    assert pma_width(name) == pma_width(name, 0) == pma_width(name, top) == bits
    assert pma_max(name) == pma_max(name, 0) == top
    assert not is_saturated(name, 0)
    assert not is_saturated(name, top - 1)
    assert is_saturated(name, top)
    # above the width: no kernel prints it; a broken source is not read as counting
    assert is_saturated(name, top + 1)


@pytest.mark.parametrize("name", EXTENDED)
@pytest.mark.parametrize(
    "value, bits, saturated",
    [
        (0, 32, False),
        ((1 << 32) - 2, 32, False),
        ((1 << 32) - 1, 32, True),  # a 32-bit PortCounters value stuck at its maximum
        (1 << 32, 64, False),  # only a 64-bit counter can read this: it counts on
        (230442669431839, 64, False),  # mlx5_0 port_xmit_data on a real H100 node
        ((1 << 64) - 2, 64, False),
        ((1 << 64) - 1, 64, True),
    ],
)
def test_extended_counter_has_the_width_its_reading_shows(name, value, bits, saturated):
    assert pma_width(name, value) == bits
    assert pma_max(name, value) == (1 << bits) - 1
    assert is_saturated(name, value) is saturated


@pytest.mark.parametrize("name", ["out_of_sequence", "unicast_xmit_packets", "lifespan", ""])
def test_other_counters_are_not_pma_counters(name):
    assert pma_width(name, 4294967295) is None and pma_max(name) is None
    assert not is_saturated(name, 4294967295) and not is_saturated(name, (1 << 64) - 1)


def test_no_reading_is_not_saturated():
    assert not is_saturated("symbol_error", None)
