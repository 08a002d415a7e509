"""A simulated root's recorded answers directory, as the simulator lays it out
(agentd.base.recorded: ``ROOT/.agentd/`` with a simulation manifest), for tests that write
the answers (nvml.json, ethtool/, dcb/) by hand."""

from __future__ import annotations

import json
from pathlib import Path

from agentd.base import recorded


def answers_dir(root: Path) -> Path:
    """``root/.agentd`` with a simulation manifest (made once; kept as it is after)."""
    d = root / recorded.DIR
    d.mkdir(parents=True, exist_ok=True)
    manifest = root / recorded.MANIFEST
    if not manifest.exists():
        manifest.write_text(json.dumps(recorded.manifest("simulation", agentd_version="test", created="2026-01-01T00:00:00Z")))
    return d
