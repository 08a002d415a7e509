"""The daemon's enforcer under hostile timing: what it changes must still be what the
configuration names when the change is made, not only when the turn began."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import pytest

from agentd import sim
from agentd.base.actuation import Outcome, Setting
from agentd.collection.collector import collect_once
from agentd.config import AgentConfig, load_config
from agentd.daemon import enforcer as enforcer_mod
from agentd.daemon.enforcer import Enforcer
from agentd.daemon.state import State
from agentd.host.fs import HostRoot
from agentd.judging.enforce import drift_findings, plan
from agentd.outputs.maintenance import Maintenance
from agentd.sim.actuate import SimActuators

pytestmark = pytest.mark.tree


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, object]]] = []

    def _add(self, event: str, **kw: object) -> None:
        self.lines.append((event, kw))

    info = warning = error = exception = debug = _add


class _Daemon:
    def __init__(self, host: HostRoot, config: AgentConfig, state: State, log: _Log):
        self.host, self.config, self.state, self.log = host, config, state, log
        self.full = 0

    def trigger_full(self) -> None:
        self.full += 1


def _config(tmp: Path, root: Path, knobs: str) -> AgentConfig:
    p = tmp / "agentd.toml"
    p.write_text(f"[paths]\nstate_dir = \"{tmp / 'state'}\"\n[enforce]\nmode = \"apply\"\nknobs = {knobs}\n")
    return load_config(p, overrides={"host_root": str(root)})


def _record_changes(monkeypatch: pytest.MonkeyPatch, root: Path) -> list[str]:
    """The targets the daemon's turns change from now on (the simulated node's actuators)."""
    changed: list[str] = []

    class Recording(SimActuators):
        def apply(self, s: Setting, timeout_s: float) -> Outcome:
            changed.append(s.target)
            return super().apply(s, timeout_s)

    monkeypatch.setattr(enforcer_mod, "actuators_for", lambda h, c: Recording(root))
    return changed


def test_a_reload_that_drops_a_knob_mid_turn_stops_the_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mode apply with mtu and pfc named, in maintenance; the configuration is reloaded
    (mode off) while the turn changes the MTU: the turn must not go on to change PFC."""
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["mtu_mismatch@ens1np0", "pfc_off@ens1np0"])
    cfg = _config(tmp_path, root, '["mtu", "pfc"]')
    host = HostRoot.at(root)
    snap = collect_once(host, cfg)
    findings = tuple(drift_findings(plan(snap, cfg), "apply"))
    assert {f.about.name for f in findings} >= {"mtu", "pfc"}
    state = State(seq=1, generated_at=time.time(), started_at=time.time(), config=cfg, ready=True, snapshot=snap,
                  findings=findings, maintenance=Maintenance("test", time.time(), None))
    daemon = _Daemon(host, cfg, state, _Log())
    off = cfg.model_copy(update={"enforce": cfg.enforce.model_copy(update={"mode": "off"})})
    applied: list[str] = []

    class Reloading(SimActuators):
        def apply(self, s: Setting, timeout_s: float) -> Outcome:
            applied.append(s.knob)
            daemon.config = off  # SIGHUP landed: the operator turned enforcement off
            return super().apply(s, timeout_s)

    monkeypatch.setattr(enforcer_mod, "actuators_for", lambda h, c: Reloading(root))
    asyncio.run(Enforcer().step(daemon))
    assert applied == ["mtu"], f"changed after enforcement was turned off: {applied}"
    assert "PFC configuration" in (root / ".agentd/dcb/ens1np0").read_text()


