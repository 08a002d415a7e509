"""No read under a host root returns data from outside it, and agentd/ runs no shell.

Each case plants a symlink in a copy of a simulated node: class entries and PCI devices
pointing out of the root (absolute, ``../`` chains, loops), attribute files linked to an
outside "shadow" file, and directories on the read path swapped for links to outside
copies. Every outside file holds MARKER; it must appear nowhere in the snapshot JSON
(values, names, error details), no probe may fail, and escapes are typed ``escape``.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
from pathlib import Path

import pytest

from agentd.collection.collector import collect_once
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot, ReadContext
from agentd.model import NodeSnapshot

build = pytest.importorskip("agentd.sim.build")

MARKER = "AGENTD-OUTSIDE-7f3c9e"
PKG = Path(__file__).resolve().parents[2] / "agentd"
IB = "sys/class/infiniband/mlx5_0"
NET = "sys/class/net/eno1"
PCI = "sys/bus/pci/devices/0000:02:00.0"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build.build_tree("pcie-4gpu", tmp_path_factory.mktemp("pristine") / "root")


def poison(d: Path) -> None:
    """Every file under d holds MARKER, in a shape its reader would accept."""
    for dirpath, _, files in os.walk(d):
        for name in files:
            p = Path(dirpath, name)
            if p.is_symlink():
                continue
            if name == "nvml.json":
                p.write_text(json.dumps({"driver_version": MARKER, "gpus": []}))
            elif "ethtool" in dirpath:
                p.write_text(f"NIC statistics:\n     {MARKER}: 1\n")
            else:
                p.write_text(f"{MARKER}\n")


class Node:
    def __init__(self, root: Path, outside: Path):
        self.root, self.outside = root, outside
        (outside / "shadow").write_text(f"root:{MARKER}:0:0:::\n")

    def real(self, rel: str) -> Path:
        return Path(os.path.realpath(self.root / rel))

    def outside_copy(self, rel: str) -> Path:
        dst = self.outside / rel.replace("/", "_")
        shutil.copytree(self.real(rel), dst, symlinks=True)
        poison(dst)
        return dst

    def link(self, rel: str, target: Path | str, *, relative: bool = False) -> None:
        """Make root/rel (resolved through existing links) a symlink to target."""
        link = self.real(os.path.dirname(rel)) / os.path.basename(rel)
        if link.is_symlink() or link.is_file():
            link.unlink()
        elif link.is_dir():
            shutil.rmtree(link)
        os.symlink(os.path.relpath(target, link.parent) if relative else target, link)

    def swap_dir(self, rel: str) -> None:
        self.link(rel, self.outside_copy(rel))

    def collect(self) -> NodeSnapshot:
        return collect_once(HostRoot.at(self.root), AgentConfig(host_root=self.root))


@pytest.fixture
def node(pristine: Path, tmp_path: Path) -> Node:
    shutil.copytree(pristine, tmp_path / "root", symlinks=True)
    (tmp_path / "outside").mkdir()
    return Node(tmp_path / "root", tmp_path / "outside")


def assert_sealed(snap: NodeSnapshot) -> None:
    failed = [f"{p.name}: {p.error}" for p in snap.probes if not p.ok]
    assert not failed, f"a reader raised: {failed}"
    assert MARKER not in snap.model_dump_json(), "content from outside the host root reached the snapshot"


def escapes(snap: NodeSnapshot) -> set[str]:
    return {e.path for e in snap.read_errors if e.kind == "escape"}


# -- entries that point out of the root: refused with an `escape` error -------------------

ENTRY_LINKS: list[tuple[str, str, str, bool]] = [  # (id, entry, directory copied outside, relative)
    ("net-absolute", "sys/class/net/evil0", NET, False),
    ("net-dotdot", "sys/class/net/evil1", NET, True),
    ("ib-absolute", "sys/class/infiniband/mlx5_9", IB, False),
    ("ib-dotdot", "sys/class/infiniband/mlx5_8", IB, True),
    ("pci-absolute", "sys/bus/pci/devices/0000:99:00.0", PCI, False),
    ("pci-dotdot", "sys/bus/pci/devices/0000:98:00.0", PCI, True),
]


@pytest.mark.parametrize("entry,source,relative", [c[1:] for c in ENTRY_LINKS], ids=[c[0] for c in ENTRY_LINKS])
def test_entry_links_out_of_the_root_are_refused(node: Node, entry: str, source: str, relative: bool) -> None:
    node.link(entry, node.outside_copy(source), relative=relative)
    snap = node.collect()
    assert_sealed(snap)
    assert entry in escapes(snap)


@pytest.mark.parametrize("target", ["/etc", "../../../../../../../../../../etc", "/"])
def test_entries_to_the_real_etc_are_refused(node: Node, target: str) -> None:
    for entry in ("sys/class/net/etc0", "sys/class/infiniband/etc1", "sys/bus/pci/devices/0000:97:00.0"):
        os.symlink(target, node.root / entry)
    snap = node.collect()
    assert_sealed(snap)
    assert {"sys/class/net/etc0", "sys/class/infiniband/etc1", "sys/bus/pci/devices/0000:97:00.0"} <= escapes(snap)


# -- attribute files that are symlinks: never followed -------------------------------------

ATTRIBUTES = [
    f"{NET}/mtu", f"{NET}/address", f"{NET}/operstate",
    f"{IB}/fw_ver", f"{IB}/ports/1/state", f"{IB}/ports/1/rate", f"{IB}/ports/1/counters/port_rcv_data", f"{IB}/ports/1/gids/0",
    f"{PCI}/class", f"{PCI}/numa_node", f"{PCI}/current_link_speed",
    "proc/cpuinfo", "proc/modules", "proc/driver/nvidia/version", "sys/module/nvidia/version",
    ".agentd/nvml.json", ".agentd/ethtool/eno1",
]


@pytest.mark.parametrize("attr", ATTRIBUTES)
@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "dotdot"])
def test_attribute_symlinks_are_not_followed(node: Node, attr: str, relative: bool) -> None:
    if not (node.root / attr).exists():
        pytest.skip(f"{attr} not in this profile")
    node.link(attr, node.outside / "shadow", relative=relative)
    snap = node.collect()
    assert_sealed(snap)
    kinds = {e.kind for e in snap.read_errors if e.path.endswith(os.path.basename(attr))}
    assert kinds == {"escape"}, snap.read_errors


def test_pci_config_symlink_is_not_followed(node: Node) -> None:
    node.link(f"{PCI}/config", node.outside / "shadow")
    assert_sealed(node.collect())


# -- loops: no hang, no crash, the rest of the node still read ---------------------------


def test_symlink_loops(node: Node, pristine: Path) -> None:
    before = node.collect()
    os.symlink("loop0", node.root / "sys/class/net/loop0")
    os.symlink("mlx5_7", node.root / "sys/class/infiniband/mlx5_6")
    os.symlink("mlx5_6", node.root / "sys/class/infiniband/mlx5_7")
    os.symlink("../devices/0000:96:00.0", node.root / "sys/bus/pci/devices/0000:96:00.0")
    node.link(f"{IB}/ports/1/phys_state", "phys_state")
    snap = node.collect()
    assert_sealed(snap)
    assert [h.name for h in snap.hcas] == [h.name for h in before.hcas]
    assert [n.name for n in snap.netdevs] == [n.name for n in before.netdevs]
    assert [d.bdf for d in snap.pci] == [d.bdf for d in before.pci]
    assert f"{IB}/ports/1/phys_state" in escapes(snap)  # ELOOP on the attribute itself


# -- directories on the read path swapped for links to outside copies ----------------------

DIR_LINKS = [
    f"{IB}/ports",
    f"{IB}/ports/1/counters",
    f"{IB}/ports/1/gids",
    f"{IB}/device/net",
    "proc",
    "proc/sys/kernel",
    "sys/devices/system/node",
    "sys/module/nvidia",
    ".agentd",
    ".agentd/ethtool",
    "sys/class/net",
    "sys/bus/pci/devices",
]


@pytest.mark.parametrize("rel", DIR_LINKS)
def test_directory_links_out_of_the_root(node: Node, rel: str) -> None:
    if not node.real(rel).is_dir():
        pytest.skip(f"{rel} not in this profile")
    node.swap_dir(rel)
    snap = node.collect()
    assert_sealed(snap)
    assert escapes(snap), "a directory that leads outside the root must be reported as an escape"


def test_whole_sys_linked_outside(node: Node) -> None:
    node.swap_dir("sys")
    snap = node.collect()
    assert_sealed(snap)
    assert "sys/class/net" in escapes(snap)


# -- ReadContext itself: every access below a directory that leaves the root ---------------


@pytest.fixture
def linked(tmp_path: Path) -> tuple[ReadContext, Path]:
    """root/sys/class/x/ports -> outside (absolute), root/sys/up -> ../.. (dot-dot), and an
    inside link root/sys/class/y -> ../devices/y that must keep working."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (outside / "1").mkdir(parents=True)
    (outside / "1" / "state").write_text(f"{MARKER}\n")
    (outside / "1" / "driver").symlink_to(f"../../{MARKER}")
    (root / "sys/class/x").mkdir(parents=True)
    (root / "sys/class/x/ports").symlink_to(outside)
    (root / "sys/up").symlink_to("../..")
    (root / "sys/devices/y").mkdir(parents=True)
    (root / "sys/devices/y/mtu").write_text("9000\n")
    (root / "sys/class/y").symlink_to("../devices/y")
    return ReadContext(HostRoot.at(root), "t"), root


