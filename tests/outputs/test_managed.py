"""Managed files: change-only writes, seal, drift, failures that keep the old file."""

import errno
import os
import subprocess
import tempfile
import time

import pytest

from agentd.base import atomic as files
from agentd.nccl import render_all
from agentd.nccl.envfile import read_nccl_conf, read_systemd_env_file
from agentd.nccl.xmlcheck import check_topo_xml
from agentd.outputs.managed import ManagedFile, ManagedFiles, digest, read_seal, seal, unseal, write_managed
from tests.support.nccl_snapshots import config, ib_node, roles_for

BODY = "# NCCL settings, written by agentd\n# generated: 2026-01-01T00:00:00Z\nNCCL_IB_HCA==mlx5_0:1\n"


def stat(path):
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns


def test_create_then_unchanged_is_not_rewritten(tmp_path):
    path = tmp_path / "nccl.conf"
    state = ManagedFiles()
    r = write_managed(path, BODY, state=state, now=100.0)
    assert r.action == "created" and r.changed and r.ok
    text = path.read_text()
    assert unseal(text) == BODY and text.splitlines()[-1] == f"# agentd-sha256: {digest(BODY)}"
    assert r.sha256 == __import__("hashlib").sha256(path.read_bytes()).hexdigest()
    before = stat(path)
    r = write_managed(path, BODY, state=state, now=200.0)
    assert r.action == "unchanged" and not r.changed
    assert stat(path) == before
    st = state.statuses()[0]
    assert st.last_write_at == 100.0 and st.last_success_at == 200.0 and st.writes_total == 1 and st.ok


def test_only_the_generated_line_changed_is_unchanged(tmp_path):
    path = tmp_path / "nccl.env"
    mf = ManagedFile(path)
    mf.write(BODY)
    before = (stat(path), path.read_bytes())
    r = mf.write(BODY.replace("2026-01-01T00:00:00Z", "2026-02-02T00:00:00Z"))
    assert r.action == "unchanged" and (stat(path), path.read_bytes()) == before


def test_changed_content_is_replaced_atomically(tmp_path):
    path = tmp_path / "nccl.conf"
    mf = ManagedFile(path)
    mf.write(BODY)
    ino = os.stat(path).st_ino
    r = mf.write(BODY.replace("mlx5_0:1", "mlx5_1:1"))
    assert r.action == "written" and "mlx5_1:1" in path.read_text()
    assert os.stat(path).st_ino != ino  # a new file renamed over the old one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nccl.conf"]  # no temp files left


def test_drift_edited_is_reported_and_restored(tmp_path):
    path = tmp_path / "nccl.conf"
    state = ManagedFiles(restore_drift=True)
    write_managed(path, BODY, state=state)
    good = path.read_bytes()
    path.write_text(path.read_text().replace("mlx5_0:1", "mlx5_0:1,mlx5_9:1"))
    r = write_managed(path, BODY, state=state, now=50.0)
    assert r.action == "restored" and r.drift == "edited" and r.changed
    assert path.read_bytes() == good
    st = state.statuses()[0]
    assert st.drift_total == 1 and st.last_drift_at == 50.0 and not st.drift_detected  # restored
    assert write_managed(path, BODY, state=state).action == "unchanged"


def test_drift_kept_when_restore_is_off(tmp_path):
    path = tmp_path / "nccl.conf"
    state = ManagedFiles(restore_drift=False)
    write_managed(path, BODY, state=state)
    path.write_text(path.read_text() + "NCCL_DEBUG=INFO\n")
    edited = path.read_bytes()
    for _ in range(2):
        r = write_managed(path, BODY.replace("mlx5_0", "mlx5_2"), state=state)
        assert r.action == "drift_kept" and r.drift == "edited" and not r.changed
        assert path.read_bytes() == edited
    st = state.statuses()[0]
    assert st.drift_detected and st.drift_kind == "edited" and st.drift_total == 1
    state.restore_drift = True  # config reload
    assert write_managed(path, BODY, state=state).action == "restored"


