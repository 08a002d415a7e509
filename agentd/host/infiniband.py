"""RDMA devices and their ports from ``sys/class/infiniband/*``.

Reads what the kernel exposes (Documentation/ABI/stable/sysfs-class-infiniband) and never
judges it. Counter values are stored raw (IB data counters count 4-byte words).

The caller says which parts to read (``parts``), so each collection tier opens only the
files it needs; every part lists the HCAs and their ports, and fields of parts not read
keep their defaults:

- ``link``: each port's state, phys_state, rate, link_layer, lid and sm_lid.
- ``counters``: each port's ``counters/``, ``counters_ext/`` and ``hw_counters/``.
- ``gids``: each port's GID table.
- ``inventory``: the HCA's attributes (hca_type, fw_ver, board_id, node_guid), PCI
  function, NUMA node and driver, and each port's netdev.
- ``qos``: each port's ``sm_sl`` and the MLNX_OFED/DOCA mlx5_ib traffic class override
  (``<dev>/tc/<port>/traffic_class``: "Global tclass=N" when set, then one line per
  per-address rule ending in ",tclass=N"; empty when nothing is set). Inbox drivers have
  no ``tc/`` directory: ``IbPort.tclass`` None, no error.

Cost: a node has ~10 HCAs and a RoCE port up to 255 GID slots, so files are opened only
when needed: attributes of a GID (``gid_attrs/types``, ``ndevs``) only for non-empty
slots, and on InfiniBand ports the GID table is read only up to the first empty slot
(index 0 is the port GID; later entries are rare alias GUIDs, and reading them all on
older kernels costs a firmware query each).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from agentd.base.ids import is_bdf, natural_key
from agentd.host import ibparse
from agentd.host.fs import ReadContext, parse_decimal
from agentd.host.netdev import bdf_of_class_path, link_bdf
from agentd.model import Gid, Hca, IbPort, TclassOverride

CLASS_IB = "sys/class/infiniband"

# Counter directories read into IbPort.counters (in this order) and hw_counters.
_COUNTER_DIRS = ("counters", "counters_ext")
_HW_COUNTERS_SKIP = frozenset({"lifespan"})  # a refresh interval, not a counter
# A RoCE port's netdev is looked up first in this many leading ndevs slots (the default
# MAC-derived GIDs sit at the start of the table).
_NDEV_PROBE_SLOTS = 4

# tc/<port>/traffic_class is a sysfs attribute: at most a page. More is not that file.
TCLASS_MAX_BYTES = 4096
_GLOBAL_TCLASS = re.compile(r"Global tclass=(\d{1,3})")
_RULE_TCLASS = re.compile(r"\S*(?:^|,)tclass=(\d{1,3})")

Part = Literal["link", "counters", "gids", "inventory", "qos"]
PARTS: frozenset[Part] = frozenset(("link", "counters", "gids", "inventory", "qos"))
# A port's attributes that change when its link does: what the daemon's quick check
# re-reads every fast cycle (agentd.collection.collector); lid, sm_lid, link_layer wait
# for the whole check (every medium interval).
LINK_SIGNALS = frozenset(("state", "phys_state", "rate"))


def read_infiniband(ctx: ReadContext, parts: Iterable[Part] = PARTS) -> tuple[Hca, ...]:
    """Every HCA with the ``parts`` asked for (all by default), in natural name order."""
    want = frozenset(parts)
    if not want <= PARTS:
        raise ValueError(f"unknown InfiniBand parts: {sorted(want - PARTS)}")
    hcas: list[Hca] = []
    for name in ctx.listdir(CLASS_IB):
        try:
            hca = _read_hca(ctx, name, want)
        except (OSError, ValueError) as e:  # never let one device hide the others
            ctx.error(f"{CLASS_IB}/{name}", "unreadable", f"{type(e).__name__}: {e}")
            continue
        if hca is not None:
            hcas.append(hca)
    hcas.sort(key=lambda h: natural_key(h.name))
    return tuple(hcas)


class _PciNetdevs:
    """The netdevs under the HCA's PCI function (``device/net/*``), listed once per HCA."""

    def __init__(self, ctx: ReadContext, device_dir: Path | None):
        self._ctx = ctx
        self._dir = device_dir
        self._by_port: dict[int, str] | None = None

    def for_port(self, port: int) -> str | None:
        if self._by_port is None:
            self._by_port = self._load()
        return self._by_port.get(port)

    def _load(self) -> dict[int, str]:
        out: dict[int, str] = {}
        if self._dir is None:
            return out
        net = self._dir / "net"
        for ifname in sorted(self._ctx.listdir(net), key=natural_key):
            # dev_port is 0-based per physical port; older drivers (mlx4 IPoIB) used dev_id.
            idx = self._ctx.integer(net / ifname / "dev_port")
            if idx is None:
                idx = self._ctx.integer(net / ifname / "dev_id", base=16)
            if idx is not None:
                out.setdefault(idx + 1, ifname)
        return out


