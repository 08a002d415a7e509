"""The node's software setup: /etc/nccl.conf read by NCCL's rules (real files:
tests/fixtures/nccl-conf, SOURCES.md) and the RDMA stack's versions (the mlx5_core module
version, rdma-core from libibverbs' link), and both in a collected snapshot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentd.collection.collector import PROBE_TIERS, collect_once
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot, ReadContext
from agentd.host.ncclconf import MAX_BYTES, parse_nccl_conf, read_nccl_conf
from agentd.host.versions import LIB_DIRS, rdma_core_version, read_versions
from agentd.model import NcclConf, SoftwareVersions
from tests.support.fixtures import FIXTURES

NCCL_CONF = FIXTURES / "nccl-conf"


def _ctx(root: Path) -> ReadContext:
    return ReadContext(HostRoot.at(root), "system")


def _write(root: Path, rel: str, data: bytes) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


# ---------------------------------------------------------------------------
# /etc/nccl.conf


def test_real_azure_ndv5_file(tmp_path):
    _write(tmp_path, "etc/nccl.conf", (NCCL_CONF / "azure-ndv5.nccl.conf").read_bytes())
    ctx = _ctx(tmp_path)
    assert read_nccl_conf(ctx) == NcclConf(path="etc/nccl.conf", variables={
        "NCCL_IB_PCI_RELAXED_ORDERING": "1",
        "NCCL_TOPO_FILE": "/opt/microsoft/ndv5/topo.xml",
        "NCCL_IGNORE_CPU_AFFINITY": "1",
    })
    assert ctx.errors == []


def test_real_docs_example_value_starting_with_equals(tmp_path):
    # the value is everything after the first '=': "=ens1f0" (exact interface-name match)
    _write(tmp_path, "etc/nccl.conf", (NCCL_CONF / "nccl-docs-example.nccl.conf").read_bytes())
    conf = read_nccl_conf(_ctx(tmp_path))
    assert conf is not None and conf.variables == {"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "=ens1f0"}


def test_nccl_rules_comments_first_assignment_and_other_keys():
    text = (
        b"# RoCE fabric\n"
        b"NCCL_IB_TC=106\n"
        b"  # indented: not a comment to NCCL, and no '=' -> skipped\n"
        b"NCCL_IB_TC=0\n"  # setenv(..., 0): the first assignment stays
        b"CUDA_DEVICE_ORDER=PCI_BUS_ID\n"  # not NCCL's: not kept
        b" NCCL_IB_SL=3\n"  # a key with a leading space is another variable
        b"NCCL_IB_HCA=mlx5_0,mlx5_1 \n"  # values are not trimmed
        b"NCCL_DEBUG=INFO\x00ignored\n"  # C strings end at NUL
        b"NCCL_NET_GDR_LEVEL\n"  # no '='
        b"NCCL_IB_GID_INDEX=3"  # no final newline
    )
    variables, bad = parse_nccl_conf(text)
    assert variables == {"NCCL_IB_TC": "106", "NCCL_IB_HCA": "mlx5_0,mlx5_1 ", "NCCL_DEBUG": "INFO", "NCCL_IB_GID_INDEX": "3"}
    assert bad == []


def test_the_packages_symlink_is_followed_and_a_dangling_one_is_no_file(tmp_path):
    # packaging/deb/postinst: /etc/nccl.conf -> nccl/nccl.conf (agentd writes it when nccl.write_conf is on)
    (tmp_path / "etc/nccl").mkdir(parents=True)
    os.symlink("nccl/nccl.conf", tmp_path / "etc/nccl.conf")
    ctx = _ctx(tmp_path)
    assert read_nccl_conf(ctx) is None and ctx.errors == []
    (tmp_path / "etc/nccl/nccl.conf").write_bytes(b"NCCL_IB_TC=106\n")
    ctx = _ctx(tmp_path)
    assert read_nccl_conf(ctx) == NcclConf(path="etc/nccl.conf", variables={"NCCL_IB_TC": "106"})
    assert ctx.errors == []


def test_a_link_out_of_the_root_is_refused(tmp_path):
    outside = tmp_path / "outside.conf"
    outside.write_bytes(b"NCCL_IB_TC=106\n")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    os.symlink(str(outside), root / "etc/nccl.conf")
    ctx = _ctx(root)
    assert read_nccl_conf(ctx) is None
    assert [e.kind for e in ctx.errors] == ["escape"]


def test_absent_file_is_none_and_no_error(tmp_path):
    ctx = _ctx(tmp_path)
    assert read_nccl_conf(ctx) is None and ctx.errors == []


def test_empty_file_is_a_conf_without_variables(tmp_path):
    _write(tmp_path, "etc/nccl.conf", b"")
    assert read_nccl_conf(_ctx(tmp_path)) == NcclConf(path="etc/nccl.conf")


def test_non_utf8_line_is_skipped_with_an_error(tmp_path):
    _write(tmp_path, "etc/nccl.conf", b"NCCL_IB_TC=106\nNCCL_SOCKET_IFNAME=\xff\xfe\n")
    ctx = _ctx(tmp_path)
    conf = read_nccl_conf(ctx)
    assert conf is not None and conf.variables == {"NCCL_IB_TC": "106"}
    assert [(e.path, e.kind) for e in ctx.errors] == [("etc/nccl.conf", "unparsable")]
    assert "line 2" in ctx.errors[0].detail


def test_huge_file_is_read_to_the_bound(tmp_path):
    _write(tmp_path, "etc/nccl.conf", b"NCCL_IB_TC=106\n" + b"# padding\n" * (MAX_BYTES // 10 + 10) + b"NCCL_IB_SL=3\n")
    ctx = _ctx(tmp_path)
    conf = read_nccl_conf(ctx)
    assert conf is not None and conf.variables == {"NCCL_IB_TC": "106"}
    assert [(e.path, e.kind) for e in ctx.errors] == [("etc/nccl.conf", "unparsable")]


def test_fifo_and_directory_do_not_hang_or_raise(tmp_path):
    (tmp_path / "etc").mkdir()
    os.mkfifo(tmp_path / "etc/nccl.conf")
    assert read_nccl_conf(_ctx(tmp_path)) == NcclConf(path="etc/nccl.conf")  # no writer: empty, at once
    os.unlink(tmp_path / "etc/nccl.conf")
    (tmp_path / "etc/nccl.conf").mkdir()
    ctx = _ctx(tmp_path)
    assert read_nccl_conf(ctx) is None
    assert [e.kind for e in ctx.errors] == ["unreadable"]


# ---------------------------------------------------------------------------
# versions


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("libibverbs.so.1.14.50.0", "50.0"),  # Ubuntu 24.04, rdma-core 50.0
        ("libibverbs.so.1.14.48.0", "48.0"),  # RHEL
        ("libibverbs.so.1.0.0", None),  # pre-rdma-core libibverbs: no rdma-core version in it
        ("libibverbs.so.1", None),
        ("libmlx5.so.1.24.50.0", None),
    ],
)
def test_rdma_core_version_from_the_file_name(name, version):
    assert rdma_core_version(name) == version


def _ubuntu_stack(root: Path, libdir: str = "usr/lib/x86_64-linux-gnu", mlx5: bytes | None = b"5.8-4.1.5\n") -> None:
    (root / libdir).mkdir(parents=True)
    (root / libdir / "libibverbs.so.1.14.50.0").write_bytes(b"\x7fELF")
    os.symlink("libibverbs.so.1.14.50.0", root / libdir / "libibverbs.so.1")
    if mlx5 is not None:
        _write(root, "sys/module/mlx5_core/version", mlx5)


def test_ofed_node_versions(tmp_path):
    _ubuntu_stack(tmp_path)
    ctx = _ctx(tmp_path)
    assert read_versions(ctx) == SoftwareVersions(
        mlx5_core="5.8-4.1.5", rdma_core="50.0", rdma_core_library="usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0")
    assert ctx.errors == []


@pytest.mark.parametrize("libdir", LIB_DIRS)
def test_every_library_directory_is_looked_in(tmp_path, libdir):
    _ubuntu_stack(tmp_path, libdir, mlx5=None)
    v = read_versions(_ctx(tmp_path))
    assert (v.rdma_core, v.rdma_core_library, v.mlx5_core) == ("50.0", f"{libdir}/libibverbs.so.1.14.50.0", None)


def test_the_link_alone_is_enough(tmp_path):
    # a capture keeps the link, not the library it names
    (tmp_path / "usr/lib64").mkdir(parents=True)
    os.symlink("libibverbs.so.1.14.48.0", tmp_path / "usr/lib64/libibverbs.so.1")
    assert read_versions(_ctx(tmp_path)).rdma_core == "48.0"


def test_inbox_node_without_rdma_core_has_no_versions(tmp_path):
    (tmp_path / "sys/module/mlx5_core").mkdir(parents=True)  # the kernel's driver: no version file
    ctx = _ctx(tmp_path)
    assert read_versions(ctx) == SoftwareVersions() and ctx.errors == []


def test_a_link_leaving_the_root_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    (root / "usr").mkdir(parents=True)
    os.symlink(str(outside), root / "usr/lib64")  # an absolute link: out of the root
    (outside / "libibverbs.so.1.14.50.0").write_bytes(b"")
    os.symlink("libibverbs.so.1.14.50.0", outside / "libibverbs.so.1")
    ctx = _ctx(root)
    assert read_versions(ctx).rdma_core is None
    assert [e.kind for e in ctx.errors] == ["escape"]


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"\xff\xfe\n", "unparsable"),
        (b"5.8 -4.1.5 garbage\n", "unparsable"),
        (b"5" * 4096, "unparsable"),
        (b"\n", None),  # empty: no version, no error
    ],
)
def test_hostile_mlx5_core_version(tmp_path, data, kind):
    _write(tmp_path, "sys/module/mlx5_core/version", data)
    ctx = _ctx(tmp_path)
    assert read_versions(ctx).mlx5_core is None
    assert [e.kind for e in ctx.errors] == ([kind] if kind else [])


# ---------------------------------------------------------------------------
# in the snapshot


def test_snapshot_carries_nccl_conf_and_versions_from_the_slow_system_probe(tmp_path):
    _ubuntu_stack(tmp_path)
    _write(tmp_path, "etc/nccl.conf", b"NCCL_IB_TC=106\n")
    snap = collect_once(HostRoot.at(tmp_path), AgentConfig(host_root=tmp_path))
    assert snap.nccl_conf == NcclConf(path="etc/nccl.conf", variables={"NCCL_IB_TC": "106"})
    assert (snap.versions.mlx5_core, snap.versions.rdma_core) == ("5.8-4.1.5", "50.0")
    assert PROBE_TIERS["system"] == "slow"


def test_snapshot_of_a_bare_root_has_neither(tmp_path):
    (tmp_path / "sys").mkdir()
    snap = collect_once(HostRoot.at(tmp_path), AgentConfig(host_root=tmp_path))
    assert snap.nccl_conf is None and snap.versions == SoftwareVersions()
