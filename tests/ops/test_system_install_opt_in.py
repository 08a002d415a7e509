"""`make test` changes nothing outside its temporary directories (issue 43: a root `make test`
installed and purged the Debian package on the machine it ran on). A test that installs a
package, or adds a user, on the machine runs only with TEST_SYSTEM_INSTALL=1, which only CI
(a machine it throws away) sets."""

from __future__ import annotations

import re

from tests.support.paths import REPO, TESTS

# a command line (argv as a list) that installs or removes a package on this machine, or adds a user
SYSTEM_CHANGE = re.compile(r"""[(\[]\s*["'](?:dpkg["'],\s*["']-(?:i|r|P|-install|-purge|-remove)|rpm["'],\s*["']-(?:i|U|e|-install|-erase)"""
                           r"""|(?:useradd|adduser|groupadd)["'],|apt-get["'],\s*["']install)""")


def test_every_test_that_changes_the_machine_opts_in():
    changing = [p for p in TESTS.rglob("*.py") if p.name != "test_system_install_opt_in.py" and SYSTEM_CHANGE.search(p.read_text(errors="replace"))]
    assert [p.relative_to(REPO).as_posix() for p in changing] == ["tests/ops/test_deb.py"]
    for p in changing:
        text = p.read_text()
        assert 'os.environ.get("TEST_SYSTEM_INSTALL") != "1"' in text, p


def test_only_ci_opts_in():
    assert "export TEST_SYSTEM_INSTALL=1" in (REPO / ".ci" / "run").read_text()
    assert "TEST_SYSTEM_INSTALL" not in (REPO / "Makefile").read_text()