def test_maintenance_ending_mid_turn_stops_the_turn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The turn opened in maintenance; `agentd maintenance off` lands while it changes the
    MTU: jobs may start now, so it must not go on to change PFC."""
    root, daemon = _maintenance_daemon(tmp_path, ["mtu_mismatch@ens1np0", "pfc_off@ens1np0"], '["mtu", "pfc"]')
    applied: list[str] = []

    class MaintenanceEnds(SimActuators):
        def apply(self, s: Setting, timeout_s: float) -> Outcome:
            applied.append(s.knob)
            daemon.state = dataclasses.replace(daemon.state, maintenance=None)
            return super().apply(s, timeout_s)

    monkeypatch.setattr(enforcer_mod, "actuators_for", lambda h, c: MaintenanceEnds(root))
    asyncio.run(Enforcer().step(daemon))
    assert applied == ["mtu"], f"changed after maintenance ended: {applied}"
    assert ("enforce.window_closed", {"knob": "pfc", "why": "maintenance ended", "effect": "not changed: the turn stops here"}) in daemon.log.lines


def test_a_node_healthy_while_in_mode_plan_gets_no_boot_grace_window_after_a_reload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The boot-grace window is for a node "that has not been healthy yet". The enforcer
    only looked at health while in mode apply: a node healthy (taking jobs) in mode plan,
    reloaded into mode apply within boot grace while a critical finding stands, had its
    settings changed under the running job."""
    from agentd.judging.findings import finding, netdev_subject

    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["mtu_mismatch@ens1np0"])
    cfg = _config(tmp_path, root, '["mtu"]')
    cfg = cfg.model_copy(update={"lifecycle": cfg.lifecycle.model_copy(update={"boot_grace_s": 86400.0})})
    plan_cfg = cfg.model_copy(update={"enforce": cfg.enforce.model_copy(update={"mode": "plan"})})
    host = HostRoot.at(root)
    snap = collect_once(host, cfg)
    snap = snap.model_copy(update={"system": snap.system.model_copy(update={"booted_at": time.time() - 60})})
    drift = tuple(drift_findings(plan(snap, cfg), "apply"))
    healthy = State(seq=1, generated_at=time.time(), started_at=time.time(), config=plan_cfg, ready=True, snapshot=snap, findings=drift)
    daemon = _Daemon(host, plan_cfg, healthy, _Log())
    e = Enforcer()
    asyncio.run(e.step(daemon))  # mode plan: the node is healthy (drift is a warning)
    crit = finding("roce.pfc.disabled", "critical", netdev_subject("ens2np0"), "PFC off")
    daemon.config = cfg
    daemon.state = State(seq=2, generated_at=time.time(), started_at=time.time(), config=cfg, ready=True, snapshot=snap,
                         findings=(*drift, crit))
    applied = _record_changes(monkeypatch, root)
    asyncio.run(e.step(daemon))
    assert applied == [], f"changed in a boot-grace window of a node that had been healthy: {e._window}"


def _in_boot_grace(tmp_path: Path, faults: list[str]) -> tuple[Path, AgentConfig, HostRoot, State]:
    """A node booted a minute ago (boot grace a day), mode apply for mtu, ``faults`` on it; its
    State: the drift findings only (healthy: drift is a warning)."""
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=faults)
    cfg = _config(tmp_path, root, '["mtu"]')
    cfg = cfg.model_copy(update={"lifecycle": cfg.lifecycle.model_copy(update={"boot_grace_s": 86400.0})})
    host = HostRoot.at(root)
    snap = collect_once(host, cfg)
    snap = snap.model_copy(update={"system": snap.system.model_copy(update={"booted_at": time.time() - 60})})
    drift = tuple(drift_findings(plan(snap, cfg), "apply"))
    return root, cfg, host, State(seq=1, generated_at=time.time(), started_at=time.time(), config=cfg, ready=True, snapshot=snap, findings=drift)


def _sick(st: State) -> State:
    from agentd.judging.findings import finding, netdev_subject

    crit = finding("roce.pfc.disabled", "critical", netdev_subject("ens2np0"), "PFC off")
    return dataclasses.replace(st, seq=st.seq + 1, findings=(*st.findings, crit))


