"""The Debian package: build it, install it for real, use it, remove it, purge it, and
check the machine is as it was.

It installs a package on the machine the tests run on, so it runs only when asked:
``TEST_SYSTEM_INSTALL=1`` (``.ci/run`` sets it; CI's machine is thrown away after the run).
A plain ``make test`` never changes the machine outside its temporary directories. Even
when asked it needs root, dpkg and a machine where installing is harmless: it is skipped
when systemd is running (the package would start the service) or when agentd, its user or
its paths already exist (it would clobber a real installation). Whatever happens, the
package is purged at the end.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "packaging" / "deb" / "build.sh"
VENV_AGENTD = REPO / ".venv" / "bin" / "agentd"

WATCHED = ["/etc", "/opt", "/usr/bin", "/usr/sbin", "/usr/lib/agentd", "/lib/systemd/system", "/usr/lib/systemd/system", "/usr/share/doc/agentd",
           "/usr/share/man/man1", "/usr/share/man/man8", "/usr/share/lintian/overrides", "/var/lib/agentd", "/var/lib/systemd"]
NFD_DIR = Path("/etc/kubernetes/node-feature-discovery/features.d")  # agentd's default features.d path
# Backups and locks that adduser/deluser leave behind on any system.
IGNORED = {"/etc/passwd-", "/etc/group-", "/etc/shadow-", "/etc/gshadow-", "/etc/subuid-", "/etc/subgid-", "/etc/.pwd.lock", "/etc/ld.so.cache"}


def _why_not() -> str | None:
    if os.environ.get("TEST_SYSTEM_INSTALL") != "1":
        return "installs agentd on this machine: set TEST_SYSTEM_INSTALL=1 to run it (CI does)"
    if os.geteuid() != 0:
        return "needs root (dpkg -i)"
    for tool in ("dpkg", "dpkg-deb", "md5sum"):
        if shutil.which(tool) is None:
            return f"{tool} not installed"
    if not Path("/usr/bin/python3").exists():
        return "/usr/bin/python3 missing (the package is built for the system Python)"
    if Path("/run/systemd/system").exists():
        return "systemd is running here: installing would start agentd on this machine"
    return None


def _not_clean() -> str | None:
    if subprocess.run(["dpkg-query", "-W", "agentd"], capture_output=True).returncode == 0:
        return "an agentd package is installed here; not touching it"
    for p in ("/etc/nccl", "/etc/nccl.env", "/etc/nccl.conf", "/etc/agentd", "/var/lib/agentd", "/opt/agentd", "/usr/lib/agentd", NFD_DIR / "agentd"):
        if os.path.lexists(p):
            return f"{p} already exists; not touching it"
    if subprocess.run(["getent", "passwd", "agentd"], capture_output=True).returncode == 0:
        return "user agentd already exists"
    return None


pytestmark = [pytest.mark.skipif(_why_not() is not None, reason=_why_not() or ""), pytest.mark.packaging, pytest.mark.proc]


def _tree() -> set[str]:
    seen: set[str] = set()
    for top in WATCHED:
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                if path not in IGNORED:
                    seen.add(path)
    return seen


def _account_lines() -> list[str]:
    lines = []
    for f in ("/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow"):
        if os.path.exists(f):
            lines += [l for l in Path(f).read_text().splitlines() if l.startswith("agentd:")]
    return lines


def _sh(*cmd: str, check: bool = True, **kw) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def _agentd_processes() -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "/usr/bin/agentd" in cmd:
            found.append(cmd)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_daemon_until_written(sim: Path, target: Path, deadline_s: float = 60.0) -> None:
    """`agentd run` as the service user with the packaged config, until it wrote target.
    A simulated root is never the node: its state would go to ``<sim>-out/``
    (docs/node-state.md). ``host_mode = live`` says "this root is the node", which is what
    this test needs: the packaged daemon writing the node's /etc/nccl."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "AGENTD_LISTEN": f"127.0.0.1:{_free_port()}", "AGENTD_HOST_MODE": "live"}
    proc = subprocess.Popen(
        ["runuser", "-u", "agentd", "--", "/usr/bin/agentd", "run", "--host-root", str(sim)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        end = time.monotonic() + deadline_s
        while not target.exists() and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.2)
    finally:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    assert target.exists(), f"agentd run did not write {target}:\n{out[-3000:]}"


def test_deb_install_use_remove_purge(tmp_path: Path) -> None:
    # Two test runs at once on one machine (parallel sessions) would install over each
    # other: the second waits for the first to purge. The lock is taken on dpkg's database
    # directory (flock, apart from dpkg's own fcntl locks): nothing is left in /tmp.
    lock = os.open("/var/lib/dpkg", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (why := _not_clean()) is not None:
            pytest.skip(why)
        _install_use_remove_purge(tmp_path)
    finally:
        os.close(lock)


def _install_use_remove_purge(tmp_path: Path) -> None:
    before, accounts_before = _tree(), _account_lines()
    deb = Path(_sh("sh", str(BUILD), str(tmp_path / "dist"), env={**os.environ, "PYTHON": "/usr/bin/python3"}, timeout=600).stdout.strip().splitlines()[-1])
    assert deb.name.startswith("agentd_") and deb.name.endswith(".deb")
    fields = _sh("dpkg-deb", "-f", str(deb), "Package", "Version", "Depends").stdout
    assert "Package: agentd" in fields and "python3." in fields
    assert _sh("dpkg-deb", "-I", str(deb), "conffiles").stdout.split() == ["/etc/agentd/agentd.toml"]

    cleanup: list[Path] = []
    try:
        _sh("dpkg", "-i", str(deb), timeout=300)

        # Files, user, directories, links.
        for p in ("/usr/bin/agentd", "/usr/sbin/agentd-healthcheck", "/lib/systemd/system/agentd.service", "/etc/agentd/agentd.toml", "/usr/lib/agentd/agentd/cli.py"):
            assert os.path.exists(p), p
        # Byte-code compiled by postinst (the sandboxed service cannot write it).
        assert any(Path("/usr/lib/agentd/agentd/__pycache__").glob("cli.cpython-*.pyc"))
        pw = _sh("getent", "passwd", "agentd").stdout.strip().split(":")
        assert pw[5] == "/var/lib/agentd" and pw[6].endswith("nologin")
        assert int(pw[2]) < 1000  # a system user
        for d in ("/etc/nccl", "/var/lib/agentd"):
            st = os.stat(d)
            assert (st.st_uid, oct(st.st_mode & 0o777)) == (int(pw[2]), "0o755"), d
        assert os.readlink("/etc/nccl.env") == "nccl/nccl.env"
        assert os.readlink("/etc/nccl.conf") == "nccl/nccl.conf"
        if shutil.which("deb-systemd-helper"):
            assert os.path.islink("/etc/systemd/system/multi-user.target.wants/agentd.service")  # enabled
        assert _agentd_processes() == []  # no systemd here: installed, not started

        # The packaged program runs from its own library directory, ignoring PYTHONPATH.
        version = _sh("/usr/bin/agentd", "--version", env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "/nonexistent"}).stdout
        assert version.startswith("agentd ")

        # As the service user, on a simulated node: check runs, the daemon writes into
        # /etc/nccl through the packaged config, and /etc/nccl.env sources in bash.
        sim = Path(tempfile.mkdtemp(prefix="agentd-deb-sim-")) / "root"  # pytest's tmp is root-only
        cleanup.append(sim.parent)
        _sh("/usr/bin/agentd", "simulate", "--profile", "h100-ib", "--out", str(sim))  # package data complete
        _sh("chmod", "-R", "a+rX", str(sim.parent))
        check = _sh("runuser", "-u", "agentd", "--", "/usr/bin/agentd", "check", "--host-root", str(sim), check=False, timeout=120)
        assert check.returncode in (0, 1, 2) and check.stdout.split("\n")[0] in ("ok", "degraded", "critical"), check.stderr
        _run_daemon_until_written(sim, Path("/etc/nccl/nccl.env"))
        assert os.stat("/etc/nccl/nccl.env").st_uid == int(pw[2])
        env = _sh("bash", "-c", "source /etc/nccl.env && env").stdout
        assert "NCCL_IB_HCA=" in env
        # Reinstalling (an upgrade to the same version) keeps the user, links and an
        # edited conffile.
        Path("/etc/agentd/agentd.toml").write_text(Path("/etc/agentd/agentd.toml").read_text() + "# edited\n")
        _sh("dpkg", "-i", "--force-confold", str(deb), timeout=300)
        assert Path("/etc/agentd/agentd.toml").read_text().endswith("# edited\n")
        assert _sh("getent", "passwd", "agentd").stdout.strip().split(":") == pw
        assert os.readlink("/etc/nccl.env") == "nccl/nccl.env" and os.path.exists("/etc/nccl/nccl.env")
        # A running daemon's leftovers must not block removal.
        Path("/etc/nccl/.nccl.env.abc123.tmp").write_text("")
        os.chown("/etc/nccl/.nccl.env.abc123.tmp", int(pw[2]), int(pw[3]))

        # agentd run as root (by hand, or from a container running as root) writes the same
        # files owned by root: purge must recognise them by their header, not their owner.
        render = _sh("/usr/bin/agentd", "render", "--host-root", str(sim), env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "AGENTD_HOST_MODE": "live"}, timeout=120)
        for name in ("nccl.env", "topo.xml"):
            f = Path("/etc/nccl") / name
            assert f.exists(), f"agentd render did not write {f}:\n{render.stdout}"
            os.chown(f, 0, 0)  # whatever render found unchanged: root's now, like the rest
        assert Path("/etc/nccl/topo.xml").read_text().startswith("<!-- NCCL topology of ")
        Path("/etc/nccl/.topo.xml.k9x2ab.tmp").write_text("")  # a root writer killed mid-write
        # Someone else's files in /etc/nccl: no agentd header, not agentd's user.
        foreign = {Path("/etc/nccl/site.env"): "export NCCL_DEBUG=WARN\n", Path("/etc/nccl/nccl.conf"): "NCCL_DEBUG=WARN\n"}
        for f, text in foreign.items():
            f.write_text(text)
        # The node-feature-discovery file at agentd's default path, written by root (only
        # where this machine has no /etc/kubernetes of its own).
        nfd = not NFD_DIR.parents[1].exists()
        if nfd:
            cleanup += [NFD_DIR, NFD_DIR.parent, NFD_DIR.parents[1]]  # deepest first
            NFD_DIR.mkdir(parents=True)
            (NFD_DIR / "agentd").write_text("# node-feature-discovery labels written by agentd; do not edit (rewritten every cycle).\n")
            (NFD_DIR / ".agentd.Zq81xy.tmp").write_text("")

        _sh("dpkg", "-r", "agentd", timeout=120)
        for p in ("/usr/bin/agentd", "/usr/sbin/agentd-healthcheck", "/usr/lib/agentd", "/lib/systemd/system/agentd.service", "/etc/nccl.env", "/etc/nccl.conf"):
            assert not os.path.lexists(p), f"{p} left after dpkg -r"
        assert os.path.exists("/etc/agentd/agentd.toml")  # conffile kept until purge

        _sh("dpkg", "-P", "agentd", timeout=120)
        assert _account_lines() == accounts_before == []
        # agentd's files went, whoever wrote them; someone else's stayed, untouched.
        assert sorted(os.listdir("/etc/nccl")) == sorted(f.name for f in foreign)
        for f, text in foreign.items():
            assert f.read_text() == text and f.stat().st_uid == 0
        assert os.stat("/etc/nccl").st_uid == 0  # no longer the (deleted) agentd user's
        if nfd:
            assert NFD_DIR.is_dir() and os.listdir(NFD_DIR) == []  # the directory is NFD's
        for f in foreign:
            f.unlink()
        os.rmdir("/etc/nccl")
        for d in cleanup:
            if d.parts[:2] == ("/", "etc"):
                d.rmdir()
        cleanup = [d for d in cleanup if d.parts[:2] != ("/", "etc")]
        after = _tree()
        assert sorted(after - before) == [], "left behind after purge"
        assert sorted(before - after) == [], "removed by purge but not ours"
    finally:
        for d in cleanup:
            shutil.rmtree(d, ignore_errors=True)
        # /etc/nccl did not exist before (_not_clean): whatever a failed run left there is
        # this test's.
        shutil.rmtree("/etc/nccl", ignore_errors=True)
        if subprocess.run(["dpkg-query", "-W", "agentd"], capture_output=True).returncode == 0:
            subprocess.run(["dpkg", "-P", "--force-all", "agentd"], capture_output=True)
