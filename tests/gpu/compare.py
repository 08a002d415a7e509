"""``python -m tests.gpu.compare DIR`` (``make gpu-compare DIR=...``): what agentd saw on a
GPU machine against what nvidia-smi and NCCL saw there, from the folder ``make gpu-check``
wrote (tests/gpu/gpu_check.py; docs/gpu-check.md). Runs anywhere, no GPU needed.

One row per compared field: its section, subject (a GPU, a PCI element, a log), field, the
value each source gave, and an outcome:

- ``match``: the sources agree (both not reporting a value counts as agreeing);
- ``mismatch``: they disagree, or a check of one source failed;
- ``missing``: a source has no value (its step failed, or agentd does not read the field);
- ``warning``: a line NCCL logged as a warning, or a rule agentd's checker raised;
- ``info``: a fact to read (versions, findings, step outcomes).

Sections: ``steps`` (summary.json), ``nvml`` (agentd's NVML and sysfs reads against
``nvidia-smi -q -x``, ``topo -m`` and ``nvlink -s``), ``topo`` (agentd's topology XML
against NCCL's own view ``nccl-a.xml`` and NCCL's view with agentd's file
``nccl-b.xml``, element by element and attribute by attribute), ``topo.ab`` (the rest of
a.xml against b.xml), ``topo.rules`` (agentd's NCCL-reader rules on the three files),
``nccl.log`` (versions, the files NCCL says it read and wrote, its warnings), ``bench``
(``agentd bench nccl``'s JSON against the formulas and the node), ``daemon`` (/metrics and
/health after the daemon's minutes), ``check`` (the live ``agentd check``, and the capture
judged again here: it must be judged as the live run was).

Text table on stdout (``--format json`` for JSON; ``--json FILE`` writes JSON besides);
exit status 1 when a row is a mismatch, 0 otherwise, 2 when DIR holds no gpu-check output.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
import tarfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from agentd.base.ids import bus_id_label, normalize_bdf
from agentd.nccl.xmlcheck import DETECTED, scan_topo_xml
from agentd.nccl.xmlreader import Element, NcclXmlReader, ReaderError
from agentd.ncclbench.formulas import algbw_gbps, bus_factor, known_op
from tests.gpu import gpu_check as gc
from tests.support.pcitree import parse_topo_matrix

OUTCOMES = ("match", "mismatch", "missing", "warning", "info")
Json = Any  # Any: parsed JSON documents (inspect, check, bench, summary), read by key with checks

# GT/s of a PCIe link -> its generation (nvidia-smi prints generations, sysfs speeds)
GEN_OF_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
BENCH_REL_TOL = 0.02  # nccl-tests-style rounding of printed times and bandwidths


@dataclass(frozen=True)
class Row:
    section: str
    subject: str
    field: str
    outcome: str
    values: tuple[tuple[str, str | None], ...]  # (source, value as that source gave it)
    note: str = ""

    def as_json(self) -> dict[str, object]:
        d = asdict(self)
        d["values"] = dict(self.values)
        return d


def _text(v: object) -> str | None:
    return None if v is None else str(v)


def row(section: str, subject: str, field: str, values: Mapping[str, object], *, outcome: str | None = None,
        key: Callable[[Any], object] = lambda v: v, note: str = "", absent: str = "missing") -> Row:  # fmt: skip
    """A row whose outcome, unless given, is the sources' agreement: all equal under ``key``
    -> match; some None -> missing; else mismatch. All None -> ``absent``: "match" where
    None is a value (nvidia-smi's N/A and NVML's none both say "not reported")."""
    vals = tuple((k, _text(v)) for k, v in values.items())
    if outcome is None:
        present = [v for v in values.values() if v is not None]
        if not present:
            outcome = absent
        elif len(present) < len(values):
            outcome = "missing"
        else:
            outcome = "match" if len({_hashable(key(v)) for v in present}) == 1 else "mismatch"
    assert outcome in OUTCOMES, outcome
    return Row(section, subject, field, outcome, vals, note)


def _hashable(v: object) -> object:
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v


# ---------------------------------------------------------------------------
# nvidia-smi


def _na(v: str | None) -> str | None:
    """nvidia-smi's "N/A" (and empty) as no value."""
    if v is None:
        return None
    v = v.strip()
    return None if v in ("", "N/A", "Not Available", "[N/A]") else v


def _int(v: str | None) -> int | None:
    v = _na(v)
    if v is None:
        return None
    m = re.match(r"^(\d+)", v)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class SmiGpu:
    index: int
    bus_id: str | None  # as nvidia-smi prints it: 00000000:01:00.0
    name: str | None
    uuid: str | None
    vbios: str | None
    persistence_mode: str | None
    fabric_state: str | None  # "Completed", "In Progress", None for N/A
    fabric_status: str | None
    current_gen: int | None
    max_gen: int | None  # max_link_gen: the lower of the device's and the host's
    max_device_gen: int | None
    max_host_gen: int | None
    current_width: int | None
    max_width: int | None
    replay_counter: int | None


@dataclass(frozen=True)
class SmiLog:
    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int | None
    gpus: tuple[SmiGpu, ...]


