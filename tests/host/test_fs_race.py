"""Confinement holds when the tree changes between the walk and the read.

The races are made deterministic: a directory on the path is swapped for a symlink out
of the root right after ``ReadContext`` walked it (the walk is wrapped, or the read seam
``fs.read_bounded`` swaps before it opens). Whatever happens, a read returns the inside
file or fails; it never returns what lies outside the root.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agentd.host import fs
from agentd.host.fs import HostRoot, ReadContext

MARKER = "AGENTD-OUTSIDE-RACE"


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """root/sys/devices/d (attr, link -> ../e, sub/) and root/sys/class/c -> ../devices/d;
    outside/ mirrors d with MARKER everywhere."""
    base = Path(os.path.realpath(tmp_path))
    root, outside = base / "root", base / "outside"
    d = root / "sys/devices/d"
    (d / "sub").mkdir(parents=True)
    (root / "sys/devices/e").mkdir()
    (d / "attr").write_text("inside\n")
    (d / "sub/attr").write_text("inside-sub\n")
    (d / "link").symlink_to("../e")
    (root / "sys/class").mkdir()
    (root / "sys/class/c").symlink_to("../devices/d")
    (outside / "sub").mkdir(parents=True)
    (outside / "attr").write_text(f"{MARKER}\n")
    (outside / "sub/attr").write_text(f"{MARKER}\n")
    (outside / MARKER).write_text(f"{MARKER}\n")
    (outside / "link").symlink_to(f"/{MARKER}")
    return root, outside


def swap_out(directory: Path, outside: Path) -> None:
    """Replace ``directory`` by a symlink to ``outside`` (the original moves aside)."""
    directory.rename(directory.with_name(directory.name + ".old"))
    directory.symlink_to(outside)


def swap_after_walk(monkeypatch: pytest.MonkeyPatch, directory: Path, outside: Path) -> list[str]:
    """Swap ``directory`` out right after the first directory walk that passes it."""
    real_dir = ReadContext._real_dir
    done: list[str] = []

    def walked(self: ReadContext, d: str) -> str:
        real = real_dir(self, d)
        if not done and (real == str(directory) or real.startswith(f"{directory}/")):
            swap_out(directory, outside)
            done.append(d)
        return real

    monkeypatch.setattr(ReadContext, "_real_dir", walked)
    return done


def no_marker(value: object) -> None:
    assert MARKER not in repr(value)


@pytest.mark.parametrize("swapped", ["sys/devices/d", "sys/devices", "sys"])
def test_read_after_the_walk_reads_inside_or_fails(tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, swapped: str) -> None:
    root, outside = tree
    ctx = ReadContext(HostRoot.at(root), "t")
    done = swap_after_walk(monkeypatch, root / swapped, outside)
    value = ctx.text("sys/devices/d/attr")
    assert done, "the swap did not happen"
    assert value in ("inside", None)
    no_marker((value, ctx.errors))
    # the same context keeps reading what it walked; a fresh one sees the escape
    assert ctx.text("sys/devices/d/attr") in ("inside", None)
    fresh = ReadContext(HostRoot.at(root), "t")
    assert fresh.text("sys/devices/d/attr") is None
    assert [e.kind for e in fresh.errors] == ["escape"]


def test_read_seam_swap_between_walk_and_open(tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The swap happens inside the read itself, after the directory fd was taken."""
    root, outside = tree
    host = HostRoot.at(root)  # opening a root reads its manifest: before the seam is wrapped
    real = fs.read_bounded

    def racing(path: str, max_bytes: int = fs.MAX_ATTR_BYTES) -> bytes:
        if (root / "sys/devices/d").is_dir() and not (root / "sys/devices/d").is_symlink():
            swap_out(root / "sys/devices/d", outside)
        return real(path, max_bytes)

    monkeypatch.setattr(fs, "read_bounded", racing)
    ctx = ReadContext(host, "t")
    assert ctx.text("sys/class/c/sub/attr") == "inside-sub"
    assert (root / "sys/devices/d").is_symlink()
    assert ctx.text("sys/class/c/attr") == "inside"  # the walked directory, not the new link
    no_marker(ctx.errors)


