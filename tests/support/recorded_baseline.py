"""A baseline recorded with a node image (``ROOT/.agentd/state/baseline.json``), as
`agentd capture` keeps the node's: what `agentd check` on a root that is not the node
judges against (read-only)."""

from __future__ import annotations

from pathlib import Path

from agentd.base import recorded
from agentd.collection.collector import Collector
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot
from agentd.judging.baseline import Baseline, baseline_to_json
from agentd.judging.judge import judge, node_identity


def baseline_of(root: Path) -> Baseline:
    """The baseline a healthy ``root`` gets: its inventory and identity."""
    cfg = AgentConfig(host_root=root)
    host = HostRoot.at(root)
    c = Collector(host, cfg)
    c.run_sync()
    snap = c.snapshot()
    j = judge(snap, (), cfg, None, node_identity(snap, cfg))
    assert j.new_baseline is not None, [(f.code, f.subject) for f in j.findings if f.severity != "ok"]
    return j.new_baseline


def record_baseline(root: Path, baseline: Baseline) -> Path:
    """Write ``baseline`` where a capture of ``root`` keeps the node's; returns the file."""
    path = root / recorded.DIR / recorded.BASELINE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(baseline_to_json(baseline))
    return path
