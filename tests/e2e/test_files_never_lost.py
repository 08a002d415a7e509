"""Files never lost (issue 7): whatever happens to a writer, a managed file is always one
complete version, old or new.

- concurrent writers (threads and processes; ``atomic_write`` and ``ManagedFile.write``)
  on one path while readers read it continuously: every read is one complete version;
- a writer SIGKILLed at random moments: the file is a complete version, and at most the
  killed write's temp file is left behind;
- a full and a read-only filesystem (a tiny tmpfs; skipped where mounting is not allowed):
  the write fails with ENOSPC/EROFS, the previous file is byte-identical, the failure is
  recorded; then the running daemon on such an NCCL directory: metrics and /health say so,
  and the file is written on a later cycle once the filesystem is writable again.

Every version identifies itself: a ``# version TAG`` first line and a ``# sha256 HEX`` last
line over everything before it (plus agentd's own seal when written by ManagedFile).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentd import sim
from agentd.base.atomic import atomic_write
from agentd.outputs.managed import ManagedFile, digest, read_seal, unseal
from tests.support.daemon_harness import REACT_S, ROOT, Agent, ib_hca, poll, sample, sim_state_dir

HERE = Path(__file__).resolve().parent


# -- self-identifying versions -------------------------------------------------------
def make_version(tag: str, size: int) -> str:
    rnd = random.Random(tag)
    body = "".join(f"line {i} {rnd.getrandbits(64):016x}\n" for i in range(max(1, size // 28)))
    head = f"# version {tag}\n{body}"
    return f"{head}# sha256 {hashlib.sha256(head.encode()).hexdigest()}\n"


def verify(data: bytes) -> str:
    """The version's tag; AssertionError when ``data`` is not one complete version."""
    text = data.decode("utf-8")
    seal = read_seal(text)
    if seal is not None:
        assert seal == digest(text), "agentd seal does not match"
        text = unseal(text)
    head, sep, last = text[:-1].rpartition("\n")
    assert sep and last.startswith("# sha256 "), f"no checksum line: {text[-80:]!r}"
    assert hashlib.sha256((head + "\n").encode()).hexdigest() == last[9:], "checksum mismatch: torn or mixed version"
    first = head.split("\n", 1)[0]
    assert first.startswith("# version "), first
    return first[10:]


def temps(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.glob(f".{path.name}.*.tmp"))


def _child(argv: list[str]) -> None:
    """Entry point of the writer/reader processes (``python -c``)."""
    mode, path, name = argv[0], Path(argv[1]), argv[2]
    if mode == "read":
        deadline, reads, bad = time.monotonic() + float(argv[3]), 0, []
        while time.monotonic() < deadline:
            try:
                verify(path.read_bytes())
                reads += 1
            except (AssertionError, UnicodeDecodeError) as e:
                bad.append(str(e)[:200])
        print(json.dumps({"reads": reads, "bad": bad[:5], "n_bad": len(bad)}), flush=True)
        return
    mf = ManagedFile(path)
    deadline = time.monotonic() + (float(argv[3]) if mode == "write" else 1e9)
    n = 0
    while time.monotonic() < deadline:
        text = make_version(f"{name}-{n}", random.randint(100, 400_000 if mode == "loop" else 150_000))
        res = mf.write(text) if n % 2 else atomic_write(path, text, only_if_changed=False)
        assert res.ok, res.error
        n += 1
        if n == 1 and mode == "loop":
            print("ready", flush=True)
    print(json.dumps({"writes": n}), flush=True)


def spawn(*args: str) -> subprocess.Popen:
    code = f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(HERE)!r}]; from test_files_never_lost import _child; _child(sys.argv[1:])"
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)