def test_edits_to_the_generated_line_are_not_drift(tmp_path):
    path = tmp_path / "nccl.env"
    mf = ManagedFile(path)
    mf.write(BODY)
    path.write_text(path.read_text().replace("2026-01-01", "1999-01-01"))
    assert mf.write(BODY).action == "unchanged" and not mf.drift_detected


def test_restart_tells_edits_from_node_changes(tmp_path):
    path = tmp_path / "nccl.conf"
    ManagedFile(path).write(BODY)
    # a new process, and the node changed meanwhile: an update, not drift
    r = ManagedFile(path).write(BODY.replace("mlx5_0", "mlx5_1"))
    assert r.action == "written" and r.drift is None
    # a new process finds a hand-edited file: drift
    path.write_text(path.read_text().replace("mlx5_1", "mlx5_7"))
    r = ManagedFile(path).write(BODY)
    assert r.action == "restored" and r.drift == "edited"


def test_foreign_unsealed_and_deleted(tmp_path):
    path = tmp_path / "nccl.conf"
    path.write_text("NCCL_IB_HCA=mlx5\n")  # someone else's file
    r = ManagedFile(path).write(BODY)
    assert r.drift == "foreign" and r.action == "restored"
    path.write_text(BODY)  # agentd's text without a seal (e.g. written by `agentd render`)
    r = ManagedFile(path).write(BODY)
    assert r.drift is None and r.action == "written" and read_seal(path.read_text())
    mf = ManagedFile(path)
    mf.write(BODY)
    path.unlink()
    r = mf.write(BODY)
    assert r.drift == "deleted" and r.action == "restored" and path.exists()


def test_replaced_by_another_sealed_version(tmp_path):
    path = tmp_path / "nccl.conf"
    mf = ManagedFile(path)
    mf.write(BODY)
    path.write_text(seal(BODY.replace("mlx5_0", "mlx5_3"), xml=False))
    assert mf.write(BODY).drift == "replaced"


@pytest.mark.parametrize(
    "target,err",
    [
        ("replace", errno.EROFS),
        ("write", errno.ENOSPC),
        ("mkstemp", errno.EROFS),
        ("fsync", errno.EIO),
    ],
)
def test_failed_write_keeps_previous_file_and_is_retried(tmp_path, monkeypatch, target, err):
    path = tmp_path / "nccl.conf"
    state = ManagedFiles()
    write_managed(path, BODY, state=state, now=10.0)
    old = path.read_bytes()

    def fail(*a, **kw):
        raise OSError(err, os.strerror(err))

    new = BODY.replace("mlx5_0", "mlx5_5")
    with monkeypatch.context() as m:
        m.setattr(tempfile if target == "mkstemp" else os, target, fail)
        r = write_managed(path, new, state=state, now=20.0)
    assert r.action == "failed" and not r.changed and os.strerror(err) in r.error
    assert path.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nccl.conf"]
    st = state.statuses()[0]
    assert not st.ok and st.failures_total == 1 and st.consecutive_failures == 1
    assert st.last_error == r.error and st.last_error_at == 20.0 and st.last_success_at == 10.0
    r = write_managed(path, new, state=state, now=30.0)  # next cycle: retried
    assert r.action == "written" and unseal(path.read_text()) == new
    st = state.statuses()[0]
    assert st.ok and st.failures_total == 1 and st.consecutive_failures == 0 and st.last_write_at == 30.0


def test_atomic_write_signature_unchanged(tmp_path):
    res = files.atomic_write(tmp_path / "f", "x", mode=0o600, only_if_changed=True)
    assert res.ok and res.changed and oct(os.stat(tmp_path / "f").st_mode & 0o777) == "0o600"
    assert not files.atomic_write(tmp_path / "f", b"x").changed


