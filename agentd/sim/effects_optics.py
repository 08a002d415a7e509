"""Fault effects on the physical layer (agentd.sim.optics): a hot module, a dark lane, FEC
errors, a link that is down for a reason the PHY names. See fault_kinds for the table."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from agentd.base.jsontypes import JsonObject
from agentd.base.sff import PAGE_SIZE, POWER_PER_W, TEMP_PER_C, THRESHOLD_ORDER, Cmis, Sff8636
from agentd.sim import effects_link
from agentd.sim.optics import (
    HIGHEST_ABOVE_C,
    MODULE_C,
    QSFP28_THRESHOLDS,
    THRESHOLDS,
    answers_path,
    hwmon_dir,
    is_sff8636,
    mdeg,
    module_answer,
    netdev_answers,
    pages_of,
    put,
    set_sff8636_rx_flag,
    u16,
    write_answers,
)
from agentd.sim.targets import Ctx, Target


def _hwmon_of(ctx: Ctx, t: Target) -> str:
    hca = t.hca
    assert hca is not None
    return hwmon_dir(ctx.layout, hca, ctx.profile.hcas.index(hca))


def _answers(ctx: Ctx, netdev: str) -> dict[str, Any]:  # Any: JSON-shaped
    p = ctx.path(answers_path(netdev))
    if not p.is_file():
        raise ValueError(f"{answers_path(netdev)} does not exist (not an mlx5 Ethernet netdev, or removed by another fault)")
    doc: JsonObject = json.loads(p.read_text())
    return doc


def _save(ctx: Ctx, netdev: str, doc: dict[str, Any]) -> None:  # Any: JSON-shaped
    write_answers(ctx.path(answers_path(netdev)), doc)


def _edit_pages(ctx: Ctx, netdev: str, edit: Callable[[dict[tuple[int, int, int], bytearray]], None]) -> None:
    doc = _answers(ctx, netdev)
    pages = {k: bytearray(v) for k, v in pages_of(doc["module-eeprom"]).items()}
    edit(pages)
    doc["module-eeprom"] = module_answer({k: bytes(v) for k, v in pages.items()})
    _save(ctx, netdev, doc)


def _pristine_module(ctx: Ctx, t: Target) -> None:
    """Put the module's pages back as the profile has them (link state and FEC counters kept)."""
    doc = _answers(ctx, t.the_netdev)
    doc["module-eeprom"] = netdev_answers(t.the_hca)["module-eeprom"]
    _save(ctx, t.the_netdev, doc)


def module_hot_apply(ctx: Ctx, t: Target, celsius: int) -> None:
    d = _hwmon_of(ctx, t)
    if not ctx.path(f"{d}/temp2_input").is_file():
        raise ValueError(f"{d} has no module sensor")
    ctx.write(f"{d}/temp2_input", mdeg(celsius))
    ctx.write(f"{d}/temp2_highest", mdeg(max(celsius, MODULE_C + HIGHEST_ABOVE_C)))
    if t.hca is not None and t.hca.link_layer == "Ethernet":

        def hot(pages: dict[tuple[int, int, int], bytearray]) -> None:
            lower = pages[(0, 0, 0)]
            sff = is_sff8636(lower)
            alarm, _, warn, _ = (QSFP28_THRESHOLDS if sff else THRESHOLDS)["temp"]
            put(lower, Sff8636.TEMP if sff else Cmis.TEMP, struct.pack(">h", round(celsius * TEMP_PER_C)))
            if sff:  # byte 6 bits 7 and 5
                lower[6] |= (0x80 if celsius >= alarm else 0) | (0x20 if celsius >= warn else 0)
            else:  # latched high alarm/warning
                lower[Cmis.MODULE_FLAGS] |= (0x01 if celsius >= alarm else 0) | (0x04 if celsius >= warn else 0)

        _edit_pages(ctx, t.the_netdev, hot)


def module_hot_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    d = _hwmon_of(ctx, t)
    return [f"{d}/temp2_input", f"{d}/temp2_highest"]


