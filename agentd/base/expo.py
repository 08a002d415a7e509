"""The Prometheus text exposition engine (format 0.0.4): families declared once, samples
rendered straight to text. A leaf: it knows the format, nothing of agentd's data.

The text is generated directly instead of through prometheus_client's registry: one
render per State, memoised per area (agentd.metrics.registry), costs less than building
client objects and the client's import, and stays correct on names that are not UTF-8
(docs/performance.md, "The exposition is written by hand"). prometheus_client is a test
dependency: the output is checked with its parser and ``promtool check metrics``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Literal

from agentd.base.escape import escaped_utf8

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
    f: float = v if cls is float else float(v)
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f.is_integer() and abs(f) < 2**53:
        return str(int(f))
    return repr(f)


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
        # A label value may hold a name that is not UTF-8 (a lone surrogate from
        # surrogateescape): written as \\xNN, which a parser reads back as the text \xNN.
        return escaped_utf8("\n".join(out))