def parse_smi_xml(text: str) -> SmiLog:
    """``nvidia-smi -q -x`` (DTD v10 to v13). Raises ValueError when it is not that XML."""
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as e:
        raise ValueError(f"not XML: {e}") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"root element <{root.tag}>, not <nvidia_smi_log>")
    gpus = []
    for i, g in enumerate(root.findall("gpu")):
        link = "pci/pci_gpu_link_info"
        gpus.append(SmiGpu(
            index=i,
            bus_id=g.get("id") or _na(g.findtext("pci/pci_bus_id")),
            name=_na(g.findtext("product_name")),
            uuid=_na(g.findtext("uuid")),
            vbios=_na(g.findtext("vbios_version")),
            persistence_mode=_na(g.findtext("persistence_mode")),
            fabric_state=_na(g.findtext("fabric/state")),
            fabric_status=_na(g.findtext("fabric/status")),
            current_gen=_int(g.findtext(f"{link}/pcie_gen/current_link_gen")),
            max_gen=_int(g.findtext(f"{link}/pcie_gen/max_link_gen")),
            max_device_gen=_int(g.findtext(f"{link}/pcie_gen/max_device_link_gen")),
            max_host_gen=_int(g.findtext(f"{link}/pcie_gen/max_host_link_gen")),
            current_width=_int(g.findtext(f"{link}/link_widths/current_link_width")),
            max_width=_int(g.findtext(f"{link}/link_widths/max_link_width")),
            replay_counter=_int(g.findtext("pci/replay_counter")),
        ))  # fmt: skip
    return SmiLog(
        driver_version=_na(root.findtext("driver_version")),
        cuda_version=_na(root.findtext("cuda_version")),
        attached_gpus=_int(root.findtext("attached_gpus")),
        gpus=tuple(gpus),
    )


_NVLINK_GPU = re.compile(r"^GPU (\d+): ")
_NVLINK_LINK = re.compile(r"^\s+Link (\d+): (.*?)\s*$")


def parse_nvlink_status(text: str) -> dict[int, dict[int, float | None]]:
    """``nvidia-smi nvlink -s``: GPU index -> link -> GB/s, None for ``<inactive>``. A GPU
    without NVLink prints nothing; lines that are neither a GPU nor a link are ignored."""
    out: dict[int, dict[int, float | None]] = {}
    gpu: int | None = None
    for line in text.splitlines():
        m = _NVLINK_GPU.match(line)
        if m:
            gpu = int(m.group(1))
            out[gpu] = {}
            continue
        m = _NVLINK_LINK.match(line)
        if m and gpu is not None:
            speed = re.match(r"^([0-9.]+) GB/s$", m.group(2))
            out[gpu][int(m.group(1))] = float(speed.group(1)) if speed else None
    return out


def numa_of_gpus(topo_m: str) -> dict[int, int | None]:
    """GPU index -> NUMA Affinity of ``nvidia-smi topo -m`` (None for N/A)."""
    matrix = parse_topo_matrix(topo_m)
    return {int(g[3:]): matrix.numa_affinity.get(g) for g in matrix.gpus if g in matrix.numa_affinity}


# ---------------------------------------------------------------------------
# agentd's side: the `agentd inspect --format json` document


def cuda_text(version: int | None) -> str | None:
    """NVML's CUDA driver version as nvidia-smi prints it: 12020 -> 12.2, 13000 -> 13.0."""
    return None if version is None else f"{version // 1000}.{version % 1000 // 10}"


def gen_of(gts: float | None) -> int | None:
    return None if gts is None else GEN_OF_GTS.get(float(gts))


class AgentdView:
    """The parts of ``agentd inspect --format json`` the comparison reads."""

    def __init__(self, doc: Json):
        self.doc = doc
        nvml = doc.get("nvml") or {}
        self.nvml_gpus: dict[int, Json] = {g["index"]: g for g in nvml.get("gpus") or []}
        self.gpus: dict[int, Json] = {g["index"]: g for g in doc.get("gpus") or []}
        self.pci: dict[str, Json] = {d["bdf"]: d for d in doc.get("pci") or []}
        self.driver_version: str | None = nvml.get("driver_version")
        self.cuda_driver_version: int | None = nvml.get("cuda_driver_version")

    def pci_of(self, bdf: str | None) -> Json | None:
        return self.pci.get(bdf) if bdf else None

    def parent_of(self, dev: Json | None) -> Json | None:
        chain = (dev or {}).get("parent_chain") or []
        return self.pci.get(chain[-1]) if chain else None


def _casefold(v: object) -> object:
    return str(v).strip().lower()


def _state(v: object) -> object:
    """nvidia-smi's "In Progress" and NVML's in_progress; "not_supported" as not reported."""
    s = str(v).strip().lower().replace(" ", "_")
    return None if s in ("n/a", "not_supported") else s


def _nvml_row(*args: Any, **kw: Any) -> Row:  # Any: row()'s own arguments, passed through
    """row() where both sources reporting nothing is agreement (N/A against None)."""
    return row(*args, absent="match", **kw)


