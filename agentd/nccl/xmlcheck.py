"""Check a topology XML file the way NCCL reads it (nccl-spec.md 1.1-1.3).

NCCL does not use an XML library: ``src/graph/xml.cc`` reads the file a character at a
time with a few fixed rules. ``scan_topo_xml`` re-implements that reader (same token
rules, same limits, same element tables) so it fails where NCCL fails, then checks the
attributes NCCL needs and agentd's own rules for generated files. Each issue has a line
number; errors are what NCCL rejects or silently misreads, warnings are what it accepts
but probably not as meant.

What NCCL's reader does, and ``xmlreader.NcclXmlReader`` too:
- Before ``<`` it skips only space, ``\\n`` and ``\\r``: a tab or any text is fatal.
- A token ends at space, ``>``, ``/``, ``\\n`` or ``\\r``, so a tag cannot span lines.
- Values must be quoted (single quotes only since 2.27); no entities are decoded.
- ``<!-- -->`` comments are skipped; ``<?xml ...?>`` fails with "expected >, got '?'".
- Names and values up to 253 characters, 16 attributes per element, 256 nodes in the
  file (the reader gives up at the 256th), 640 children per element (128 in 2.21-2.27).
- Unknown elements, and elements in the wrong place, are skipped with their children.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator

from agentd.base.ids import BDF_RE
from agentd.nccl.topo import ALLOWED_LINK_SPEEDS, NEEDS_FAMILY_MODEL, X86_VENDORS
from agentd.nccl.xmlreader import Element, NcclXmlReader, ReaderError, XmlIssue

MAX_ATTRS = 16
MAX_NODES = 256
MAX_SUBS = 640
OLD_MAX_SUBS = 128
NODE_HEADROOM = 192  # NCCL adds gpu/nvlink/nic/net nodes to the same 256

DETECTED = ("gpu", "nic", "net", "nvlink", "c2c", "pcilink")
_Say = Callable[[str], None]  # err / warn: record one problem of the element being checked
KNOWN_ATTRS: dict[str, frozenset[str]] = {
    "system": frozenset({"version", "name"}),
    "cpu": frozenset({"numaid", "affinity", "arch", "vendor", "familyid", "modelid", "host_hash"}),
    "pci": frozenset({"busid", "class", "vendor", "device", "subsystem_vendor", "subsystem_device", "link_speed", "link_width"}),
    "gpu": frozenset({"dev", "sm", "rank", "gdr", "mlopart"}),
    "nvlink": frozenset({"target", "count", "tclass"}),
    "c2c": frozenset({"bw", "count"}),
    "pcilink": frozenset({"target"}),
    "nic": frozenset(),
    "net": frozenset({"name", "dev", "speed", "latency", "port", "guid", "maxconn", "gdr", "coll", "net", "gin", "rma", "rail", "plane"}),
}
NUMERIC = frozenset({"version", "numaid", "familyid", "modelid", "link_width", "dev", "sm", "rank", "gdr", "mlopart", "count", "bw", "speed", "port", "maxconn", "coll", "net", "gin", "rma", "rail", "plane"})
AFFINITY_RE = re.compile(r"[0-9a-f]{1,8}(,[0-9a-f]{1,8})*")
HEX16_RE = re.compile(r"0x[0-9a-f]{4}")


def scan_topo_xml(text: str, *, existing_bus_ids: Collection[str] | None = None) -> list[XmlIssue]:
    reader = NcclXmlReader(text)
    try:
        reader.load(None)
    except ReaderError as e:
        return sorted(reader.issues + [XmlIssue(e.line, "error", e.message)], key=lambda i: i.line)
    issues = reader.issues
    for line, n in sorted(reader.tags_per_line.items()):
        if n > 1:
            issues.append(XmlIssue(line, "warning", f"{n} tags on one line (NCCL accepts it; agentd writes one tag a line)"))
    if reader.nodes >= MAX_NODES:
        issues.append(XmlIssue(1, "error", f"{reader.nodes} elements: NCCL's reader fails at {MAX_NODES} (too many XML nodes)"))
    elif reader.nodes > NODE_HEADROOM:
        issues.append(XmlIssue(1, "warning", f"{reader.nodes} elements leave little room: NCCL adds its gpu/nvlink/nic/net nodes to the same {MAX_NODES}"))
    systems = [el for el in reader.top if el.known]
    if not systems:
        issues.append(XmlIssue(1, "error", "no <system> element"))
    for extra in systems[1:]:
        issues.append(XmlIssue(extra.line, "error", "second <system> element: NCCL uses only the first"))
    busids = set(existing_bus_ids) if existing_bus_ids is not None else None
    seen: dict[str, int] = {}
    numaids: dict[str, int] = {}
    for el in _walk(systems):
        issues += _check_element(el, busids, seen, numaids)
    return sorted(issues, key=lambda i: (i.line, i.severity))


def check_topo_xml(text: str, *, existing_bus_ids: Collection[str] | None = None) -> list[str]:
    """Problems (errors and warnings, one line each); empty means NCCL reads the file as
    written. ``existing_bus_ids``: when given, every ``pci`` busid must be one of them."""
    return [str(i) for i in scan_topo_xml(text, existing_bus_ids=existing_bus_ids)]


def _walk(els: list[Element]) -> Iterator[Element]:
    for el in els:
        yield el
        yield from _walk(el.children)


def _check_element(el: Element, busids: set[str] | None, seen: dict[str, int], numaids: dict[str, int]) -> list[XmlIssue]:
    out: list[XmlIssue] = []

    def err(msg: str) -> None:
        out.append(XmlIssue(el.line, "error", f"<{el.name}> {msg}"))

    def warn(msg: str) -> None:
        out.append(XmlIssue(el.line, "warning", f"<{el.name}> {msg}"))

    if el.name in DETECTED:
        err("must not be written (agentd policy): NCCL detects it, and any value in the file overrides detection and goes stale")
    if len(el.attrs) > MAX_ATTRS:
        err(f"has {len(el.attrs)} attributes; NCCL reads {MAX_ATTRS} and ignores the rest")
    keys = [k for k, _ in el.attrs]
    if "" in keys:
        warn("has an empty attribute (two spaces in a row, or a space before '/>'); it counts toward the limit of 16")
    for k in sorted({k for k in keys if k and keys.count(k) > 1}):
        err(f"has {k} twice; NCCL uses the first")
    for k in sorted({k for k in keys if k and k not in KNOWN_ATTRS.get(el.name, frozenset())}):
        warn(f"attribute {k!r} is not one NCCL reads")
    for k, v in el.attrs:
        if any(c in v for c in "&<>"):
            err(f"{k}={v!r}: NCCL does not decode entities or markup in values")
        if k in NUMERIC and v != "":
            if re.fullmatch(r"-?0[0-9]+", v):
                err(f'{k}="{v}" has a leading zero: NCCL reads numbers with strtol(.., 0), so it is octal')
            elif not re.fullmatch(r"-?(0|[1-9][0-9]*)|0x[0-9a-fA-F]+", v):
                err(f'{k}="{v}" is not a number (NCCL would read it as 0)')
    if len(el.children) > MAX_SUBS:
        err(f"has {len(el.children)} children; NCCL accepts {MAX_SUBS}")
    elif len(el.children) > OLD_MAX_SUBS:
        warn(f"has {len(el.children)} children; NCCL 2.21-2.27 accept only {OLD_MAX_SUBS}")
    check = {"system": _system, "cpu": _cpu, "pci": _pci}.get(el.name)
    if check:
        check(el, err, warn, busids, seen, numaids)
    return out


def _system(el: Element, err: _Say, warn: _Say, busids: set[str] | None, seen: dict[str, int], numaids: dict[str, int]) -> None:
    v = el.get("version")
    if v is None:
        err("needs version=\"1\" (NCCL: Attribute version of node system not found)")
    elif v != "1" and not re.fullmatch(r"-?0[0-9]+", v):
        err(f'version="{v}": NCCL accepts only version 1 (ncclInvalidUsage)')


def _cpu(el: Element, err: _Say, warn: _Say, busids: set[str] | None, seen: dict[str, int], numaids: dict[str, int]) -> None:
    numaid = el.get("numaid")
    if numaid is None:
        err("needs numaid")
    elif numaid in numaids:
        err(f'numaid="{numaid}" is also used on line {numaids[numaid]}; NCCL attaches devices to the first')
    else:
        numaids[numaid] = el.line
    affinity = el.get("affinity")
    if affinity is not None and not AFFINITY_RE.fullmatch(affinity):
        err(f'affinity="{affinity}" is not a Linux cpumask (comma-separated 32-bit hex words)')
    arch = el.get("arch")
    if arch is None:
        err("needs arch (NCCL: Attribute arch of node cpu not found)")
    elif arch not in ("x86_64", "arm64", "ppc64"):
        err(f'arch="{arch}" is not x86_64, arm64 or ppc64')
    elif arch == "x86_64":
        vendor = el.get("vendor")
        if vendor is None:
            err("needs vendor on x86_64")
        elif vendor not in X86_VENDORS:
            err(f'vendor="{vendor}" is not one NCCL knows ({", ".join(v.strip() for v in X86_VENDORS)})')
        elif vendor in NEEDS_FAMILY_MODEL:
            for k in ("familyid", "modelid"):
                if el.get(k) is None:
                    err(f"needs {k} for {vendor.strip()} (it sets the inter-socket bandwidth)")


def _pci(el: Element, err: _Say, warn: _Say, busids: set[str] | None, seen: dict[str, int], numaids: dict[str, int]) -> None:
    busid = el.get("busid")
    if busid is None:
        err("needs busid")
    elif not BDF_RE.fullmatch(busid):
        # NCCL matches a busid as a string against the ids it makes (int64ToBusId,
        # "%04lx:%02lx:%02lx.%01lx") and reads from sysfs: the kernel's spelling, VMD's
        # 5-digit domains included, never NVML's zero-padded 8 digits.
        hint = " in lower case" if BDF_RE.fullmatch(busid.lower()) else ""
        err(f'busid="{busid}" must be dddd:bb:dd.f{hint}; NCCL compares bus ids as strings and would not match it')
    else:
        if busid in seen:
            err(f"busid {busid} also appears on line {seen[busid]}; NCCL uses the first")
        seen.setdefault(busid, el.line)
        if busids is not None and busid not in busids:
            err(f"busid {busid} does not exist on this host; NCCL drops it without a message")
    cls = el.get("class")
    if cls is None:
        err("needs class")
    elif not re.fullmatch(r"0x[0-9a-f]{6}", cls):
        err(f'class="{cls}" is not a PCI class as sysfs writes it (0x030200)')
    for k in ("vendor", "device", "subsystem_vendor", "subsystem_device"):
        v = el.get(k)
        if v is not None and not HEX16_RE.fullmatch(v):
            err(f'{k}="{v}" is not 0x followed by 4 lowercase hex digits')
    # NCCL fills in only the pci elements it creates or attaches a device to
    # (ncclTopoGetXmlFromSys); a pci the file already puts above a device keeps what the
    # file says, and ncclTopoAddPci then fails without link_speed/link_width.
    above = any(c.name == "pci" for c in el.children)
    speed = el.get("link_speed")
    if speed is None and above:
        err('has pci children but no link_speed: NCCL fails ("Attribute link_speed of node pci not found"); write link_speed="" when sysfs has none')
    elif speed is None:
        warn("has no link_speed: NCCL reads it from sysfs when the device exists here, else assumes Gen3")
    elif speed == "":
        warn('link_speed="": NCCL assumes Gen3')
    elif speed not in ALLOWED_LINK_SPEEDS:
        if any(speed.startswith(s) for s in ALLOWED_LINK_SPEEDS):
            warn(f'link_speed="{speed}" is matched only by its prefix')
        else:
            err(f'link_speed="{speed}" is not a speed NCCL knows (e.g. "32.0 GT/s PCIe"); it falls back to Gen3')
    width = el.get("link_width")
    if width is None and above:
        err('has pci children but no link_width: NCCL fails ("Attribute link_width of node pci not found"); write link_width="0" when sysfs has none')
    elif width is None:
        warn("has no link_width: NCCL reads it from sysfs when the device exists here")
    elif width in ("", "0"):
        warn(f'link_width="{width}": NCCL assumes x16')
    if cls and cls.startswith(("0x03", "0x02")) and above:
        warn("is a GPU or NIC but has pci children")
