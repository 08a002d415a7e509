"""Changing the node, one setting at a time: journal, change, read back, roll back.

A ``Session`` is one run under the enforcement lock (the caller holds it:
agentd.outputs.enforce_lock), by the CLI or the daemon. For each change of a plan
(agentd.judging.enforce):

1. precondition: the plan says it may be applied (the device is there, the value
   settable, the link has carrier, the root is not offline), and its knob is named;
2. a journal entry with the prior value, written atomically *before* the change
   (agentd.outputs.enforce_journal);
3. the change through the node's own interface (the actuators: agentd.host.actuators on a
   live root, agentd.sim.actuate on a simulated one);
4. a read-back: the node is collected again, as every check reads it, and only what the
   knob sets is compared (agentd.judging.enforce.read_setting);
5. what does not read back as desired is rolled back to the prior value, read back again;
6. the outcome finishes the entry (applied, failed, partial) and is logged as one
   structured line: who, why (the finding), before, after, the read-back.

``recover`` finishes what a killed run left ``pending``: the setting reads as desired
(the change was made: applied), as before (it never happened: interrupted), or as
neither (restored to before, or partial). ``rollback`` restores the prior values of the
outstanding entries, newest setting first. Nothing here decides *when*: the caller does.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Protocol

from agentd.base.actuation import Actuators, Setting, Value
from agentd.base.jsontypes import JsonObject
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot
from agentd.judging.enforce import APPLY_ORDER, CODES, DRIFT_CODE, Change, Plan, command_for, from_json, plan, read_setting, same, show, to_json, with_value
from agentd.model import NodeSnapshot
from agentd.outputs.enforce_journal import Entry, Journal, journal_path, load_journal, save_journal

Collect = Callable[[], NodeSnapshot]


class AuditLog(Protocol):
    """Where the audit lines go: one call per event, its fields as keywords (structlog's
    bound logger in the CLI and the daemon)."""

    def info(self, event: str, **fields: object) -> object: ...

    def warning(self, event: str, **fields: object) -> object: ...


class EnforceError(Exception):
    """The session cannot change anything (no actuators for this root, journal unwritable)."""


# What a plan and a read-back read: every probe but the kernel log, the fabric daemons and
# the counters (ethtool statistics, IB and PCIe error counters), which no knob depends on.
# A session's own collector leaves them out: a fresh kernel log reader would read the
# whole log on every read-back.
UNPLANNED_PROBES = frozenset(("kernel", "daemons", "ethtool", "ib_counters", "pci_errors"))


def collector_for(host: HostRoot, config: AgentConfig) -> Collect:
    """A ``collect`` for a Session: one collector, each call a collection of what plans read.
    A probe that fails keeps its previous data in a collector (stale): here it reads as
    nothing instead (its probe's empty data, as on a first collection), so neither a plan
    nor a read-back is ever judged from a reading taken before the last change."""
    from agentd.collection.collector import PROBE_BY_NAME, PROBE_TIERS, Collector

    c = Collector(host, config)
    names = [n for n in PROBE_TIERS if n not in UNPLANNED_PROBES]

    def collect() -> NodeSnapshot:
        c.run_sync(names)
        for n in names:
            out = c.outputs.get(n)
            if out is not None and out.status.stale:
                c.outputs[n] = replace(out, data=PROBE_BY_NAME[n].empty, errors=(), journal=None, inputs=())
        return c.snapshot()

    return collect


def actuators_for(host: HostRoot, config: AgentConfig) -> Actuators | None:
    """The live node's interfaces, the simulated node's stand-ins, or None (an offline root,
    or a capture made live by ``host_mode``: it is not the node, and the live interfaces
    would change the running kernel's netdevs, same names on the node it was taken on,
    from the capture's readings). A simulated tree forced live keeps the live interfaces:
    the crash tests drive a stand-in modprobe that way."""
    if host.is_live and (host.unread_recording is not None
                         or (host.answers is not None and (host.manifest or {}).get("kind") != "simulation")):
        return None
    if host.is_live:
        from agentd.host.actuators import LiveActuators

        return LiveActuators(host, config.enforce.modprobe)
    if host.is_simulated:
        from agentd.sim.actuate import SimActuators

        return SimActuators(host.root)
    return None


@dataclass(frozen=True)
class Result:
    """What happened to one setting in this run."""

    knob: str
    target: str
    outcome: str  # applied | refused | failed | partial | restored | interrupted | unknown
    before: Value
    desired: Value
    after: Value
    command: str
    detail: str = ""
    verify: str = ""
    entry: int | None = None
    param: int | None = None

    @property
    def key(self) -> str:
        return f"{self.knob}@{self.target}"

    def to_json(self) -> JsonObject:
        return {"knob": self.knob, "target": self.target, "outcome": self.outcome,
                "current": to_json(self.knob, self.before), "desired": to_json(self.knob, self.desired),
                "after": to_json(self.knob, self.after), "current_text": show(self.knob, self.before, self.param),
                "desired_text": show(self.knob, self.desired, self.param), "command": self.command,
                "detail": self.detail, "verify": self.verify, "journal_entry": self.entry}


def _setting_json(s: Setting) -> JsonObject:
    d = asdict(s)
    d.pop("value")
    d["entries"] = [list(e) for e in s.entries]
    return d


def _setting_from(e: Entry, value: Value) -> Setting:
    d = dict(e.setting)
    d.pop("knob", None)
    d.pop("target", None)
    entries = tuple((int(a), int(b)) for a, b in d.pop("entries", ()) or ())
    return Setting(e.knob, e.target, value, entries=entries, **{k: v for k, v in d.items() if k in Setting.__dataclass_fields__})


def restore_setting(s: Setting, value: Value, snap: NodeSnapshot) -> Setting:
    """The request that puts ``s`` back to ``value``, from what ``snap`` reads now: the DSCP
    APP entries a trust change to pcp deletes (mlx5), the entry a DSCP map change replaces.
    A prior value belongs to the netdev's name (what the journal and `rollback` name): the
    request goes to the device of that name as ``snap`` read it (its ifindex now: a driver
    reload or a reboot gives it another), never to one renamed after that read."""
    if s.ifindex is not None and s.netdev is not None:
        nd_now = snap.netdev(s.netdev)
        s = with_value(s, s.value, ifindex=nd_now.ifindex if nd_now is not None else None)
    if s.knob == "trust" and value == "pcp" and not s.apptrust:
        nd = snap.netdev(s.netdev or "")
        table = nd.pfc.dscp2prio if nd is not None and nd.pfc is not None else {}
        return with_value(s, value, entries=tuple(table.items()))
    if s.knob == "dscp2prio":
        ok, now = read_setting(snap, s)
        return with_value(s, value, entries=((s.param, now),) if ok and isinstance(now, int) and s.param is not None else ())
    return with_value(s, value)


class Session:
    def __init__(self, *, host: HostRoot, config: AgentConfig, state_dir: Path, actuators: Actuators, collect: Collect,
                 by: str, log: AuditLog, boot_id: str | None = None):
        self.host, self.config, self.actuators, self.collect = host, config, actuators, collect
        self.by, self.log = by, log
        self.path = journal_path(state_dir)
        self.journal: Journal = load_journal(self.path).for_boot(boot_id)  # raises JournalError
        self.note = self.journal.note
        self.timeout_s = config.enforce.change_timeout_s
        self._snap: NodeSnapshot | None = None

    # -- the node and the journal ---------------------------------------------------
    def snapshot(self, *, fresh: bool = True) -> NodeSnapshot:
        if fresh or self._snap is None:
            self._snap = self.collect()
        return self._snap

    def plan(self, knobs: Iterable[str] | None = None, *, fresh: bool = True) -> Plan:
        return plan(self.snapshot(fresh=fresh), self.config, knobs=None if knobs is None else list(knobs))

    def _save(self, j: Journal) -> None:
        res = save_journal(self.path, j)
        if not res.ok:
            raise EnforceError(f"cannot write the journal {self.path}: {res.error}; nothing was changed")
        self.journal = j

    def _put(self, e: Entry) -> None:
        self._save(self.journal.with_entry(e))

    def save(self) -> None:
        self._save(self.journal)

    def _audit(self, event: str, e: Entry, r: Result) -> None:
        level = "info" if r.outcome in ("applied", "restored", "interrupted") else "warning"
        getattr(self.log, level)(event, who=e.by, why=e.why, knob=e.knob, target=e.target, before=e.before,
                                 desired=e.desired, after=to_json(e.knob, r.after), verify=r.verify, outcome=r.outcome,
                                 detail=r.detail, command=e.command, journal=str(self.path), entry=e.id)

    # -- one change -------------------------------------------------------------------
    def apply(self, c: Change, *, why: str | None = None) -> Result:
        """Apply one change of the plan (its knob must be named in enforce.knobs)."""
        why = why or f"{DRIFT_CODE} {c.key} ({', '.join(CODES.get(c.knob, ()))})"
        e = Entry(id=self.journal.next_id(), at=time.time(), by=self.by, why=why, knob=c.knob, target=c.target,
                  before=to_json(c.knob, c.current), desired=to_json(c.knob, c.desired), command=c.command,
                  setting=_setting_json(c.setting))
        if c.knob not in self.config.enforce.knobs:
            r = Result(c.knob, c.target, "refused", c.current, c.desired, c.current, c.command,
                       detail=f"{c.knob} is not in enforce.knobs: agentd changes only the knobs named there", param=c.setting.param)
            self._finish(e, "refused", r)
            return r
        if c.blocked is not None or not c.drift:
            r = Result(c.knob, c.target, "refused", c.current, c.desired, c.current, c.command,
                       detail=c.blocked or "nothing differs", param=c.setting.param)
            self._finish(e, "refused", r)
            return r
        self._save(self.journal.with_entry(e).tried(c.key))  # the prior value reaches the disk first
        out = self.actuators.apply(c.setting, self.timeout_s)
        return self._verify(e, c.setting, c.current, out.ok, out.detail)

    def _verify(self, e: Entry, s: Setting, before: Value, took: bool, detail: str) -> Result:
        """Read back; restore ``before`` where the setting is not as desired but changed."""
        desired = s.value
        ok, after = read_setting(self.snapshot(), s)
        if ok and same(s, after, desired) and took:
            r = Result(e.knob, e.target, "applied", before, desired, after, e.command, detail,
                       f"read back {show(e.knob, after, s.param)}", e.id, s.param)
            return self._finish(e, "applied", r)
        if ok and same(s, after, before):
            why = detail if not took else f"the interface took it, but it reads {show(e.knob, after, s.param)} still"
            r = Result(e.knob, e.target, "failed", before, desired, after, e.command, why,
                       f"read back {show(e.knob, after, s.param)}: unchanged", e.id, s.param)
            return self._finish(e, "failed", r)
        seen = show(e.knob, after, s.param) if ok else "unreadable"
        back = self.actuators.apply(restore_setting(s, before, self.snapshot(fresh=False)), self.timeout_s)
        ok2, after2 = read_setting(self.snapshot(), s)
        if ok2 and same(s, after2, before):
            r = Result(e.knob, e.target, "failed", before, desired, after2, e.command, detail or "did not read back as desired",
                       f"read back {seen}, not {show(e.knob, desired, s.param)}: rolled back to {show(e.knob, before, s.param)}", e.id, s.param)
            return self._finish(e, "failed", r)
        r = Result(e.knob, e.target, "partial", before, desired, after2 if ok2 else None, e.command,
                   "; ".join(x for x in (detail, back.detail) if x),
                   f"read back {seen}, not {show(e.knob, desired, s.param)}; the rollback to {show(e.knob, before, s.param)} "
                   f"reads {show(e.knob, after2, s.param) if ok2 else 'unreadable'}: the prior value stays in the journal", e.id, s.param)
        return self._finish(e, "partial", r)

    def _finish(self, e: Entry, state: str, r: Result, event: str = "enforce.apply") -> Result:
        done = replace(e, state=state, after=to_json(e.knob, r.after), verify=r.verify, detail=r.detail, finished_at=time.time())
        self._save(self.journal.with_entry(done))
        self._audit(event, done, r)
        return r

    # -- a killed run's leftovers ---------------------------------------------------------
    def recover(self) -> list[Result]:
        """Finish every ``pending`` entry from what the node reads now."""
        out = []
        for e in [x for x in self.journal.entries if x.state == "pending"]:
            try:
                before, desired = from_json(e.knob, e.before), from_json(e.knob, e.desired)
            except ValueError as err:
                out.append(Result(e.knob, e.target, "unknown", None, None, None, e.command, f"journal entry {e.id}: {err}", entry=e.id))
                continue
            s = _setting_from(e, desired)
            ok, now = read_setting(self.snapshot(), s)
            if not ok:
                out.append(Result(e.knob, e.target, "unknown", before, desired, None, e.command,
                                  "the setting cannot be read now: the entry stays pending (its prior value kept)", entry=e.id, param=s.param))
                continue
            if same(s, now, desired):
                r = Result(e.knob, e.target, "applied", before, desired, now, e.command, "finished after an interrupted run",
                           f"read back {show(e.knob, now, s.param)}", e.id, s.param)
                out.append(self._finish(e, "applied", r, "enforce.recover"))
            elif same(s, now, before):
                r = Result(e.knob, e.target, "interrupted", before, desired, now, e.command, "the run was interrupted before the change",
                           f"read back {show(e.knob, now, s.param)}: unchanged", e.id, s.param)
                out.append(self._finish(e, "interrupted", r, "enforce.recover"))
            else:
                out.append(self._verify(e, s, before, False, "interrupted mid-change"))
        return out

    # -- the CLI's loop -------------------------------------------------------------------
    def apply_all(self, knobs: Iterable[str]) -> tuple[list[Result], Plan]:
        """Apply the plan's changes one at a time, reading the node back after each, until
        none of ``knobs`` is left that may be applied; the refused ones are recorded once.
        Returns the results and the plan of what is left."""
        wanted = [k for k in knobs]
        results: list[Result] = []
        tried: set[str] = set()
        while True:
            p = self.plan(wanted)
            c = next((x for x in _in_order(p) if x.applicable and x.key not in tried), None)
            if c is None:
                for x in p.drift:
                    if x.key not in tried:
                        tried.add(x.key)
                        results.append(self.apply(x))
                return results, p
            tried.add(c.key)
            results.append(self.apply(c))

    # -- putting prior values back ---------------------------------------------------------
    def rollback(self, knobs: Iterable[str]) -> list[Result]:
        """Restore the prior value of every outstanding entry of ``knobs`` (the oldest
        entry's of each setting), newest setting first. (``recover`` first: the caller.)"""
        results: list[Result] = []
        groups: dict[str, list[Entry]] = {}
        for e in self.journal.outstanding(knobs):
            groups.setdefault(e.key, []).append(e)
        for key in sorted(groups, key=lambda k: -max(x.id for x in groups[k])):
            entries = groups[key]
            first = min(entries, key=lambda x: x.id)
            try:
                before = from_json(first.knob, first.before)
            except ValueError as err:
                results.append(Result(first.knob, first.target, "unknown", None, None, None, "", f"journal entry {first.id}: {err}", entry=first.id))
                continue
            results.append(self._restore(first, entries, before))
        return results

    def _restore(self, first: Entry, entries: list[Entry], before: Value) -> Result:
        s0 = _setting_from(first, before)
        snap = self.snapshot()
        ok, now = read_setting(snap, s0)
        s = restore_setting(s0, before, snap)
        cmd = command_for(s, now if ok else None, before)
        e = Entry(id=self.journal.next_id(), at=time.time(), by=self.by, why=f"rollback of journal entries {', '.join(str(x.id) for x in entries)}",
                  knob=first.knob, target=first.target, before=to_json(first.knob, now) if ok else None, desired=first.before,
                  command=cmd, state="pending", setting=_setting_json(s))
        if ok and same(s0, now, before):
            r = Result(first.knob, first.target, "restored", now, before, now, cmd, "it already reads its prior value",
                       f"read back {show(first.knob, now, s.param)}", e.id, s.param)
        else:
            self._put(e)
            out = self.actuators.apply(s, self.timeout_s)
            ok2, after = read_setting(self.snapshot(), s)
            good = ok2 and same(s, after, before)
            r = Result(first.knob, first.target, "restored" if good else "failed", now if ok else None, before, after if ok2 else None, cmd,
                       out.detail, f"read back {show(first.knob, after, s.param) if ok2 else 'unreadable'}" + ("" if good else f", not {show(first.knob, before, s.param)}"),
                       e.id, s.param)
        done = replace(e, state="rollback", after=to_json(first.knob, r.after), verify=r.verify, detail=r.detail, finished_at=time.time())
        j = self.journal.with_entry(done)
        if r.outcome == "restored":
            for x in entries:
                j = j.with_entry(replace(x, state="restored"))
        self._save(j)
        self._audit("enforce.rollback", done, r)
        return r


def _in_order(p: Plan) -> list[Change]:
    return sorted(p.changes, key=lambda c: APPLY_ORDER.index(c.knob))


def give_up(s: Session, key: str, why: str) -> None:
    """Mark setting ``key`` stuck until the next boot or `agentd enforce status --reset`."""
    s._save(replace(s.journal, stuck={**s.journal.stuck, key: why[:300]}))


def last_outcomes(j: Journal) -> dict[str, Entry]:
    """Each knob's newest finished entry (`agentd enforce status`)."""
    out: dict[str, Entry] = {}
    for e in j.entries:
        if e.state != "pending":
            out[e.knob] = e
    return out