def nvml_rows(smi: SmiLog, view: AgentdView, *, topo_m: str | None, nvlink: str | None) -> list[Row]:
    """agentd's NVML and sysfs reads against nvidia-smi's, GPU by GPU in NVML index order
    (nvidia-smi lists GPUs by NVML index)."""
    S, A, R = "nvml", "agentd", "nvidia-smi"
    row = _nvml_row
    rows = [
        row(S, "node", "driver_version", {A: view.driver_version, R: smi.driver_version}),
        row(S, "node", "cuda_version", {A: cuda_text(view.cuda_driver_version), R: smi.cuda_version},
            note=f"agentd: NVML's {view.cuda_driver_version}" if view.cuda_driver_version is not None else ""),
        row(S, "node", "gpu_count", {A: len(view.nvml_gpus), R: smi.attached_gpus if smi.attached_gpus is not None else len(smi.gpus)}),
    ]  # fmt: skip
    numa = numa_of_gpus(topo_m) if topo_m is not None else None
    links = parse_nvlink_status(nvlink) if nvlink is not None else None
    for g in smi.gpus:
        subject = f"gpu{g.index}"
        ours = view.nvml_gpus.get(g.index)
        if ours is None:
            rows.append(row(S, subject, "present", {A: None, R: g.bus_id}, note="NVML index not in agentd's NVML read"))
            continue
        bdf = ours.get("pci_bus_id")
        rows.append(row(S, subject, "bus_id.nvml_spelling", {A: bus_id_label(bdf) if bdf else None, R: g.bus_id},
                        note="agentd's bus id spelled as NVML prints it (8-digit domain, upper case)"))  # fmt: skip
        merged = view.gpus.get(g.index)
        sysfs = view.pci_of(bdf)
        rows.append(row(S, subject, "bus_id.sysfs_spelling", {A: sysfs["bdf"] if sysfs else None, R: normalize_bdf(g.bus_id)},
                        note="nvidia-smi's bus id in sysfs spelling; agentd's: the PCI device it read"))  # fmt: skip
        rows.append(row(S, subject, "name", {A: ours.get("name"), R: g.name}))
        rows.append(row(S, subject, "uuid", {A: ours.get("uuid"), R: g.uuid}))
        rows.append(row(S, subject, "vbios_version", {A: ours.get("vbios_version"), R: g.vbios}, key=_casefold))
        rows.append(row(S, subject, "persistence_mode", {A: None, R: g.persistence_mode}, outcome="missing" if g.persistence_mode else "match",
                        note="agentd does not read the persistence mode"))  # fmt: skip
        same_state = _state(ours.get("fabric_state") or "n/a") == _state(g.fabric_state or "n/a")
        rows.append(row(S, subject, "fabric.state", {A: ours.get("fabric_state"), R: g.fabric_state}, outcome="match" if same_state else "mismatch",
                        note="NVML's not_supported is nvidia-smi's N/A"))  # fmt: skip
        rows.append(row(S, subject, "fabric.status", {A: ours.get("fabric_status"), R: g.fabric_status}, key=_casefold))
        rows.append(row(S, subject, "pcie.replay_counter", {A: ours.get("pcie_replay_errors"), R: g.replay_counter},
                        note="a counter: it may move between the two reads"))  # fmt: skip
        if numa is not None:
            rows.append(row(S, subject, "numa_node", {A: (merged or {}).get("numa_node"), R: numa.get(g.index)},
                            note="nvidia-smi: topo -m's NUMA Affinity; agentd: the GPU's sysfs numa_node"))  # fmt: skip
        parent = view.parent_of(sysfs)
        rows += [
            row(S, subject, "pcie.current_gen", {A: gen_of((sysfs or {}).get("current_link_speed_gts")), R: g.current_gen},
                note="the current speed drops while a GPU idles: both read within a minute"),
            row(S, subject, "pcie.max_gen", {A: gen_of((sysfs or {}).get("max_link_speed_gts")), R: g.max_device_gen or g.max_gen},
                note="the device's capability (nvidia-smi max_device_link_gen)"),
            row(S, subject, "pcie.max_host_gen", {A: gen_of((parent or {}).get("max_link_speed_gts")), R: g.max_host_gen},
                note="the port above the GPU (agentd: its sysfs parent's max_link_speed)"),
            row(S, subject, "pcie.current_width", {A: (sysfs or {}).get("current_link_width"), R: g.current_width}),
            row(S, subject, "pcie.max_width", {A: (sysfs or {}).get("max_link_width"), R: g.max_width}),
        ]  # fmt: skip
        if links is not None:
            rows += _nvlink_rows(subject, ours.get("nvlinks") or [], links.get(g.index, {}))
    for index in sorted(set(view.nvml_gpus) - {g.index for g in smi.gpus}):
        rows.append(row(S, f"gpu{index}", "present", {A: view.nvml_gpus[index].get("pci_bus_id"), R: None},
                        note="agentd's NVML lists a GPU nvidia-smi does not"))  # fmt: skip
    return rows


def _nvlink_rows(subject: str, ours: Sequence[Json], theirs: Mapping[int, float | None]) -> list[Row]:
    """NVLink count, states and speeds: agentd's NVML links against ``nvidia-smi nvlink -s``
    (which prints a link's speed, or ``<inactive>``)."""
    S, A, R = "nvml", "agentd", "nvidia-smi"
    row = _nvml_row
    our_state = {int(link["link"]): link.get("state") for link in ours}
    their_state = {n: ("up" if speed is not None else "down") for n, speed in theirs.items()}
    rows = [
        row(S, subject, "nvlink.count", {A: len(our_state), R: len(their_state)}),
        row(S, subject, "nvlink.up", {A: sum(s == "up" for s in our_state.values()), R: sum(s == "up" for s in their_state.values())}),
    ]
    differ = sorted(n for n in set(our_state) | set(their_state) if our_state.get(n) != their_state.get(n))
    rows.append(row(S, subject, "nvlink.states", {A: _states(our_state), R: _states(their_state)},
                    outcome="mismatch" if differ else "match",
                    note=f"links that differ: {', '.join(map(str, differ))}" if differ else ""))  # fmt: skip
    our_speed = sorted({round(link["speed_mb_s"] / 1000, 3) for link in ours if link.get("speed_mb_s")})
    their_speed = sorted({s for s in theirs.values() if s is not None})
    if our_speed or their_speed:
        rows.append(row(S, subject, "nvlink.speed_gb_s", {A: ",".join(map(str, our_speed)) or None, R: ",".join(map(str, their_speed)) or None},
                        note="agentd: NVML's MB/s / 1000"))  # fmt: skip
    return rows