def _read_hca(ctx: ReadContext, name: str, parts: frozenset[Part]) -> Hca | None:
    entry = f"{CLASS_IB}/{name}"
    real = ctx.resolve(entry)
    if real is None or not real.is_dir():
        return None

    inventory: dict[str, Any] = {}  # Any: Hca fields by name, validated by Hca(**inventory)
    device_dir = None
    if "inventory" in parts:
        device_dir = ctx.resolve(f"{entry}/device")
        if device_dir is None and bdf_of_class_path(real, "infiniband"):
            device_dir = real.parent.parent
        inventory = _read_inventory(ctx, entry, real, device_dir)

    netdevs = _PciNetdevs(ctx, device_dir)
    ports = []
    for port, pname in _numbered(ctx.listdir(f"{entry}/ports", required=True)):
        ports.append(_read_port(ctx, f"{entry}/ports/{pname}", port, netdevs, parts))
    if "qos" in parts:
        ports = [p.model_copy(update={"tclass": read_tclass(ctx, f"{entry}/tc/{p.port}/traffic_class")}) for p in ports]
    return Hca(name=name, ports=tuple(ports), **inventory)


def _read_inventory(ctx: ReadContext, entry: str, real: Path, device_dir: Path | None) -> dict[str, Any]:  # Any: Hca fields by name
    pci = link_bdf(ctx, f"{entry}/device") or bdf_of_class_path(real, "infiniband")
    if pci is None and device_dir is not None:
        # An auxiliary/SF device (mlx5_core.sf.N) hangs below its PCI function.
        for candidate in (device_dir, device_dir.parent):
            if is_bdf(candidate.name):
                pci = candidate.name.lower()
                break

    numa_node = driver = None
    if device_dir is not None:
        numa_node = ctx.integer(device_dir / "numa_node")
        if numa_node is not None and numa_node < 0:
            numa_node = None
        driver = ctx.readlink_name(device_dir / "driver")

    def attr(a: str) -> str | None:
        return ctx.text(f"{entry}/{a}") or None

    return {
        "hca_type": attr("hca_type"),
        "fw_ver": attr("fw_ver"),
        "board_id": attr("board_id"),
        "node_guid": attr("node_guid"),
        "pci_bus_id": pci,
        "numa_node": numa_node,
        "driver": driver,
    }


def _read_port(ctx: ReadContext, pdir: str, port: int, netdevs: _PciNetdevs, parts: frozenset[Part]) -> IbPort:
    fields: dict[str, Any] = {}  # Any: IbPort fields by name, validated by IbPort(**fields)
    link_layer = None
    if parts & {"link", "gids", "inventory"}:  # GID table length and netdev lookup depend on it
        link_layer = fields["link_layer"] = _required_text(ctx, f"{pdir}/link_layer")
    if "link" in parts:
        fields["state_id"], fields["state"] = _state(ctx, f"{pdir}/state")
        fields["phys_state_id"], fields["phys_state"] = _state(ctx, f"{pdir}/phys_state")
        rate_raw = _required_text(ctx, f"{pdir}/rate")
        gbps, width, gen = ibparse.parse_rate(rate_raw)
        if rate_raw and gbps is None:
            ctx.error(f"{pdir}/rate", "unparsable", f"unknown rate {rate_raw[:60]!r}")
        fields.update(rate_raw=rate_raw, rate_gbps=gbps, width=width, generation=gen)
        fields["lid"] = ctx.integer(f"{pdir}/lid", base=16)
        fields["sm_lid"] = ctx.integer(f"{pdir}/sm_lid", base=16)
    if "qos" in parts:
        fields["sm_sl"] = ctx.integer(f"{pdir}/sm_sl")
    if "counters" in parts:
        fields["counters"] = _read_counters(ctx, pdir, _COUNTER_DIRS)
        fields["hw_counters"] = _read_counters(ctx, pdir, ("hw_counters",), skip=_HW_COUNTERS_SKIP)

    gid_table: tuple[Gid, ...] = ()
    ndevs_seen: dict[int, str | None] = {}  # gid_attrs/ndevs/<i> already read for the table
    if "gids" in parts:
        gid_table = fields["gids"] = _read_gids(ctx, pdir, full=link_layer != "InfiniBand", ndevs_seen=ndevs_seen)
    if "inventory" in parts:
        # The port's netdev: a leading GID's ndev (RoCE), else the PCI function's netdev
        # for this port (IPoIB, or a RoCE port whose leading slots are empty), else any
        # GID's ndev.
        netdev = _first_ndev(ctx, pdir, ndevs_seen) if link_layer != "InfiniBand" else None
        if netdev is None:
            netdev = netdevs.for_port(port)
        if netdev is None:
            netdev = next((g.netdev for g in gid_table if g.netdev), None)
        fields["netdev"] = netdev
    return IbPort(port=port, **fields)


