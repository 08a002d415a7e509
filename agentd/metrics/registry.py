"""The metrics registry: explicit records of the areas that make up ``/metrics``.

Each area (``agentd/metrics/{agent,fabric,node}.py``, ``agentd/ncclbench/bench_metrics.py``)
declares its families once (which is also where ``docs/metrics.md`` comes from) and
renders its samples from a ``MetricsSource`` (the daemon's State). The daemon composes
the registry (``agentd.daemon.exposition``); this layer never imports the State.

Conventions (DESIGN.md section 4): prefix ``agentd_``, base units, ``_total`` for
counters, ``_info`` gauges with value 1 for strings and joins, ``priority`` as a label.
Label values: ``pci_bus_id`` is written in the NVML/dcgm-exporter spelling
(``00000000:1B:00.0``) on every series, so ``on(gpu, pci_bus_id)`` joins with
dcgm-exporter; the JSON endpoints keep the sysfs spelling (``0000:1b:00.0``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Sequence

from agentd.base.expo import Exposition, Family
from agentd.base.memo import IdentityMemo
from agentd.metrics.budget import SECTION as BUDGET_SECTION
from agentd.metrics.source import MetricsSource

RenderFn = Callable[[Exposition, MetricsSource], None]
CacheKeyFn = Callable[[MetricsSource], "tuple[object, ...] | None"]


@dataclass(frozen=True)
class Area:
    """One part of the exposition. ``cache_key``: a tuple of the very objects the area
    renders from; when every element is identical (``is``) to the last render's, the
    last text is reused (agentd.base.memo: a steady node keeps its snapshot parts the
    same objects, so it re-renders only the agent's own metrics)."""

    name: str
    families: tuple[Family, ...]
    render: RenderFn
    cache_key: CacheKeyFn | None = None


class Registry:
    def __init__(self, areas: Sequence[Area]):
        names = [a.name for a in areas]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate metrics areas: {names}")
        fams = [f.name for a in areas for f in a.families]
        if len(set(fams)) != len(fams):
            raise ValueError("a metric family is declared by two areas")
        self.areas = tuple(areas)
        self._memo: dict[str, IdentityMemo[bytes]] = {a.name: IdentityMemo() for a in areas if a.cache_key is not None}

    def families(self) -> tuple[Family, ...]:
        return tuple(f for a in self.areas for f in a.families)

    def render(self, source: MetricsSource) -> bytes:
        """The exposition of one source, area by area, reusing unchanged areas' text."""
        chunks = []
        for area in self.areas:
            key = area.cache_key(source) if area.cache_key is not None else None
            render = partial(self._render, area, source)
            chunks.append(render() if key is None else self._memo[area.name].get(key, render))
        return b"".join(chunks)

    @staticmethod
    def _render(area: Area, source: MetricsSource) -> bytes:
        x = Exposition(area.families)
        area.render(x, source)
        return x.render()

    def reference_markdown(self) -> str:
        """docs/metrics.md, generated from the declared families (a test keeps them equal)."""
        lines = [
            "# agentd metrics reference",
            "",
            "Generated from the family declarations in the metrics areas (`agentd/metrics/`, `agentd/ncclbench/bench_metrics.py`)",
            "(`python -m agentd.daemon.exposition > docs/metrics.md`); a test fails when they differ.",
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
        for area in self.areas:
            lines += [f"## {area.name}", "", "| name | type | labels | help |", "|---|---|---|---|"]
            for f in area.families:
                labels = ", ".join(f"`{lab}`" for lab in f.labels) or "-"
                lines.append(f"| `{f.name}` | {f.type} | {labels} | {f.help.replace('|', '/')} |")
            lines.append("")
        return "\n".join(lines) + "\n" + BUDGET_SECTION  # static text after the generated tables
