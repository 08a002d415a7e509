"""agentd's NCCL topology XML for this node as agentd.nccl.topo renders it, printed whatever
agentd's own checks say of it: `agentd render` writes nothing when the rendered files fail
its validation, and then the GPU check still wants NCCL's verdict on the XML (NCCL_TOPO_FILE).
The reason when there is no XML goes to stderr (exit status 1).

``python tests/gpu/render_topo.py --config FILE`` with agentd importable (tests/gpu/gpu_check.py
runs it only after `agentd render` wrote no topology)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentd.collection.collector import Collector
from agentd.config import load_config
from agentd.host.fs import HostRoot
from agentd.judging.roles import hca_roles
from agentd.nccl.topo import build_topo


def main() -> int:
    ap = argparse.ArgumentParser(prog="render_topo")
    ap.add_argument("--config", type=Path, required=True)
    config = load_config(ap.parse_args().config)
    collector = Collector(HostRoot.at(config.host_root, config.host_mode), config)
    collector.run_sync()
    snap = collector.snapshot()
    render = build_topo(snap, hca_roles(snap, config.hca))
    if render.xml is None:
        print(f"no topology XML: {render.reason}", file=sys.stderr)
        return 1
    sys.stdout.write(render.xml)
    return 0


if __name__ == "__main__":
    sys.exit(main())