def parse_tclass(text: str) -> TclassOverride:
    """A ``traffic_class`` file's text (mlx5_ib's traffic_class_show) as a TclassOverride.
    ValueError for a line of another shape or a class outside 0-255."""
    global_tclass: int | None = None
    rules: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _GLOBAL_TCLASS.fullmatch(line)
        rule = None if m is not None else _RULE_TCLASS.fullmatch(line)
        value = m or rule
        if value is None or int(value.group(1)) > 255:
            raise ValueError(f"not a traffic class line: {line[:60]!r}")
        if m is not None:
            if global_tclass is not None:
                raise ValueError("two Global tclass lines")
            global_tclass = int(m.group(1))
        else:
            rules.append(line)
    return TclassOverride(global_tclass=global_tclass, rules=tuple(rules))


def read_tclass(ctx: ReadContext, path: str) -> TclassOverride | None:
    """The port's traffic class override; None when the file is absent (inbox driver) or
    does not read as one (an ``unparsable`` error)."""
    data = ctx.raw(path, max_bytes=TCLASS_MAX_BYTES + 1)
    if data is None:
        return None
    try:
        if len(data) > TCLASS_MAX_BYTES:
            raise ValueError(f"longer than {TCLASS_MAX_BYTES} bytes")
        return parse_tclass(data.decode("ascii"))
    except UnicodeDecodeError:
        ctx.error(path, "unparsable", "not ASCII text")
    except ValueError as e:
        ctx.error(path, "unparsable", str(e))
    return None


def _numbered(names: list[str]) -> list[tuple[int, str]]:
    """(number, name) of the entries named by a plain number, as the kernel names ports
    (``ports/1``) and GID slots (``gids/0``), in numeric order. Other names are skipped:
    not ASCII decimal (``str.isdigit()`` admits superscripts ``int()`` refuses), a
    leading zero, or more than 20 digits."""
    out = []
    for name in names:
        n = parse_decimal(name)
        if n is not None and str(n) == name:
            out.append((n, name))
    out.sort()
    return out


def _required_text(ctx: ReadContext, path: str) -> str | None:
    return ctx.text(path, required=True) or None


def _state(ctx: ReadContext, path: str) -> tuple[int | None, str | None]:
    text = _required_text(ctx, path)
    sid, name = ibparse.parse_state(text)
    if text and sid is None:
        ctx.error(path, "unparsable", f"unknown port state {text[:60]!r}")
    return sid, name


def _read_counters(
    ctx: ReadContext, pdir: str, dirs: tuple[str, ...], skip: frozenset[str] = frozenset()
) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dirs:
        for name in ctx.listdir(f"{pdir}/{d}"):
            if name in skip or name in out:
                continue
            v = ctx.integer(f"{pdir}/{d}/{name}")  # "N/A (no PMA)" -> None, no error
            if v is not None:
                out[name] = v
    return out


def _read_gids(ctx: ReadContext, pdir: str, *, full: bool, ndevs_seen: dict[int, str | None]) -> tuple[Gid, ...]:
    slots = _numbered(ctx.listdir(f"{pdir}/gids"))
    attrs = set(ctx.listdir(f"{pdir}/gid_attrs"))
    out: list[Gid] = []
    for i, slot in slots:
        text = ctx.text(f"{pdir}/gids/{slot}")  # None: EINVAL (empty slot) or unreadable
        if text is None or ibparse.is_zero(text):
            if full:
                continue
            break
        if not ibparse.is_gid(text):
            ctx.error(f"{pdir}/gids/{slot}", "unparsable", f"not a GID: {text[:60]!r}")
            continue
        # EINVAL on an attribute (slot emptied under us, or a container view) -> None.
        gtype = ctx.text(f"{pdir}/gid_attrs/types/{slot}") if "types" in attrs else None
        ndev = None
        if "ndevs" in attrs:
            ndev = ndevs_seen[i] = ctx.name(f"{pdir}/gid_attrs/ndevs/{slot}")
        out.append(Gid(index=i, gid=text.lower(), type=gtype or None, netdev=ndev or None))
    return tuple(out)


def _first_ndev(ctx: ReadContext, pdir: str, ndevs_seen: dict[int, str | None]) -> str | None:
    for i in range(_NDEV_PROBE_SLOTS):
        ndev = ndevs_seen[i] if i in ndevs_seen else ctx.name(f"{pdir}/gid_attrs/ndevs/{i}")
        if ndev:
            return ndev
    return None
