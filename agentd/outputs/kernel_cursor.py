"""Where the kernel log reader left off, persisted so a restart goes on from there.

``<paths.state_dir>/kernel-cursor.json``: the boot id, the last record's sequence number,
and the recent events that make findings (agentd.host.kernel_log.cursor_of). The next
agentd on the same boot neither counts those records again nor forgets those events when
the ring buffer has overwritten them; on another boot the file is ignored. Written
atomically; read bounded; a damaged file is ignored (the log is then read from its start,
as on a first start).
"""

from __future__ import annotations

import json
from pathlib import Path

from agentd.base.atomic import WriteResult, atomic_write, read_regular
from agentd.base.jsontypes import JsonObject
from agentd.host.kernel_log import cursor_of
from agentd.judging.kernel_policy import event_policy
from agentd.model import KernelEvent, KernelLog

CURSOR_FILE = "kernel-cursor.json"
MAX_CURSOR_BYTES = 4 << 20


def cursor_path(state_dir: Path) -> Path:
    return Path(state_dir) / CURSOR_FILE


def load_cursor(path: Path) -> JsonObject | None:
    """The cursor at ``path``; None when absent, unreadable or not a cursor."""
    try:
        data = json.loads(read_regular(path, MAX_CURSOR_BYTES))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def judged(e: KernelEvent) -> bool:
    """Events worth keeping across a restart: those a rule can make a finding of."""
    return event_policy(e.kind, e.code).rule != "count"


def save_cursor(path: Path, log: KernelLog) -> WriteResult | None:
    cur = cursor_of(log, judged)
    if cur is None:
        return None
    return atomic_write(path, json.dumps(cur, separators=(",", ":")) + "\n", mode=0o644)
