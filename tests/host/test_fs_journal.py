"""The read journal: every access with its outcome, in call order, and ``replay``.

A probe's journal replays equal exactly when everything it read still reads the same:
a changed file, a new or removed directory entry, a file that went missing or became
unreadable, a retargeted symlink each make the replay unequal.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from agentd.host import fs
from agentd.host.fs import Escaped, HostRoot, JournalEntry, ReadContext, replay
from agentd.host.infiniband import read_infiniband
from agentd.host.netdev import read_netdevs
from agentd.host.pci import read_pci

build = pytest.importorskip("agentd.sim.build")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build.build_tree("h100-ib", tmp_path_factory.mktemp("journal") / "root")


@pytest.fixture
def root(pristine: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "root", symlinks=True))


def probes(ctx: ReadContext) -> None:
    read_pci(ctx)
    read_infiniband(ctx)
    read_netdevs(ctx)


def journal_of(root: Path) -> tuple[list[JournalEntry], int]:
    with ReadContext(HostRoot.at(root), "t", journal=[]) as ctx:
        probes(ctx)
    assert ctx.journal is not None
    return ctx.journal, ctx.files_read


@pytest.mark.tree
def test_off_by_default(root: Path) -> None:
    ctx = ReadContext(HostRoot.at(root), "t")
    probes(ctx)
    assert ctx.journal is None


def test_an_unchanged_tree_replays_equal(root: Path) -> None:
    journal, files = journal_of(root)
    ops = {e[0] for e in journal}
    assert {"raw", "listdir", "resolve", "readlink", "config"} <= ops
    assert all(hash(e) is not None for e in journal)
    assert replay(HostRoot.at(root), journal) == (True, files)
    assert replay(HostRoot.at(root), tuple(journal)) == (True, files)


def test_the_same_tree_read_twice_journals_equal(root: Path) -> None:
    assert journal_of(root) == journal_of(root)


def some(root: Path, pattern: str) -> Path:
    return sorted(root.glob(pattern))[0]


CHANGES = {
    "file content": lambda r: some(r, "sys/devices/**/infiniband/*/ports/1/state").write_text("1: DOWN\n"),
    "new entry": lambda r: (some(r, "sys/devices/**/infiniband/*/ports/1/counters") / "new_counter").write_text("0\n"),
    "removed entry": lambda r: os.unlink(some(r, "sys/devices/**/infiniband/*/ports/1/counters/symbol_error")),
    "file missing": lambda r: os.unlink(some(r, "sys/devices/**/infiniband/*/fw_ver")),
    "config missing": lambda r: os.unlink(some(r, "sys/devices/pci*/**/config")),
    "new class entry": lambda r: os.symlink("../../devices/virtual/net/lo", r / "sys/class/net/dummy9"),
    "link retargeted": lambda r: retarget(some(r, "sys/devices/**/driver")),
    "device link retargeted": lambda r: retarget_device(r),
}


def retarget(link: Path) -> None:
    target = os.readlink(link)
    link.unlink()
    link.symlink_to(target.rsplit("/", 1)[0] + "/other_driver")


def retarget_device(root: Path) -> None:
    """A class entry that now names another device directory (same tree otherwise)."""
    entries = sorted((root / "sys/class/infiniband").iterdir())
    a, b = entries[0], entries[1]
    ta, tb = os.readlink(a), os.readlink(b)
    a.unlink()
    b.unlink()
    a.symlink_to(tb)
    b.symlink_to(ta)


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_replays_unequal(root: Path, change: str) -> None:
    journal, files = journal_of(root)
    CHANGES[change](root)
    same, read = replay(HostRoot.at(root), journal)
    assert not same
    assert read <= files
    assert journal_of(root)[0] != journal


def test_replay_stops_at_the_first_difference(root: Path) -> None:
    journal, files = journal_of(root)
    first = next(i for i, e in enumerate(journal) if e[0] == "raw")
    path = str(journal[first][1])
    Path(path).write_bytes(b"changed\n")
    assert replay(HostRoot.at(root), journal) == (False, 1)
    assert replay(HostRoot.at(root), journal[:first]) == (True, 0)


# -- outcomes: each failure kind is its own ------------------------------------------------


@pytest.fixture
def small(tmp_path: Path) -> Path:
    d = tmp_path / "root/sys/class/x"
    d.mkdir(parents=True)
    for name in ("ok", "einval", "eio", "empty"):
        (d / name).write_text("" if name == "empty" else "1\n")
    (d / "link").symlink_to("../y")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside/f").write_text("outside\n")
    (tmp_path / "outside/config").write_text("outside\n")
    (d / "out").symlink_to(tmp_path / "outside")
    return tmp_path / "root"


def failing(monkeypatch: pytest.MonkeyPatch, errs: dict[str, int]) -> None:
    real = fs.read_bounded

    def fake(path: str, max_bytes: int = fs.MAX_ATTR_BYTES) -> bytes:
        for name, err in errs.items():
            if str(path).endswith(f"/{name}"):
                raise OSError(err, os.strerror(err))
        return real(path, max_bytes)

    monkeypatch.setattr(fs, "read_bounded", fake)


def test_outcomes_tell_failures_apart(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = HostRoot.at(small)
    failing(monkeypatch, {"einval": errno.EINVAL, "eio": errno.EIO})
    ctx = ReadContext(host, "t", journal=[])
    for name in ("ok", "einval", "eio", "empty", "absent"):
        ctx.raw(f"sys/class/x/{name}")
    ctx.raw("sys/class/x/out/f")
    outcomes = [e[-1] for e in ctx.journal or []]
    assert outcomes[0] == b"1\n" and outcomes[3] == b""
    assert len(set(map(repr, outcomes))) == 6  # ok, EINVAL, EIO, empty, missing, escape all differ
    assert outcomes[1] == errno.EINVAL and outcomes[2] == errno.EIO and outcomes[4] == errno.ENOENT
    assert isinstance(outcomes[5], Escaped)
    assert replay(host, ctx.journal or []) == (True, 2)


def test_a_file_that_becomes_unreadable_replays_unequal(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = HostRoot.at(small)
    ctx = ReadContext(host, "t", journal=[])
    assert ctx.integer("sys/class/x/eio") == 1
    failing(monkeypatch, {"eio": errno.EIO})
    assert replay(host, ctx.journal or []) == (False, 0)
    failing(monkeypatch, {"eio": errno.EINVAL})
    assert replay(host, ctx.journal or []) == (False, 0)


def test_every_access_is_journaled_in_order(small: Path) -> None:
    host = HostRoot.at(small)
    ctx = ReadContext(host, "t", journal=[])
    r = str(host.root)
    ctx.listdir("sys/class/x")
    ctx.exists("sys/class/x/ok")
    ctx.exists("sys/class/x/nope")
    ctx.readlink_name("sys/class/x/link")
    ctx.readlink_name("sys/class/x/ok")
    ctx.resolve("sys/class/x")
    ctx.resolve("sys/class/x/link")
    ctx.config_bytes("sys/class/x/ok", 64)
    ctx.config_bytes("sys/class/x/none", 64)
    assert ctx.journal == [
        ("listdir", f"{r}/sys/class/x", ("einval", "eio", "empty", "link", "ok", "out")),
        ("exists", f"{r}/sys/class/x/ok", True),
        ("exists", f"{r}/sys/class/x/nope", False),
        ("readlink", f"{r}/sys/class/x/link", "../y"),
        ("readlink", f"{r}/sys/class/x/ok", errno.EINVAL),
        ("resolve", f"{r}/sys/class/x", (f"{r}/sys/class/x", True)),
        ("resolve", f"{r}/sys/class/x/link", errno.ENOENT),
        ("config", f"{r}/sys/class/x/ok", 64, b"1\n"),
        ("config", f"{r}/sys/class/x/none", 64, errno.ENOENT),
    ]
    assert replay(host, ctx.journal) == (True, 1)
    (small / "sys/class/y").mkdir()  # the dangling link now resolves
    assert replay(host, ctx.journal) == (False, 0)


def test_config_bytes_keeps_the_pci_reader_contract(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = HostRoot.at(small)
    failing(monkeypatch, {"eio": errno.EACCES})
    ctx = ReadContext(host, "t")
    assert ctx.config_bytes("sys/class/x/ok", 1) == b"1"
    assert ctx.config_bytes("sys/class/x/absent", 64) is None
    assert ctx.config_bytes("sys/class/x/eio", 64) == b""  # refused: judged as cut
    assert ctx.config_bytes("sys/class/x/out/config", 64) == b""
    assert ctx.errors == [] and ctx.files_read == 1


def test_replay_under_slash_tells_every_kind_of_change(tmp_path: Path) -> None:
    """Under ``/`` accesses are plain (no confinement walk): the replay still sees a changed
    file, a new entry, a link retargeted and a file gone."""
    d = tmp_path / "dev0"
    d.mkdir()
    (d / "state").write_text("4: ACTIVE\n")
    (d / "rate").write_text("400\n")
    (tmp_path / "link").symlink_to("dev0")
    host = HostRoot.at("/")

    def record() -> list[JournalEntry]:
        ctx = ReadContext(host, "t", journal=[])
        ctx.listdir(str(tmp_path))
        ctx.resolve(str(tmp_path / "link"))
        ctx.raw(str(tmp_path / "link/state"))
        ctx.raw(str(d / "rate"))
        ctx.exists(str(d / "absent"))
        ctx.readlink_name(str(tmp_path / "link"))
        return ctx.journal or []

    journal = record()
    assert [e[0] for e in journal] == ["listdir", "resolve", "raw", "raw", "exists", "readlink"]
    assert replay(host, journal) == (True, 2)
    changes = [
        lambda: (d / "state").write_text("1: DOWN\n"),
        lambda: (tmp_path / "new").write_text(""),
        lambda: ((tmp_path / "dev1").mkdir(), (tmp_path / "link").unlink(), (tmp_path / "link").symlink_to("dev1")),
        lambda: (d / "rate").unlink(),
        lambda: (d / "absent").write_text(""),
    ]
    for change in changes:
        journal = record()
        change()
        assert not replay(host, journal)[0], change
