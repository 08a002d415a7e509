"""agentd.host.kernel_log: the kernel log read as a stream, once per record, restart-safe.

The catalogue is replaced by a fake that recognises lines starting with "EV " (kind "t",
code the next word), so these tests are about the stream, not the wording."""

from __future__ import annotations

import os
import stat
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest

from agentd.host.fs import BOOT_ID, HostRoot, ReadContext
from agentd.host.kernel_catalog import Extracted as Ev
from agentd.host.kernel_log import KernelLogSource, cursor_of
from agentd.host.kmsg import iter_records, parse_record


class Fake:
    def feed(self, message: str, fields: Mapping[str, str] | None = None) -> Ev | None:
        if not message.startswith("EV "):
            return None
        code = message.split()[1]
        return Ev("t", code, (fields or {}).get("DEVICE", "").removeprefix("+pci:") or None, message)


def root_with(tmp_path: Path, lines: list[str], boot: str = "b1", uptime: float | None = None) -> HostRoot:
    (tmp_path / "dev").mkdir(exist_ok=True)
    (tmp_path / "dev/kmsg").write_text("".join(line + "\n" for line in lines))
    (tmp_path / BOOT_ID).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / BOOT_ID).write_text(boot + "\n")
    if uptime is not None:
        (tmp_path / "proc/uptime").write_text(f"{uptime} 1.0\n")
    return HostRoot(tmp_path, "offline", "test")


def poll(src: KernelLogSource, keep_s: float = 3600.0, max_events: int = 100):
    with ReadContext(src.host, "kernel") as ctx:
        return src.poll(ctx, keep_s=keep_s, max_events=max_events)


def test_record_format_with_continuation_lines():
    r = parse_record(b"3,1042,5140900,-;mlx5_core 0000:5a:00.0: something\n SUBSYSTEM=pci\n DEVICE=+pci:0000:5a:00.0\n")
    assert r is not None and (r.level, r.facility, r.seq, r.usec) == (3, 0, 1042, 5140900)
    assert r.message == "mlx5_core 0000:5a:00.0: something" and r.fields["DEVICE"] == "+pci:0000:5a:00.0"
    assert parse_record(b"30,7,1,-,caller=T1;x").facility == 3  # more header fields: tolerated
    for bad in (b"", b"no header", b"a,b,c;x", b"1,2;x", b"-1,2,3,-;x", b"\xff\xfe;\x00"):
        assert parse_record(bad) is None
    recs = list(iter_records(b"6,1,10,-;one\n SUBSYSTEM=pci\n\ngarbage\n6,2,20,-;two"))
    assert [(r.seq, r.message, dict(r.fields)) for r in recs] == [(1, "one", {"SUBSYSTEM": "pci"}), (2, "two", {})]


def test_each_record_is_read_once_and_counted(tmp_path):
    host = root_with(tmp_path, ["6,1,10,-;boot line", "4,2,20,-;EV 79", " DEVICE=+pci:0000:3b:00.0", "4,3,30,-;EV 13"])
    src = KernelLogSource(host, Fake)
    log = poll(src)
    assert log.available and log.last_seq == 3 and log.records == 3
    assert [(e.code, e.device) for e in log.events] == [("79", "0000:3b:00.0"), ("13", None)]
    assert {(c.code, c.device): c.count for c in log.counts} == {("79", "0000:3b:00.0"): 1, ("13", None): 1}
    assert poll(src) is log  # nothing new: the same object (memoised downstream)
    with open(tmp_path / "dev/kmsg", "a") as f:
        f.write("4,4,40,-;EV 79\n DEVICE=+pci:0000:3b:00.0\n")
    log2 = poll(src)
    assert log2.records == 4 and {(c.code, c.device): c.count for c in log2.counts}[("79", "0000:3b:00.0")] == 2


def test_a_restart_on_the_same_boot_counts_nothing_twice_and_keeps_events(tmp_path):
    host = root_with(tmp_path, ["4,1,10,-;EV 79", "4,2,20,-;EV 48"])
    first = poll(KernelLogSource(host, Fake))
    cursor = cursor_of(first, keep=lambda e: e.code == "79")
    assert cursor is not None and cursor["seq"] == 2 and [e["code"] for e in cursor["events"]] == ["79"]
    # the ring buffer moved on: record 1 was overwritten, 3 is new
    (tmp_path / "dev/kmsg").write_text("4,2,20,-;EV 48\n4,3,30,-;EV 31\n")
    again = KernelLogSource(host, Fake)
    again.resume(cursor)
    log = poll(again)
    assert {c.code: c.count for c in log.counts} == {"31": 1}  # 48 was counted by the first run
    assert [e.code for e in log.events] == ["79", "31"]  # 79 came with the cursor


def test_a_new_boot_inherits_nothing(tmp_path):
    host = root_with(tmp_path, ["4,1,10,-;EV 79"], boot="old")
    cursor = cursor_of(poll(KernelLogSource(host, Fake)))
    root_with(tmp_path, ["4,1,10,-;EV 13"], boot="new")
    src = KernelLogSource(host, Fake)
    src.resume(cursor)
    log = poll(src)
    assert [e.code for e in log.events] == ["13"] and log.boot_id == "new"
    # and a running source that sees the boot id change starts over too
    root_with(tmp_path, ["4,1,10,-;EV 95"], boot="newer")
    log = poll(src)
    assert [e.code for e in log.events] == ["95"] and {c.code: c.count for c in log.counts} == {"95": 1}