def test_read_context_refuses_reads_below_an_outside_directory(linked: tuple[ReadContext, Path]) -> None:
    ctx, _ = linked
    assert ctx.raw("sys/class/x/ports/1/state") is None
    assert ctx.integer("sys/class/x/ports/1/state") is None  # no "expected an integer, got '<outside>'"
    assert ctx.text("sys/up/outside/1/state") is None
    assert ctx.raw("sys/../../outside/1/state") is None
    assert ctx.listdir("sys/class/x/ports") == [] and ctx.listdir("sys/class/x/ports/1") == []
    assert ctx.readlink_name("sys/class/x/ports/1/driver") is None
    assert ctx.exists("sys/class/x/ports/1/state") is False
    assert ctx.errors and {e.kind for e in ctx.errors} == {"escape"}
    assert MARKER not in repr(ctx.errors)


def test_read_context_follows_links_that_stay_inside(linked: tuple[ReadContext, Path]) -> None:
    ctx, root = linked
    assert ctx.integer("sys/class/y/mtu") == 9000
    assert ctx.listdir("sys/class/y") == ["mtu"]
    assert ctx.integer(root / "sys/class/y/mtu") == 9000  # absolute paths under the root too
    assert ctx.errors == []


def test_read_context_root_given_through_a_symlink(linked: tuple[ReadContext, Path], tmp_path: Path) -> None:
    _, root = linked
    alias = tmp_path / "alias"
    alias.symlink_to(root)
    ctx = ReadContext(HostRoot(alias), "t")  # not resolved, unlike HostRoot.at
    assert ctx.integer("sys/class/y/mtu") == 9000
    assert ctx.raw("sys/class/x/ports/1/state") is None
    assert [e.kind for e in ctx.errors] == ["escape"]


