"""Everything one publish writes: the NCCL files, the NFD features file and a first
baseline. ``Writer.write`` runs in the daemon's writer lane (a daemon thread) with a
timeout, so a hung filesystem cannot wedge the event loop, and reports one ``FileStatus``
per managed file."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from agentd.base.atomic import sweep_temps
from agentd.config import STATE_DIR_FILES, AgentConfig
from agentd.judging.baseline import Baseline
from agentd.model import NodeSnapshot
from agentd.nccl import CONF_FILE, ENV_FILE, TOPO_FILE
from agentd.outputs.baseline_store import save_baseline
from agentd.outputs.evaluate import Evaluation
from agentd.outputs.managed import ManagedFiles, ManagedStatus, write_managed
from agentd.outputs.nfd import default_expiry_s, render_nfd_features, write_nfd_features
from agentd.records import FileStatus


def planned_files(ev: Evaluation | None, config: AgentConfig) -> list[tuple[str, Path, str | None]]:
    """(file label, path, content or None when the renderer gave nothing) per managed file
    (``ev`` None: the paths only)."""
    if not config.nccl.enabled:
        return []
    r = ev.render if ev is not None else None
    out: list[tuple[str, Path, str | None]] = [(ENV_FILE, config.paths.nccl_env, getattr(r, "env_sh", None))]
    if config.nccl.write_conf:
        out.append((CONF_FILE, config.paths.nccl_conf, getattr(r, "env_conf", None)))
    if config.nccl.write_topo:
        out.append((TOPO_FILE, config.paths.nccl_topo, getattr(r, "topo_xml", None)))
    return out


@dataclass
class FileKeeper:
    """Writes the managed files through ``agentd.outputs.managed`` (only on change, sealed,
    drift detected and restored per ``nccl.restore_drift``) and maps its bookkeeping onto
    one FileStatus per file that the current config manages. Runs in the writer lane."""

    managed: ManagedFiles = field(default_factory=ManagedFiles)
    _last: tuple[FileStatus, ...] = ()

    def statuses(self) -> tuple[FileStatus, ...]:
        return self._last

    def hold(self) -> tuple[FileStatus, ...]:
        """Write nothing (maintenance): the last statuses stand, none of them a change."""
        self._last = tuple(replace(s, changed=False) if s.changed else s for s in self._last)
        return self._last

    def write(self, ev: Evaluation, config: AgentConfig) -> tuple[FileStatus, ...]:
        self.managed.restore_drift = config.nccl.restore_drift
        out = []
        for name, path, content in planned_files(ev, config):
            blocked = ev.blocked(name)
            if blocked:
                # A value this file carries failed validation: the previous file stays, but
                # it no longer follows the node, so it is reported as not ok (not a write
                # failure). The other files are written on their own.
                st = _status(self.managed.file(path, name=name).status())
                out.append(replace(st, ok=False, changed=False, error="not written: " + "; ".join(blocked)))
                continue
            if content is None:
                continue  # e.g. no topology XML for this node: NCCL detects the topology itself
            write_managed(path, content, state=self.managed, name=name)
            out.append(_status(self.managed.file(path, name=name).status()))
        self._last = tuple(out)
        return self._last


def _status(m: ManagedStatus) -> FileStatus:
    return FileStatus(
        name=m.name, path=m.path, ok=m.ok, last_write_at=m.last_write_at, failures_total=m.failures_total,
        drift=m.drift_detected, drift_total=m.drift_total, error=m.last_error, changed=m.changed,
    )


@dataclass
class NfdKeeper:
    """node-feature-discovery labels (``paths.nfd_features``): rewritten when a label
    changes, and otherwise once a third of the expiry has passed, to keep them alive."""

    last_labels: str | None = None
    last_write_at: float = 0.0
    status: FileStatus | None = None

    def write(self, snap: NodeSnapshot, ev: Evaluation, status: str, config: AgentConfig, now: float) -> FileStatus | None:
        path = config.paths.nfd_features
        if path is None:
            self.status = None
            return None
        expiry = default_expiry_s(config)
        text = render_nfd_features(status, ev.findings, snap, expiry_s=expiry, roles=ev.roles, now=now, fabric=config.fabric)
        labels = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
        prev = self.status or FileStatus(name="nfd-features", path=str(path), ok=True)
        if prev.path != str(path):
            prev, self.last_labels = FileStatus(name="nfd-features", path=str(path), ok=True), None
        if labels == self.last_labels and prev.ok and now - self.last_write_at < expiry / 3:
            self.status = replace(prev, changed=False)
            return self.status
        res = write_nfd_features(path, text)
        if res.ok:
            self.last_labels, self.last_write_at = labels, now
            self.status = replace(prev, ok=True, error=None, changed=True, last_write_at=now)
        else:
            self.status = replace(prev, ok=False, error=res.error, changed=False, failures_total=prev.failures_total + 1)
        return self.status


@dataclass
class Writer:
    """Everything one publish writes, run as one job in the writer lane. The first time it
    sees a path (at start, and after a reload names a new one) it sweeps the temp files a
    killed writer left there: every managed file, the NFD file, the baseline and the files
    agentd keeps in its state directory (history, kernel cursor, maintenance, benchmark
    runs), whoever writes those."""

    files: FileKeeper = field(default_factory=FileKeeper)
    nfd: NfdKeeper = field(default_factory=NfdKeeper)
    baseline: FileStatus | None = None  # once a baseline save was tried
    swept: set[Path] = field(default_factory=set)

    def statuses(self) -> tuple[FileStatus, ...]:
        extra = tuple(s for s in (self.nfd.status, self.baseline) if s is not None)
        return self.files.statuses() + extra

    def sweep(self, config: AgentConfig) -> int:
        """Remove temp files killed writers left beside each path not swept before."""
        paths = [path for _, path, _ in planned_files(None, config)]
        paths += [p for p in (config.paths.nfd_features, config.paths.baseline) if p is not None]
        paths += [config.paths.state_dir / name for name in STATE_DIR_FILES.values()]
        removed = 0
        for path in paths:
            if path not in self.swept:
                self.swept.add(path)
                removed += sweep_temps(path)
        return removed

    def write(self, ev: Evaluation, config: AgentConfig, snap: NodeSnapshot, status: str, baseline: Baseline | None,
              hold_nccl: bool = False) -> tuple[tuple[FileStatus, ...], str | None]:
        """(file statuses, error saving ``baseline`` or None). ``baseline``: a new baseline
        to persist, or None. ``hold_nccl`` (maintenance): the NCCL files are left as they
        are, drift included; their last statuses stand."""
        self.sweep(config)
        if self.baseline is not None and self.baseline.changed:
            self.baseline = replace(self.baseline, changed=False)
        if hold_nccl:
            self.files.hold()
        else:
            self.files.write(ev, config)
        try:
            if ev.nothing_to_judge is None:  # no labels for a node without GPUs and RDMA devices
                self.nfd.write(snap, ev, status, config, time.time())
        except ValueError as e:  # bad label prefix etc.: report, never crash the cycle
            self.nfd.status = FileStatus(name="nfd-features", path=str(config.paths.nfd_features), ok=False, error=str(e))
        err = None
        if baseline is not None:
            path = config.paths.baseline
            err = save_baseline(path, baseline).error
            prev = self.baseline if self.baseline is not None and self.baseline.path == str(path) else FileStatus(name="baseline", path=str(path), ok=True)
            if err is None:
                self.baseline = replace(prev, ok=True, error=None, changed=True, last_write_at=time.time())
            else:
                self.baseline = replace(prev, ok=False, error=err, changed=False, failures_total=prev.failures_total + 1)
        return self.statuses(), err