def test_event_times_come_from_the_recorded_uptime(tmp_path):
    host = root_with(tmp_path, ["4,1,1000000,-;EV 79", "4,2,3599000000,-;EV 48"], uptime=3600.0)
    log = poll(KernelLogSource(host, Fake))
    old, recent = log.events
    assert 3597.9 < recent.at - old.at < 3598.1  # 1 s and 3599 s after boot
    assert poll(KernelLogSource(host, Fake), keep_s=600).events[0].code == "48"  # the old one expired


def test_bounded_events_and_count_keys(tmp_path):
    lines = [f"4,{i},{i},-;EV c{i}\n DEVICE=+pci:0000:{i % 256:02x}:00.0" for i in range(1, 2000)]
    log = poll(KernelLogSource(root_with(tmp_path, lines), Fake), max_events=50)
    assert len(log.events) == 50 and log.events[-1].seq == 1999
    assert len(log.counts) <= 513 and sum(c.count for c in log.counts) == 1999


def test_no_log_and_hostile_files(tmp_path):
    host = HostRoot(tmp_path, "offline", "test")
    src = KernelLogSource(host, Fake)
    log = poll(src)
    assert not log.available and not log.asked
    assert poll(src) is log  # the same answer, the same object: nothing downstream is redone
    (tmp_path / "dev").mkdir()
    os.mkfifo(tmp_path / "dev/kmsg")
    log = poll(KernelLogSource(host, Fake))  # a FIFO: read without waiting on a writer, nothing in it
    assert log.events == () and log.records == 0
    os.unlink(tmp_path / "dev/kmsg")
    (tmp_path / "dev/kmsg").write_bytes(b"\xff" * 100000 + b"\n4,1,1,-;EV \xff\xfe odd\n" + b"x" * (2 << 20))
    log = poll(KernelLogSource(host, Fake))
    assert log.available and [e.seq for e in log.events] == [1]


class Boom:
    def feed(self, message: str, fields: Mapping[str, str] | None = None) -> Ev | None:
        raise RuntimeError("catalogue bug")


def test_a_catalogue_bug_costs_the_line_not_the_source(tmp_path):
    log = poll(KernelLogSource(root_with(tmp_path, ["4,1,1,-;EV 79"]), Boom))
    assert log.available and log.records == 1 and log.events == ()


def _live_root(tmp_path: Path) -> HostRoot:
    """A root that is the running node (its boot id) whose dev/kmsg is the kernel's device."""
    running = Path("/", BOOT_ID).read_text()
    (tmp_path / BOOT_ID).parent.mkdir(parents=True)
    (tmp_path / BOOT_ID).write_text(running)
    (tmp_path / "dev").mkdir()
    st = os.stat("/dev/kmsg")
    os.mknod(tmp_path / "dev/kmsg", stat.S_IFCHR | 0o600, st.st_rdev)
    return HostRoot.at(tmp_path)


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/kmsg"), reason="writing and reading the kernel log needs root")
def test_live_kmsg_reads_the_retained_buffer_then_only_new_records(tmp_path):
    host = _live_root(tmp_path)
    assert host.is_live
    token = uuid.uuid4().hex[:12]
    with open("/dev/kmsg", "w") as k:  # a harmless line of agentd's own, matched by the fake only
        k.write(f"<6>EV agentd-test-{token}-a\n")
    src = KernelLogSource(host, Fake)
    log = poll(src)
    assert log.available and log.source == "/dev/kmsg"
    assert [e.code for e in log.events if token in e.code] == [f"agentd-test-{token}-a"]  # from before the first poll
    with open("/dev/kmsg", "w") as k:
        k.write(f"<6>EV agentd-test-{token}-b\n")
    log2 = poll(src)
    mine = [e for e in log2.events if token in e.code]
    assert [e.code for e in mine] == [f"agentd-test-{token}-a", f"agentd-test-{token}-b"]  # b once, a not again
    assert abs(mine[-1].at - log2.events[-1].at) < 5 and log2.last_seq > log.last_seq
    src.close()


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/kmsg"), reason="a root that is the running node needs mknod (root)")
def test_live_read_errors_cost_a_record_not_the_source(tmp_path, monkeypatch):
    """EPIPE (overwritten) and one EINVAL (a record larger than the buffer: the kernel skips
    it) cost that record, counted by the gap; EINVAL twice in a row is not /dev/kmsg."""
    import errno

    from agentd.host import kernel_log

    host = _live_root(tmp_path)
    script: list[object] = []
    real_read = os.read

    def fake_read(fd: int, n: int) -> bytes:
        if fd != src._fd:  # the boot id and the rest: read as they are
            return real_read(fd, n)
        step = script.pop(0) if script else BlockingIOError()
        if isinstance(step, BaseException):
            raise step
        return step  # type: ignore[return-value]

    monkeypatch.setattr(kernel_log.os, "read", fake_read)
    src = KernelLogSource(host, Fake)
    now_us = int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)
    script[:] = [b"4,10,%d,-;EV a\n" % now_us, OSError(errno.EPIPE, "Broken pipe"), b"4,13,%d,-;EV b\n" % now_us,
                 OSError(errno.EINVAL, "Invalid argument"), b"4,15,%d,-;EV c\n" % now_us]
    log = poll(src)
    assert log.available and [e.code for e in log.events] == ["a", "b", "c"] and log.lost == 3  # 11, 12 and 14
    script[:] = [OSError(errno.EINVAL, "Invalid argument"), OSError(errno.EINVAL, "Invalid argument")]
    log = poll(src)
    assert not log.available and "Invalid argument" in (log.error or "")
    src.close()
