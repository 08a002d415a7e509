"""The daemon's enforcement (``enforce.mode = "apply"``): drift is fixed only where it
cannot hurt a running job.

The drift itself is the checks' business (``config.drift`` findings, every mode but off);
this component decides *when* to act on it: only in a safe window
(agentd.judging.enforce.apply_window: the node in maintenance, in boot grace before its
first healthy collection, or, opt-in, while no process holds a GPU), at most one change
per knob per ``enforce.interval_s``, and never for a setting given up on this boot
(``enforce.stuck`` after ``enforce.max_attempts``; `agentd enforce status --reset`).

The work runs in its own lane (a worker thread) under the enforcement lock, taken
without waiting: while `agentd enforce` holds it the daemon skips its turn. It reads the
node back with its own collector (agentd.outputs.enforce.Session), then asks the daemon
for a full collection, so the drift it fixed leaves the State at once. Outside mode apply
it wakes once a minute to notice a reload, and costs nothing else.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Protocol

from agentd.config import AgentConfig
from agentd.daemon.logging import Log
from agentd.daemon.state import State
from agentd.host.fs import HostRoot
from agentd.host.gpuprocs import gpu_processes
from agentd.host.runner import Lane, await_future
from agentd.judging.enforce import APPLY_ORDER, DRIFT_CODE, Stuck, apply_window, stuck_findings
from agentd.model import Finding
from agentd.outputs.enforce import Result, Session, actuators_for, collector_for, give_up
from agentd.outputs.enforce_journal import journal_path, load_journal, save_journal
from agentd.outputs.enforce_lock import enforce_lock
from agentd.outputs.history_store import node_now
from agentd.records import EnforceKnob, EnforceStatus

IDLE_S = 60.0  # how often a daemon not in mode apply looks again (a reload may change it)


class EnforcerHost(Protocol):
    """What the enforcer needs of the daemon that runs it."""

    @property
    def config(self) -> AgentConfig: ...
    @property
    def state(self) -> State: ...
    @property
    def host(self) -> HostRoot: ...
    @property
    def log(self) -> Log: ...
    def trigger_full(self) -> None: ...


@dataclass(frozen=True)
class _Job:
    results: tuple[Result, ...]
    stuck: dict[str, str]
    attempts: dict[str, int]
    skipped: str = ""  # why nothing was tried (the lock held by `agentd enforce`)


def _apply_job(host: HostRoot, config: AgentConfig, state_dir: Path, knobs: tuple[str, ...], log: Log,
               current: Callable[[], AgentConfig] | None = None, closed: Callable[[], str | None] | None = None) -> _Job:
    """One turn, in the lane: recover what a killed run left, then at most one change per
    knob of ``knobs``, re-planned after each (the QoS chain's knobs build on each other).
    ``current``: the daemon's configuration now; before each change the knob must still be
    named and the mode still apply (a reload while the turn runs stops it there).
    ``closed``: why the window the turn was opened in has closed since (None: open)."""
    actuators = actuators_for(host, config)
    if actuators is None:
        return _Job((), {}, {}, "an offline root is never changed")
    with enforce_lock(state_dir, wait_s=0) as held:
        if not held:
            return _Job((), {}, {}, "agentd enforce holds the lock")
        s = Session(host=host, config=config, state_dir=state_dir, actuators=actuators, collect=collector_for(host, config), by="daemon", log=log,
                    boot_id=node_now(host, str(config.host_root))[1])
        s.save()  # a new boot's attempts start at zero on disk too
        results = list(s.recover())
        p = s.plan(knobs)
        for knob in (k for k in APPLY_ORDER if k in knobs):
            now = current() if current is not None else config
            if now.enforce.mode != "apply" or knob not in now.enforce.knobs:
                log.info("enforce.reloaded", knob=knob, effect="not changed: the configuration no longer names it in mode apply")
                continue
            if closed is not None and (why := closed()) is not None:
                log.info("enforce.window_closed", knob=knob, why=why, effect="not changed: the turn stops here")
                break
            for c in [x for x in p.changes if x.knob == knob and x.applicable]:
                if c.key in s.journal.stuck:
                    continue
                tries = s.journal.attempts.get(c.key, 0)
                if tries >= config.enforce.max_attempts:
                    last = next((e for e in reversed(s.journal.entries) if e.key == c.key and e.state != "pending"), None)
                    why = f"{last.state}: {last.verify or last.detail}" if last is not None else "still differs"
                    give_up(s, c.key, why)
                    log.warning("enforce.stuck", knob=c.knob, target=c.target, attempts=tries, last=why,
                                effect="left alone until the next boot or `agentd enforce status --reset`")
                    continue
                results.append(s.apply(c))  # one change per knob and turn
                p = s.plan(knobs)
                break
        return _Job(tuple(results), dict(s.journal.stuck), dict(s.journal.attempts))


def _read_stuck(host: HostRoot, config: AgentConfig) -> tuple[dict[str, str], dict[str, int], bool]:
    """This boot's stuck settings and attempts, as the journal holds them (a new boot: none),
    and whether a daemon saw the node healthy earlier this boot (a boot it can name)."""
    boot = node_now(host, str(config.host_root))[1]
    j = load_journal(journal_path(config.paths.state_dir), set_aside=False).for_boot(boot)  # without the lock: change nothing
    return dict(j.stuck), dict(j.attempts), boot is not None and j.healthy_at is not None


def _mark_healthy(host: HostRoot, config: AgentConfig, at: float) -> bool:
    """Record in the journal that the node was healthy this boot, so that a daemon
    restarted later in the boot opens no boot-grace window either. False: not recorded
    (`agentd enforce` holds the lock, or the boot cannot be named): try again later."""
    boot = node_now(host, str(config.host_root))[1]
    if boot is None:
        return False
    state_dir = config.paths.state_dir
    with enforce_lock(state_dir, wait_s=0) as held:
        if not held:
            return False
        path = journal_path(state_dir)
        # a damaged journal is left for `agentd enforce apply` or rollback to set aside (and
        # say so): JournalError, said by the caller, tried again later
        j = load_journal(path, set_aside=False).for_boot(boot)
        if j.healthy_at is None:
            res = save_journal(path, replace(j, healthy_at=at))
            if not res.ok:
                raise OSError(f"cannot write {path}: {res.error}")
        return True


class Enforcer:
    def __init__(self) -> None:
        self.lane = Lane("enforce")
        self._knobs: dict[str, EnforceKnob] = {}
        self._last_mono: dict[str, float] = {}  # knob -> when a change of it was last tried
        self._stuck: dict[str, str] = {}  # setting key -> the outcome it was given up on
        self._attempts: dict[str, int] = {}
        self._stuck_read_mono = -1e9
        self._healthy_seen = False
        self._healthy_kept = False  # the journal says so too (a restart in this boot knows it)
        self._healthy_try_mono = -1e9
        self._window: tuple[bool, str] = (False, "")

    # -- what the State shows -------------------------------------------------------
    def status(self, config: AgentConfig) -> EnforceStatus | None:
        cfg = config.enforce
        if cfg.mode == "off" or not cfg.knobs:
            return None
        stuck = {k: sum(1 for key in self._stuck if key.split("@", 1)[0] == k) for k in cfg.knobs}
        knobs = tuple(replace(self._knobs.get(k, EnforceKnob(k)), stuck=stuck[k]) for k in cfg.knobs)
        open_, why = self._window if cfg.mode == "apply" else (False, "enforce.mode is plan: drift is only reported")
        return EnforceStatus(mode=cfg.mode, knobs=knobs, window_open=open_, window=why)

    def findings(self, config: AgentConfig) -> tuple[Finding, ...]:
        cfg = config.enforce
        if cfg.mode != "apply" or not self._stuck:
            return ()
        out = []
        for key, why in sorted(self._stuck.items()):
            knob, _, target = key.partition("@")
            if knob in cfg.knobs:
                out.append(Stuck(knob, target, self._attempts.get(key, cfg.max_attempts), why))
        return tuple(stuck_findings(out))

    # -- the loop ---------------------------------------------------------------------
    async def run_forever(self, daemon: EnforcerHost) -> None:
        while True:
            cfg = daemon.config.enforce
            # in mode apply it looks at each fast tier's State (a few dict lookups when nothing drifts)
            await asyncio.sleep(daemon.config.intervals.fast_s if cfg.mode == "apply" and cfg.knobs else IDLE_S)
            try:
                await self.step(daemon)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                daemon.log.exception("enforce.failed", error=f"{type(e).__name__}: {e}")

    def _observe(self, st: State) -> None:
        """The node has been healthy once (its measured status, boot-grace-withheld
        findings included, had nothing critical): the boot-grace window is over."""
        if st.ready and not self._healthy_seen and not any(f.severity == "critical" for f in st.findings):
            self._healthy_seen = True

    async def _keep_healthy(self, daemon: EnforcerHost) -> None:
        """Write down (once, in the lane) that the node has been healthy this boot."""
        now_mono = time.monotonic()
        if now_mono - self._healthy_try_mono < IDLE_S:
            return
        self._healthy_try_mono = now_mono
        config = daemon.config
        try:
            self._healthy_kept = await await_future(self.lane.submit(_mark_healthy, daemon.host, config, time.time())[0], config.timeouts.probe_s)
        except Exception as e:
            daemon.log.warning("enforce.journal_unwritable", path=str(journal_path(config.paths.state_dir)), error=f"{type(e).__name__}: {e}",
                               effect="a daemon restarted in this boot may open a boot-grace window again")

    async def step(self, daemon: EnforcerHost) -> None:
        config, st = daemon.config, daemon.state
        cfg = config.enforce
        self._observe(st)  # in every mode: a node healthy in mode plan has had its boot-grace window
        if self._healthy_seen and not self._healthy_kept and cfg.mode != "off" and cfg.knobs:
            await self._keep_healthy(daemon)
        if cfg.mode != "apply" or not cfg.knobs or not st.ready or st.snapshot is None:
            self._window = (False, "")
            return
        state_dir = config.paths.state_dir
        timeout = config.timeouts.probe_s
        now_mono = time.monotonic()
        if now_mono - self._stuck_read_mono >= min(60.0, cfg.interval_s):
            try:
                self._stuck, self._attempts, healthy = await await_future(self.lane.submit(_read_stuck, daemon.host, config)[0], timeout)
                self._stuck_read_mono = now_mono
                if healthy:  # an earlier daemon of this boot saw the node healthy
                    self._healthy_seen = self._healthy_kept = True
            except Exception as e:
                daemon.log.warning("enforce.journal_unreadable", path=str(journal_path(state_dir)), error=f"{type(e).__name__}: {e}")
        drifting = {f.about.name for f in st.findings if f.code == DRIFT_CODE and f.about.kind == "setting" and f.about.name}
        due = tuple(k for k in cfg.knobs if k in drifting and now_mono - self._last_mono.get(k, -1e18) >= cfg.interval_s)
        busy: bool | None = None
        if cfg.when_gpus_idle:
            try:
                procs = await await_future(self.lane.submit(gpu_processes, daemon.host)[0], config.timeouts.nvml_s)
                busy = bool(procs.processes) if procs.available else None
            except Exception:
                busy = None
        snap = st.snapshot
        self._window = apply_window(maintenance=st.maintenance is not None, booted_at=snap.system.booted_at, now=time.time(),
                                    boot_grace_s=config.lifecycle.boot_grace_s, healthy_seen=self._healthy_seen,
                                    when_gpus_idle=cfg.when_gpus_idle, gpus_busy=busy)
        if not due or not self._window[0]:
            return
        for k in due:
            self._last_mono[k] = now_mono
        daemon.log.info("enforce.window", knobs=list(due), why=self._window[1])
        in_maintenance = st.maintenance is not None

        def closed() -> str | None:  # read in the lane: State is replaced whole, never changed
            return "maintenance ended" if in_maintenance and daemon.state.maintenance is None else None

        job = functools.partial(_apply_job, daemon.host, config, state_dir, due, daemon.log, lambda: daemon.config, closed)
        limit = (len(due) * 3 + 2) * (cfg.change_timeout_s + 2 * max(config.timeouts.probe_s, config.timeouts.nvml_s))
        try:
            done = await await_future(self.lane.submit(job)[0], limit)
        except TimeoutError:
            daemon.log.error("enforce.stuck_lane", limit_s=limit, effect="the next turn waits for it to finish")
            return
        if done.skipped:
            daemon.log.info("enforce.skipped", why=done.skipped)
            return
        self._stuck, self._attempts = done.stuck, done.attempts
        for r in done.results:
            was = self._knobs.get(r.knob, EnforceKnob(r.knob))
            if r.outcome == "applied":
                was = replace(was, applies_total=was.applies_total + 1, last_apply_at=time.time())
            elif r.outcome in ("failed", "partial"):
                was = replace(was, failures_total=was.failures_total + 1)
            self._knobs[r.knob] = was
        if done.results:
            daemon.trigger_full()
