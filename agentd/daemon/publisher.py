"""What the daemon does with each snapshot: judge it, derive expected values, render the
NCCL files (pure, ``evaluate``, memoised by ``Evaluator``), then write the NCCL files, the
NFD features file and the baseline (``Writer``).

``evaluate`` runs in a worker thread on immutable inputs; ``Writer.write`` runs in its
own lane (a daemon thread) with a timeout, so a hung filesystem cannot wedge the event
loop, and reports one ``FileStatus`` per managed file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from agentd.config import AgentConfig
from agentd.model import Finding, NodeSnapshot
from agentd.judging.roles import HcaRoles
from agentd.outputs.managed import ManagedFiles, ManagedStatus, write_managed
from agentd.daemon.state import Expected, FileStatus


@dataclass(frozen=True)
class Evaluation:
    findings: tuple[Finding, ...]
    status: str
    roles: HcaRoles
    expected: Expected
    render: Any = None  # agentd.nccl.NcclRender when nccl.enabled
    nccl_env: tuple[tuple[str, str], ...] = ()
    nccl_problems: tuple[str, ...] = ()
    new_baseline: Any = None  # agentd.judging.baseline.Baseline


def expected_values(snap: NodeSnapshot, roles: HcaRoles, config: AgentConfig) -> Expected:
    """The expectations the checks apply, exported beside the measured values: port rate
    and width from agentd.checks.ib (one definition for both), MTU per agentd.checks.mtu's
    rule (RoCE compute netdevs: expect.roce_mtu; IPoIB only when expect.ipoib_mtu is set)."""
    from agentd.checks.ib import expected_port_values

    rates: dict[tuple[str, int], float] = {}
    widths: dict[tuple[str, int], int] = {}
    for key, (rate, width) in expected_port_values(snap, roles, config.expect).items():
        if rate:
            rates[key] = rate
        if width:
            widths[key] = width
    mtus: dict[str, int] = {}
    exp = config.expect
    for h in snap.hcas:
        if roles.is_compute(h.name):
            for p in h.ports:
                if p.link_layer == "Ethernet" and p.netdev:
                    mtus[p.netdev] = exp.roce_mtu
    if exp.ipoib_mtu is not None:
        for nd in snap.netdevs:
            if nd.link_layer == "InfiniBand":
                mtus[nd.name] = exp.ipoib_mtu
    return Expected(port_rate_gbps=rates, port_width=widths, netdev_mtu=mtus)


def evaluate(snap: NodeSnapshot, history: Sequence[NodeSnapshot], config: AgentConfig, baseline: Any) -> Evaluation:
    """Pure: judge the snapshot (agentd.judging.judge, as `agentd check` does) and render NCCL files."""
    from agentd.judging.judge import judge

    j = judge(snap, history, config, baseline)
    ev = Evaluation(
        findings=tuple(j.findings),
        status=j.status,
        roles=j.roles,
        expected=expected_values(snap, j.roles, config),
        new_baseline=j.new_baseline,
    )
    if not config.nccl.enabled:
        return ev
    from agentd.nccl import render_all

    try:
        r = render_all(snap, list(j.findings), config, j.roles)
    except Exception as e:  # noqa: BLE001 - a renderer bug must not stop health reporting
        return replace(ev, nccl_problems=(f"renderer failed: {type(e).__name__}: {e}",))
    env = r.env
    items = tuple(env.items()) if hasattr(env, "items") else tuple(dict(env).items())
    return replace(ev, render=r, nccl_env=tuple((str(k), str(v)) for k, v in items), nccl_problems=tuple(r.problems))


def output_findings(ev: Evaluation, files: Sequence[FileStatus]) -> list[Finding]:
    """Findings about what agentd writes for others (pure): a workload on this node may be
    running with an outdated NCCL file, so it shows in /health (as a warning: the node
    itself may be fine) and not only in metrics."""
    out: list[Finding] = []
    for f in files:
        if not f.ok:
            out.append(Finding(
                code="nccl.file.write_failed", severity="warning", subject=f.name,
                message=f"cannot write {f.path}: {f.error or 'unknown error'}; the previous file is kept and the write is retried every cycle ({f.failures_total} failures so far)",
                remediation="check the filesystem (full, read-only, permissions) of the path; with the packaged unit only /etc/nccl is writable",
                measured=f.failures_total,
            ))
        if f.drift:
            out.append(Finding(
                code="nccl.file.drift", severity="warning", subject=f.name,
                message=f"{f.path} was changed by someone else and is not restored (nccl.restore_drift is off)",
                remediation="move local NCCL settings into nccl.overrides in agentd's config, or set nccl.restore_drift = true",
            ))
    if ev.nccl_problems:
        out.append(Finding(
            code="nccl.render.invalid", severity="warning", subject="nccl",
            message="NCCL files not updated, the rendered values fail validation: " + "; ".join(ev.nccl_problems)[:400],
            remediation="fix the nccl.* settings named in the message (agentd check --format json shows them)",
        ))
    topo_problems = getattr(ev.render, "topo_problems", ()) if ev.render is not None else ()
    if topo_problems:
        out.append(Finding(
            code="nccl.topo.invalid", severity="warning", subject="nccl",
            message=f"topology XML not written, it fails NCCL's parser rules ({len(topo_problems)} problems): {topo_problems[0]}",
            remediation="report this with `agentd inspect --format json`; NCCL falls back to its own detection meanwhile (NCCL_TOPO_FILE is left out)",
        ))
    return out


_CONTENT = ("system", "pci", "gpus", "hcas", "netdevs", "gdr", "nvml", "read_errors")


def _probe_flags(snap: NodeSnapshot) -> tuple[tuple[str, bool, bool, bool], ...]:
    return tuple((p.name, p.ok, p.timed_out, p.stale) for p in snap.probes)


@dataclass
class Evaluator:
    """``evaluate`` with a memo: when a snapshot's parts are the very objects of the last
    evaluated one (``history.share`` makes unchanged parts identical), the probes are as
    healthy as before, config and baseline are the same objects, and the last evaluation is
    younger than ``refresh_s``, the last Evaluation is returned. Most fast cycles of a
    steady node change nothing; time-dependent findings (rates over a window) are still
    refreshed every ``refresh_s`` (the medium interval)."""

    fn: Callable[..., Evaluation] = evaluate
    hits: int = 0
    _last: tuple[Any, ...] | None = None

    def __call__(self, snap: NodeSnapshot, history: Sequence[NodeSnapshot], config: AgentConfig, baseline: Any, *, refresh_s: float) -> Evaluation:
        now = time.monotonic()
        last = self._last
        if last is not None:
            psnap, ev, pcfg, pbase, at = last
            if (
                pcfg is config
                and pbase is baseline
                and now - at < refresh_s
                and all(getattr(snap, f) is getattr(psnap, f) for f in _CONTENT)
                and _probe_flags(snap) == _probe_flags(psnap)
            ):
                self.hits += 1
                return ev
        ev = self.fn(snap, history, config, baseline)
        self._last = (snap, ev, config, baseline, now)
        return ev


# ---------------------------------------------------------------------------
# writes (shell)


def planned_files(ev: Evaluation, config: AgentConfig) -> list[tuple[str, Path, str | None]]:
    """(file label, path, content or None when the renderer gave nothing) per managed file."""
    if not config.nccl.enabled:
        return []
    r = ev.render
    out: list[tuple[str, Path, str | None]] = [("nccl.env", config.paths.nccl_env, getattr(r, "env_sh", None))]
    if config.nccl.write_conf:
        out.append(("nccl.conf", config.paths.nccl_conf, getattr(r, "env_conf", None)))
    if config.nccl.write_topo:
        out.append(("topo.xml", config.paths.nccl_topo, getattr(r, "topo_xml", None)))
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

    def write(self, ev: Evaluation, config: AgentConfig) -> tuple[FileStatus, ...]:
        self.managed.restore_drift = config.nccl.restore_drift
        out = []
        for name, path, content in planned_files(ev, config):
            if ev.nccl_problems:
                # Renderer says write nothing: the previous file stays, but it no longer
                # follows the node, so the file is reported as not ok (not a write failure).
                st = _status(self.managed.file(path, name=name).status())
                out.append(replace(st, ok=False, changed=False, error="not written: " + "; ".join(ev.nccl_problems)))
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
        from agentd.outputs.nfd import default_expiry_s, render_nfd_features, write_nfd_features

        expiry = default_expiry_s(config)
        text = render_nfd_features(status, ev.findings, snap, expiry_s=expiry, roles=ev.roles, now=now)
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
    """Everything one publish writes, run as one job in the writer lane."""

    files: FileKeeper = field(default_factory=FileKeeper)
    nfd: NfdKeeper = field(default_factory=NfdKeeper)

    def statuses(self) -> tuple[FileStatus, ...]:
        extra = (self.nfd.status,) if self.nfd.status is not None else ()
        return self.files.statuses() + extra

    def write(self, ev: Evaluation, config: AgentConfig, snap: NodeSnapshot, status: str, baseline: Any) -> tuple[tuple[FileStatus, ...], str | None]:
        """(file statuses, error saving ``baseline`` or None). ``baseline``: a new baseline
        to persist, or None."""
        self.files.write(ev, config)
        try:
            self.nfd.write(snap, ev, status, config, time.time())
        except ValueError as e:  # bad label prefix etc.: report, never crash the cycle
            self.nfd.status = FileStatus(name="nfd-features", path=str(config.paths.nfd_features), ok=False, error=str(e))
        err = None
        if baseline is not None:
            from agentd.outputs.baseline_store import save_baseline

            err = save_baseline(config.paths.baseline, baseline).error
        return self.statuses(), err