def _states(states: Mapping[int, object]) -> str:
    return " ".join(f"{n}:{states[n]}" for n in sorted(states)) or "none"


# ---------------------------------------------------------------------------
# topology XML: agentd's file, NCCL's own view (a), NCCL's view with agentd's file (b)

IGNORED_AB = frozenset({"host_hash"})  # NCCL rewrites it at every load (topo.cc): the same on one host


@dataclass(frozen=True)
class TopoNode:
    ident: str
    tag: str
    attrs: dict[str, str]
    parent: str | None
    line: int


def _key(el: Element, parent: str | None) -> str:
    tag = el.name
    if tag == "cpu":
        return f"cpu:{el.get('numaid')}"
    if tag == "pci":
        return f"pci:{(el.get('busid') or '').lower()}"
    if tag == "net":
        return f"net:{el.get('name')}"
    if tag in ("nvlink", "pcilink", "c2c"):
        return f"{parent}>{tag}:{(el.get('target') or '').lower()}"
    return f"{parent}>{tag}"  # system, gpu, nic: one per parent


def topo_index(text: str) -> dict[str, TopoNode]:
    """Every element NCCL's reader keeps (agentd.nccl.xmlreader, its rules), by identity:
    cpu by numaid, pci by bus id, net by name, the others by their parent. Raises
    ValueError where NCCL's reader stops."""
    reader = NcclXmlReader(text)
    try:
        reader.load(None)
    except ReaderError as e:
        raise ValueError(f"line {e.line}: {e.message}") from None
    out: dict[str, TopoNode] = {}

    def walk(el: Element, parent: str | None) -> None:
        ident = _key(el, parent)
        out.setdefault(ident, TopoNode(ident, el.name, dict(el.attrs), parent, el.line))
        for child in el.children:
            if child.known:
                walk(child, ident)

    for top in reader.top:
        if top.known:
            walk(top, None)
    return out


def topo_rows(agentd: str | None, a: str | None, b: str | None) -> list[Row]:
    """Each element and attribute agentd writes, as agentd wrote it, as NCCL detects it on
    its own (a) and as NCCL ends up with agentd's file loaded (b); then what NCCL sees that
    agentd's file leaves out, and the rest of a against b."""
    S, A = "topo", "agentd"
    rows: list[Row] = []
    parsed: dict[str, dict[str, TopoNode] | None] = {}
    for name, text in (("agentd", agentd), ("a.xml", a), ("b.xml", b)):
        if text is None:
            parsed[name] = None
            rows.append(row(S, name, "file", {name: None}, outcome="missing", note="not written (see summary.json's steps)"))
            continue
        try:
            parsed[name] = topo_index(text)
        except ValueError as e:
            parsed[name] = None
            rows.append(row(S, name, "file", {name: "unreadable"}, outcome="mismatch", note=f"NCCL's reader rules: {e}"))
    ours, na, nb = parsed["agentd"], parsed["a.xml"], parsed["b.xml"]
    covered: set[str] = set()
    if ours is not None:
        for ident, node in ours.items():
            if node.tag not in ("cpu", "pci"):
                continue
            covered.add(ident)
            ta = na.get(ident) if na is not None else None
            tb = nb.get(ident) if nb is not None else None
            views = {A: "yes"}
            if na is not None:
                views["a.xml"] = "yes" if ta else None
            if nb is not None:
                views["b.xml"] = "yes" if tb else None
            rows.append(row(S, ident, "present", views, note="" if all(views.values()) else "agentd writes it; NCCL does not have it"))
            parents = {A: node.parent, **({"a.xml": ta.parent} if ta else {}), **({"b.xml": tb.parent} if tb else {})}
            if len(parents) > 1:
                rows.append(row(S, ident, "parent", parents))
            for attr, value in node.attrs.items():
                vals: dict[str, object] = {A: value}
                if na is not None:
                    vals["a.xml"] = ta.attrs.get(attr) if ta else None
                if nb is not None:
                    vals["b.xml"] = tb.attrs.get(attr) if tb else None
                rows.append(row(S, ident, attr, vals, note=_topo_note(vals)))
    if na is not None:
        for ident, node in na.items():
            if node.tag in ("cpu", "pci") and ident not in covered:
                views = {A: None, "a.xml": "yes", **({"b.xml": "yes" if ident in nb else None} if nb is not None else {})}
                rows.append(row(S, ident, "present", views, outcome="missing" if ours is not None else "info",
                                note="NCCL detects it; agentd's file leaves it out"))  # fmt: skip
    if na is not None and nb is not None:
        rows += _ab_rows(na, nb, covered)
    for name, text in (("agentd", agentd), ("a.xml", a), ("b.xml", b)):
        if text is not None:
            rows += _rules_rows(name, text, dump=name != "agentd")
    return rows


def _topo_note(vals: Mapping[str, object]) -> str:
    a, b, ours = vals.get("a.xml"), vals.get("b.xml"), vals.get("agentd")
    if "b.xml" in vals and a is not None and b is not None and a != b:
        return "agentd's file changed what NCCL uses" + (" to agentd's value" if b == ours else "")
    if a is not None and ours is not None and a != ours:
        return "agentd writes another value than NCCL detects"
    return ""


