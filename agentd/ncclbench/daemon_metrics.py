"""agentd_bench_nccl_* from the last scheduled benchmark (agentd.ncclbench.metrics)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentd.ncclbench.metrics import FAMILIES, render_into

if TYPE_CHECKING:
    from agentd.metrics.registry import Exposition
    from agentd.daemon.state import State

__all__ = ["FAMILIES", "render", "cache_key"]


def render(x: "Exposition", s: "State") -> None:
    out = s.bench
    render_into(x, out.run if out is not None else None, out.expectations if out is not None else ())


def cache_key(s: "State") -> tuple[object, ...]:
    return (s.bench,)