# -- no shell, and no process spawning outside agentd/host/ ------------------------------

SPAWN_CALLS = {("os", n) for n in ("system", "popen", "execv", "execve", "execvp", "execvpe", "execl", "execlp", "spawnv", "spawnve", "spawnvp", "spawnl", "posix_spawn", "posix_spawnp", "fork", "forkpty")}
SPAWN_CALLS |= {("asyncio", "create_subprocess_shell"), ("asyncio", "create_subprocess_exec"), ("pty", "spawn")}


def _violations(source: str, rel: str) -> list[str]:
    in_host = rel.startswith("agentd/host/")
    out = []
    for n in ast.walk(ast.parse(source, rel)):
        if isinstance(n, ast.keyword) and n.arg == "shell" and not (isinstance(n.value, ast.Constant) and n.value.value is False):
            out.append(f"{rel}:{n.value.lineno}: shell= other than False")
        if in_host:
            continue
        if isinstance(n, ast.Import) and any(a.name.split(".")[0] in ("subprocess", "pty") for a in n.names):
            out.append(f"{rel}:{n.lineno}: imports subprocess/pty outside agentd/host/")
        if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in ("subprocess", "pty"):
            out.append(f"{rel}:{n.lineno}: imports from subprocess/pty outside agentd/host/")
        if isinstance(n, ast.ImportFrom) and n.module in ("os", "asyncio") and {a.name for a in n.names} & {c for _, c in SPAWN_CALLS}:
            out.append(f"{rel}:{n.lineno}: imports a process-spawning function outside agentd/host/")
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and (n.value.id, n.attr) in SPAWN_CALLS:
            out.append(f"{rel}:{n.lineno}: {n.value.id}.{n.attr} outside agentd/host/")
    return out


def test_no_shell_and_no_process_spawning_outside_host() -> None:
    sources = sorted(PKG.rglob("*.py"))
    assert len(sources) > 20
    found = [v for p in sources for v in _violations(p.read_text(), p.relative_to(PKG.parent).as_posix())]
    assert not found, "\n".join(found)


def test_the_source_check_catches_what_it_should() -> None:
    bad = "import subprocess\nimport os\nfrom asyncio import create_subprocess_exec\nsubprocess.run('x', shell=True)\nos.system('x')\n"
    assert len(_violations(bad, "agentd/service/x.py")) == 4
    assert len(_violations(bad, "agentd/host/x.py")) == 1  # shell=True is refused everywhere
    assert _violations('"""No `shell=True`, no os.system."""\n', "agentd/x.py") == []  # docstrings are not code
