"""agentd.outputs.state_lock: one holder per lock file in the state directory, who it is,
and a lock that goes with its holder however it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from agentd.outputs.state_lock import LockHeld, acquire, held, holder


def test_one_holder_at_a_time_and_who_it_is(tmp_path):
    path = tmp_path / "state" / "agentd.lock"
    with acquire(path, info={"config": "/etc/agentd/agentd.toml"}) as lock:
        assert lock.held
        with pytest.raises(LockHeld) as refused:
            acquire(path)
        who = refused.value.holder
        assert who is not None and who.pid == os.getpid() and who.info == {"config": "/etc/agentd/agentd.toml"}
        assert abs(who.started - time.time()) < 60
        assert f"pid {os.getpid()}, started " in who.describe() and who.describe().endswith("config /etc/agentd/agentd.toml")
        with held(path, wait_s=0) as got:
            assert got is False
    assert not lock.held
    with held(path, wait_s=0) as got:
        assert got is True


@pytest.mark.proc
def test_the_lock_goes_with_a_holder_that_is_killed(tmp_path):
    path = tmp_path / "agentd.lock"
    code = ("import sys, time; from agentd.outputs.state_lock import acquire; l = acquire(sys.argv[1]); "
            "print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "held\n"
        with pytest.raises(LockHeld) as refused:
            acquire(path)
        assert refused.value.holder.pid == proc.pid
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        with acquire(path, wait_s=5):  # no stale lock file to clean up
            pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_waiting_gives_up_after_wait_s(tmp_path):
    path = tmp_path / "agentd.lock"
    with acquire(path):
        t = time.monotonic()
        with held(path, wait_s=0.2) as got:
            assert got is False
        assert time.monotonic() - t >= 0.2


def test_a_lock_path_that_is_no_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "agentd.lock"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        acquire(fifo)
    link = tmp_path / "link.lock"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        acquire(link)
    assert not (tmp_path / "elsewhere").exists()


def test_a_lock_file_of_other_words_names_no_holder(tmp_path):
    path = tmp_path / "agentd.lock"
    path.write_bytes(b"\xff\xfe not json")
    assert holder(path) is None
    path.write_text('{"pid": true, "started": "x", "config": ["a"]}')
    h = holder(path)
    assert h is not None and h.pid is None and h.started is None and h.info == {}


def test_the_held_lock_keeps_no_file_open_for_writing(tmp_path):
    """A daemon holds its lock for its life: a descriptor open for writing all that time
    would keep the state directory's filesystem from being remounted read-only."""
    path = tmp_path / "agentd.lock"
    with acquire(path, info={"config": "x"}):
        modes = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                    modes.append(int(open(f"/proc/self/fdinfo/{fd}").read().split("flags:")[1].split()[0], 8) & os.O_ACCMODE)
            except OSError:
                continue
        assert modes == [os.O_RDONLY]
        assert holder(path).info == {"config": "x"}
