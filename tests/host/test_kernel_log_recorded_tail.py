"""Issue 42.11: a recorded kernel log (a capture's, the simulator's dev/kmsg) is read from
its tail and by the records' place in it, never trusting their sequence numbers: the newest
records are the ones that matter, and an odd number must hide nothing.

Through ``agentd check`` (and a capture of the tree) on a simulated node whose log ends
with an Xid 79 for gpu3 (the simulator appends the driver's real line) after a lot of
filler, one huge line, or one record numbered 2^63-1. Each of these gave nothing before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentd import sim
from agentd.cli import main
from agentd.host.fs import HostRoot, ReadContext
from agentd.host.kernel_log import KernelLogSource, cursor_of

pytestmark = pytest.mark.tree

FILLER = "audit: type=1400 audit(1712345678.123:456): apparmor=\"DENIED\" operation=\"open\" profile=\"snap.x\" name=\"/proc/1/status\""


def _check(capsys: pytest.CaptureFixture[str], tmp: Path, root: Path) -> tuple[int, set[tuple[str, str, str]]]:
    cfg = tmp / "agentd.toml"
    cfg.write_text(f'[intervals]\ncheck_rate_window_s = 0\n[paths]\nbaseline = "{tmp / "baseline.json"}"\nstate_dir = "{tmp / "state"}"\n')
    code = main(["check", "--config", str(cfg), "--host-root", str(root), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    return code, {(f["code"], f["severity"], f["subject"]) for f in doc["findings"]}


def _node(tmp: Path, head: bytes) -> Path:
    """A simulated node whose log is ``head`` and then the driver's Xid 79 for gpu3."""
    root = sim.build_tree("h100-ib", tmp / "root")
    (root / "dev/kmsg").write_bytes(head)
    sim.apply_fault(root, "xid@gpu3")
    assert (root / "dev/kmsg").read_bytes().rstrip().endswith(b"GPU has fallen off the bus.")
    return root


def _filler(n: int) -> bytes:
    return b"".join(b"6,%d,%d,-;%s\n" % (i + 1, 1_000_000 + i, FILLER.encode()) for i in range(n))


@pytest.mark.parametrize("head", ["filler", "one_huge_line", "huge_sequence_number"])
def test_an_xid_after_what_fills_the_log_is_seen(tmp_path, capsys, head):
    data = {
        "filler": _filler(100_000),  # ~13 MB: the first 4 MiB were read, the newest records never
        "one_huge_line": b"6,1,1000000,-;" + b"x" * (5 << 20) + b"\n",
        "huge_sequence_number": _filler(3) + b"6,%d,2000000,-;%s\n" % ((1 << 63) - 1, FILLER.encode()) + b"4,4,3000000,-;NVRM: loading\n",
    }[head]
    if head == "huge_sequence_number":  # the simulator numbers after the last record: make it an ordinary one again
        data += b"6,5,4000000,-;%s\n" % FILLER.encode()
    root = _node(tmp_path, data)
    code, found = _check(capsys, tmp_path, root)
    assert ("gpu.xid", "critical", "gpu3") in found and code == 2


def test_a_capture_of_a_long_log_keeps_its_newest_records(tmp_path, capsys):
    root = _node(tmp_path, _filler(100_000))
    out = tmp_path / "node.tar.gz"
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(f'[paths]\nbaseline = "{tmp_path / "baseline.json"}"\nstate_dir = "{tmp_path / "state"}"\n')
    assert main(["capture", "--config", str(cfg), "--host-root", str(root), "--out", str(out)]) == 0
    capsys.readouterr()
    code, found = _check(capsys, tmp_path, out)
    assert ("gpu.xid", "critical", "gpu3") in found and code == 2


def test_a_record_recorded_twice_is_read_once_and_appends_are_read_on(tmp_path):
    """By place, not number: the duplicate of a record is one record; a record appended
    after a huge number is new."""
    (tmp_path / "dev").mkdir()
    log = tmp_path / "dev/kmsg"
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    log.write_text(f"4,7,1000,-;{xid}\n4,7,1000,-;{xid}\n4,{(1 << 63) - 1},2000,-;x\n")
    src = KernelLogSource(HostRoot(tmp_path, "offline", "test"))

    def poll():
        with ReadContext(src.host, "kernel") as ctx:
            return src.poll(ctx, keep_s=3600, max_events=100)

    first = poll()
    assert [(e.code, e.seq) for e in first.events] == [("79", 7)] and first.records == 2
    with log.open("a") as f:
        f.write(f"4,8,3000,-;{xid.replace('3b:00', '5e:00')}\n")
    again = poll()
    assert [e.device for e in again.events] == ["0000:3b:00.0", "0000:5e:00.0"] and again.records == 3


def test_a_cursor_beyond_the_log_is_not_this_logs(tmp_path):
    """A cursor whose sequence number is beyond every record (a damaged or forged state
    file) would hide every record up to it: it is dropped, events and all."""
    (tmp_path / "dev").mkdir()
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("b1\n")
    (tmp_path / "dev/kmsg").write_text("4,1,1000,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    host = HostRoot(tmp_path, "offline", "test")
    src = KernelLogSource(host)
    with ReadContext(host, "kernel") as ctx:
        good = src.poll(ctx, keep_s=3600, max_events=100)
    cursor = cursor_of(good)
    assert cursor is not None
    forged = {**cursor, "seq": 10**18, "events": [{**cursor["events"][0], "code": "48", "seq": 10**18}]}
    again = KernelLogSource(host)
    again.resume(forged)
    with ReadContext(host, "kernel") as ctx:
        log = again.poll(ctx, keep_s=3600, max_events=100)
    assert [(e.code, e.seq) for e in log.events] == [("79", 1)] and log.records == 1


def test_a_log_rewritten_from_its_start_is_read_again(tmp_path):
    """A recorded log replaced by a fresh one (emptied, then numbered again from 1): its
    records have numbers seen before but other text, and are new."""
    (tmp_path / "dev").mkdir()
    log = tmp_path / "dev/kmsg"
    log.write_text("3,1,1000,-;pcieport 0000:14:01.0: AER: Multiple Uncorrected (Fatal) error received: 0000:18:00.0\n")
    src = KernelLogSource(HostRoot(tmp_path, "offline", "test"))

    def poll():
        with ReadContext(src.host, "kernel") as ctx:
            return src.poll(ctx, keep_s=3600, max_events=100)

    assert [e.code for e in poll().events] == ["fatal"]
    log.write_text("")
    poll()
    log.write_text("4,1,2000,-;NVRM: Xid (PCI:0000:18:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Global Exception\n")
    assert {(c.kind, c.code) for c in poll().counts} >= {("xid", "13")}