def _ab_rows(na: Mapping[str, TopoNode], nb: Mapping[str, TopoNode], covered: set[str]) -> list[Row]:
    """Everything else of a.xml against b.xml (gpus, nvlinks, nics, nets): loading agentd's
    file should change none of it. One row per difference, and one for the rest."""
    S = "topo.ab"
    rows: list[Row] = []
    same = 0
    for ident in sorted((set(na) | set(nb)) - covered):
        ta, tb = na.get(ident), nb.get(ident)
        if ta is None or tb is None:
            rows.append(row(S, ident, "present", {"a.xml": "yes" if ta else None, "b.xml": "yes" if tb else None}))
            continue
        differ = [row(S, ident, "parent", {"a.xml": ta.parent, "b.xml": tb.parent})] if ta.parent != tb.parent else []
        for attr in sorted((set(ta.attrs) | set(tb.attrs)) - IGNORED_AB):
            va, vb = ta.attrs.get(attr), tb.attrs.get(attr)
            if va != vb:
                differ.append(row(S, ident, attr, {"a.xml": va, "b.xml": vb}))
        rows += differ
        same += not differ
    rows.append(row(S, "other elements", "equal", {"a.xml": same, "b.xml": same}, outcome="info",
                    note="elements agentd does not write (gpu, nvlink, nic, net ...) equal in both"))  # fmt: skip
    return rows


def _rules_rows(name: str, text: str, *, dump: bool) -> list[Row]:
    """agentd's checker of NCCL's reader rules (agentd.nccl.xmlcheck) on one file: on
    NCCL's own dumps an error means agentd's rules reject what NCCL itself writes. A dump
    holds the elements NCCL detects (gpu, nic, net, nvlink ...), which agentd's policy keeps
    out of the files it writes: that rule is not asked of a dump."""
    S = "topo.rules"
    policy = tuple(f"<{tag}> must not be written" for tag in DETECTED)
    issues = [i for i in scan_topo_xml(text) if not (dump and i.message.startswith(policy))]
    rows = []
    for issue in issues:
        outcome = "mismatch" if issue.severity == "error" else "warning"
        rows.append(row(S, name, f"line {issue.line}", {"xmlcheck": issue.severity}, outcome=outcome, note=issue.message))
    if not issues:
        rows.append(row(S, name, "xmlcheck", {"xmlcheck": "no issue"}, outcome="match"))
    return rows


# ---------------------------------------------------------------------------
# NCCL's logs (NCCL_DEBUG=INFO, NCCL_DEBUG_FILE)

_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)(\S*)")
_WARN = re.compile(r"NCCL WARN (.*?)\s*$")
_TOPO_FILE = re.compile(r"NCCL_TOPO_FILE set by environment to (\S+)")
_DUMP_FILE = re.compile(r"NCCL_TOPO_DUMP_FILE set by environment to (\S+)")
_DETECTION = re.compile(r"NCCL INFO (Topology detection : .*?)\s*$")


@dataclass(frozen=True)
class NcclLog:
    version: str | None  # 2.30.4 (the +cudaX.Y suffix apart)
    version_suffix: str
    warnings: tuple[str, ...]  # each WARN line's message, in order
    topo_file: str | None  # what NCCL says it read as NCCL_TOPO_FILE
    dump_file: str | None
    detection: tuple[str, ...]  # "Topology detection : could not read ..." lines


def parse_nccl_log(text: str) -> NcclLog:
    """An NCCL_DEBUG=INFO log (any NCCL from 2.7: with or without the host:pid:tid prefix,
    NCCL_DEBUG_TIMESTAMP_FORMAT's timestamps, several processes interleaved)."""
    version = suffix = None
    warnings: list[str] = []
    detection: list[str] = []
    topo = dump = None
    for line in text.splitlines():
        if version is None and (m := _VERSION.search(line)):
            version, suffix = m.group(1), m.group(2)
        if m := _WARN.search(line):
            warnings.append(m.group(1))
        if topo is None and (m := _TOPO_FILE.search(line)):
            topo = m.group(1)
        if dump is None and (m := _DUMP_FILE.search(line)):
            dump = m.group(1)
        if m := _DETECTION.search(line):
            detection.append(m.group(1))
    return NcclLog(version, suffix or "", tuple(warnings), topo, dump, tuple(detection))


def nccl_log_rows(a_log: str | None, b_log: str | None, a_init: Json | None, b_init: Json | None, *, topo_written: bool) -> list[Row]:
    S = "nccl.log"
    la = parse_nccl_log(a_log) if a_log is not None else None
    lb = parse_nccl_log(b_log) if b_log is not None else None
    rows = [
        row(S, "nccl", "version", {"a.log": la.version if la else None, "b.log": lb.version if lb else None,
                                   "init": _version_core((a_init or {}).get("nccl_version"))}),
    ]  # fmt: skip
    for name, init in (("a", a_init), ("b", b_init)):
        if init is not None:
            rows.append(row(S, f"init {name}", "communicator", {"nccl_init": "created" if init.get("ok") else "failed"},
                            outcome="match" if init.get("ok") else "mismatch", note=str(init.get("error") or init.get("via") or "")))  # fmt: skip
    if la is not None:
        rows.append(row(S, "a.log", "NCCL_TOPO_FILE", {"a.log": la.topo_file or "not set"}, outcome="match" if la.topo_file is None else "mismatch",
                        note="NCCL's own view must read no topology file" if la.topo_file else ""))  # fmt: skip
        rows.append(row(S, "a.log", "NCCL_TOPO_DUMP_FILE", {"a.log": la.dump_file}))
    if lb is not None:
        rows.append(row(S, "b.log", "NCCL_TOPO_FILE", {"b.log": lb.topo_file}, outcome="match" if lb.topo_file else "mismatch",
                        note="" if lb.topo_file else "NCCL does not say it read agentd's file"))  # fmt: skip
        rows.append(row(S, "b.log", "NCCL_TOPO_DUMP_FILE", {"b.log": lb.dump_file}))
    elif topo_written:
        rows.append(row(S, "b.log", "file", {"b.log": None}, outcome="missing", note="agentd wrote its XML but NCCL's second run left no log"))
    for name, log in (("a.log", la), ("b.log", lb)):
        if log is None:
            continue
        counts: dict[str, int] = {}
        for w in log.warnings:
            counts[w] = counts.get(w, 0) + 1
        for message, n in counts.items():
            rows.append(row(S, name, "WARN", {name: message}, outcome="warning", note=f"{n} times" if n > 1 else ""))
        for line in dict.fromkeys(log.detection):
            rows.append(row(S, name, "detection", {name: line}, outcome="info"))
    return rows


