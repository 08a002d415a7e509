"""sd_notify over ``$NOTIFY_SOCKET`` with a plain AF_UNIX datagram socket (no libsystemd).

READY=1 after the first full collection, STATUS=<one line> when the summary changes,
RELOADING=1/READY=1 around a SIGHUP reload, STOPPING=1 on shutdown, and WATCHDOG=1 from
the event loop only while collections keep completing: ``Watchdog.should_pet`` says no
once the last completed collection is older than half of ``WatchdogSec``, so systemd
restarts a daemon whose collection loop is wedged even though its event loop still runs.
Outside systemd (no ``NOTIFY_SOCKET``) every call is a no-op.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Mapping


def _address(raw: str) -> str | bytes | None:
    if raw.startswith("@"):
        return b"\0" + raw[1:].encode()  # abstract namespace socket
    if raw.startswith("/"):
        return raw
    return None  # vsock: and other transports are not supported


class Notifier:
    def __init__(self, environ: Mapping[str, str] | None = None):
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET", "")
        self.socket_path = raw
        self._address = _address(raw) if raw else None
        self.error: str | None = None
        if raw and self._address is None:
            self.error = f"unsupported NOTIFY_SOCKET {raw!r}"
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def send(self, *fields: str) -> bool:
        """Send "K=V" fields as one datagram. Never raises; False when not sent."""
        if self._address is None:
            return False
        msg = "\n".join(f.replace("\n", " ") for f in fields).encode("utf-8", "replace")
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.setblocking(False)
            self._sock.sendto(msg, self._address)
        except OSError as e:
            self.error = f"sd_notify to {self.socket_path}: {e.strerror or e}"
            return False
        self.error = None
        return True

    def ready(self, status: str) -> bool:
        return self.send("READY=1", f"STATUS={status}")

    def status(self, status: str) -> bool:
        return self.send(f"STATUS={status}")

    def reloading(self) -> bool:
        return self.send("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")

    def stopping(self) -> bool:
        return self.send("STOPPING=1", "STATUS=stopping")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


@dataclass(frozen=True)
class Watchdog:
    """The systemd watchdog contract: pet every ``period_s`` while collections complete."""

    interval_s: float  # WatchdogSec

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Watchdog | None":
        env = os.environ if environ is None else environ
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        if not usec.isdigit() or int(usec) == 0:
            return None
        if pid and (not pid.isdigit() or int(pid) != os.getpid()):
            return None  # meant for another process (e.g. a wrapper that exec'd us)
        return cls(int(usec) / 1e6)

    @property
    def period_s(self) -> float:
        return self.interval_s / 4

    @property
    def max_collection_age_s(self) -> float:
        return self.interval_s / 2

    def should_pet(self, last_collection_monotonic: float | None, now_monotonic: float) -> bool:
        """Pet only while the newest completed collection is recent (before the first one,
        the start-up time counts from when the loop began: pass its start)."""
        if last_collection_monotonic is None:
            return False
        return now_monotonic - last_collection_monotonic <= self.max_collection_age_s