@pytest.mark.proc
def test_sealed_files_still_read_correctly(tmp_path):
    """The seal is a comment in every form: NCCL, systemd, bash and the XML checker agree."""
    snap = ib_node()
    r = render_all(snap, [], config(ib_tc=106), roles_for(snap))
    state = ManagedFiles()
    for name, text in (("nccl.env", r.env_sh), ("nccl.conf", r.env_conf), ("topo.xml", r.topo_xml)):
        write_managed(tmp_path / name, text, state=state)
    conf = (tmp_path / "nccl.conf").read_text()
    assert read_nccl_conf(conf) == read_nccl_conf(conf, skip_hash_lines=False) == read_systemd_env_file(conf) == r.env.as_dict()
    xml = (tmp_path / "topo.xml").read_text()
    assert xml.splitlines()[-1].startswith("<!-- agentd-sha256: ")
    assert check_topo_xml(xml, existing_bus_ids={d.bdf for d in snap.pci}) == []
    out = subprocess.run(
        ["bash", "-c", f"set -e; . {tmp_path / 'nccl.env'}; echo \"$NCCL_IB_HCA|$NCCL_IB_TC\""],
        capture_output=True, text=True, timeout=30, check=True,
    )
    assert out.stdout.strip() == f"{r.env.get('NCCL_IB_HCA')}|106"


def test_a_fifo_at_a_managed_path_fails_the_write_at_once_and_is_left_alone(tmp_path):
    """O_NONBLOCK and a type check: never an open() that waits for a FIFO's peer."""
    import threading

    fifo = tmp_path / "nccl.env"
    os.mkfifo(fifo)
    got: list = []
    t = threading.Thread(target=lambda: got.append(write_managed(fifo, BODY, state=ManagedFiles())), daemon=True)
    t.start()
    t.join(30)  # a bound on a hang, not a timing
    if t.is_alive():  # the code before the fix: give the blocked reader its EOF, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(30)
    assert got and got[0].action == "failed" and "FIFO" in (got[0].error or ""), got
    assert fifo.is_fifo() and not files.temp_files(fifo)