def _version_core(v: object) -> str | None:
    m = re.match(r"^(\d+\.\d+\.\d+)", str(v)) if v else None
    return m.group(1) if m else None


# ---------------------------------------------------------------------------
# agentd bench nccl


def bench_rows(doc: Json, *, gpus: int | None, nccl_version: str | None, requested: Json | None) -> list[Row]:
    """The benchmark's JSON against itself (algbw = size / time, busbw = algbw x the
    collective's factor for its ranks: agentd.ncclbench.formulas), the node (ranks = GPUs)
    and NCCL (the version the init step loaded)."""
    S = "bench"
    run = doc.get("run") or {}
    status = run.get("status")
    n = run.get("n_ranks")
    rows = [
        row(S, "run", "status", {"bench": status}, outcome="match" if status in ("ok", "below_min") else "mismatch", note=run.get("reason") or ""),
        row(S, "run", "runner", {"bench": run.get("runner"), "wanted": "torch"}),
        row(S, "run", "ranks", {"bench": n, "gpus": gpus}),
        row(S, "run", "nccl_version", {"bench": _version_core(run.get("nccl_version")), "nccl.log": nccl_version}),
    ]
    results = run.get("results") or []
    if requested:
        expected = len(requested.get("ops") or []) * len(requested.get("sizes") or [])
        rows.append(row(S, "run", "results", {"bench": len(results), "requested": expected}))
    for r in results:
        subject = f"{r.get('op')}/{r.get('size_bytes')}"
        op, size, t, alg, bus = r.get("op"), r.get("size_bytes"), r.get("time_us"), r.get("algbw_gbps"), r.get("busbw_gbps")
        if isinstance(size, int) and isinstance(t, (int, float)) and t > 0 and isinstance(alg, (int, float)):
            rows.append(row(S, subject, "algbw_gbps", {"bench": alg, "size/time": round(algbw_gbps(size, t), 3)},
                            key=_close(alg), note=f"time {t} us"))  # fmt: skip
        if isinstance(op, str) and known_op(op) and isinstance(n, int) and n >= 1 and isinstance(alg, (int, float)):
            want = alg * bus_factor(op, n)
            rows.append(row(S, subject, "busbw_gbps", {"bench": bus, "algbw x factor": round(want, 3)}, key=_close(want),
                            note=f"factor {bus_factor(op, n):g} for {n} ranks"))  # fmt: skip
        wrong = r.get("wrong")
        rows.append(row(S, subject, "wrong", {"bench": wrong}, outcome="match" if wrong in (0, 0.0) else ("missing" if wrong is None else "mismatch")))
    for f in doc.get("findings") or []:
        rows.append(row(S, str(f.get("subject")), str(f.get("code")), {"bench": f.get("severity")}, outcome="info", note=str(f.get("message") or "")))
    return rows


def _close(target: float) -> Callable[[Any], object]:
    """A key under which values within BENCH_REL_TOL of ``target`` (or 0.01 GB/s) equal it."""

    def key(v: Any) -> object:
        try:
            x = float(v)
        except (TypeError, ValueError):
            return v
        return "close" if abs(x - target) <= max(0.01, BENCH_REL_TOL * abs(target)) else x

    return key


# ---------------------------------------------------------------------------
# the daemon's /metrics and /health; agentd check


def metric_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """The exposition parsed by the Prometheus client's own parser (test dependency)."""
    from prometheus_client.parser import text_string_to_metric_families

    return [(s.name, dict(s.labels), s.value) for fam in text_string_to_metric_families(text) for s in fam.samples]


