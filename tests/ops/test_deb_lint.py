"""The Debian package as Debian's tools judge it: lintian clean (errors and warnings), the
Depends field dpkg-shlibdeps computes, the changelog.

The package is built once for the module (packaging/deb/build.sh, which needs PyPI or a
wheel mirror for the locked dependencies); the tests that need it are skipped only where
the Debian tools are missing.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parents[2]
DEB_DIR = REPO / "packaging" / "deb"
CHANGELOG = DEB_DIR / "changelog"
TOOLS = ("dpkg-deb", "dpkg-shlibdeps", "lintian", "strip")


def _pyproject_version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def _debian_version(pep440: str) -> str:
    """build.sh's mapping: PEP 440 pre-releases sort first in Debian only with '~'."""
    return re.sub(r"\.?(a|b|rc|dev)(\d*)", r"~\1\2", pep440).replace("+", "+local.")


def test_changelog_top_entry_is_the_project_version() -> None:
    first = CHANGELOG.read_text().splitlines()[0]
    m = re.fullmatch(r"agentd \(([^)]+)\) [a-z-]+; urgency=(low|medium|high|emergency|critical)", first)
    assert m, f"not a Debian changelog entry line: {first!r}"
    assert m.group(1) == _debian_version(_pyproject_version())
    # The trailer line of that entry, in the format dpkg-parsechangelog reads.
    trailer = next(line for line in CHANGELOG.read_text().splitlines() if line.startswith(" -- "))
    assert re.fullmatch(r" -- [^<>]+ <[^@\s]+@[^@\s]+\.[a-z]+>  \w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} [+-]\d{4}", trailer), trailer


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (Debian packages lintian, dpkg-dev)")
    if not Path("/usr/bin/python3").exists():
        pytest.skip("/usr/bin/python3 missing (the package is built for the system Python)")
    out = tmp_path_factory.mktemp("deb")
    proc = subprocess.run(
        ["sh", str(DEB_DIR / "build.sh"), str(out)],
        env={**os.environ, "PYTHON": "/usr/bin/python3"}, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, f"build.sh failed:\n{proc.stdout}\n{proc.stderr[-5000:]}"
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.mark.proc
def test_lintian_reports_no_error_or_warning(deb: Path, tmp_path: Path) -> None:
    # TMPDIR: lintian leaves its mldbm-elf-* scratch files behind in the temp directory.
    proc = subprocess.run(
        ["lintian", "--fail-on", "error,warning", "--display-info", "--no-tag-display-limit", str(deb)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert proc.returncode == 0, f"lintian exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"


@pytest.mark.proc
def test_depends_names_libc_adduser_and_the_interpreter(deb: Path) -> None:
    depends = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True, text=True, check=True).stdout
    names = {alt.split()[0] for dep in depends.split(",") for alt in dep.split("|") if alt.strip()}
    assert {"libc6", "adduser", "libudev1"} <= names, depends
    assert any(re.fullmatch(r"python3\.\d+", n) for n in names), depends


@pytest.mark.proc
def test_package_layout(deb: Path) -> None:
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    paths = {line.split()[5].removeprefix(".") for line in listing.splitlines()}
    assert "/usr/lib/agentd/agentd/cli.py" in paths
    assert not any(p.startswith("/opt/") for p in paths)
    assert not any("__pycache__" in p for p in paths)  # compiled by postinst, removed by prerm
    for p in ("/usr/share/man/man1/agentd.1.gz", "/usr/share/man/man8/agentd-healthcheck.8.gz",
              "/usr/share/lintian/overrides/agentd", "/usr/share/doc/agentd/copyright"):
        assert p in paths, p
    # A native version (no Debian revision) has changelog.gz, with the changelog's text.
    version = subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], capture_output=True, text=True, check=True).stdout.strip()
    name = "changelog.Debian.gz" if "-" in version else "changelog.gz"
    assert f"/usr/share/doc/agentd/{name}" in paths
    extracted = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True,
    ).stdout
    member = subprocess.run(
        ["tar", "-xOf", "-", f"./usr/share/doc/agentd/{name}"], input=extracted, capture_output=True, check=True,
    ).stdout
    assert gzip.decompress(member).decode() == CHANGELOG.read_text()


def test_overrides_say_why() -> None:
    """Every lintian override has a comment above it."""
    lines = (DEB_DIR / "lintian-overrides").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("agentd: "):
            above = lines[i - 1] if i else ""
            assert above.startswith(("#", "agentd: ")), f"override without a reason: {line}"
