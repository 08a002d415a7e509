"""The physical layer of Ethernet ports through ethtool netlink: why a link is down, how
often the PHY saw it go down, and the FEC counters.

Live (the running kernel's root; the netdevs in agentd's netns): the generic netlink family
"ethtool" (include/uapi/linux/ethtool_netlink*.h, Documentation/networking/
ethtool-netlink.rst), one request per netdev and question:

- ``ETHTOOL_MSG_LINKSTATE_GET`` (net/ethtool/linkstate.c) with ``ETHTOOL_FLAG_STATS``:
  ``LINK``; ``EXT_STATE``/``EXT_SUBSTATE`` (only while the netdev is up and the driver
  says why the link is down: ``get_link_ext_state``, mlx5e since 5.10); ``EXT_DOWN_CNT``
  (the PHY's link-down events: ``get_link_ext_stats``, kernel >= 6.3, mlx5e among the
  first). A kernel without the stats flag (< 5.12) answers EOPNOTSUPP to it: asked again
  without.
- ``ETHTOOL_MSG_FEC_GET`` (net/ethtool/fec.c) with ``ETHTOOL_FLAG_STATS``: the
  ``STATS`` nest's ``CORRECTED``, ``UNCORR``, ``CORR_BITS`` arrays of u64 (the total, then
  one per lane where the driver counts per lane; mlx5e ``mlx5e_get_fec_stats`` since 5.16:
  per lane in FC-FEC mode only, RS-FEC corrects across lanes), and the ``HIST`` bins
  (kernel >= 6.18).

A netdev without the op answers EOPNOTSUPP: no data, never an error (veth, dummy, IPoIB
for FEC). A kernel without the family (no CONFIG_ETHTOOL_NETLINK) has no data either.

Recorded (a capture or a simulated node): ``.agentd/ethtool-netlink/<if>.json`` holds the
answers under the attribute names of the kernel's netlink spec
(Documentation/netlink/specs/ethtool.yaml, what ``ynl`` prints): ``{"linkstate": {"link",
"ext-state", "ext-substate", "ext-down-cnt"}, "fec": {"stats": {"corrected", "uncorr",
"corr-bits", "hist": [{"bin-low", "bin-high", "bin-val", "bin-val-per-lane"}]}},
"module-eeprom": ...}``, or ``{"error": "EOPNOTSUPP"}`` for a question the kernel refused
(docs/capture.md). Live answers are put in the same shape first, so one conversion
(``phy_of``) serves both.
"""

from __future__ import annotations

import errno
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentd.base import recorded
from agentd.base.jsontypes import JsonObject
from agentd.host.dcb import NetlinkError, iter_attrs
from agentd.host.ethtool import read_recorded_per_netdev, valid_ifname
from agentd.host.fs import ReadContext
from agentd.host.genl import Genl, attrs_of, nest, strz, u32, unsigned
from agentd.model import FecBin, FecStats, PhyLink

FAMILY = "ethtool"
MSG_LINKSTATE_GET = 6
MSG_FEC_GET = 29
MSG_MODULE_EEPROM_GET = 31
A_HEADER = 1  # every request's header nest: ETHTOOL_A_*_HEADER is attribute 1
A_HEADER_DEV_NAME = 2
A_HEADER_FLAGS = 3
FLAG_STATS = 1 << 2
LINKSTATE = {2: "link", 3: "sqi", 4: "sqi-max", 5: "ext-state", 6: "ext-substate", 7: "ext-down-cnt"}
A_FEC_STATS = 5
FEC_STAT = {2: "corrected", 3: "uncorr", 4: "corr-bits"}
A_FEC_STAT_HIST = 5
FEC_HIST = {2: "bin-low", 3: "bin-high", 4: "bin-val"}
A_FEC_HIST_PER_LANE = 5
SIM_MAX_BYTES = 256 * 1024

# include/uapi/linux/ethtool.h: enum ethtool_link_ext_state and its substates
EXT_STATES = ("autoneg", "link_training_failure", "link_logical_mismatch", "bad_signal_integrity", "no_cable",
              "cable_issue", "eeprom_issue", "calibration_failure", "power_budget_exceeded", "overheat", "module",
              "otp_speed_violation", "bmc_request_down")
EXT_SUBSTATES: dict[str, tuple[str, ...]] = {
    "autoneg": ("no_partner_detected", "ack_not_received", "next_page_exchange_failed", "no_partner_detected_force_mode",
                "fec_mismatch_during_override", "no_hcd"),
    "link_training_failure": ("kr_frame_lock_not_acquired", "kr_link_inhibit_timeout", "kr_link_partner_did_not_set_receiver_ready",
                              "remote_fault"),
    "link_logical_mismatch": ("pcs_did_not_acquire_block_lock", "pcs_did_not_acquire_am_lock", "pcs_did_not_get_align_status",
                              "fc_fec_is_not_locked", "rs_fec_is_not_locked"),
    "bad_signal_integrity": ("large_number_of_physical_errors", "unsupported_rate", "serdes_reference_clock_lost", "serdes_alos"),
    "cable_issue": ("unsupported_cable", "cable_test_failure"),
    "module": ("cmis_not_ready",),
}


