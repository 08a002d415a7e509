"""The RPM: built with rpmbuild from the working tree, linted with rpmlint, and its
payload and scriptlets inspected (rpm -qp, rpm2cpio).

Nothing is installed: the host is Debian (CI) and has no rpm database of its own, so the
build runs with --nodeps (the spec's header says so) and the spec's systemd scriptlet
fallbacks are what end up in the package. The source tarball is made from the working
tree's files (tracked and untracked, not ignored), so uncommitted work is what is built.
Dependencies come from PyPI (packaging/requirements.lock), as in CI.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import tarfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "packaging" / "rpm" / "agentd.spec"
RPMLINTRC = REPO / "packaging" / "rpm" / "agentd.rpmlintrc"
LOCK = REPO / "packaging" / "requirements.lock"
UNIT = REPO / "systemd" / "agentd.service"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
LIBDIR = "/usr/lib/agentd"
# The build's PATH: the distribution's interpreter and its pip, not a virtualenv's.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

pytestmark = [pytest.mark.skipif(
    shutil.which("rpmbuild") is None or shutil.which("rpmlint") is None,
    reason="rpmbuild or rpmlint not installed (Debian packages: rpm, rpmlint)",
), pytest.mark.packaging]


def _system_python() -> str:
    """python3.X of the host's /usr/bin/python3 (python3.11 on Debian 12, the spec's own
    default): the build installs the wheels for it and the launcher names it."""
    proc = subprocess.run(
        ["/usr/bin/python3", "-c", "import sys; print('python%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"/usr/bin/python3 is needed to build the RPM: {proc.stderr}"
    return proc.stdout.strip()


def _source_tarball(dest: Path) -> None:
    """agentd-<version>.tar.gz from the working tree, prefix agentd-<version>/ (what
    `git archive --prefix` makes, but with uncommitted changes included)."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    prefix = f"agentd-{VERSION}"
    with tarfile.open(dest, "w:gz") as tar:
        for name in sorted(n for n in listing.split("\0") if n):
            path = REPO / name
            if path.is_file() or path.is_symlink():  # deleted but not yet committed: skipped
                tar.add(path, arcname=f"{prefix}/{name}", recursive=False)


@dataclass(frozen=True)
class Built:
    rpm: Path
    root: Path  # the payload, extracted
    python: str


