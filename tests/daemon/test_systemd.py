"""sd_notify through a real AF_UNIX datagram socket; the watchdog contract."""

from __future__ import annotations

import os
import socket

import pytest

from agentd.daemon.systemd import Notifier, Watchdog


@pytest.fixture
def notify_socket(tmp_path):
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    yield str(path), sock
    sock.close()


def test_messages_arrive_on_a_path_socket(notify_socket):
    path, sock = notify_socket
    n = Notifier({"NOTIFY_SOCKET": path})
    assert n.enabled
    assert n.ready("ok: 8 GPUs")
    assert sock.recv(4096) == b"READY=1\nSTATUS=ok: 8 GPUs"
    assert n.status("degraded: one\nline")
    assert sock.recv(4096) == b"STATUS=degraded: one line"  # STATUS stays one line
    assert n.watchdog()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert n.reloading()
    msg = sock.recv(4096).split(b"\n")
    assert msg[0] == b"RELOADING=1" and msg[1].startswith(b"MONOTONIC_USEC=")
    assert n.stopping()
    assert sock.recv(4096).startswith(b"STOPPING=1")
    n.close()


def test_abstract_socket():
    name = f"agentd-test-{os.getpid()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(5)
    try:
        n = Notifier({"NOTIFY_SOCKET": "@" + name})
        assert n.ready("x")
        assert sock.recv(4096).startswith(b"READY=1")
    finally:
        sock.close()


def test_no_socket_is_a_noop_and_errors_do_not_raise(tmp_path):
    assert not Notifier({}).enabled
    assert Notifier({}).ready("x") is False
    gone = Notifier({"NOTIFY_SOCKET": str(tmp_path / "missing")})
    assert gone.watchdog() is False and "missing" in (gone.error or "")
    assert not Notifier({"NOTIFY_SOCKET": "vsock:2:1234"}).enabled


def test_watchdog_from_environment():
    assert Watchdog.from_env({}) is None
    assert Watchdog.from_env({"WATCHDOG_USEC": "0"}) is None
    wd = Watchdog.from_env({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())})
    assert wd is not None and wd.interval_s == 30 and wd.period_s == 7.5 and wd.max_collection_age_s == 15
    assert Watchdog.from_env({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}) is None  # another process's


def test_watchdog_pets_only_while_collections_are_recent():
    wd = Watchdog(30.0)
    assert wd.should_pet(100.0, 110.0)
    assert wd.should_pet(100.0, 115.0)
    assert not wd.should_pet(100.0, 115.1)
    assert not wd.should_pet(None, 1.0)