def test_swaps_racing_reads_never_read_outside(tree: tuple[Path, Path]) -> None:
    """Another thread swaps a directory on the path for a link out of the root and back,
    as fast as it can, while this one walks and reads through it: every read is the
    inside file or fails (never the marker)."""
    import threading

    root, outside = tree
    d = root / "sys/devices/d"
    aside, link = d.with_name("d.inside"), d.with_name("d.link")
    link.symlink_to(outside)
    stop = threading.Event()

    def swapper() -> None:
        while not stop.is_set():
            os.rename(d, aside)
            os.rename(link, d)  # the path now leads out of the root
            os.rename(d, link)
            os.rename(aside, d)

    host = HostRoot.at(root)
    t = threading.Thread(target=swapper)
    t.start()
    seen: set[str | None] = set()
    try:
        for _ in range(400):
            ctx = ReadContext(host, "t")
            seen.add(ctx.text("sys/class/c/sub/attr"))
            seen.add(ctx.text("sys/devices/d/attr"))
            no_marker((seen, ctx.errors, ctx.listdir("sys/class/c")))
            ctx.close()
    finally:
        stop.set()
        t.join()
    assert seen <= {"inside", "inside-sub", None}
    assert "inside" in seen or "inside-sub" in seen  # the reads did get through at times