def _rpm_q(built: Built, *args: str) -> str:
    proc = subprocess.run(["rpm", "-qp", *args, str(built.rpm)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    top = tmp_path_factory.mktemp("rpmbuild")
    (top / "SOURCES").mkdir()
    _source_tarball(top / "SOURCES" / f"agentd-{VERSION}.tar.gz")
    python = _system_python()
    env = dict(os.environ, PATH=SYSTEM_PATH, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        ["rpmbuild", "-bb", "--nodeps", "--define", f"_topdir {top}", "--define", f"agentd_python {python}", str(SPEC)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    rpms = sorted((top / "RPMS").glob(f"*/agentd-{VERSION}-*.rpm"))
    assert len(rpms) == 1, rpms
    root = top / "payload"
    root.mkdir()
    extract = subprocess.run(
        f"rpm2cpio '{rpms[0]}' | cpio -idm --quiet --no-absolute-filenames",
        shell=True,
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert extract.returncode == 0, extract.stderr
    try:
        yield Built(rpms[0], root, python)
    finally:
        shutil.rmtree(top, ignore_errors=True)  # some 100 MB: not left for pytest's basetemp


@pytest.mark.proc
def test_rpmlint_is_clean_with_the_packages_filters(built: Built) -> None:
    proc = subprocess.run(["rpmlint", "-r", str(RPMLINTRC), str(built.rpm), str(SPEC)], capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert re.search(r"\b0 errors, 0 warnings\b", out), out
    assert proc.returncode == 0, out


@pytest.mark.proc
def test_payload_layout(built: Built) -> None:
    files = set(_rpm_q(built, "-l").split())
    for path in (
        "/usr/bin/agentd",
        "/usr/sbin/agentd-healthcheck",
        "/usr/lib/systemd/system/agentd.service",
        "/etc/agentd/agentd.toml",
        "/etc/nccl",
        "/var/lib/agentd",
        f"{LIBDIR}/agentd/cli.py",
        # compiled at build time: the sandboxed service cannot write __pycache__ under /usr
        f"{LIBDIR}/agentd/__pycache__/cli.cpython-{built.python.removeprefix('python').replace('.', '')}.pyc",
    ):
        assert path in files, path
    assert not [f for f in files if f.startswith("/opt")]
    assert not [f for f in files if f.startswith(f"{LIBDIR}/bin")], "console scripts belong to no one"
    assert _rpm_q(built, "--configfiles").split() == ["/etc/agentd/agentd.toml"]
    flags = dict(line.split(" ", 1) for line in _rpm_q(built, "--qf", "[%{FILENAMES} %{FILEFLAGS:fflags}\n]").splitlines())
    assert set(flags["/etc/agentd/agentd.toml"]) == {"c", "n"}  # %config(noreplace)
    assert flags["/usr/lib/systemd/system/agentd.service"] == ""  # overwritten on upgrade


@pytest.mark.proc
def test_ownership_and_modes(built: Built) -> None:
    rows = [line.split() for line in _rpm_q(built, "--qf", "[%{FILENAMES} %{FILEUSERNAME} %{FILEGROUPNAME} %{FILEMODES:perms}\n]").splitlines()]
    owned = {r[0]: (r[1], r[2], r[3]) for r in rows}
    assert owned["/etc/nccl"] == ("agentd", "agentd", "drwxr-xr-x")
    assert owned["/var/lib/agentd"] == ("agentd", "agentd", "drwxr-xr-x")
    assert owned["/usr/bin/agentd"] == ("root", "root", "-rwxr-xr-x")
    assert owned["/usr/sbin/agentd-healthcheck"] == ("root", "root", "-rwxr-xr-x")
    others = {p: o for p, o in owned.items() if p not in ("/etc/nccl", "/var/lib/agentd")}
    assert {o[:2] for o in others.values()} == {("root", "root")}
    assert not [p for p, o in owned.items() if o[2][8] == "w"], "world-writable files"


def _scriptlets(built: Built) -> dict[str, str]:
    tags = {"pre": "PREIN", "post": "POSTIN", "preun": "PREUN", "postun": "POSTUN"}
    out = {}
    for name, tag in tags.items():
        out[name] = _rpm_q(built, "--qf", f"%{{{tag}}}")
        prog = _rpm_q(built, "--qf", f"%{{{tag}PROG}}")
        assert prog.strip() == "/bin/sh", (name, prog)
    return out


@pytest.mark.proc
def test_scriptlets_are_plain_shell_with_the_systemd_handling(built: Built) -> None:
    listing = _rpm_q(built, "--scripts")
    for header in ("preinstall scriptlet", "postinstall scriptlet", "preuninstall scriptlet", "postuninstall scriptlet"):
        assert header in listing, header
    assert "%" not in listing, "unexpanded rpm macro in a scriptlet"
    scripts = _scriptlets(built)
    for name, text in scripts.items():
        assert text.strip() and text != "(none)", name
        syntax = subprocess.run(["sh", "-n"], input=text, capture_output=True, text=True)
        assert syntax.returncode == 0, (name, syntax.stderr)
    assert "useradd -r -g agentd" in scripts["pre"]
    # What systemd's macros do on EL9/Fedora: enable per preset on first install, disable
    # and stop on erase, restart after an upgrade.
    helper = "/usr/lib/systemd/systemd-update-helper"
    assert re.search(r'if \[ "?\$1"? -eq 1 \].*\n\s*(#.*\n\s*)?' + re.escape(f"{helper} install-system-units agentd.service"), scripts["post"])
    assert re.search(r'if \[ "?\$1"? -eq 0 \].*\n\s*(#.*\n\s*)?' + re.escape(f"{helper} remove-system-units agentd.service"), scripts["preun"])
    assert re.search(r'if \[ "?\$1"? -ge 1 \].*\n\s*(#.*\n\s*)?' + re.escape(f"{helper} mark-restart-system-units agentd.service"), scripts["postun"])
    # Fedora's guidelines: users are never deleted.
    assert "userdel" not in scripts["postun"] and "groupdel" not in scripts["postun"]


def _postun_in(root: Path, built: Built) -> str:
    """The %postun scriptlet with its absolute paths moved under root."""
    text = _scriptlets(built)["postun"]
    return text.replace("/var/lib/agentd", f"{root}/var/lib/agentd").replace("/etc/", f"{root}/etc/")


def _tree(root: Path) -> tuple[Path, Path, list[Path], list[Path]]:
    nccl = root / "etc" / "nccl"
    nfd = root / "etc" / "kubernetes" / "node-feature-discovery" / "features.d"
    state = root / "var" / "lib" / "agentd"
    for d in (nccl, nfd, state):
        d.mkdir(parents=True)
    ours = [nccl / "nccl.env", nccl / "nccl.conf", nccl / "topo.xml", nccl / ".nccl.env.k3j9x2aa.tmp", nfd / "agentd", nfd / ".agentd.q81mzz0p.tmp"]
    (nccl / "nccl.env").write_text("# NCCL settings for this node, written by agentd. Source it in bash or sh ('. FILE') to export them.\nexport NCCL_IB_HCA=mlx5_0\n")
    (nccl / "nccl.conf").write_text("# NCCL settings for this node, written by agentd as plain KEY VALUE lines for NCCL's own\nNCCL_IB_HCA=mlx5_0\n")
    (nccl / "topo.xml").write_text("<!-- NCCL topology of node1, written by agentd from sysfs: PCI switches, GPUs and NICs only; -->\n<system/>\n")
    (nccl / ".nccl.env.k3j9x2aa.tmp").write_text("")
    (nfd / "agentd").write_text("# node-feature-discovery labels written by agentd; do not edit (rewritten every cycle).\nagentd.io/ok=true\n")
    (nfd / ".agentd.q81mzz0p.tmp").write_text("")
    (state / "state.json").write_text("{}\n")
    theirs = [nccl / "site.conf", nfd / "other", nfd / ".other.x.tmp"]
    (nccl / "site.conf").write_text("# the site's own NCCL settings\nNCCL_DEBUG=WARN\n")
    (nfd / "other").write_text("# labels from another tool\nvendor.io/x=1\n")
    (nfd / ".other.x.tmp").write_text("")
    (root / "etc" / "nccl.env").symlink_to("nccl/nccl.env")
    (root / "etc" / "nccl.conf").write_text("# the admin's own file, not our link\n")
    return nccl, state, ours, theirs


@pytest.mark.proc
def test_erase_removes_what_agentd_wrote_and_nothing_else(built: Built, tmp_path: Path) -> None:
    nccl, state, ours, theirs = _tree(tmp_path)
    script = _postun_in(tmp_path, built)
    proc = subprocess.run(["sh", "-s", "0"], input=script, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert [p for p in ours if p.exists()] == []
    assert [p for p in theirs if not p.exists()] == []
    assert not state.exists()
    assert not (tmp_path / "etc" / "nccl.env").is_symlink()
    assert (tmp_path / "etc" / "nccl.conf").read_text() == "# the admin's own file, not our link\n"
    assert sorted(p.name for p in nccl.iterdir()) == ["site.conf"]  # not empty: kept


@pytest.mark.proc
def test_upgrade_postun_keeps_everything(built: Built, tmp_path: Path) -> None:
    nccl, state, ours, theirs = _tree(tmp_path)
    script = _postun_in(tmp_path, built)
    proc = subprocess.run(["sh", "-s", "1"], input=script, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert [p for p in ours + theirs if not p.exists()] == []
    assert (state / "state.json").exists() and (tmp_path / "etc" / "nccl.env").is_symlink()


@pytest.mark.proc
def test_erase_removes_an_emptied_etc_nccl(built: Built, tmp_path: Path) -> None:
    nccl, _state, _ours, theirs = _tree(tmp_path)
    for p in theirs:
        p.unlink()
    proc = subprocess.run(["sh", "-s", "0"], input=_postun_in(tmp_path, built), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert not nccl.exists()


def test_unit_is_the_repositorys_byte_for_byte(built: Built) -> None:
    assert (built.root / "usr/lib/systemd/system/agentd.service").read_bytes() == UNIT.read_bytes()
    assert (built.root / "etc/agentd/agentd.toml").read_bytes() == (REPO / "systemd" / "agentd.toml.example").read_bytes()
    assert (built.root / "usr/sbin/agentd-healthcheck").read_bytes() == (REPO / "packaging" / "slurm" / "agentd-healthcheck").read_bytes()


def _lock_names() -> set[str]:
    names = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", LOCK.read_text(), re.M)
    return {re.sub(r"[-_.]+", "-", n).lower() for n in names}


def test_library_holds_agentd_and_exactly_the_locked_dependencies(built: Built) -> None:
    lib = built.root / LIBDIR.lstrip("/")
    installed = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d.version for d in importlib.metadata.distributions(path=[str(lib)])}
    assert installed.pop("agentd") == VERSION
    assert set(installed) == _lock_names()


@pytest.mark.proc
def test_extracted_launcher_runs_agentd(built: Built, tmp_path: Path) -> None:
    launcher = (built.root / "usr/bin/agentd").read_text()
    first, _, body = launcher.partition("\n")
    # The interpreter the wheels were installed for, isolated from the system's site.
    assert first == f"#!/usr/bin/{built.python} -IS"
    assert f'sys.path.insert(0, "{LIBDIR}")' in body
    moved = tmp_path / "agentd"
    moved.write_text(launcher.replace(f'"{LIBDIR}"', repr(str(built.root / LIBDIR.lstrip("/")))))
    interpreter = first[2:].split()[0]
    if not Path(interpreter).exists():
        pytest.fail(f"{interpreter} missing: the package was built for it")
    proc = subprocess.run([interpreter, "-I", "-S", str(moved), "--version"], capture_output=True, text=True, env={"PATH": SYSTEM_PATH})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"agentd {VERSION}"
    # Every runtime dependency imports from the payload alone (-S: no site-packages).
    modules = ["aiohttp", "pydantic", "pydantic_core", "structlog", "psutil", "pyudev", "pynvml", "yaml", "bcrypt"]
    code = (
        f"import sys; sys.path.insert(0, {str(built.root / LIBDIR.lstrip('/'))!r}); import agentd.cli, agentd.daemon; " + "; ".join(f"import {m}" for m in modules) + "; print(pydantic_core.__file__)"
    )
    proc = subprocess.run([interpreter, "-I", "-S", "-c", code], capture_output=True, text=True, env={"PATH": SYSTEM_PATH})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(str(built.root))
