"""Host-root file access: bounded, typed errors, no escape from the root."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from agentd.host import fs
from agentd.host.fs import HostRoot, ReadContext, parse_int
from tests.support.recorded_root import answers_dir


@pytest.fixture
def root(tmp_path):
    (tmp_path / "sys/class/x").mkdir(parents=True)
    (tmp_path / "sys/class/x/nonl").write_text("4: ACTIVE")
    (tmp_path / "sys/class/x/nl").write_text("5: LinkUp\n")
    (tmp_path / "sys/class/x/num").write_text("  42 \n")
    (tmp_path / "sys/class/x/na").write_text("N/A (no PMA)\n")
    (tmp_path / "sys/class/x/bad").write_text("forty\n")
    (tmp_path / "sys/class/x/bin").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "sys/class/x/big").write_text("a" * 200_000)
    return tmp_path


def test_text_values_and_quirks(root):
    ctx = ReadContext(HostRoot.at(root), "t")
    assert ctx.text("sys/class/x/nonl") == "4: ACTIVE"
    assert ctx.text("/sys/class/x/nl") == "5: LinkUp"
    assert ctx.integer("sys/class/x/num") == 42
    assert ctx.integer("sys/class/x/na") is None
    assert ctx.errors == []
    assert len(ctx.text("sys/class/x/big")) == fs.MAX_ATTR_BYTES
    assert ctx.files_read == 5


def test_typed_errors(root):
    ctx = ReadContext(HostRoot.at(root), "t")
    assert ctx.integer("sys/class/x/bad") is None
    assert ctx.text("sys/class/x/bin") is None
    assert ctx.text("sys/class/x/absent") is None  # optional: no error
    assert ctx.text("sys/class/x/absent2", required=True) is None
    kinds = [(e.path, e.kind) for e in ctx.errors]
    assert kinds == [
        ("sys/class/x/bad", "unparsable"),
        ("sys/class/x/bin", "unparsable"),
        ("sys/class/x/absent2", "missing"),
    ]
    assert all(e.source == "t" for e in ctx.errors)


def test_einval_is_an_empty_value_not_an_error(root, monkeypatch):
    def einval(path, max_bytes=0):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(fs, "read_bounded", einval)
    ctx = ReadContext(HostRoot.at(root), "t")
    assert ctx.text("sys/class/x/nl") is None
    assert ctx.errors == []


def test_io_error_is_unreadable(root, monkeypatch):
    def eio(path, max_bytes=0):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(fs, "read_bounded", eio)
    ctx = ReadContext(HostRoot.at(root), "t")
    assert ctx.text("sys/class/x/nl") is None
    assert [e.kind for e in ctx.errors] == ["unreadable"]


def test_symlinks_may_not_escape_the_root(root, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    (outside / "secret").write_text("s3cret")
    os.symlink(outside, root / "sys/class/x/evil_dir")
    os.symlink(outside / "secret", root / "sys/class/x/evil_file")
    os.symlink("../x", root / "sys/class/x/inside")
    ctx = ReadContext(HostRoot.at(root), "t")
    assert ctx.resolve("sys/class/x/evil_dir") is None
    assert ctx.text("sys/class/x/evil_file") is None  # last component symlink refused
    assert ctx.resolve("sys/class/x/inside") == (root / "sys/class/x").resolve()
    assert [e.kind for e in ctx.errors] == ["escape", "escape"]


def test_readlink_name_of_dangling_link(root):
    os.symlink("../../../bus/pci/drivers/mlx5_core", root / "sys/class/x/driver")
    ctx = ReadContext(HostRoot.at(root), "t")
    assert ctx.readlink_name("sys/class/x/driver") == "mlx5_core"
    assert ctx.readlink_name("sys/class/x/nl") is None


@pytest.mark.parametrize("s, v", [("0x15b3", 0x15B3), ("12", 12), ("-1", -1), ("", None), ("N/A", None), ("x", None)])
def test_parse_int(s, v):
    assert parse_int(s) == v


def test_live_root_flags(tmp_path):
    assert HostRoot.at("/").is_live
    h = HostRoot.at(tmp_path)
    assert not h.is_live and not h.is_simulated
    answers_dir(tmp_path)
    assert not h.is_simulated  # the mode is decided when the root is opened
    assert HostRoot.at(tmp_path).is_simulated


def test_host_root_resolve_follows_links_inside_only(root, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    os.symlink("x", root / "sys/class/y")
    os.symlink(outside, root / "sys/class/out")
    os.symlink("../../..", root / "sys/class/up")
    host = HostRoot.at(root)
    assert host.resolve("sys/class/y") == host.root / "sys/class/x"
    assert host.resolve("/sys/class/y/nl") == host.root / "sys/class/x/nl"  # a file at the end
    for link in ("out", "up/.."):
        with pytest.raises(fs.ReadFailure) as e:
            host.resolve(f"sys/class/{link}")
        assert e.value.kind == "escape"
    with pytest.raises(FileNotFoundError):
        host.resolve("sys/class/absent")


def test_resolve_under_the_live_root_matches_realpath(root):
    os.symlink("../class/x", root / "sys/class/rel")
    os.symlink(root / "sys/class/x", root / "sys/class/abs")
    os.symlink("../../../../../../../../../../..", root / "sys/class/top")
    with ReadContext(HostRoot.at("/"), "t") as ctx:
        for link in ("rel", "abs", "top", "x"):
            assert ctx.resolve(root / "sys/class" / link) == Path(os.path.realpath(root / "sys/class" / link))
        assert ctx.resolve(root / "sys/class/absent") is None
        assert ctx.errors == []