def header(ifname: str, flags: int = 0) -> bytes:
    parts = [strz(A_HEADER_DEV_NAME, ifname)]
    if flags:
        parts.append(u32(A_HEADER_FLAGS, flags))
    return nest(A_HEADER, parts)


def errname(err: int) -> str:
    """The errno's name; EOPNOTSUPP by that name (Linux's ENOTSUP is the same number)."""
    return "EOPNOTSUPP" if err == errno.EOPNOTSUPP else errno.errorcode.get(err, f"E{err}")


# ---------------------------------------------------------------------------
# replies -> answers (pure)


def _u64s(value: bytes) -> list[int]:
    n = len(value) // 8
    return list(struct.unpack(f"={n}Q", value[: n * 8]))


def parse_linkstate(payload: bytes) -> dict[str, int]:
    out: dict[str, int] = {}
    for atype, value in iter_attrs(payload):
        name = LINKSTATE.get(atype)
        if name is not None:
            out[name] = unsigned(value)
    return out


def parse_fec(payload: bytes) -> dict[str, Any]:  # Any: the kernel's nested answer, JSON-shaped
    stats = attrs_of(payload).get(A_FEC_STATS)
    if stats is None:
        return {}
    out: JsonObject = {}
    hist: list[JsonObject] = []
    for atype, value in iter_attrs(stats):
        name = FEC_STAT.get(atype)
        if name is not None and value:
            out[name] = _u64s(value)
        elif atype == A_FEC_STAT_HIST:
            b: JsonObject = {}
            for htype, hvalue in iter_attrs(value):
                if htype in FEC_HIST:
                    b[FEC_HIST[htype]] = unsigned(hvalue)
                elif htype == A_FEC_HIST_PER_LANE:
                    b["bin-val-per-lane"] = _u64s(hvalue)
            hist.append(b)
    if hist:
        out["hist"] = hist
    return {"stats": out} if out else {}


# ---------------------------------------------------------------------------
# answers -> PhyLink (pure; live and recorded alike)


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _ints(v: object) -> list[int]:
    return [x for x in v if _int(x) is not None] if isinstance(v, list) else []


def _fec(answer: object) -> FecStats | None:
    stats = answer.get("stats") if isinstance(answer, Mapping) else None
    if not isinstance(stats, Mapping):
        return None
    arrays = {k: _ints(stats.get(k)) for k in ("corrected", "uncorr", "corr-bits")}
    bins = []
    for b in stats.get("hist") or ():
        if isinstance(b, Mapping) and all(_int(b.get(k)) is not None for k in ("bin-low", "bin-high", "bin-val")):
            bins.append(FecBin(low=b["bin-low"], high=b["bin-high"], count=b["bin-val"]))
    if not any(arrays.values()) and not bins:
        return None
    return FecStats(
        corrected_blocks=arrays["corrected"][0] if arrays["corrected"] else None,
        uncorrectable_blocks=arrays["uncorr"][0] if arrays["uncorr"] else None,
        corrected_bits=arrays["corr-bits"][0] if arrays["corr-bits"] else None,
        corrected_per_lane=tuple(arrays["corrected"][1:]),
        uncorrectable_per_lane=tuple(arrays["uncorr"][1:]),
        histogram=tuple(bins),
    )


def ext_state_names(state: int | None, substate: int | None) -> tuple[str | None, str | None]:
    if state is None:
        return None, None
    name = EXT_STATES[state] if state < len(EXT_STATES) else f"unknown-{state}"
    if not substate:
        return name, None
    subs = EXT_SUBSTATES.get(name, ())
    return name, subs[substate - 1] if substate <= len(subs) else f"unknown-{substate}"


def phy_of(answer: Mapping[str, Any]) -> PhyLink | None:  # Any: JSON-shaped answers
    """The PhyLink of a netdev's answers; None when the kernel told nothing."""
    ls = answer.get("linkstate")
    ls = ls if isinstance(ls, Mapping) and "error" not in ls else {}
    fec = _fec(answer.get("fec"))
    link = _int(ls.get("link"))
    state, sub = ext_state_names(_int(ls.get("ext-state")), _int(ls.get("ext-substate")))
    down = _int(ls.get("ext-down-cnt"))
    if link is None and state is None and down is None and fec is None:
        return None
    return PhyLink(link=None if link is None else bool(link), ext_state=state, ext_substate=sub, link_down_events=down, fec=fec)


# ---------------------------------------------------------------------------
# live


Asker = Callable[[int, bytes], bytes | None]  # (cmd, attrs) -> the reply's attributes


