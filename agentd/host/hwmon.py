"""NIC temperatures from the hwmon devices of the HCAs' PCI functions.

mlx5 (drivers/net/ethernet/mellanox/mlx5/core/hwmon.c, kernel >= 6.5, and MLNX_OFED/DOCA
builds) registers one hwmon device named "mlx5" per PCI function, parented to it, so it
is found at ``sys/bus/pci/devices/<bdf>/hwmon/hwmon<N>/`` without scanning
``class/hwmon``. Its channels (Documentation/hwmon/sysfs-interface):

- ``tempN_input``, ``tempN_highest``, ``tempN_crit``: millidegrees Celsius (the firmware's
  MTMP register in 0.125 degC steps: temperature, max_temperature, temp_threshold_hi);
- ``tempN_label``: the sensor's name from the firmware ("asic", "Module0"), or, from older
  firmware without names, ``sensor<index>`` with the MTMP sensor index: ASIC sensors below
  64, the module sensor 64 + the module number.

The ASIC sensors come first; one module sensor follows when the plugged module reports a
temperature (the driver probes it once, at load). Every read of input/highest/crit is a
firmware register read (the label is cached by the driver): the reader takes ``may_read``
(device PCI bus id -> bool), the gate that keeps firmware reads off a device (issue 36),
and reads nothing of a device it refuses.

No hwmon directory (an older kernel, CONFIG_HWMON off, a driver without sensors) is no
data, not an error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agentd.host.fs import ReadContext, parse_int
from agentd.host.gate import Gate, allow_all
from agentd.model import TempSensor, TempSensorKind

DEVICES = "sys/bus/pci/devices"
MODULE_SENSOR_BASE = 64  # hwmon.c: to_mtmp_module_sensor_idx(idx) = 64 + idx
_INPUT = re.compile(r"^temp(\d{1,3})_input$")
_HWMON = re.compile(r"^hwmon\d{1,6}$")
_SENSOR_INDEX = re.compile(r"^sensor(\d{1,4})$")


def sensor_kind(label: str | None) -> TempSensorKind:
    """asic, module or other, from the label the firmware (or the driver) gave."""
    if label is None:
        return "other"
    low = label.lower()
    if low.startswith("module"):
        return "module"
    if low.startswith("asic"):
        return "asic"
    m = _SENSOR_INDEX.match(low)
    if m:
        return "module" if int(m.group(1)) >= MODULE_SENSOR_BASE else "asic"
    return "other"


def _millideg(ctx: ReadContext, path: str) -> float | None:
    text = ctx.text(path)
    if text is None:
        return None
    v = parse_int(text)
    if v is None:
        ctx.error(path, "unparsable", f"expected millidegrees, got {text[:40]!r}")
        return None
    return v / 1000


def read_device(ctx: ReadContext, bus_id: str) -> tuple[TempSensor, ...]:
    """The temperature channels of every hwmon device of one PCI function."""
    base = f"{DEVICES}/{bus_id}/hwmon"
    out: list[TempSensor] = []
    for hw in sorted(n for n in ctx.listdir(base) if _HWMON.match(n)):
        d = f"{base}/{hw}"
        channels = sorted(int(m.group(1)) for n in ctx.listdir(d) if (m := _INPUT.match(n)))
        for ch in channels:
            label = ctx.text(f"{d}/temp{ch}_label")
            out.append(TempSensor(
                hwmon=hw,
                channel=ch,
                label=label or None,
                kind=sensor_kind(label),
                temperature_c=_millideg(ctx, f"{d}/temp{ch}_input"),
                highest_c=_millideg(ctx, f"{d}/temp{ch}_highest"),
                critical_c=_millideg(ctx, f"{d}/temp{ch}_crit"),
            ))
    return tuple(out)


def read_hwmon(ctx: ReadContext, bus_ids: Sequence[str], may_read: Gate = allow_all) -> dict[str, tuple[TempSensor, ...]]:
    """``{PCI bus id: sensors}`` for the devices that have any and that ``may_read``
    allows. Never raises."""
    out: dict[str, tuple[TempSensor, ...]] = {}
    for bus in bus_ids:
        if not may_read(bus):
            continue
        sensors = read_device(ctx, bus)
        if sensors:
            out[bus] = sensors
    return out