def daemon_rows(metrics: str | None, health: Json | None, check: Json | None, smi: SmiLog | None, http: Json | None) -> list[Row]:
    S = "daemon"
    rows: list[Row] = []
    for path, meta in sorted((http or {}).items()):
        rows.append(row(S, path, "http", {"daemon": meta.get("status"), "after_s": meta.get("after_s")}, outcome="info", note=meta.get("error") or ""))
    if health is not None:
        rows.append(row(S, "/health", "status", {"/health": health.get("status"), "agentd check": (check or {}).get("status")},
                        note="the daemon after its minutes against one `agentd check`"))  # fmt: skip
        theirs = _finding_keys((check or {}).get("findings") or [])
        ours = _finding_keys(health.get("findings") or [])
        if check is not None and ours != theirs:
            rows.append(row(S, "/health", "findings", {"/health": "; ".join(sorted(ours - theirs)) or "-", "agentd check": "; ".join(sorted(theirs - ours)) or "-"},
                            outcome="mismatch", note="findings only one of the two has"))  # fmt: skip
    if metrics is None:
        rows.append(row(S, "/metrics", "read", {"daemon": None}, outcome="missing"))
        return rows
    try:
        samples = metric_samples(metrics)
    except ValueError as e:
        rows.append(row(S, "/metrics", "parse", {"prometheus_client": "failed"}, outcome="mismatch", note=str(e)))
        return rows
    rows.append(row(S, "/metrics", "parse", {"prometheus_client": f"{len(samples)} samples"}, outcome="match"))
    info = [labels for name, labels, _ in samples if name == "agentd_gpu_info"]
    if smi is not None:
        rows.append(row(S, "agentd_gpu_info", "series", {"daemon": len(info), "nvidia-smi": len(smi.gpus)}))
        by_gpu = {labels.get("gpu"): labels for labels in info}
        for g in smi.gpus:
            labels = by_gpu.get(str(g.index))
            if labels is None:
                continue
            rows.append(row(S, f"gpu{g.index}", "uuid", {"daemon": labels.get("uuid"), "nvidia-smi": g.uuid}))
            rows.append(row(S, f"gpu{g.index}", "pci_bus_id", {"daemon": normalize_bdf(labels.get("pci_bus_id")), "nvidia-smi": normalize_bdf(g.bus_id)}))
        nvml = next((labels for name, labels, _ in samples if name == "agentd_nvml_info"), None)
        if nvml is not None:
            rows.append(row(S, "agentd_nvml_info", "driver_version", {"daemon": nvml.get("driver_version"), "nvidia-smi": smi.driver_version}))
            cuda = nvml.get("cuda_driver_version")
            rows.append(row(S, "agentd_nvml_info", "cuda_driver_version",
                            {"daemon": cuda_text(int(cuda)) if cuda and cuda.isdigit() else cuda, "nvidia-smi": smi.cuda_version}))  # fmt: skip
    return rows


def _finding_keys(findings: Iterable[Json]) -> set[str]:
    return {f"{f.get('severity')} {f.get('code')} {f.get('subject')}" for f in findings if f.get("severity") != "ok"}


def check_rows(check: Json) -> list[Row]:
    S = "check"
    rows = [row(S, "live", "status", {"agentd check": check.get("status")}, outcome="info", note=str(check.get("nothing_to_judge") or ""))]
    for f in check.get("findings") or []:
        if f.get("severity") != "ok":
            rows.append(row(S, str(f.get("subject")), str(f.get("code")), {"agentd check": f.get("severity")}, outcome="info", note=str(f.get("message") or "")))
    return rows


def replay_check(capture: Path) -> tuple[int, Json | None, str]:
    """``agentd check --host-root CAPTURE --format json`` in this process: (exit status,
    its document or None, stderr)."""
    from agentd.cli import main as agentd_main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = agentd_main(["check", "--host-root", str(capture), "--format", "json"])
        except SystemExit as e:
            rc = int(e.code or 0)
    try:
        doc = json.loads(out.getvalue())
    except ValueError:
        doc = None
    return rc, doc, err.getvalue()


def replay_rows(live: Json, replayed: Json | None, replay_error: str = "") -> list[Row]:
    """The capture judged here against the live run's judgement: the same status and the
    same findings (severity, code, subject; messages carry measured values that move)."""
    S = "check"
    if replayed is None:
        return [row(S, "replay", "status", {"live": live.get("status"), "replay": None}, outcome="missing", note=replay_error.strip()[-300:])]
    rows = [row(S, "replay", "status", {"live": live.get("status"), "replay": replayed.get("status")},
                note="agentd check on the capture must judge it as the live run did")]  # fmt: skip
    ours, theirs = _finding_keys(replayed.get("findings") or []), _finding_keys(live.get("findings") or [])
    rows.append(row(S, "replay", "findings", {"live": "; ".join(sorted(theirs - ours)) or "-", "replay": "; ".join(sorted(ours - theirs)) or "-"},
                    outcome="match" if ours == theirs else "mismatch", note=f"{len(theirs)} live, {len(ours)} replayed; shown: only in one"))  # fmt: skip
    return rows


# ---------------------------------------------------------------------------
# the folder


class RunDir:
    """A gpu-check output folder: summary.json, bundle.tar.gz (or the raw files unpacked
    beside it) and capture.tar.gz."""

    def __init__(self, path: Path):
        self.path = path
        self.members: dict[str, bytes] = {}
        bundle = path / gc.BUNDLE
        if bundle.is_file():
            with tarfile.open(bundle, "r:gz") as tar:
                for m in tar.getmembers():
                    f = tar.extractfile(m) if m.isfile() else None
                    if f is not None:
                        self.members[m.name] = f.read()
        try:
            self.summary: Json | None = json.loads((path / gc.SUMMARY).read_text())
        except (OSError, ValueError):
            self.summary = None

    def text(self, name: str) -> str | None:
        if name in self.members:
            return self.members[name].decode("utf-8", "replace")
        p = self.path / name
        return p.read_text(errors="replace") if p.is_file() else None

    def json(self, name: str) -> Json | None:
        """A JSON document, or the last line that is one (a library may print before it)."""
        text = self.text(name)
        if text is None:
            return None
        for candidate in (text, *reversed([line for line in text.splitlines() if line.startswith("{")])):
            try:
                return json.loads(candidate)
            except ValueError:
                continue
        return None

    @property
    def capture(self) -> Path | None:
        p = self.path / gc.CAPTURE
        return p if p.is_file() else None