def test_a_daemon_restarted_within_boot_grace_remembers_the_node_was_healthy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Healthy was kept in memory only: a daemon restarted (an upgrade, an OOM kill) within
    boot grace while a critical finding stood opened the boot-grace window again and changed
    settings under the jobs the healthy node had taken. The journal now keeps it for the boot."""
    root, cfg, host, healthy = _in_boot_grace(tmp_path, ["mtu_mismatch@ens1np0"])
    first = _Daemon(host, cfg, healthy, _Log())
    applied = _record_changes(monkeypatch, root)
    asyncio.run(Enforcer().step(first))  # healthy: no window, and the journal says so
    assert applied == []
    restarted = _Daemon(host, cfg, _sick(healthy), _Log())
    e = Enforcer()
    asyncio.run(e.step(restarted))
    assert applied == [], f"a restarted daemon changed a node that had been healthy this boot: {e._window}"
    assert e._window == (False, "no safe window: the node is not in maintenance and not in boot grace (enforce.when_gpus_idle is off)")


def test_the_healthy_mark_never_sets_a_damaged_journal_aside(tmp_path: Path) -> None:
    """The daemon's bookkeeping (in every mode, plan too) leaves a journal it cannot read
    where it is, for `agentd enforce apply` or rollback to set aside and say so; it says
    why it could not write, and the node's boot grace stays closed in this process."""
    root, cfg, host, healthy = _in_boot_grace(tmp_path, ["mtu_mismatch@ens1np0"])
    journal = tmp_path / "state" / "enforce-journal.json"
    journal.parent.mkdir(parents=True, exist_ok=True)
    journal.write_text("{ not json")
    daemon = _Daemon(host, cfg, healthy, _Log())
    e = Enforcer()
    asyncio.run(e.step(daemon))
    assert journal.read_text() == "{ not json" and list(journal.parent.glob("enforce-journal.json.bad-*")) == []
    assert any(ev == "enforce.journal_unwritable" and "is not a journal" in str(kw["error"]) for ev, kw in daemon.log.lines)
    assert e._healthy_seen


def test_the_healthy_mark_is_for_one_boot_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next boot comes up anew: its boot-grace window opens again before its first
    healthy collection (and the mark of the boot before is forgotten)."""
    root, cfg, host, healthy = _in_boot_grace(tmp_path, ["mtu_mismatch@ens1np0"])
    asyncio.run(Enforcer().step(_Daemon(host, cfg, healthy, _Log())))
    (root / "proc/sys/kernel/random/boot_id").write_text("00000000-0000-4000-8000-00000000b007\n")
    applied = _record_changes(monkeypatch, root)
    asyncio.run(Enforcer().step(_Daemon(host, cfg, _sick(healthy), _Log())))
    assert applied == ["ens1np0"], "the next boot's grace window did not open"


def _maintenance_daemon(tmp_path: Path, faults: list[str], knobs: str, **enforce: object) -> tuple[Path, _Daemon]:
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=faults)
    cfg = _config(tmp_path, root, knobs)
    cfg = cfg.model_copy(update={"enforce": cfg.enforce.model_copy(update=enforce)})
    host = HostRoot.at(root)
    snap = collect_once(host, cfg)
    st = State(seq=1, generated_at=time.time(), started_at=time.time(), config=cfg, ready=True, snapshot=snap,
               findings=tuple(drift_findings(plan(snap, cfg), "apply")), maintenance=Maintenance("test", time.time(), None))
    return root, _Daemon(host, cfg, st, _Log())


def test_at_most_one_change_per_knob_per_interval_and_none_after_max_attempts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A setting that never sticks (the interface takes it, something puts it back at once):
    one try per enforce.interval_s, and none after enforce.max_attempts."""
    root, daemon = _maintenance_daemon(tmp_path, ["mtu_mismatch@ens1np0"], '["mtu"]', interval_s=3600.0, max_attempts=2)
    tried: list[str] = []

    class NeverSticks(SimActuators):
        def apply(self, s: Setting, timeout_s: float) -> Outcome:
            if s.value == 9000:
                tried.append(s.target)
                return Outcome(True, "took it")  # and nothing changed
            return super().apply(s, timeout_s)

    monkeypatch.setattr(enforcer_mod, "actuators_for", lambda h, c: NeverSticks(root))
    e = Enforcer()
    asyncio.run(e.step(daemon))
    asyncio.run(e.step(daemon))  # within the interval
    assert tried == ["ens1np0"]
    for _ in range(4):
        e._last_mono.clear()  # the interval passed
        asyncio.run(e.step(daemon))
    assert tried == ["ens1np0", "ens1np0"], tried
    assert "mtu@ens1np0" in e._stuck


def test_the_daemon_changes_nothing_while_agentd_enforce_holds_the_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentd.outputs.enforce_lock import enforce_lock

    root, daemon = _maintenance_daemon(tmp_path, ["mtu_mismatch@ens1np0"], '["mtu"]')
    tried = _record_changes(monkeypatch, root)
    with enforce_lock(daemon.config.paths.state_dir, wait_s=0) as held:
        assert held
        asyncio.run(Enforcer().step(daemon))
    assert tried == [] and ("enforce.skipped", {"why": "agentd enforce holds the lock"}) in daemon.log.lines