# -- (a) concurrent writers and readers -----------------------------------------------
@pytest.mark.proc
def test_concurrent_writers_readers_always_see_one_complete_version(tmp_path):
    path = tmp_path / "nccl.env"
    atomic_write(path, make_version("initial", 1000))
    seconds = 3.0
    procs = [spawn("write", str(path), f"p{i}", str(seconds)) for i in range(3)]
    procs.append(spawn("read", str(path), "reader", str(seconds)))
    stop = threading.Event()
    seen: set[str] = set()
    bad: list[str] = []
    counts = {"reads": 0, "writes": 0}

    def writer(i: int) -> None:
        mf = ManagedFile(path)
        n = 0
        while not stop.is_set():
            text = make_version(f"t{i}-{n}", random.randint(100, 150_000))
            res = mf.write(text) if i % 2 else atomic_write(path, text, only_if_changed=False)
            if not res.ok:
                bad.append(f"write failed: {res.error}")
            n += 1
        counts["writes"] += n

    def reader() -> None:
        while not stop.is_set():
            try:
                seen.add(verify(path.read_bytes()).rsplit("-", 1)[0])
                counts["reads"] += 1
            except (AssertionError, UnicodeDecodeError) as e:
                bad.append(str(e)[:200])

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)] + [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(30)
    outs = [json.loads(p.communicate(timeout=60)[0].strip().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    proc_reader = outs[-1]
    print(f"\nconcurrent: {counts['writes'] + sum(o.get('writes', 0) for o in outs)} writes, "
          f"{counts['reads'] + proc_reader['reads']} reads, writers seen by readers: {sorted(seen)}")
    assert not bad and proc_reader["n_bad"] == 0, (bad[:5], proc_reader)
    assert counts["reads"] > 0 and proc_reader["reads"] > 0
    assert len(seen) > 1, "readers saw a single writer: no concurrency was exercised"
    verify(path.read_bytes())
    assert temps(path) == [], "a finished writer left a temp file"


# -- (b) SIGKILL in the middle of a write loop ---------------------------------------
@pytest.mark.proc
def test_sigkilled_writer_leaves_a_complete_version(tmp_path):
    path = tmp_path / "nccl.env"
    rnd = random.Random(7)
    left = 0
    for i in range(20):
        before = set(temps(path))
        p = spawn("loop", str(path), f"k{i}")
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        time.sleep(rnd.uniform(0.0, 0.12))
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        assert verify(path.read_bytes()).startswith(f"k{i}-")  # the old or the new version of this writer, complete
        new = set(temps(path)) - before
        assert len(new) <= 1, new  # at most the write that was in flight
        left += len(new)
    print(f"\nSIGKILL x20: the file was always complete; {left} kills left a .nccl.env.*.tmp behind")
    assert len(temps(path)) == left


@pytest.mark.e2e
def test_daemon_removes_stale_temp_files_at_start(tmp_path):
    nccl = sim_state_dir(tmp_path / "d")  # where the daemon on a simulated root writes
    nccl.mkdir(parents=True)
    stale = [nccl / ".nccl.env.k1x2y3z4.tmp", nccl / ".topo.xml.a9b8c7d6.tmp"]
    an_hour_ago = time.time() - 3600
    for s in stale:
        s.write_text("half a file")
        os.utime(s, (an_hour_ago, an_hour_ago))  # left by a writer killed earlier
    with Agent(tmp_path / "d") as a:
        assert poll(lambda: a.env_file.exists())
        assert poll(lambda: not any(s.exists() for s in stale), 5), sorted(p.name for p in nccl.iterdir())


# -- (c, d) full and read-only filesystem ---------------------------------------------
@contextlib.contextmanager
def tiny_tmpfs(where: Path, size: str = "64k"):
    where.mkdir(parents=True, exist_ok=True)
    try:
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)], capture_output=True, text=True)
    except OSError as e:
        pytest.skip(f"cannot run mount: {e}")
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root/CAP_SYS_ADMIN): {res.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(where)], capture_output=True)
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def remount(where: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(where)], check=True, capture_output=True)


def fill(where: Path) -> Path:
    """Fill the filesystem to the last byte; returns the filler file."""
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (b"x" * 4096, b"x"):
            while True:
                try:
                    if os.write(fd, chunk) == 0:
                        break
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
    finally:
        os.close(fd)
    return filler


