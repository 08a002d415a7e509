"""What every test run shares: temporary files on tmpfs, and honest cost markers.

**Temporary files on tmpfs.** Most of the suite's time was the file system: simulated trees
(thousands of files and links each), atomic writes with fsync of file and directory, and
the removal of every passing test's directory. On tmpfs the same work costs a fraction
(docs/performance.md, "The test suite"). Unless ``--basetemp`` is given, a run puts its base
temporary directory under ``/dev/shm`` when that is a writable tmpfs with room, and points
``TMPDIR`` there for the tests' own ``tempfile`` use and every process they start; xdist
workers inherit both. The directory goes when the run passes; a failing run keeps it and
says where. ``TEST_TMPFS=0`` keeps everything on the default temporary directory.

**Cost markers that cannot drift.** ``make test-fast`` leaves out the tests marked ``e2e``,
``proc``, ``tree``, ``packaging`` and ``slow`` (pyproject.toml). A marker that is missing
makes the fast loop slow without anyone noticing, so two of them are checked, not trusted:
a test that starts a process (anything through ``subprocess.Popen``, asyncio's subprocesses
included) without ``proc`` or ``e2e``, or writes a simulated tree of its own without
``tree`` (or ``e2e``), fails with the marker to add. A tree written by a fixture that a
module or the session shares is built once and is not counted against each test. Any other unmarked test whose call runs
past ``SLOW_S`` is listed at the end of the run, as a hint to mark it ``slow``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import cost
from tests.support.paths import TESTS

SLOW_S = 0.5
_TMPFS = Path("/dev/shm")
_TMPFS_MIN_FREE = 2 << 30
_PROCESS_MARKERS = ("proc", "e2e")
_TREE_MARKERS = ("tree", "e2e")
_COST_MARKERS = ("e2e", "proc", "tree", "packaging", "slow")
# Fixtures shared by a module or the session that start processes: every test that uses one
# is marked ``proc`` at collection (the spy sees the processes only in the first such test).
_PROCESS_FIXTURES = frozenset({"pki"})
# Folders whose every test has a cost by what the folder is for.
_FOLDER_MARKERS = {"e2e": pytest.mark.e2e, "golden": pytest.mark.e2e, "ops": pytest.mark.packaging}

_made_basetemp: Path | None = None
_slow_unmarked: list[tuple[str, float]] = []


def _tmpfs_room(path: Path) -> bool:
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return os.access(path, os.W_OK) and st.f_bavail * st.f_frsize >= _TMPFS_MIN_FREE


def pytest_configure(config: pytest.Config) -> None:
    global _made_basetemp
    if hasattr(config, "workerinput") or config.option.basetemp or os.environ.get("TEST_TMPFS") == "0":
        return  # an xdist worker (the controller chose), an explicit --basetemp, or asked not to
    if not (_TMPFS.is_dir() and _tmpfs_room(_TMPFS)):
        return
    base = Path(tempfile.mkdtemp(prefix="agentd-tests-", dir=_TMPFS))
    (base / "tmp").mkdir()
    # Traversable, as /tmp is, so a test may hand a directory it made to another user (the
    # package test runs the installed agentd as its own user); what tests make stays 0700.
    base.chmod(0o755)
    (base / "tmp").chmod(0o755)
    config.option.basetemp = str(base / "pytest")
    os.environ["TMPDIR"] = str(base / "tmp")
    tempfile.tempdir = None  # re-read TMPDIR
    _made_basetemp = base


def pytest_unconfigure(config: pytest.Config) -> None:
    if _made_basetemp is None:
        return
    failed = getattr(config, "_agentd_failed", True)
    if failed:
        print(f"\ntemporary files of this run kept in {_made_basetemp}")
    else:
        shutil.rmtree(_made_basetemp, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config._agentd_failed = exitstatus not in (0, 5)  # type: ignore[attr-defined]  # a flag for unconfigure


cost.install()


def _has(item: pytest.Item, names: tuple[str, ...]) -> bool:
    return any(item.get_closest_marker(n) is not None for n in names)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    cost.current = cost.Spy()
    try:
        return (yield)
    finally:
        cost.current = None


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Iterator[Any]:  # Any: any fixture's value
    if fixturedef.scope == "function":
        return (yield)
    with cost.shared():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    spy = cost.current
    if report.when == "call" and report.passed and not _has(item, _COST_MARKERS) and call.duration > SLOW_S:
        report.user_properties.append(("unmarked_slow_s", call.duration))  # to the controller under xdist
    if report.when == "teardown" and spy is not None and report.passed:
        missing = []
        if spy.processes and not _has(item, _PROCESS_MARKERS):
            missing.append(f"@pytest.mark.proc: it started {len(spy.processes)} process(es), first {spy.processes[0]!r}")
        if spy.trees and not _has(item, _TREE_MARKERS):
            missing.append(f"@pytest.mark.tree: it wrote {len(spy.trees)} simulated tree(s), first {spy.trees[0]}")
        if missing:
            report.outcome = "failed"
            report.longrepr = "unmarked cost (tests/conftest.py): add " + "; ".join(missing)
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for key, value in report.user_properties:
        if key == "unmarked_slow_s":
            _slow_unmarked.append((report.nodeid, float(value)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.proc)
        folder = item.path.relative_to(TESTS).parts[0] if item.path.is_relative_to(TESTS) else ""
        if folder in _FOLDER_MARKERS:
            item.add_marker(_FOLDER_MARKERS[folder])


@pytest.fixture(scope="session")
def shared_tree(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A fault-free simulated tree per profile, built once per session (per xdist worker)
    and shared by every test that asks: read it, never write into it (build a tree of your
    own, marked ``tree``, to inject faults)."""
    built: dict[str, Path] = {}

    def get(profile: str) -> Path:
        if profile not in built:
            from agentd.sim.build import build_tree

            with cost.shared():
                built[profile] = build_tree(profile, tmp_path_factory.mktemp("shared-tree") / profile)
        return built[profile]

    return get


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:  # Any: pytest's TerminalReporter is not public API
    if not _slow_unmarked:
        return
    terminalreporter.section(f"unmarked tests slower than {SLOW_S} s (consider @pytest.mark.slow)")
    for nodeid, dur in sorted(_slow_unmarked, key=lambda t: -t[1])[:40]:
        terminalreporter.write_line(f"{dur:6.2f}s {nodeid}")