def module_hot_on_clear(ctx: Ctx, t: Target) -> None:
    if t.hca is not None and t.hca.link_layer == "Ethernet":
        _pristine_module(ctx, t)


def rx_power_low_apply(ctx: Ctx, t: Target, lane: int) -> None:
    def dark(pages: dict[tuple[int, int, int], bytearray]) -> None:
        lower = pages[(0, 0, 0)]
        if is_sff8636(lower):  # the lower page holds the 4 lanes' monitors and flags
            put(lower, Sff8636.RX_POWER + 2 * (lane - 1), u16(QSFP28_THRESHOLDS["rx_power"][1] / 2, POWER_PER_W))
            for name in ("low_alarm", "low_warning"):
                set_sff8636_rx_flag(lower, lane, name)
            return
        low_alarm = THRESHOLDS["rx_power"][1]
        p11 = pages[(Cmis.LANE_PAGE, 0, PAGE_SIZE)]
        put(p11, Cmis.RX_POWER + 2 * (lane - 1), u16(low_alarm / 2, POWER_PER_W))
        for name in ("low_alarm", "low_warning"):  # the module latches both flags of the lane
            p11[Cmis.RX_POWER_FLAGS[THRESHOLD_ORDER.index(name)] - PAGE_SIZE] |= 1 << (lane - 1)

    _edit_pages(ctx, t.the_netdev, dark)


def module_restores(ctx: Ctx, t: Target, v: object) -> list[str]:
    return []  # the module's pages go back in on_clear (the same file keeps the FEC counters)


def module_file(ctx: Ctx, t: Target, v: object) -> list[str]:
    """The answer file a module fault edits: clearing puts its pages back and keeps the FEC
    and link-down counters beside them, which other faults (or none) advanced: it is named
    with the advancing files, as reset_counters puts it back whole."""
    if t.hca is None or t.hca.link_layer != "Ethernet":
        return []
    return [answers_path(t.the_netdev)]


def fec_errors_apply(ctx: Ctx, t: Target, bits: int) -> None:
    doc = _answers(ctx, t.the_netdev)
    stats = doc["fec"]["stats"]
    stats["corrected"][0] += bits // 100  # RS(544,514) corrects up to 15 symbols (150 bits) a block
    stats["uncorr"][0] += max(1, bits // 10**9)
    _save(ctx, t.the_netdev, doc)
    ctx.ethtool_add(t.the_netdev, {"rx_corrected_bits_phy": bits})


def fec_advancing(ctx: Ctx, t: Target, v: object) -> list[str]:
    return [answers_path(t.the_netdev), f".agentd/ethtool/{t.the_netdev}"]


def link_down_reason_apply(ctx: Ctx, t: Target, reason: str) -> None:
    effects_link.port_down_apply(ctx, t, "polling")
    doc = _answers(ctx, t.the_netdev)
    ls = doc["linkstate"]
    ls.update({"link": 0, "ext-state": EXT_STATES.index(reason), "ext-down-cnt": ls.get("ext-down-cnt", 0) + 1})
    _save(ctx, t.the_netdev, doc)


def link_down_reason_on_clear(ctx: Ctx, t: Target) -> None:
    effects_link.port_down_on_clear(ctx, t)
    doc = _answers(ctx, t.the_netdev)
    for k in ("ext-state", "ext-substate"):
        doc["linkstate"].pop(k, None)
    doc["linkstate"]["link"] = 1
    _save(ctx, t.the_netdev, doc)


def link_down_reason_advancing(ctx: Ctx, t: Target, v: object) -> list[str]:
    return [*effects_link.link_counters_advancing(ctx, t, v), answers_path(t.the_netdev)]


# include/uapi/linux/ethtool.h enum ethtool_link_ext_state, in its order (the fault's VALUE)
EXT_STATES = ("autoneg", "link_training_failure", "link_logical_mismatch", "bad_signal_integrity", "no_cable",
              "cable_issue", "eeprom_issue", "calibration_failure", "power_budget_exceeded", "overheat", "module")
