"""Recorded answers: what the live interfaces said, kept beside a node image.

A host root that is not the running node (a capture, a copied tree, a simulated node)
cannot ask NVML, the ETHTOOL ioctl, rtnetlink or uname. What they answered is kept in one
documented, versioned layout (docs/capture.md), written by ``agentd capture`` and by the
simulator, read by the host readers::

    ROOT/.agentd/manifest.json        this format: version, kind, who wrote it, what is in it
    ROOT/.agentd/nvml.json            NVML inventory, NVLinks, fabric (docs/simulated-sources.md)
    ROOT/.agentd/ethtool/<netdev>     what `ethtool -S <netdev>` prints
    ROOT/.agentd/dcb/<netdev>         what `mlnx_qos -i <netdev>` prints
    ROOT/.agentd/pause/<netdev>       what `ethtool -a <netdev>` prints (global pause)
    ROOT/.agentd/ethtool-netlink/<netdev>.json   ethtool netlink answers: link state, FEC
                                      statistics, module EEPROM pages (agentd.host.ethtool_nl)
    ROOT/.agentd/link-tool/<hca>_<port>   what `mstlink`/`mlxlink -d <bdf> -c -m` prints
                                      (only with [optics] link_tool; agentd.host.mstlink)
    ROOT/.agentd/uname.json           os.uname() as an object
    ROOT/.agentd/state/baseline.json  the node's inventory baseline when it was captured
    ROOT/.agentd/simulation.json      the simulator's profile and applied faults
    ROOT/dev/kmsg                     kernel log records (a file, /dev/kmsg's record format)

This module is a leaf: names, the manifest's shape, and the two text formats that are
written here (``ethtool -S``, ``mlnx_qos -i``, ``ethtool -a``). Parsing them is the readers' job.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Literal

from agentd.base.jsontypes import JsonObject, JsonValue

DIR = ".agentd"
MANIFEST = f"{DIR}/manifest.json"
NVML = "nvml.json"
ETHTOOL = "ethtool"
DCB = "dcb"
PAUSE = "pause"
ETHTOOL_NETLINK = "ethtool-netlink"
LINK_TOOL = "link-tool"
UNAME = "uname.json"
BASELINE = "state/baseline.json"
SIMULATION = "simulation.json"
KMSG = "dev/kmsg"

FORMAT = "agentd-recording"
VERSION = 1

Kind = Literal["capture", "simulation"]
KINDS: tuple[str, ...] = ("capture", "simulation")

MANIFEST_MAX_BYTES = 4 * 1024 * 1024


class ManifestError(ValueError):
    pass


def manifest(kind: Kind, *, agentd_version: str, created: str, extra: Mapping[str, JsonValue] | None = None) -> JsonObject:
    """A manifest object (``json.dumps`` it into ``MANIFEST``)."""
    out: JsonObject = {"format": FORMAT, "version": VERSION, "kind": kind, "agentd_version": agentd_version, "created": created}
    if extra:
        out.update({k: v for k, v in extra.items() if k not in out})
    return out


def parse_manifest(data: bytes) -> JsonObject:
    """The manifest object, checked for what every reader relies on: the format name, a
    version this agentd reads (``VERSION`` or older) and a known kind."""
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise ManifestError(f"not JSON: {e}") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ManifestError(f"not an {FORMAT} manifest")
    version = obj.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ManifestError(f"bad version {version!r}")
    if version > VERSION:
        raise ManifestError(f"version {version} is newer than this agentd reads ({VERSION})")
    if obj.get("kind") not in KINDS:
        raise ManifestError(f"unknown kind {obj.get('kind')!r} (expected one of {', '.join(KINDS)})")
    return obj


def format_ethtool_s(stats: Mapping[str, int]) -> str:
    """``ethtool -S`` text for a statistics mapping (the order given)."""
    lines = ["NIC statistics:"]
    lines += [f"     {name}: {value}" for name, value in stats.items()]
    return "\n".join(lines) + "\n"


def default_dscp2prio() -> dict[int, int]:
    """mlx5's DSCP map after ``--trust dscp``: DSCP d -> priority d >> 3, in the order the
    kernel's app table dumps it (63 first)."""
    return {d: d >> 3 for d in range(63, -1, -1)}


def format_mlnx_qos(enabled: Iterable[int] | None, trust: str | None = "dscp", dscp2prio: Mapping[int, int] | None = None) -> str:
    """``mlnx_qos -i <if>`` output in its layout (real sample:
    tests/fixtures/outputs/mlnx_qos.*) for a trust state and the PFC-enabled priorities
    (``None`` or empty: PFC off on every priority). With trust dscp, ``dscp2prio``
    ({dscp: priority}, in the app table's order; default ``default_dscp2prio()``) is
    printed as mlnx_qos does: one row per priority, its DSCPs in that order, at most 8 a
    row (more continue on another row of the same priority), no row for a priority
    without one. The TC lines are the defaults mlnx_qos shows."""
    on = set(enabled or ())
    lines = ["DCBX mode: OS controlled"]
    if trust:
        lines.append(f"Priority trust state: {trust}")
    if trust == "dscp":
        table = default_dscp2prio() if dscp2prio is None else dscp2prio
        lines.append("dscp2prio mapping:")
        for p in range(8):
            dscps = [d for d, prio in table.items() if prio == p]
            for i in range(0, len(dscps), 8):
                lines.append(f"        prio:{p} dscp:" + "".join(f"{d:02d}," for d in dscps[i : i + 8]))
    lines += ["Cable len: 7", "PFC configuration:", "        priority    0   1   2   3   4   5   6   7"]
    lines.append("        enabled     " + "".join(f"{1 if p in on else 0}   " for p in range(8)))
    for tc in range(8):
        prio = {0: 1, 1: 0}.get(tc, tc)
        lines += [f"tc: {tc} ratelimit: unlimited, tsa: vendor", f"         priority:  {prio}"]
    return "\n".join(lines) + "\n"


def format_ethtool_a(netdev: str, autoneg: bool | None, rx: bool, tx: bool) -> str:
    """``ethtool -a <netdev>`` output (ethtool 6.x: tabs as it prints them; "Autonegotiate"
    off when the driver does not say)."""
    def on(v: bool | None) -> str:
        return "on" if v else "off"

    return f"Pause parameters for {netdev}:\nAutonegotiate:\t{on(autoneg)}\nRX:\t\t{on(rx)}\nTX:\t\t{on(tx)}\n\n"