def test_sweep_removes_a_killed_writers_temp_and_keeps_a_live_one(tmp_path):
    import fcntl

    path = tmp_path / "nccl.env"
    dead, live = tmp_path / ".nccl.env.d3adw71t.tmp", tmp_path / ".nccl.env.l1v3w71t.tmp"
    dead.write_text("half")  # as new as a crash a second ago: no age rule hides it
    fd = os.open(live, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # atomic_write holds this lock until its rename
    try:
        assert ManagedFile(path).sweep_stale_temps() == 1
        assert not dead.exists() and live.exists()
    finally:
        os.close(fd)


# -- the fast path: a steady file costs a stat ----------------------------------------


def count_reads(monkeypatch) -> list[int]:
    from agentd.outputs import managed

    calls: list[int] = []
    real = managed.read_current

    def counting(path, *a, **kw):
        calls.append(1)
        return real(path, *a, **kw)

    monkeypatch.setattr(managed, "read_current", counting)
    return calls


def verified(path) -> tuple[ManagedFile, os.stat_result]:
    """A ManagedFile that wrote ``BODY`` and checked it once in full (so the next equal
    write may take the fast path), with the file's stat at that point."""
    mf = ManagedFile(path)
    assert mf.write(BODY).action == "created"
    assert mf.write(BODY).action == "unchanged"
    return mf, os.stat(path)


def test_a_steady_file_is_not_read_again(tmp_path, monkeypatch):
    path = tmp_path / "nccl.conf"
    reads = count_reads(monkeypatch)
    mf = ManagedFile(path)
    assert mf.write(BODY, now=1.0).action == "created"
    first = mf.write(BODY, now=2.0)  # after a write: one full check, which takes the stat
    assert first.action == "unchanged" and len(reads) == 2
    for t in (3.0, 4.0):
        r = mf.write(BODY, now=t)
        assert r.action == "unchanged" and not r.changed and r.sha256 == first.sha256
    assert len(reads) == 2  # the fast path read nothing
    st = mf.status()
    assert st.last_success_at == 4.0 and st.writes_total == 1 and not st.changed and st.ok
    assert mf.write(BODY.replace("mlx5_0", "mlx5_1"), now=5.0).action == "written"  # other content: full path
    assert len(reads) == 3


def test_fast_path_ends_when_the_bound_passes(tmp_path, monkeypatch):
    from agentd.outputs import managed

    clock = [1000.0]
    monkeypatch.setattr(managed.time, "monotonic", lambda: clock[0])
    path = tmp_path / "nccl.conf"
    mf, _ = verified(path)
    reads = count_reads(monkeypatch)
    clock[0] += ManagedFile.FULL_CHECK_EVERY_S - 1
    assert mf.write(BODY).action == "unchanged" and reads == []
    clock[0] += 1  # the bound: a full check again, which vouches for the next bound
    assert mf.write(BODY).action == "unchanged" and len(reads) == 1
    assert mf.write(BODY).action == "unchanged" and len(reads) == 1


def test_fast_path_ends_when_restore_setting_changes(tmp_path, monkeypatch):
    path = tmp_path / "nccl.conf"
    mf, _ = verified(path)
    reads = count_reads(monkeypatch)
    assert mf.write(BODY, restore_drift=False).action == "unchanged" and len(reads) == 1


def test_same_size_edit_in_place_with_mtime_put_back_is_drift(tmp_path):
    """ctime catches it: ``os.utime`` sets mtime back, but the kernel sets ctime to now."""
    path = tmp_path / "nccl.conf"
    mf, before = verified(path)
    good = path.read_bytes()
    with open(path, "r+b") as f:  # same inode, same size
        f.write(good.replace(b"mlx5_0:1", b"mlx5_9:1"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    while os.stat(path).st_ctime_ns == before.st_ctime_ns:  # a filesystem with a coarse clock: next tick
        time.sleep(0.001)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    r = mf.write(BODY)
    assert r.action == "restored" and r.drift == "edited" and path.read_bytes() == good


def test_same_size_rename_over_is_drift(tmp_path):
    path = tmp_path / "nccl.conf"
    mf, before = verified(path)
    other = seal(BODY.replace("mlx5_0", "mlx5_3"), xml=False)  # sealed, same size: "replaced"
    tmp = tmp_path / "other"
    tmp.write_text(other)
    os.utime(tmp, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(tmp, path)
    assert os.stat(path).st_size == before.st_size and os.stat(path).st_mtime_ns == before.st_mtime_ns
    r = mf.write(BODY)
    assert r.drift == "replaced" and r.action == "restored"
    mf.write(BODY)  # verified again
    before = os.stat(path)
    foreign = "X" * before.st_size  # no seal, no agentd header: "foreign"
    tmp.write_text(foreign)
    os.replace(tmp, path)
    assert mf.write(BODY).drift == "foreign"


def test_deleted_after_the_fast_path_is_drift(tmp_path):
    path = tmp_path / "nccl.conf"
    mf, _ = verified(path)
    assert mf.write(BODY).action == "unchanged"
    path.unlink()
    r = mf.write(BODY)
    assert r.drift == "deleted" and r.action == "restored" and path.exists()


def test_drift_kept_is_checked_in_full_every_time(tmp_path, monkeypatch):
    path = tmp_path / "nccl.conf"
    state = ManagedFiles(restore_drift=False)
    write_managed(path, BODY, state=state)
    write_managed(path, BODY, state=state)
    path.write_text(path.read_text() + "NCCL_DEBUG=INFO\n")
    reads = count_reads(monkeypatch)
    for _ in range(3):
        assert write_managed(path, BODY, state=state).action == "drift_kept"
    assert len(reads) == 3