@pytest.mark.proc
@pytest.mark.parametrize("how", ["full", "read-only"])
def test_full_or_read_only_filesystem_keeps_the_previous_file(tmp_path, how):
    with tiny_tmpfs(tmp_path / "mnt") as mnt:
        path = mnt / "nccl.env"
        mf = ManagedFile(path)
        assert mf.write(make_version("v1", 2000)).ok
        before = path.read_bytes()
        filler = fill(mnt) if how == "full" else None
        if how == "read-only":
            remount(mnt, "ro")
        want_errno = "No space left on device" if how == "full" else "Read-only file system"

        raw = atomic_write(path, make_version("raw", 3000))
        res = mf.write(make_version("v2", 3000))
        assert not raw.ok and want_errno in (raw.error or ""), raw
        assert res.action == "failed" and want_errno in (res.error or ""), res
        assert path.read_bytes() == before
        st = mf.status()
        assert (st.ok, st.failures_total, st.consecutive_failures) == (False, 1, 1) and want_errno in (st.last_error or ""), st
        assert temps(path) == []

        if filler is not None:
            filler.unlink()
        else:
            remount(mnt, "rw")
        res = mf.write(make_version("v2", 3000))
        assert res.ok and res.action == "written", res
        assert verify(path.read_bytes()) == "v2"
        st = mf.status()
        assert (st.ok, st.failures_total, st.consecutive_failures, st.last_error) == (True, 1, 0, None), st


# -- the daemon on such an NCCL directory ---------------------------------------------
def _file_metrics(a: Agent) -> tuple[float | None, float | None]:
    m = a.metrics()
    lab = {"file": "nccl.env", "path": str(a.env_file)}
    return sample(m, "agentd_nccl_file_write_success", **lab), sample(m, "agentd_nccl_file_write_failures_total", **lab)


@pytest.mark.e2e
def test_daemon_on_a_full_or_read_only_nccl_dir_reports_and_retries(tmp_path):
    with tiny_tmpfs(sim_state_dir(tmp_path / "d"), "256k") as mnt:  # where the daemon on a simulated root writes
        a = Agent(tmp_path / "d")
        try:
            a.wait_ready()
            assert poll(lambda: len(ib_hca(a.env_file)) == 8 and _file_metrics(a)[0] == 1), a.logs()
            for how in ("read-only", "full"):
                before = a.env_file.read_bytes()
                _, failures0 = _file_metrics(a)
                filler = fill(mnt) if how == "full" else None
                if how == "read-only":
                    remount(mnt, "ro")
                sim.apply_fault(a.root, "port_down")  # nccl.env must change: mlx5_0:1 leaves NCCL_IB_HCA
                first = poll(lambda: (lambda s, f: f if s == 0 and f and f > (failures0 or 0) else None)(*_file_metrics(a)))
                assert first, (how, _file_metrics(a), a.logs())
                assert poll(lambda: (_file_metrics(a)[1] or 0) > first), "the write is not retried"
                assert a.env_file.read_bytes() == before, "the previous file must stay byte for byte"
                assert temps(a.env_file) == []
                code, body = a.health()
                found = {(f["code"], f["severity"], f["subject"]) for f in body["findings"]}
                assert ("nccl.file.write_failed", "warning", "nccl.env") in found, (how, found)
                assert code == 503  # port_down is critical; the file finding itself is a warning

                if filler is not None:
                    filler.unlink()
                else:
                    remount(mnt, "rw")
                assert poll(lambda: ib_hca(a.env_file) == [f"mlx5_{i}:1" for i in range(1, 8)]), (how, a.env_file.read_text())
                assert poll(lambda: _file_metrics(a)[0] == 1)
                assert ("nccl.file.write_failed", "warning", "nccl.env") not in a.findings()[1]
                sim.clear_fault(a.root, "port_down")
                assert poll(lambda: a.findings() == (200, set()) and len(ib_hca(a.env_file)) == 8, REACT_S), a.findings()
            assert a.alive(), a.logs()
        finally:
            a.stop()