def step_rows(summary: Json) -> list[Row]:
    S = "steps"
    rows = [row(S, "run", "gpu", {"gpu-check": (summary.get("gpu") or {}).get("how")}, outcome="info",
                note=f"{summary.get('elapsed_s')} s of {summary.get('budget_s')} s")]  # fmt: skip
    for s in summary.get("steps") or []:
        ok = s.get("status") == "ok"
        rows.append(row(S, s.get("name"), "status", {"gpu-check": s.get("status"), "rc": s.get("rc")},
                        outcome="info" if ok else "missing", note=s.get("reason") or ""))  # fmt: skip
    return rows


def compare_dir(path: Path, *, replay: bool = True) -> list[Row]:
    d = RunDir(path)
    if d.summary is None and not d.members:
        raise FileNotFoundError(f"{path} holds no {gc.SUMMARY} or {gc.BUNDLE}")
    rows: list[Row] = step_rows(d.summary) if d.summary is not None else []
    smi: SmiLog | None = None
    smi_text = d.text(gc.RAW_SMI_XML)
    if smi_text is not None:
        try:
            smi = parse_smi_xml(smi_text)
        except ValueError as e:
            rows.append(row("nvml", "nvidia-smi -q -x", "parse", {"nvidia-smi": "unreadable"}, outcome="mismatch", note=str(e)))
    inspect = d.json(gc.RAW_INSPECT)
    if smi is not None and inspect is not None:
        rows += nvml_rows(smi, AgentdView(inspect), topo_m=d.text(gc.RAW_SMI_TOPO), nvlink=d.text(gc.RAW_SMI_NVLINK))
    else:
        rows.append(row("nvml", "node", "sources", {"agentd": "inspect.json" if inspect else None, "nvidia-smi": "nvidia-smi -q -x" if smi else None}))
    agentd_topo = d.text(gc.RAW_TOPO)
    source = (d.summary or {}).get("topo_source")
    if source:
        rows.append(row("topo", "agentd", "written by", {"gpu-check": source}, outcome="info"))
    rows += topo_rows(agentd_topo, d.text(gc.RAW_NCCL_A), d.text(gc.RAW_NCCL_B))
    a_log = d.text(gc.RAW_NCCL_A_LOG)
    rows += nccl_log_rows(a_log, d.text(gc.RAW_NCCL_B_LOG), d.json(gc.RAW_NCCL_A_JSON), d.json(gc.RAW_NCCL_B_JSON), topo_written=agentd_topo is not None)
    bench = d.json(gc.RAW_BENCH)
    if bench is not None:
        version = parse_nccl_log(a_log).version if a_log is not None else None
        gpus = len(smi.gpus) if smi is not None else ((d.summary or {}).get("gpu") or {}).get("count")
        rows += bench_rows(bench, gpus=gpus, nccl_version=version, requested=(d.summary or {}).get("bench"))
    check = d.json(gc.RAW_CHECK)
    rows += daemon_rows(d.text(gc.RAW_METRICS), d.json(gc.RAW_HEALTH), check, smi, (d.summary or {}).get("http"))
    if check is not None:
        rows += check_rows(check)
        if replay and d.capture is not None:
            rc, doc, err = replay_check(d.capture)
            rows += replay_rows(check, doc, err if doc is None else "")
    return rows


# ---------------------------------------------------------------------------
# output


def table(rows: Sequence[Row], width: int = 60) -> str:
    def cut(s: str) -> str:
        return s if len(s) <= width else s[: width - 3] + "..."

    lines = [["outcome", "section", "subject", "field", "values", "note"]]
    for r in rows:
        values = "  ".join(f"{k}={v if v is not None else '-'}" for k, v in r.values)
        lines.append([r.outcome, r.section, r.subject, r.field, cut(values), cut(r.note)])
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]) - 1)]
    out = ["  ".join(c.ljust(w) for c, w in zip(line[:-1], widths)) + "  " + line[-1] for line in lines]
    counts = {o: sum(r.outcome == o for r in rows) for o in OUTCOMES}
    out.append("")
    out.append("  ".join(f"{o} {n}" for o, n in counts.items()))
    return "\n".join(line.rstrip() for line in out) + "\n"


def as_json(rows: Sequence[Row]) -> dict[str, object]:
    return {"counts": {o: sum(r.outcome == o for r in rows) for o in OUTCOMES}, "rows": [r.as_json() for r in rows]}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.gpu.compare", description="compare a gpu-check output folder (docs/gpu-check.md)")
    ap.add_argument("dir", type=Path, help="the folder make gpu-check wrote (summary.json, bundle.tar.gz, capture.tar.gz)")
    ap.add_argument("--format", choices=("text", "json"), default="text")
    ap.add_argument("--json", type=Path, help="also write the JSON table here")
    ap.add_argument("--no-replay", action="store_true", help="do not judge the capture again")
    ap.add_argument("--only", default="", help="comma-separated outcomes to show (default all)")
    args = ap.parse_args(argv)
    try:
        rows = compare_dir(args.dir, replay=not args.no_replay)
    except FileNotFoundError as e:
        print(f"gpu-compare: {e}", file=sys.stderr)
        return 2
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(rows), indent=2) + "\n")
    shown = [r for r in rows if not args.only or r.outcome in args.only.split(",")]
    sys.stdout.write(json.dumps(as_json(shown), indent=2) + "\n" if args.format == "json" else table(shown))
    return 1 if any(r.outcome == "mismatch" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
