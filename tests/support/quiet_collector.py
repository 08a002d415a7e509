"""A collector for an in-process Daemon that collects nothing and hands out the service
snapshot (agentd.daemon.daemon.CollectorLike): for tests of the daemon's own behaviour
(reload, stop), not of collection."""

from __future__ import annotations

import time

from agentd.config import AgentConfig
from agentd.model import NodeSnapshot
from tests.support import service_snapshots


class QuietCollector:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config

    async def run(self, names: object, *, quick: bool = False) -> None:
        return None

    kernel_source = None

    def snapshot(self) -> NodeSnapshot:
        return service_snapshots.snapshot(time.time())

    def snapshot_job(self):  # type: ignore[no-untyped-def]  # the CollectorLike member: the snapshot, as a job for a worker
        return self.snapshot

    def steady_snapshot(self) -> NodeSnapshot | None:
        return None

    def with_config(self, config: AgentConfig) -> QuietCollector:
        self.config = config
        return self
