"""The container recipe is reproducible: the base image pinned by digest, every Python
package from a hash-locked file that is generated from pyproject.toml and complete. The
last test runs the recipe's Python steps (the same pip commands, the same lock files) in
a fresh virtual environment, so a lock that pip refuses or that misses a dependency fails
here rather than in an image build. No registry is reachable from CI: the image itself is
not built."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "packaging" / "container" / "Containerfile"
LOCK = REPO / "packaging" / "requirements.lock"
BUILD_LOCK = REPO / "packaging" / "build-requirements.lock"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), " ".join(rest.split())))
    return out


INS = _instructions(CONTAINERFILE.read_text())


def _lock(path: Path) -> dict[str, tuple[Version, list[str]]]:
    """name -> (pinned version, sha256 hashes) of a pip requirements file with hashes."""
    pins: dict[str, tuple[Version, list[str]]] = {}
    for entry in re.sub(r"\\\n", " ", path.read_text()).splitlines():
        entry = entry.split(" #", 1)[0].strip()
        if not entry or entry.startswith("#"):
            continue
        spec, *hashes = entry.split(" --hash=")
        req = Requirement(spec)
        (pin,) = req.specifier
        assert pin.operator == "==", entry
        pins[canonicalize_name(req.name)] = (Version(pin.version), [h.strip() for h in hashes])
    return pins


def test_base_image_is_pinned_by_digest_in_every_stage() -> None:
    (base,) = [v for k, v in INS if k == "ARG" and v.startswith("BASE=")]
    ref = base.removeprefix("BASE=")
    m = re.fullmatch(r"python:(\d+\.\d+)-slim@sha256:([0-9a-f]{64})", ref)
    assert m, ref
    # The interpreter the lock was resolved for is the image's.
    assert f"--python-version {m.group(1)}" in (REPO / "Makefile").read_text()
    froms = [v.split()[0] for k, v in INS if k == "FROM"]
    assert froms == ["${BASE}", "${BASE}"]


def test_python_packages_come_only_from_the_locks() -> None:
    runs = [v for k, v in INS if k == "RUN" and "pip " in v]
    installs = [c for r in runs for c in re.split(r"&&|;", r) if re.search(r"pip (install|wheel)", c)]
    assert installs, runs
    for cmd in installs:
        if "-r " in cmd:
            # A lock: hashes required, wheels only, nothing resolved beyond the file.
            for flag in ("--require-hashes", "--no-deps", "--only-binary :all:"):
                assert flag in cmd, cmd
        else:
            # agentd itself: its own wheel, nothing pulled in, no build tools fetched.
            assert "--no-deps" in cmd and ("--no-index" in cmd or "--no-build-isolation" in cmd), cmd
    copied = [v.split()[0] for k, v in INS if k == "COPY" and not v.startswith("--from")]
    assert "packaging/requirements.lock" in copied and "packaging/build-requirements.lock" in copied


def test_recipe_basics() -> None:
    assert json.loads(next(v for k, v in INS if k == "ENTRYPOINT")) == ["agentd", "run"]
    env = " ".join(v for k, v in INS if k == "ENV")
    assert "AGENTD_HOST_ROOT=/host" in env
    user = next(v for k, v in INS if k == "USER")
    assert not user.startswith(("0", "root"))
    # Every COPY source from the build context exists (a glob may match nothing).
    for k, v in INS:
        if k == "COPY" and not v.startswith("--from"):
            *sources, _dest = v.split()
            assert any((REPO / s).exists() or any(REPO.glob(s)) for s in sources), v
            for s in sources:
                assert (REPO / s).exists() or "[" in s, s


def _closure(root: str, extras: frozenset[str] = frozenset()) -> dict[str, list[tuple[str, Requirement]]]:
    """Every distribution agentd needs at run time (markers evaluated for CPython 3.11 on
    Linux, like the image), with the requirements that pull each in and who asks them."""
    env = default_environment()
    seen: dict[str, list[tuple[str, Requirement]]] = {}
    todo = [(root, extras)]
    while todo:
        name, wanted = todo.pop()
        for line in metadata.requires(name) or []:
            req = Requirement(line)
            if req.marker is not None and not any(
                req.marker.evaluate({**env, "extra": e}) for e in (wanted or {""})
            ):
                continue
            key = canonicalize_name(req.name)
            first = key not in seen
            seen.setdefault(key, []).append((name, req))
            if first:
                todo.append((req.name, frozenset(req.extras)))
    return seen


def test_lock_is_agentds_runtime_closure_and_satisfies_every_range() -> None:
    pins = _lock(LOCK)
    needed = _closure("agentd")
    # What pyproject.toml names is in the lock (the installed metadata may be older than
    # the checkout's pyproject: check it directly too).
    for line in PYPROJECT["project"]["dependencies"]:
        assert canonicalize_name(Requirement(line).name) in pins, f"{line} is not in {LOCK.name}: run make lock"
    missing = sorted(set(needed) - set(pins))
    assert not missing, f"{LOCK.name} misses {missing}: run make lock"
    for name, reqs in needed.items():
        version, hashes = pins[name]
        for parent, req in reqs:
            # The installed metadata speaks for the installed version only: a newer release
            # in this venv (pip resolves the test venv unpinned) says nothing of the locked one.
            if parent != "agentd" and Version(metadata.version(parent)) != pins[canonicalize_name(parent)][0]:
                continue
            assert req.specifier.contains(version, prereleases=True), f"{name}=={version} breaks {req} (of {parent})"
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name
    for line in PYPROJECT["project"]["dependencies"]:
        req = Requirement(line)
        assert req.specifier.contains(pins[canonicalize_name(req.name)][0], prereleases=True), line
    # Nothing that agentd does not need (a stale pin after a dependency was dropped).
    extra = sorted(set(pins) - set(needed))
    assert not extra, f"{LOCK.name} pins {extra}, which agentd no longer needs: run make lock"


def test_build_lock_holds_the_build_system_requirements() -> None:
    pins = _lock(BUILD_LOCK)
    for line in PYPROJECT["build-system"]["requires"]:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in pins, f"{line} is not in {BUILD_LOCK.name}: run make lock"
        assert req.specifier.contains(pins[name][0]), line
    assert all(h for _v, h in pins.values())


def _sh(cmd: list[str], **kw) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


@pytest.mark.proc
def test_recipe_python_steps_install_from_the_locks(tmp_path: Path) -> None:
    """The Containerfile's pip steps, in order, in a fresh venv of this interpreter
    (needs PyPI, as the image build does)."""
    venv = tmp_path / "venv"
    _sh([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "--no-cache-dir"]
    _sh([*pip, "install", "-q", "--require-hashes", "--no-deps", "--only-binary", ":all:", "-r", str(BUILD_LOCK)])
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (src / name).write_bytes((REPO / name).read_bytes())
    subprocess.run(["cp", "-R", str(REPO / "agentd"), str(src / "agentd")], check=True)
    _sh([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "--wheel-dir", str(tmp_path / "wheels"), str(src)])
    _sh([*pip, "install", "-q", "--require-hashes", "--no-deps", "--only-binary", ":all:", "-r", str(LOCK)])
    (wheel,) = (tmp_path / "wheels").glob("agentd-*.whl")
    _sh([*pip, "install", "-q", "--no-deps", "--no-index", str(wheel)])
    _sh([*pip, "check"])
    out = subprocess.run([str(venv / "bin" / "agentd"), "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("agentd "), out.stderr
