"""structlog setup and the state-change log: one event per change, never one per cycle.

``configure_logging`` renders JSON lines when stderr is not a TTY (or ``log_format =
"json"``), a console format otherwise. ``state_changes(old, new)`` is pure: it compares two
States and returns the events worth logging (health status changed, finding raised,
changed or cleared, probe stale or recovered, managed file written or failing, ready).
"""

from __future__ import annotations

import logging
import sys
from typing import Literal, Protocol, Sequence, TextIO, cast

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from agentd.base.escape import printable
from agentd.daemon.state import State
from agentd.judging.staleness import stale_probe_names
from agentd.model import Finding

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class Log(Protocol):
    """What the daemon uses of a logger: one call per event, its fields as keywords
    (structlog's bound logger from ``get_logger``; a recorder in the tests)."""

    def debug(self, event: str, **fields: object) -> object: ...

    def info(self, event: str, **fields: object) -> object: ...

    def warning(self, event: str, **fields: object) -> object: ...

    def error(self, event: str, **fields: object) -> object: ...

    def exception(self, event: str, **fields: object) -> object: ...


def _printable_values(_logger: WrappedLogger, _method: str, event: EventDict) -> EventDict:
    """A name that is not UTF-8 (a lone surrogate) logs as \\xNN, as in every other output."""
    return {k: printable(v) if isinstance(v, str) else v for k, v in event.items()}


class _Stderr:
    """Standard error as it is when a line is written, not when logging was configured: a
    command run inside another program (a test, an embedding tool) that swaps ``sys.stderr``
    and closes the old one must not leave the logger writing to a closed stream."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(log_format: str = "auto", level: str = "info", stream: TextIO | None = None) -> None:
    # cast: structlog's writer needs only write and flush, which _Stderr has
    out = cast(TextIO, _Stderr()) if stream is None else stream
    fmt = log_format
    if fmt == "auto":
        fmt = "console" if (sys.stderr if stream is None else stream).isatty() else "json"
    renderer: Processor = structlog.processors.JSONRenderer(sort_keys=False) if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _printable_values,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.WriteLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str = "agentd") -> Log:
    logger: Log = structlog.get_logger(name)
    return logger


Level = Literal["debug", "info", "warning", "error"]
Event = tuple[Level, str, dict[str, object]]  # (level, event name, fields)
# ok-severity findings are facts (the GDR path in use, the nearest NIC): debug, not news;
# info ones are events (an application's XID): news, not trouble.
_LEVEL_OF: dict[str, Level] = {"ok": "debug", "info": "info", "warning": "info", "critical": "warning"}


def _stale(state: State) -> tuple[str, ...]:
    """The probes stale as of the State's own time (once per State: the next publish asks again)."""
    return state.cached("stale_probes", lambda: stale_probe_names(state.snapshot, state.stale_limits, state.generated_mono))


def _finding_changes(old: Sequence[Finding], new: Sequence[Finding]) -> list[Event]:
    """Raised, changed, clearing and cleared findings (their fields built only for those)."""
    events: list[Event] = []
    old_f = {(f.code, f.subject): f for f in old}
    new_f = {(f.code, f.subject): f for f in new}
    for key, f in new_f.items():
        prev = old_f.get(key)
        if prev is f:
            continue
        level: Level = _LEVEL_OF[f.severity] if f.withheld is None else "info" if f.severity != "ok" else "debug"
        if prev is None:
            events.append((level, "finding.raised", _fields(f)))
        elif prev.severity != f.severity:
            events.append(("info", "finding.changed", {**_fields(f), "old_severity": prev.severity}))
        elif prev.withheld != f.withheld:  # now counts (pending met raise_after, grace over), or no longer
            events.append((level, "finding.changed", {**_fields(f), "old_withheld": prev.withheld}))
        elif f.clears_at is not None and prev.clears_at is None:  # gone, sticky until clears_at
            events.append(("info", "finding.clearing", {**_fields(f), "clears_at": f.clears_at}))
    for key, f in old_f.items():
        if key not in new_f:
            level = "debug" if f.severity == "ok" else "info"
            events.append((level, "finding.cleared", {"code": f.code, "subject": f.subject, "severity": f.severity}))
    return events


def _fields(f: Finding) -> dict[str, object]:
    fields: dict[str, object] = {"code": f.code, "subject": f.subject, "severity": f.severity, "message": f.message}
    if f.withheld is not None:  # shown, not counted (observe, pending, boot_grace)
        fields["withheld"] = f.withheld
    if f.since is not None:
        fields["since"] = f.since
    return fields


def state_changes(old: State | None, new: State) -> list[Event]:
    events: list[Event] = []
    if new.ready and (old is None or not old.ready):
        events.append(("info", "agentd.ready", {"status": new.status}))
    old_status = old.status if old is not None and old.ready else None
    if new.ready and new.status != old_status:
        level: Level = "warning" if new.status == "critical" else "info"
        events.append((level, "health.status_changed", {"old": old_status, "new": new.status}))

    if old is None or old.findings is not new.findings:  # a steady publish shares the very tuple
        events.extend(_finding_changes(old.findings if old is not None else (), new.findings))

    old_stale = set(_stale(old)) if old is not None and old.ready else set()
    new_stale = set(_stale(new)) if new.ready else set()
    by_name = {p.name: p for p in new.snapshot.probes} if new.snapshot else {}
    for name in sorted(new_stale - old_stale):
        p = by_name.get(name)
        events.append(("warning", "probe.stale", {"probe": name, "error": p.error if p else None, "last_success_at": p.last_success_at if p else None}))
    for name in sorted(old_stale - new_stale):
        events.append(("info", "probe.recovered", {"probe": name}))

    old_files = {fs.name: fs for fs in old.files} if old is not None else {}
    for fs in new.files:
        prev_fs = old_files.get(fs.name)
        if fs.changed:
            events.append(("info", "file.written", {"file": fs.name, "path": fs.path}))
        if not fs.ok and (prev_fs is None or prev_fs.ok or prev_fs.error != fs.error):
            events.append(("error", "file.write_failed", {"file": fs.name, "path": fs.path, "error": fs.error}))
        elif fs.ok and prev_fs is not None and not prev_fs.ok:
            events.append(("info", "file.write_recovered", {"file": fs.name, "path": fs.path}))
        if fs.drift and (prev_fs is None or not prev_fs.drift):
            events.append(("warning", "file.drift", {"file": fs.name, "path": fs.path}))
    return events


def log_state_changes(log: Log, old: State | None, new: State) -> None:
    for level, event, fields in state_changes(old, new):
        emit = {"debug": log.debug, "info": log.info, "warning": log.warning, "error": log.error}[level]
        emit(event, **fields)
