"""Fault targets and the context fault effects work in.

Target forms (per kind, see fault_kinds):
- port:    ``mlx5_0``, ``mlx5_0:1``, or a netdev of an HCA; default the first compute HCA, port 1;
- netdev:  a netdev name (HCA netdevs, the bootstrap NIC) or an HCA name (its netdev);
- roce:    like netdev but only mlx5 Ethernet netdevs; default the first of them;
- ethtool: a netdev with an ``.agentd/ethtool`` file (mlx5 Ethernet, the bootstrap
           NIC); default the first RoCE netdev, else the bootstrap NIC;
- gpu:     ``gpuN``, ``N`` or a bus id, optionally ``:LINK`` (NVLink kinds); default gpu0;
- device:  gpuN, an HCA, a netdev or any PCI bus id in the profile; default gpu0;
- nic:     an HCA name, its netdev or its bus id; default the first compute HCA;
- file:    a path relative to the root (may go through class/ links) or ``hca[:port]``
           (the port's attribute files the kind names); default ``mlx5_0:1``;
- gpus:    ``gpuN`` or all GPUs when left out;
- none:    no target.
Resolution depends only on the profile (and, for paths, on the directory links, which
faults never change), so apply and clear resolve a spec to the same thing.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentd.base.jsontypes import JsonObject, JsonValue
from agentd.sim.net import format_ethtool, netdev_dir, parse_ethtool
from agentd.sim.pci import PciNode
from agentd.sim.pristine import pristine_root
from agentd.sim.profiles import HcaSpec, Profile
from agentd.sim.rdma import port_dir
from agentd.sim.tree import write_attr

NVML = ".agentd/nvml.json"


@dataclass(frozen=True)
class NvmlField:
    """A field of nvml.json: ``bdf`` None = top-level key ``path[0]``; ``path`` () = the whole GPU entry."""

    bdf: str | None
    path: tuple[str | int, ...] = ()  # keys and list indexes, outermost first


# What clearing a fault copies back from the pristine tree: a path under the root, or a field of nvml.json.
Restorable = str | NvmlField
# A fault's VALUE as its kind parsed it (fault_kinds.Kind.value: an int, a float, a string,
# None), each kind's effects reading their own: a table of kinds cannot say which per entry.
FaultValue = Any  # Any: one type per fault kind (above)


@dataclass(frozen=True)
class Target:
    name: str  # canonical form, recorded in simulation.json
    hca: HcaSpec | None = None
    port: int = 1
    netdev: str | None = None
    gpu: int | None = None  # NVML index in the fault-free profile
    bdf: str | None = None
    link: int | None = None
    files: tuple[str, ...] = ()
    gpus: tuple[int, ...] = field(default_factory=tuple)

    # What an effect of a kind that targets a port, a netdev or a PCI function reads: the kind's
    # resolver always sets it (agentd.sim.fault_kinds), so None here is a bug, said as one.
    @property
    def the_hca(self) -> HcaSpec:
        if self.hca is None:
            raise ValueError(f"fault target {self.name!r} has no HCA")
        return self.hca

    @property
    def the_netdev(self) -> str:
        if self.netdev is None:
            raise ValueError(f"fault target {self.name!r} has no netdev")
        return self.netdev

    @property
    def the_bdf(self) -> str:
        if self.bdf is None:
            raise ValueError(f"fault target {self.name!r} has no PCI function")
        return self.bdf


@dataclass
class Ctx:
    root: Path
    profile: Profile
    layout: dict[str, PciNode]

    # -- files --------------------------------------------------------------
    def path(self, rel: str) -> Path:
        return self.root / rel

    def read(self, rel: str) -> str:
        return self.path(rel).read_text().strip()

    def write(self, rel: str, value: object) -> None:
        write_attr(self.path(rel), value)

    def add(self, rel: str, delta: int, cap: int | None = None) -> None:
        """Advance a counter file; ``cap`` saturates it like a fixed-width PMA counter."""
        v = int(self.read(rel)) + delta
        self.write(rel, min(v, cap) if cap is not None else v)

    # -- places -------------------------------------------------------------
    def port_dir(self, hca: HcaSpec, port: int = 1) -> str:
        return port_dir(self.layout, hca, port)

    def netdev_dir(self, name: str) -> str:
        boot = self.profile.boot_nic
        if name == boot.netdev:
            return f"{self.layout[boot.bdf].rel}/net/{name}"
        return netdev_dir(self.layout, self.hca_of_netdev(name))  # type: ignore[arg-type]

    def hca_of_netdev(self, name: str) -> HcaSpec | None:
        return next((h for h in self.profile.hcas if h.netdev == name), None)

    def netdevs(self) -> list[str]:
        return [self.profile.boot_nic.netdev] + [h.netdev for h in self.profile.hcas]

    # -- ethtool --------------------------------------------------------------
    def ethtool_add(self, netdev: str, deltas: dict[str, int]) -> None:
        p = self.path(f".agentd/ethtool/{netdev}")
        if not p.is_file():
            return  # removed by another fault (ethtool_failure=missing, nic_removed)
        try:
            stats = parse_ethtool(p.read_text())
        except (ValueError, UnicodeDecodeError):
            return  # garbage written by ethtool_failure
        for k, d in deltas.items():
            stats[k] = stats.get(k, 0) + d
        write_attr(p, format_ethtool(stats), newline=False)

    # -- nvml.json --------------------------------------------------------------
    def nvml(self) -> JsonObject:
        data: JsonObject = json.loads(self.path(NVML).read_text())
        return data

    def save_nvml(self, data: JsonObject) -> None:
        write_attr(self.path(NVML), json.dumps(data, indent=2))

    def nvml_gpu(self, data: JsonObject, bdf: str) -> JsonObject | None:
        return next((g for g in data["gpus"] if g["pci_bus_id"] == bdf), None)

    def restore_nvml(self, pristine: JsonObject, fields: list[NvmlField]) -> None:
        data = self.nvml()
        for f in fields:
            if f.bdf is None:
                key = str(f.path[0])
                if key in pristine:
                    data[key] = pristine[key]
                else:
                    data.pop(key, None)
                continue
            src = self.nvml_gpu(pristine, f.bdf)
            if not f.path:
                data["gpus"] = [g for g in data["gpus"] if g["pci_bus_id"] != f.bdf] + [src]
                data["gpus"].sort(key=lambda g: g["pci_bus_id"])
                for i, g in enumerate(data["gpus"]):
                    g["index"] = i
                continue
            gpu = self.nvml_gpu(data, f.bdf)
            if gpu is None or src is None:
                continue
            frm: JsonValue = src
            to: JsonValue = gpu
            for k in f.path[:-1]:
                frm, to = frm[k], to[k]
            to[f.path[-1]] = frm[f.path[-1]]
        self.save_nvml(data)


# ---------------------------------------------------------------------------
# resolution


def _hca(ctx: Ctx, name: str) -> HcaSpec | None:
    return ctx.profile.hca(name) or ctx.hca_of_netdev(name) or next((h for h in ctx.profile.hcas if h.bdf == name), None)


def _first_compute(ctx: Ctx) -> HcaSpec:
    hcas = [h for h in ctx.profile.hcas if h.compute] or list(ctx.profile.hcas)
    if not hcas:
        raise ValueError("the profile has no HCA")
    return hcas[0]


def _port(ctx: Ctx, t: str | None) -> Target:
    if t is None:
        first = _first_compute(ctx)
        return Target(f"{first.name}:1", hca=first, netdev=first.netdev)
    name, _, port = t.partition(":")
    hca = _hca(ctx, name)
    if hca is None:
        raise ValueError(f"no HCA {name!r}; HCAs: {', '.join(h.name for h in ctx.profile.hcas)}")
    if port and port != "1":
        raise ValueError(f"{hca.name} has only port 1")
    return Target(f"{hca.name}:1", hca=hca, netdev=hca.netdev)


def _netdev(ctx: Ctx, t: str | None, *, mode: str) -> Target:
    """mode: "any" (every netdev with a device), "roce" (mlx5 Ethernet), "ethtool" (has stats)."""
    roce = ctx.profile.roce_netdevs
    boot = ctx.profile.boot_nic.netdev
    allowed = {"any": ctx.netdevs(), "roce": roce, "ethtool": [boot] + roce}[mode]
    if t is None:
        if roce:
            t = roce[0]
        elif mode == "roce":
            raise ValueError("the profile has no RoCE (mlx5 Ethernet) netdev")
        else:
            t = boot if mode == "ethtool" else _first_compute(ctx).netdev
    hca = ctx.profile.hca(t)
    name = hca.netdev if hca else t
    if name not in allowed:
        what = {"any": "netdev", "roce": "RoCE netdev", "ethtool": "netdev with ethtool statistics"}[mode]
        raise ValueError(f"no {what} {t!r}; valid: {', '.join(allowed) or 'none'}")
    return Target(name, hca=ctx.hca_of_netdev(name), netdev=name)


_GPU_RE = re.compile(r"^(?:gpu)?(\d+)$")


def _gpu(ctx: Ctx, t: str | None, *, links: bool) -> Target:
    bdfs = ctx.profile.gpu_bdfs
    if not bdfs:
        raise ValueError("the profile has no GPU")
    t = t or "gpu0"
    link: int | None = None
    if links and re.search(r":\d+$", t) and not re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d$", t):
        t, _, l = t.rpartition(":")
        link = int(l)
    m = _GPU_RE.match(t)
    if m:
        index = int(m.group(1))
        if index >= len(bdfs):
            raise ValueError(f"no gpu{index}; the profile has {len(bdfs)} GPUs")
    elif t.lower() in bdfs:
        index = bdfs.index(t.lower())
    else:
        raise ValueError(f"no GPU {t!r}; use gpuN (0-{len(bdfs) - 1}) or a bus id")
    name = f"gpu{index}" + (f":{link}" if link is not None else "")
    return Target(name, gpu=index, bdf=bdfs[index], link=link)


def _device(ctx: Ctx, t: str | None) -> Target:
    if t is None or _GPU_RE.match(t):
        return _gpu(ctx, t, links=False)
    hca = _hca(ctx, t)
    if hca is not None:
        return Target(hca.bdf, hca=hca, bdf=hca.bdf)
    if t == ctx.profile.boot_nic.netdev:
        t = ctx.profile.boot_nic.bdf
    if t.lower() in ctx.layout:
        return Target(t.lower(), bdf=t.lower())
    raise ValueError(f"no device {t!r}; use gpuN, an HCA, a netdev or a PCI bus id")


def _nic(ctx: Ctx, t: str | None) -> Target:
    hca = _first_compute(ctx) if t is None else _hca(ctx, t)
    if hca is None:
        raise ValueError(f"no HCA {t!r}; HCAs: {', '.join(h.name for h in ctx.profile.hcas)}")
    return Target(hca.name, hca=hca, netdev=hca.netdev, bdf=hca.bdf)


def _file(ctx: Ctx, t: str | None, port_files: tuple[str, ...]) -> Target:
    if t is None or "/" not in t:
        p = _port(ctx, t)
        files = tuple(f"{ctx.port_dir(p.hca, 1)}/{f}" for f in port_files)  # type: ignore[arg-type]
        return Target(",".join(files), hca=p.hca, files=files)
    rel = t.lstrip("/")
    parent = os.path.realpath(ctx.root / os.path.dirname(rel))
    root = os.path.realpath(ctx.root)
    if not parent.startswith(root + os.sep):
        raise ValueError(f"{t!r} is not inside the root")
    canon = os.path.join(os.path.relpath(parent, root), os.path.basename(rel))
    pristine = pristine_root(ctx.profile.name) / canon
    if pristine.is_symlink() or not pristine.is_file():
        raise ValueError(f"{t!r} is not a regular file of the {ctx.profile.name} tree")
    return Target(canon, files=(canon,))


def _gpus(ctx: Ctx, t: str | None) -> Target:
    if t is None:
        return Target("all", gpus=tuple(range(len(ctx.profile.gpu_bdfs))))
    g = _gpu(ctx, t, links=False)
    return Target(g.name, gpu=g.gpu, bdf=g.bdf, gpus=(g.gpu,))  # type: ignore[arg-type]


def resolve_target(ctx: Ctx, form: str, t: str | None, *, links: bool = False, port_files: tuple[str, ...] = ()) -> Target:
    """The target ``t`` (None: the form's default) of a fault kind whose targets have this
    ``form`` (a ``Kind.target``); ``links``/``port_files`` as that kind declares them."""
    match form:
        case "port":
            return _port(ctx, t)
        case "netdev":
            return _netdev(ctx, t, mode="any")
        case "ethtool":
            return _netdev(ctx, t, mode="ethtool")
        case "roce":
            return _netdev(ctx, t, mode="roce")
        case "gpu":
            return _gpu(ctx, t, links=links)
        case "device":
            return _device(ctx, t)
        case "nic":
            return _nic(ctx, t)
        case "file":
            return _file(ctx, t, port_files)
        case "gpus":
            return _gpus(ctx, t)
        case "none":
            return Target("node")
    raise AssertionError(form)