def test_listing_after_the_walk(tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root, outside = tree
    ctx = ReadContext(HostRoot.at(root), "t")
    assert swap_after_walk(monkeypatch, root / "sys/devices/d", outside) == []
    names = ctx.listdir("sys/class/c")
    assert names in (["attr", "link", "sub"], [])
    no_marker((names, ctx.errors))
    assert ctx.exists("sys/class/c/attr") and not ctx.exists(f"sys/class/c/{MARKER}")
    assert ctx.readlink_name("sys/class/c/link") == "e"


def test_device_link_resolve_after_the_walk(tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root, outside = tree
    ctx = ReadContext(HostRoot.at(root), "t")
    swap_after_walk(monkeypatch, root / "sys/devices/d", outside)
    real = ctx.resolve("sys/class/c")
    assert real == root / "sys/devices/d"
    for value in (ctx.text(real / "attr"), ctx.text(real / "sub/attr"), ctx.listdir(real / "sub"), ctx.readlink_name(real / "link")):
        no_marker(value)
    assert ctx.text(real / "attr") == "inside"
    no_marker(ctx.errors)


def test_resolve_then_swap_is_an_escape_for_a_fresh_context(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    swap_out(root / "sys/devices/d", outside)
    ctx = ReadContext(HostRoot.at(root), "t")
    assert ctx.resolve("sys/class/c") is None
    assert ctx.text("sys/class/c/attr") is None and ctx.listdir("sys/class/c") == []
    assert {e.kind for e in ctx.errors} == {"escape"}
    no_marker(ctx.errors)


# -- links that try to leave -------------------------------------------------------------


def test_symlink_loop_is_an_escape_not_a_hang(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    (root / "sys/class/a").symlink_to("b")
    (root / "sys/class/b").symlink_to("a")
    (root / "sys/class/self").symlink_to("./self/x")
    ctx = ReadContext(HostRoot.at(root), "t")
    assert ctx.resolve("sys/class/a") is None
    assert ctx.text("sys/class/b/attr") is None
    assert ctx.listdir("sys/class/self") == []
    assert [e.kind for e in ctx.errors] == ["escape"] * 3
    assert all(fs.LOOP_DETAIL in e.detail for e in ctx.errors)


def test_a_long_chain_inside_is_followed(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    prev = "../devices/d"
    for i in range(fs.MAX_SYMLINK_HOPS - 1):
        (root / f"sys/class/l{i}").symlink_to(prev)
        prev = f"l{i}"
    ctx = ReadContext(HostRoot.at(root), "t")
    assert ctx.text(f"sys/class/{prev}/attr") == "inside"
    (root / "sys/class/over").symlink_to(prev)
    (root / "sys/class/over2").symlink_to("over")
    assert ctx.text("sys/class/over2/attr") is None
    assert [e.kind for e in ctx.errors] == ["escape"]


@pytest.mark.parametrize("target", ["../../..", "../../../..", "../devices/../../..", "./../../../outside"])
def test_dotdot_chains_do_not_climb_above_the_root(tree: tuple[Path, Path], target: str) -> None:
    root, _ = tree
    (root / "sys/class/up").symlink_to(target)
    ctx = ReadContext(HostRoot.at(root), "t")
    assert ctx.text("sys/class/up/outside/attr") is None
    assert ctx.text("sys/class/up/root/sys/devices/d/attr") is None  # even back down into the root
    assert ctx.raw("sys/devices/../../outside/attr") is None
    assert ctx.listdir("sys/class/up") == [] and ctx.resolve("sys/class/up") is None
    assert {e.kind for e in ctx.errors} == {"escape"}


def test_dotdot_that_stays_inside_is_followed(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    (root / "sys/class/top").symlink_to("../..")  # the root itself
    ctx = ReadContext(HostRoot.at(root), "t")
    assert ctx.text("sys/class/top/sys/devices/d/attr") == "inside"
    assert ctx.resolve("sys/class/top") == root
    assert ctx.errors == []


def test_absolute_links(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "sys/class/out").symlink_to(outside)
    (root / "sys/class/in").symlink_to(root / "sys/devices/d")
    (root / "sys/class/prefix").symlink_to(f"{root}x")  # a sibling that shares the prefix
    (root / "sys/class/back").symlink_to(f"{root}/../outside")
    ctx = ReadContext(HostRoot.at(root), "t")
    assert ctx.text("sys/class/in/attr") == "inside"
    assert ctx.resolve("sys/class/in") == root / "sys/devices/d"
    assert ctx.errors == []
    for link in ("out", "prefix", "back"):
        assert ctx.text(f"sys/class/{link}/attr") is None
    assert [e.kind for e in ctx.errors] == ["escape"] * 3
    no_marker(ctx.errors)


# -- directory fds: bounded, closed ------------------------------------------------------


def open_fds() -> int:
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def wide(tmp_path: Path) -> Path:
    for i in range(fs.MAX_OPEN_DIRS * 2):
        d = tmp_path / f"sys/w/d{i}"
        d.mkdir(parents=True)
        (d / "v").write_text(f"{i}\n")
    return tmp_path


def read_all(ctx: ReadContext) -> list[int | None]:
    return [ctx.integer(f"sys/w/d{i}/v") for i in range(fs.MAX_OPEN_DIRS * 2)]


def test_directory_fds_are_bounded_and_closed(wide: Path) -> None:
    before = open_fds()
    ctx = ReadContext(HostRoot.at(wide), "t")
    assert read_all(ctx) == list(range(fs.MAX_OPEN_DIRS * 2))
    assert open_fds() - before <= fs.MAX_OPEN_DIRS + 8
    assert read_all(ctx) == list(range(fs.MAX_OPEN_DIRS * 2))  # evicted directories reopen
    ctx.close()
    assert open_fds() == before
    assert ctx.integer("sys/w/d3/v") == 3  # usable after close
    with ctx:
        pass
    assert open_fds() == before


@pytest.mark.parametrize("drop", [lambda ctx: None, lambda ctx: ctx.__exit__(None, None, None)])
def test_fds_are_closed_when_the_context_goes(wide: Path, drop: Callable[[ReadContext], None]) -> None:
    before = open_fds()
    ctx = ReadContext(HostRoot.at(wide), "t")
    read_all(ctx)
    drop(ctx)
    del ctx
    gc.collect()
    assert open_fds() == before


def test_contexts_kept_alive_do_not_pile_up_fds(wide: Path) -> None:
    """A caller that keeps finished contexts (a future holding its result) does not
    keep every context's fds: idle contexts are swept past ``SWEEP_AT``."""
    before = open_fds()
    kept = []
    for _ in range(12):
        ctx = ReadContext(HostRoot.at(wide), "t")
        read_all(ctx)
        kept.append(ctx)
    assert open_fds() - before <= fs.SWEEP_AT + 2 * (fs.MAX_OPEN_DIRS + 8)
    assert all(read_all(c) == list(range(fs.MAX_OPEN_DIRS * 2)) for c in kept[:2])  # a swept context reopens
    for c in kept:
        c.close()
    assert open_fds() == before


def test_live_root_opens_by_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under "/" reads are plain absolute opens: no directory fd, nothing to close."""
    (tmp_path / "f").write_text("x\n")
    seen: list[str] = []
    host = HostRoot.at("/")
    real = fs.read_bounded

    def spy(path: str, max_bytes: int = fs.MAX_ATTR_BYTES) -> bytes:
        seen.append(type(path).__name__)
        return real(path, max_bytes)

    monkeypatch.setattr(fs, "read_bounded", spy)
    before = open_fds()
    ctx = ReadContext(host, "t")
    assert ctx.text(tmp_path / "f") == "x"
    assert seen == ["str"] and open_fds() == before


def test_a_swept_context_never_closes_fds_twice(wide: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once swept, a context's old fd numbers belong to whoever opens next: neither its
    finalizer nor its close() may close them again."""
    monkeypatch.setattr(fs, "SWEEP_AT", 0)
    a = ReadContext(HostRoot.at(wide), "a")
    assert a.integer("sys/w/d1/v") == 1
    b = ReadContext(HostRoot.at(wide), "b")
    assert b.integer("sys/w/d2/v") == 2  # b starts holding fds: idle a is swept
    (tmp_path / "mine").write_text("still open\n")
    mine = [os.open(tmp_path / "mine", os.O_RDONLY) for _ in range(4)]  # reuse a's numbers
    try:
        a.close()
        del a
        gc.collect()
        assert all(os.pread(fd, 5, 0) == b"still" for fd in mine)
    finally:
        for fd in mine:
            os.close(fd)
    assert b.integer("sys/w/d2/v") == 2
    b.close()
