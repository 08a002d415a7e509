"""`agentd render --host-root T --out-dir D` on trees real nodes give agentd (issue 13): a
kernel without proc/sys/kernel/arch (< 6.1) read through a root that is not live, where
the CPU is known from a real /proc/cpuinfo only (tests/fixtures/cpuinfo, SOURCES.md).

The written XML goes through the port of NCCL's reader and the NCCL-rule check
(agentd.nccl.xmlcheck): no errors means NCCL loads it as written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentd import sim
from agentd.cli import main
from agentd.nccl.xmlcheck import scan_topo_xml
from agentd.nccl.xmlreader import Element, NcclXmlReader
from tests.support.fixtures import FIXTURES

pytestmark = pytest.mark.tree

CPUINFO = FIXTURES / "cpuinfo"
TOPO = "nccl-topo.xml"


@pytest.fixture
def sim_root(tmp_path, monkeypatch) -> Path:
    for key in [k for k in os.environ if k.startswith("AGENTD_")]:
        monkeypatch.delenv(key)
    return sim.build_tree("h100-ib", tmp_path / "root")


def render(root: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    cfg = root.parent / "agentd.toml"
    cfg.write_text("")
    rc = main(["render", "--host-root", str(root), "--out-dir", str(out), "--config", str(cfg)])
    return rc, capsys.readouterr().err


def loaded(xml: str) -> list[Element]:
    """The elements NCCL's reader (the port) loads, after the NCCL-rule check found no error."""
    errors = [i for i in scan_topo_xml(xml) if i.severity == "error"]
    assert errors == []
    reader = NcclXmlReader(xml)
    reader.load(None)
    out: list[Element] = []
    todo = list(reader.top)
    while todo:
        el = todo.pop(0)
        out.append(el)
        todo += el.children
    return out


def without_kernel_arch(root: Path, cpuinfo: str) -> None:
    (root / "proc/sys/kernel/arch").unlink()
    (root / "proc/cpuinfo").write_text((CPUINFO / cpuinfo).read_text())


@pytest.mark.parametrize(
    "cpuinfo, cpu_attrs",
    [
        ("archspec-linux-unknown-sapphirerapids", {"arch": "x86_64", "vendor": "GenuineIntel", "familyid": "6", "modelid": "143"}),
        ("archspec-linux-rocky8.5-zen4", {"arch": "x86_64", "vendor": "AuthenticAMD", "familyid": "25", "modelid": "17"}),
        ("archspec-linux-rhel9-neoverse_v2", {"arch": "arm64"}),
        ("archspec-linux-centos7-power8le", {"arch": "ppc64"}),
    ],
)
def test_cpu_from_cpuinfo_when_kernel_has_no_arch_file(sim_root, tmp_path, capsys, cpuinfo, cpu_attrs):
    without_kernel_arch(sim_root, cpuinfo)
    rc, err = render(sim_root, tmp_path / "out", capsys)
    assert rc == 0, err
    assert "topology XML not written" not in err
    els = loaded((tmp_path / "out" / TOPO).read_text())
    cpus = [el for el in els if el.name == "cpu"]
    assert len(cpus) == 2  # the profile's two sockets
    for cpu in cpus:
        attrs = {k: v for k, v in cpu.attrs if k in ("arch", "vendor", "familyid", "modelid")}
        assert attrs == cpu_attrs  # no x86 keys on arm64 or POWER, as NCCL writes them
    assert sum(el.name == "pci" and el.get("class") == "0x030200" for el in els) == 8


def hide_link_capabilities(root: Path, how: str) -> int:
    """What old kernels and some hypervisors show: no link capability files, or the
    kernel's "Unknown" speed and a 0 width. Returns how many devices were changed."""
    n = 0
    for dirpath, _dirs, files in os.walk(root / "sys/devices"):
        d = Path(dirpath)
        if "max_link_speed" not in files:
            continue
        n += 1
        for kind in ("max", "current"):
            if how == "absent":
                (d / f"{kind}_link_speed").unlink(missing_ok=True)
                (d / f"{kind}_link_width").unlink(missing_ok=True)
            else:
                (d / f"{kind}_link_speed").write_text("Unknown\n")
                (d / f"{kind}_link_width").write_text("0\n")
    return n


@pytest.mark.parametrize("how", ["absent", "unknown"])
@pytest.mark.parametrize(
    "cpuinfo, arch, vendor",
    [
        ("archspec-linux-unknown-sapphirerapids", "x86_64", "GenuineIntel"),
        ("archspec-linux-rocky8.5-zen4", "x86_64", "AuthenticAMD"),
        ("archspec-linux-rhel9-neoverse_v2", "arm64", None),
    ],
)
def test_xml_written_without_link_capabilities(sim_root, tmp_path, capsys, how, cpuinfo, arch, vendor):
    without_kernel_arch(sim_root, cpuinfo)
    assert hide_link_capabilities(sim_root, how) > 20
    out = tmp_path / "out"
    rc, err = render(sim_root, out, capsys)
    assert rc == 0, err
    assert "topology XML not written" not in err
    assert 'link_speed="": NCCL assumes Gen3' in err  # said, not blocking: the node is not sick
    xml = (out / TOPO).read_text()
    els = loaded(xml)
    assert {(el.get("arch"), el.get("vendor")) for el in els if el.name == "cpu"} == {(arch, vendor)}
    switches = [el for el in els if el.name == "pci" and any(c.name == "pci" for c in el.children)]
    assert len(switches) == 8
    for sw in switches:  # what NCCL itself writes where sysfs has nothing
        assert (sw.get("link_speed"), sw.get("link_width")) == ("", "0")
    assert sum(el.name == "pci" and el.get("class") == "0x030200" for el in els) == 8
    assert f"NCCL_TOPO_FILE={out / TOPO}" in (out / "nccl.env").read_text()
