"""An unpacked capture (up to 2 GiB) leaves nothing in the temp dir, however the command
ends (issue 42): SIGTERM (whose default action runs no atexit), the ``--npd`` deadline
(``os._exit``), a refused archive (a member 3,000 directories deep crashed with "internal
error"), and SIGKILL, whose leftover the next capture opened on the node removes."""

from __future__ import annotations

import fcntl
import io
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from agentd import cli
from agentd.capture import replay

HANG_GUARD_S = 60  # a guard against a wedged child, not a timing: each run takes about a second
REPO = Path(__file__).resolve().parents[2]


def tiny_capture(path: Path, *, deep: int = 0) -> Path:
    """A tar.gz with a ``sys/`` directory (what a host root needs), and a member ``deep``
    directories down when asked."""
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        for name in ("sys", "sys/class"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        body = b"1\n"
        info = tarfile.TarInfo("sys/" + "d/" * deep + "value")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    return path


def unpacked(tmpdir: Path) -> list[str]:
    return sorted(n for n in os.listdir(tmpdir) if replay.PREFIX in n)


def child(tmpdir: Path, argv: list[str]) -> subprocess.Popen[str]:
    """`agentd` with a collection that never returns (as in a hung driver call); it says
    "collecting" once the capture is unpacked and the command is under way."""
    code = ("import sys, threading\nfrom agentd import cli\n"
            "def hang(*a, **k):\n    print('collecting', flush=True)\n    threading.Event().wait()\n"
            f"cli._collect = hang\nsys.exit(cli.main({argv!r}))\n")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmpdir)}, cwd=REPO)


@pytest.fixture
def tmpdir(tmp_path: Path) -> Path:
    d = tmp_path / "tmp"
    d.mkdir()
    return d


@pytest.mark.proc
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_a_command_removes_the_unpacked_capture(tmp_path: Path, tmpdir: Path, sig: int) -> None:
    cap = tiny_capture(tmp_path / "node.tar.gz")
    p = child(tmpdir, ["check", "--host-root", str(cap)])
    try:
        assert p.stdout is not None and p.stdout.readline() == "collecting\n"
        assert len(unpacked(tmpdir)) == 1  # unpacked, in use
        p.send_signal(sig)
        p.wait(HANG_GUARD_S)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 128 + sig, p.stderr.read() if p.stderr else ""
    assert unpacked(tmpdir) == []


@pytest.mark.proc
def test_the_npd_deadline_removes_the_unpacked_capture(tmp_path: Path, tmpdir: Path) -> None:
    cap = tiny_capture(tmp_path / "node.tar.gz")
    p = child(tmpdir, ["check", "--npd", "net", "--npd-timeout", "1", "--host-root", str(cap)])
    try:
        out, _ = p.communicate(timeout=HANG_GUARD_S)
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 2 and out.splitlines()[-1] == "unknown: timed out: net not judged within 1 s (--npd-timeout)"
    assert unpacked(tmpdir) == []


@pytest.mark.proc
def test_a_capture_left_by_a_killed_process_is_removed_by_the_next_one_and_a_live_one_is_kept(tmp_path: Path, tmpdir: Path) -> None:
    cap = tiny_capture(tmp_path / "node.tar.gz")
    p = child(tmpdir, ["check", "--host-root", str(cap)])
    try:
        assert p.stdout is not None and p.stdout.readline() == "collecting\n"
        p.kill()  # SIGKILL: nothing of agentd runs
        p.wait(HANG_GUARD_S)
    finally:
        p.kill()
        p.wait()
    (left,) = unpacked(tmpdir)
    live = tmpdir / "agentd-replay-l1v3"  # another agentd on the node reading its capture now
    live.mkdir()
    older = tmpdir / "agentd-capture-0ld1"  # an agentd from before the lock: in use or not, nobody can tell
    older.mkdir()
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        q = child(tmpdir, ["check", "--host-root", str(cap)])
        try:
            assert q.stdout is not None and q.stdout.readline() == "collecting\n"
            now = unpacked(tmpdir)
            assert left not in now and "agentd-replay-l1v3" in now and len(now) == 2  # q's own and the live one
            assert older.is_dir()
        finally:
            q.kill()
            q.wait()
    finally:
        os.close(fd)


def test_a_member_thousands_of_directories_deep_is_refused_not_a_crash(tmp_path: Path, tmpdir: Path, capsys: pytest.CaptureFixture[str],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmpdir))
    cap = tiny_capture(tmp_path / "deep.tar.gz", deep=3000)
    assert cli.main(["check", "--host-root", str(cap)]) == 3
    err = capsys.readouterr().err
    assert "directories deep" in err and "internal error" not in err, err
    assert unpacked(tmpdir) == []


def test_a_member_as_deep_as_sysfs_goes_is_taken(tmp_path: Path, tmpdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmpdir))
    root = replay.open_capture(tiny_capture(tmp_path / "ok.tar.gz", deep=40))
    try:
        assert (root / "sys" / Path(*["d"] * 40) / "value").read_text() == "1\n"
    finally:
        replay.remove_unpacked(root)
    assert unpacked(tmpdir) == []


def test_a_replay_daemons_state_beside_its_root_is_kept_while_it_lives_and_goes_with_its_root(tmpdir: Path) -> None:
    """`agentd run --host-root FILE` keeps its state in ``<unpacked>-out`` (no lock of its
    own): another command's sweep must not take it from a running daemon, and must take it
    with the root of a process that is gone."""
    live, dead = tmpdir / f"{replay.PREFIX}l1v3", tmpdir / f"{replay.PREFIX}d34d"
    for d in (live, dead):
        (d / "sys").mkdir(parents=True)
        (tmpdir / f"{d.name}-out").mkdir()
        (tmpdir / f"{d.name}-out" / "nccl.env").write_text("NCCL_IB_HCA=mlx5_0:1\n")
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert replay.sweep_unpacked(str(tmpdir)) == 1
        assert sorted(os.listdir(tmpdir)) == [live.name, f"{live.name}-out"]
        assert (tmpdir / f"{live.name}-out" / "nccl.env").is_file()
    finally:
        os.close(fd)
