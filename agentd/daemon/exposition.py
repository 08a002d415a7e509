"""The daemon's ``/metrics``: the registry of every metrics area, in exposition order.

``python -m agentd.daemon.exposition > docs/metrics.md`` regenerates the reference."""

from __future__ import annotations

from agentd.metrics import agent, enforce, fabric, fingerprint, gpu_fabric, kernel, node, optics, qos
from agentd.metrics import placement as placement_metrics
from agentd.metrics.registry import Registry
from agentd.ncclbench import bench_metrics as bench

REGISTRY = Registry((agent.AREA, fabric.AREA, node.AREA, gpu_fabric.AREA, kernel.AREA, bench.AREA, placement_metrics.AREA,
                     qos.AREA, fingerprint.AREA, enforce.AREA, optics.AREA))

if __name__ == "__main__":  # pragma: no cover - doc generator
    print(REGISTRY.reference_markdown(), end="")
