"""``agentd enforce plan|apply|rollback|status``: keep the node's fabric configuration right
by hand (docs/enforce.md).

Exit codes: ``plan`` 0 nothing differs, 1 drift; ``apply`` 0 no drift is left, 1 some
remains (refused, failed, partial); ``rollback`` 0 every prior value is back, 1 not;
``status`` 0; 3 could not run (as every agentd command: bad config, an offline root for
apply, the lock held by another, no ``--yes`` without a terminal). JSON names each
change's knob, target, current, desired, command and outcome.

Wiring (agentd/cli.py): the arguments are parsed there (building the parser must stay
cheap for every command); ``cmd_enforce`` resolves the config, host root, state directory
and user, then calls ``run`` here.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

from agentd.base.escape import json_text, printable
from agentd.base.jsontypes import JsonObject
from agentd.config import KNOBS, AgentConfig
from agentd.host.fs import HostRoot
from agentd.judging.enforce import Change, Plan, to_json
from agentd.outputs.enforce import AuditLog, Collect, EnforceError, Result, Session, actuators_for, last_outcomes
from agentd.outputs.enforce_journal import JournalError, journal_path, load_journal
from agentd.outputs.enforce_lock import enforce_lock, holder

EXIT_OK, EXIT_DRIFT, EXIT_INTERNAL = 0, 1, 3
LOCK_WAIT_S = 30.0


def _out(args: argparse.Namespace, doc: JsonObject, text: str) -> None:
    if args.format == "json":
        sys.stdout.write(json_text(doc, indent=2) + "\n")
    else:
        sys.stdout.write(text)


def _change_json(c: Change) -> JsonObject:
    return {"knob": c.knob, "target": c.target, "current": to_json(c.knob, c.current) if c.readable else None,
            "desired": to_json(c.knob, c.desired), "current_text": c.current_text, "desired_text": c.desired_text,
            "readable": c.readable, "drift": c.drift, "applicable": c.applicable, "blocked": c.blocked,
            "command": c.command, "why": c.why}


def _plan_text(p: Plan, head: str) -> str:
    lines = [head]
    for c in p.drift:
        lines.append(f"  {printable(c.key)}: {c.current_text} -> {c.desired_text} ({c.why})")
        lines.append(f"      {printable(c.command)}")
        if c.blocked:
            lines.append(f"      not applicable now: {c.blocked}")
    in_sync = sum(1 for c in p.changes if c.readable and not c.drift)
    unread = [c for c in p.changes if not c.readable]
    tail = f"in sync: {in_sync}"
    if unread:
        tail += f"; not readable: {len(unread)} ({', '.join(printable(c.key) for c in unread[:6])}{', ...' if len(unread) > 6 else ''})"
    lines.append(tail)
    return "\n".join(lines) + "\n"


def _result_line(r: Result) -> str:
    verify = f" ({r.verify})" if r.verify else ""
    detail = f": {r.detail}" if r.detail and r.outcome != "applied" else ""
    entry = f" [journal entry {r.entry}]" if r.entry is not None else ""
    return f"  {r.outcome} {printable(r.key)}: {r.to_json()['current_text']} -> {r.to_json()['desired_text']}{verify}{detail}{entry}\n"


def _knobs(args: argparse.Namespace, config: AgentConfig, *, changing: bool) -> list[str]:
    if not args.knob:
        return list(config.enforce.knobs)
    asked: list[str] = [k for k in KNOBS if k in args.knob]
    if changing and args.enforce_command == "apply":
        unnamed = [k for k in asked if k not in config.enforce.knobs]
        if unnamed:
            raise EnforceError(f"--knob {', '.join(unnamed)}: not in enforce.knobs ({', '.join(config.enforce.knobs) or 'none'}); "
                               "agentd changes only the knobs the configuration names")
    return asked


def _confirm(args: argparse.Namespace, what: str) -> None:
    if args.yes:
        return
    if not sys.stdin.isatty():
        raise EnforceError(f"refusing to {what} without --yes (stdin is not a terminal)")
    sys.stderr.write(f"{what}? [y/N] ")
    sys.stderr.flush()
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise EnforceError("not confirmed: nothing changed")


def run(args: argparse.Namespace, *, config: AgentConfig, host: HostRoot, state_dir: Path | None, user: str | None,
        collect: Collect, boot_id: str | None, log: AuditLog) -> int:
    """One ``agentd enforce`` command. ``collect``: a callable that collects the node once."""
    cmd = args.enforce_command
    knobs = _knobs(args, config, changing=cmd in ("apply", "rollback"))
    where = f"host root {printable(str(host.root))} ({host.mode})"
    if cmd == "plan":
        from agentd.judging.enforce import plan

        p = plan(collect(), config, knobs=knobs)
        head = (f"agentd enforce plan: {len(p.drift)} of {len(p.changes)} settings differ "
                f"(knobs: {', '.join(p.knobs) or 'none named: set enforce.knobs or give --knob'}; mode {config.enforce.mode}; {where})")
        _out(args, {"host_root": str(host.root), "host_mode": host.mode, "mode": config.enforce.mode, "knobs": list(p.knobs),
                    "drift": len(p.drift), "changes": [_change_json(c) for c in p.changes]}, _plan_text(p, head))
        return EXIT_DRIFT if p.drift else EXIT_OK
    if state_dir is None:
        raise EnforceError(f"{where} has no state directory for the journal")
    if cmd == "status":
        return _status(args, config, state_dir)
    if config.enforce.mode == "off" and cmd == "apply":
        raise EnforceError("enforce.mode is off: nothing is applied (set it to plan or apply)")
    actuators = actuators_for(host, config)
    if actuators is None:
        raise EnforceError(f"{where}: an offline root (a capture or a copied tree) can be planned, never changed")
    if not knobs:
        raise EnforceError("no knob named (enforce.knobs is empty and no --knob): nothing is changed")
    _confirm(args, f"{cmd} {', '.join(knobs)} on {where}")
    with _locked(state_dir) as held:
        if not held:
            raise EnforceError(f"another agentd holds {state_dir}/enforce.lock ({holder(state_dir) or 'holder unknown'}) "
                               f"for more than {LOCK_WAIT_S:g} s: try again later")
        try:
            s = Session(host=host, config=config, state_dir=state_dir, actuators=actuators, collect=collect,
                        by=f"cli:{user or 'unknown'}", log=log, boot_id=boot_id)
        except (JournalError, OSError) as e:
            raise EnforceError(f"the journal cannot be used: {e}") from None
        if s.note:
            print(f"agentd: note: {s.note}", file=sys.stderr)
        recovered = s.recover()
        if cmd == "apply":
            results, left = s.apply_all(knobs)
            return _report(args, "apply", recovered + results, left, s)
        results = s.rollback(knobs)
        return _report(args, "rollback", recovered + results, None, s)


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[bool]:
    """enforce_lock, its OSError (a lock path that is a FIFO, a directory, a symlink; a
    state directory that cannot hold it) an EnforceError: nothing is changed."""
    stack = contextlib.ExitStack()
    try:
        held = stack.enter_context(enforce_lock(state_dir, wait_s=LOCK_WAIT_S))
    except OSError as e:
        raise EnforceError(f"cannot take {state_dir}/enforce.lock: {e.strerror or e}; nothing was changed") from None
    with stack:
        yield held


def _report(args: argparse.Namespace, cmd: str, results: Sequence[Result], left: Plan | None, s: Session) -> int:
    if cmd == "apply":
        assert left is not None
        rc = EXIT_DRIFT if left.drift else EXIT_OK
        head = f"agentd enforce apply: {len(results)} change(s); {len(left.drift)} setting(s) still differ\n"
        tail = _plan_text(left, "left:") if left.drift else ""
    else:
        rc = EXIT_OK if all(r.outcome in ("restored", "applied", "interrupted") for r in results) else EXIT_DRIFT
        head = f"agentd enforce rollback: {len(results)} setting(s)\n" if results else "agentd enforce rollback: nothing to restore\n"
        tail = ""
    doc: JsonObject = {"command": cmd, "journal": str(s.path), "results": [r.to_json() for r in results]}
    if left is not None:
        doc["remaining"] = [_change_json(c) for c in left.drift]
    _out(args, doc, head + "".join(_result_line(r) for r in results) + tail + f"journal: {s.path}\n")
    return rc


def _status(args: argparse.Namespace, config: AgentConfig, state_dir: Path) -> int:
    path = journal_path(state_dir)
    if args.reset:
        with _locked(state_dir) as held:
            if not held:
                raise EnforceError(f"another agentd holds {state_dir}/enforce.lock: try again later")
            try:
                j = load_journal(path)
            except (JournalError, OSError) as e:
                raise EnforceError(str(e)) from None
            from agentd.outputs.enforce_journal import save_journal

            res = save_journal(path, j.reset())
            if not res.ok:
                raise EnforceError(f"cannot write {path}: {res.error}")
            print(f"agentd: {path}: attempts and stuck settings of this boot forgotten", file=sys.stderr)
    try:
        j = load_journal(path, set_aside=False)  # read-only, without the lock
    except (JournalError, OSError) as e:
        raise EnforceError(str(e)) from None
    last = last_outcomes(j)
    wanted = [k for k in KNOBS if k in (args.knob or config.enforce.knobs or KNOBS)]
    doc = {"journal": str(path), "boot_id": j.boot_id, "mode": config.enforce.mode, "knobs": list(config.enforce.knobs),
           "attempts": j.attempts, "stuck": j.stuck, "healthy_at": j.healthy_at,
           "last": {k: {"state": e.state, "target": e.target, "at": e.at, "by": e.by, "verify": e.verify, "entry": e.id}
                    for k, e in last.items() if k in wanted},
           "outstanding": [e.to_json() for e in j.outstanding()], "entries": [e.to_json() for e in j.entries if e.knob in wanted]}
    lines = [f"agentd enforce status: {path} (mode {config.enforce.mode}; knobs {', '.join(config.enforce.knobs) or 'none'})"]
    for k in wanted:
        le = last.get(k)
        lines.append(f"  {k}: " + (f"{le.state} {printable(le.target)} by {le.by} ({le.verify or le.detail})" if le else "never changed"))
    if j.healthy_at is not None:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(j.healthy_at))
        lines.append(f"  the daemon saw the node healthy at {when} (boot {printable(j.boot_id or '?')}): no boot-grace window in that boot")
    for key, why in sorted(j.stuck.items()):
        lines.append(f"  stuck {printable(key)}: {why} (`agentd enforce status --reset` to try again)")
    outstanding = j.outstanding(wanted)
    lines.append(f"outstanding prior values: {len(outstanding)}" + (" (`agentd enforce rollback` restores them)" if outstanding else ""))
    for x in j.entries[-20:]:
        if x.knob in wanted:
            lines.append(f"  #{x.id} {x.state:<11} {printable(x.key)}: {x.before!r} -> {x.desired!r} by {x.by}; {x.verify or x.detail}")
    _out(args, doc, "\n".join(lines) + "\n")
    return EXIT_OK
