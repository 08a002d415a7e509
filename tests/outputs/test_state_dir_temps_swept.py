"""Temp files of agentd's own atomic writes in its state directory are swept at start
(issue 42): a writer killed mid-write (SIGKILL, OOM, a hung fsync at stop) leaves
``.history.json.XXXXXXXX.tmp`` of up to 2 MiB, and nothing removed it; the kernel cursor,
the maintenance file and the benchmark history have the same kind of temp file. One a
live writer still holds (``agentd maintenance on`` right now) is kept."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import SimpleNamespace

from agentd.config import STATE_DIR_FILES, AgentConfig
from agentd.daemon.publisher import Publisher
from agentd.judging.expected import Expected
from agentd.judging.roles import HcaRoles
from agentd.outputs.evaluate import Evaluation
from tests.support import service_snapshots


class Log:
    def __getattr__(self, level: str):
        return lambda event, **kw: None


async def test_temp_files_of_every_state_dir_file_are_swept_at_start(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    config = AgentConfig(paths={"nccl_env": str(tmp_path / "nccl.env"), "nccl_conf": str(tmp_path / "nccl.conf"),
                                "nccl_topo": str(tmp_path / "topo.xml"), "baseline": str(state / "baseline.json"), "state_dir": str(state)},
                         nccl={"enabled": True, "write_topo": False})
    left = [state / f".{name}.k1ll3d{i:02d}.tmp" for i, name in enumerate(STATE_DIR_FILES.values())]
    for p in left:
        p.write_bytes(b"{\"half\": ")
    live = state / ".maintenance.json.l1v3w7t3.tmp"  # its writer is filling it right now: holds the lock
    fd = os.open(live, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    others = state / ".notes.txt.abcdefgh.tmp"  # not a file agentd writes: not agentd's to remove
    others.write_text("someone else's")
    try:
        snap = service_snapshots.snapshot()
        ev = Evaluation(findings=(), status="ok", roles=HcaRoles(("mlx5_0",), (), "inferred"), expected=Expected(),
                        render=SimpleNamespace(env_sh="export NCCL_IB_HCA==mlx5_0\n", env_conf=None, topo_xml=None, topo_problems=()))  # type: ignore[arg-type]
        await Publisher(log=Log()).write(ev, snap, config, {})
        assert [p.name for p in left if p.exists()] == []
        assert live.exists() and others.exists()
    finally:
        os.close(fd)
