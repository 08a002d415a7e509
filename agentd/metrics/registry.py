"""Prometheus text exposition (format 0.0.4) rendered from a State, once per State.

The text is generated directly instead of through prometheus_client's registry: the
families are declared once (``Family``, in the ``metrics_*`` area modules, which is also
where ``docs/metrics.md`` comes from) and each area renders its samples from the immutable
snapshot. Output is checked with prometheus_client's parser and ``promtool check metrics``
in the tests. Conventions (DESIGN.md section 4): prefix ``agentd_``, base units, ``_total``
for counters, ``_info`` gauges with value 1 for strings and joins, ``priority`` as a label.

Label values: ``pci_bus_id`` is written in the NVML/dcgm-exporter spelling
(``00000000:1B:00.0``) on every series, so ``on(gpu, pci_bus_id)`` joins with
dcgm-exporter; the JSON endpoints keep the sysfs spelling (``0000:1b:00.0``).
"""

from __future__ import annotations

import math
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Literal

if TYPE_CHECKING:
    from agentd.daemon.state import State

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MetricType = Literal["gauge", "counter"]


@dataclass(frozen=True)
class Family:
    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()


def _escape_label(v: str) -> str:
    if "\\" in v or '"' in v or "\n" in v:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return v


def _escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(v: float | int | bool) -> str:
    cls = v.__class__
    if cls is int:
        return str(v)
    if cls is bool:
        return "1" if v else "0"
    if cls is not float:
        v = float(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v.is_integer() and abs(v) < 2**53:
        return str(int(v))
    return repr(v)


def bus_id_label(bdf: str | None) -> str:
    """sysfs 0000:1b:00.0 -> NVML/dcgm-exporter 00000000:1B:00.0 (joins with DCGM series)."""
    if not bdf:
        return ""
    dom, sep, rest = bdf.partition(":")
    if not sep or len(dom) > 8:
        return bdf.upper()
    return f"{dom.upper():0>8}:{rest.upper()}"


def _label_text(v: object) -> str:
    if v.__class__ is int:
        return str(v)
    return _escape_label("" if v is None else str(v))


def _template(fam: Family) -> str:
    if not fam.labels:
        return fam.name + " {}"
    return fam.name + "{{" + ",".join(f'{k}="{{}}"' for k in fam.labels) + "}} {}"


class Exposition:
    """Collects samples per family and renders them in declaration order."""

    __slots__ = ("_families", "_samples", "_templates")

    def __init__(self, families: Iterable[Family]):
        self._families = {f.name: f for f in families}
        self._samples: dict[str, list[str]] = {name: [] for name in self._families}
        self._templates = {f.name: _template(f) for f in self._families.values()}

    def add(self, name: str, labels: tuple[object, ...], value: float | int | bool) -> None:
        if len(labels) != len(self._families[name].labels):
            raise ValueError(f"{name}: expected labels {self._families[name].labels}, got {labels!r}")
        self._samples[name].append(self._templates[name].format(*map(_label_text, labels), format_value(value)))

    def render(self) -> bytes:
        out: list[str] = []
        for name, fam in self._families.items():
            samples = self._samples[name]
            if not samples:
                continue
            out.append(f"# HELP {name} {_escape_help(fam.help)}")
            out.append(f"# TYPE {name} {fam.type}")
            out.extend(samples)
        if not out:
            return b""
        out.append("")
        return "\n".join(out).encode("utf-8")


def _areas() -> list[tuple[tuple[Family, ...], Callable[[Exposition, "State"], None]]]:
    from agentd.metrics import agent as metrics_agent
    from agentd.ncclbench import daemon_metrics as metrics_bench
    from agentd.metrics import fabric as metrics_fabric
    from agentd.metrics import node as metrics_node

    return [
        (metrics_agent.FAMILIES, metrics_agent.render),
        (metrics_fabric.FAMILIES, metrics_fabric.render),
        (metrics_node.FAMILIES, metrics_node.render),
        (metrics_bench.FAMILIES, metrics_bench.render),
    ]


def all_families() -> tuple[Family, ...]:
    return tuple(f for fams, _ in _areas() for f in fams)


_cache_lock = threading.Lock()
_area_cache: dict[str, tuple[tuple[object, ...], bytes]] = {}


def render_metrics(state: "State") -> bytes:
    """The exposition of one State. An area whose ``cache_key`` (a tuple of the very
    objects it renders from) is identical, element by element, to the last render's
    reuses that text: ``history.share`` keeps unchanged snapshot parts the same objects,
    so a steady node re-renders only the agent's own metrics."""
    chunks = []
    for fams, render in _areas():
        key_fn = getattr(sys.modules[render.__module__], "cache_key", None)
        key = key_fn(state) if key_fn is not None else None
        name = render.__module__
        if key is not None:
            with _cache_lock:
                hit = _area_cache.get(name)
            if hit is not None and len(hit[0]) == len(key) and all(a is b for a, b in zip(hit[0], key)):
                chunks.append(hit[1])
                continue
        x = Exposition(fams)
        render(x, state)
        text = x.render()
        if key is not None:
            with _cache_lock:
                _area_cache[name] = (key, text)
        chunks.append(text)
    return b"".join(chunks)


def reference_markdown() -> str:
    """docs/metrics.md, generated from the declared families (a test keeps them equal)."""
    lines = [
        "# agentd metrics reference",
        "",
        "Generated from the family declarations in `agentd/service/metrics_*.py`",
        "(`python -m agentd.metrics.registry > docs/metrics.md`); a test fails when they differ.",
        "",
        "Conventions: prefix `agentd_`, base units (bytes, seconds, transfers/s), `_total` for",
        "counters, `_info` gauges (value 1) for strings and joins. Label keys: `device` + `port`",
        "for an HCA port (as node_exporter), `netdev` for a network interface, `gpu` + `pci_bus_id`",
        "for a GPU (as dcgm-exporter; `pci_bus_id` is spelled `00000000:1B:00.0` on every series",
        "so it joins with DCGM), `priority` 0-7 as a label. Expected values sit beside measured",
        "ones (`..._expected_<unit>`), so alert rules need no hard-coded thresholds. IB data",
        "counters count 4-byte words; agentd exports bytes (x4). Series exist only for what the",
        "node has (no HCA: no `agentd_ib_*` series).",
        "",
    ]
    for fams, render in _areas():
        area = render.__module__.rsplit("_", 1)[-1]
        lines += [f"## {area}", "", "| name | type | labels | help |", "|---|---|---|---|"]
        for f in fams:
            labels = ", ".join(f"`{lab}`" for lab in f.labels) or "-"
            lines.append(f"| `{f.name}` | {f.type} | {labels} | {f.help.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - doc generator
    print(reference_markdown(), end="")