def ask_phy(ask: Asker, ifname: str) -> dict[str, Any]:  # Any: JSON-shaped answers
    """LINKSTATE_GET and FEC_GET for one netdev, as answers. An EOPNOTSUPP is an answer
    (``{"error": "EOPNOTSUPP"}``); any other refusal raises NetlinkError."""
    out: JsonObject = {}
    for key, cmd, parse in (("linkstate", MSG_LINKSTATE_GET, parse_linkstate), ("fec", MSG_FEC_GET, parse_fec)):
        try:
            try:
                payload = ask(cmd, header(ifname, FLAG_STATS))
            except NetlinkError as e:
                if e.errno != errno.EOPNOTSUPP or key == "fec":
                    raise
                payload = ask(cmd, header(ifname))  # a kernel before the stats flag (5.12)
        except NetlinkError as e:
            if e.errno != errno.EOPNOTSUPP:
                raise
            out[key] = {"error": errname(e.errno)}
            continue
        out[key] = parse(payload or b"")
    return out


def _read_live(ctx: ReadContext, names: Sequence[str]) -> dict[str, JsonObject]:
    out: dict[str, JsonObject] = {}
    if not names:
        return out
    try:
        g = Genl()
    except OSError as e:
        ctx.error("netlink(NETLINK_GENERIC)", "unavailable", f"cannot open a generic netlink socket: {e.strerror or e}")
        return out
    with g:
        try:
            family = g.family(FAMILY)
        except (NetlinkError, TimeoutError, ValueError, OSError) as e:
            ctx.error("genl(ethtool)", "unreadable", f"resolving the ethtool family: {e}")
            return out
        if family is None:
            return out  # no CONFIG_ETHTOOL_NETLINK: nothing to ask

        def ask(cmd: int, attrs: bytes) -> bytes | None:
            return g.ask(family, cmd, attrs)

        for name in names:
            path = f"genl(ethtool, {name})"
            if not valid_ifname(name):
                ctx.error(path, "unreadable", "invalid interface name")
                continue
            try:
                out[name] = ask_phy(ask, name)
            except NetlinkError as e:
                ctx.error(path, "unreadable", f"{errname(e.errno)}: {e}")
            except TimeoutError:
                ctx.error(path, "timeout", "no reply within the netlink timeout")
            except (ValueError, OSError) as e:
                ctx.error(path, "unparsable" if isinstance(e, ValueError) else "unreadable", str(e))
    return out


def _json_object(text: str) -> JsonObject | None:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def read_recorded_answers(ctx: ReadContext, names: Sequence[str]) -> dict[str, dict[str, Any]]:  # Any: JSON
    """``{netdev: answers}`` from ``.agentd/ethtool-netlink/<if>.json`` (no file: none)."""
    return read_recorded_per_netdev(ctx, recorded.ETHTOOL_NETLINK, names, _json_object, "not a JSON object of ethtool netlink answers",
                                    max_bytes=SIM_MAX_BYTES, suffix=".json")


def read_phy(ctx: ReadContext, names: Sequence[str]) -> dict[str, PhyLink]:
    """``{netdev: PhyLink}`` for the netdevs the kernel said something about. Never raises."""
    if ctx.host.is_live:
        answers = _read_live(ctx, names)
    elif ctx.host.answers is not None:
        answers = read_recorded_answers(ctx, names)
    else:
        return {}
    out = {}
    for name, answer in answers.items():
        phy = phy_of(answer)
        if phy is not None:
            out[name] = phy
    return out


def answers_of(phy: PhyLink | None) -> dict[str, Any]:  # Any: JSON-shaped answers
    """The recorded answers that read back as ``phy`` (what ``agentd capture`` writes)."""
    if phy is None:
        return {"linkstate": {"error": "EOPNOTSUPP"}, "fec": {"error": "EOPNOTSUPP"}}
    ls: dict[str, int] = {}
    if phy.link is not None:
        ls["link"] = int(phy.link)
    if phy.ext_state is not None:
        state = phy.ext_state
        ls["ext-state"] = EXT_STATES.index(state) if state in EXT_STATES else int(state.rpartition("-")[2])
        if phy.ext_substate is not None:
            subs = EXT_SUBSTATES.get(state, ())
            sub = phy.ext_substate
            ls["ext-substate"] = subs.index(sub) + 1 if sub in subs else int(sub.rpartition("-")[2])
    if phy.link_down_events is not None:
        ls["ext-down-cnt"] = phy.link_down_events
    out: JsonObject = {"linkstate": ls}
    f = phy.fec
    if f is None:
        out["fec"] = {"error": "EOPNOTSUPP"}
        return out
    stats: JsonObject = {}
    for key, total, lanes in (("corrected", f.corrected_blocks, f.corrected_per_lane), ("uncorr", f.uncorrectable_blocks, f.uncorrectable_per_lane),
                              ("corr-bits", f.corrected_bits, ())):
        if total is not None:
            stats[key] = [total, *lanes]
    if f.histogram:
        stats["hist"] = [{"bin-low": b.low, "bin-high": b.high, "bin-val": b.count} for b in f.histogram]
    out["fec"] = {"stats": stats}
    return out
