"""Topology XML rendering: NCCL's tree shape, attributes and lexical form."""

import xml.etree.ElementTree as ET

from agentd.model import Gpu, Hca, NodeSnapshot, SystemInfo
from agentd.nccl.topo import build_topo, nic_busid, render_topo_xml
from agentd.nccl.xmlcheck import check_topo_xml
from tests.support.fixtures import NCCL_TOPO
from tests.support.nccl_snapshots import BRIDGE, GEN4, bdf, ib_node, pci, pcie_node, roce_node, roles_for


def render(snap):
    return render_topo_xml(snap, roles_for(snap))


def tree(xml_text):
    """{numaid: sorted [(switch class, sorted endpoint classes) or endpoint class]}."""
    root = ET.fromstring(xml_text)
    assert root.tag == "system" and root.get("version") == "1"
    out = {}
    for cpu in root.findall("cpu"):
        items = []
        for p in cpu.findall("pci"):
            kids = p.findall("pci")
            items.append((p.get("class"), tuple(sorted(k.get("class") for k in kids))) if kids else p.get("class"))
        out[cpu.get("numaid")] = sorted(items, key=repr)
    return out


def busids(xml_text):
    return [e.get("busid") for e in ET.fromstring(xml_text).iter("pci")]


def test_ib_node_shape():
    snap = ib_node()
    xml = render(snap)
    pair = ("0x060400", ("0x020700", "0x030200"))
    assert tree(xml) == {"0": sorted([pair] * 4 + ["0x020000"], key=repr), "1": [pair] * 4}
    ids = busids(xml)
    # switch upstream ports only: no root ports, no downstream ports
    assert "0000:15:00.0" in ids and "0000:14:01.0" not in ids and "0000:16:00.0" not in ids
    # the dual-port storage NIC appears once, as function 0; the BMC VGA device not at all
    assert "0000:10:00.0" in ids and "0000:10:00.1" not in ids and "0000:03:00.0" not in ids
    assert check_topo_xml(xml, existing_bus_ids={d.bdf for d in snap.pci}) == []


def test_exact_lines_match_nccl_dialect():
    xml = render(ib_node())
    lines = xml.splitlines()
    assert lines[0].startswith("<!-- ") and not xml.startswith("<?xml")
    assert '<system version="1">' in lines
    assert (
        '  <cpu numaid="0" affinity="00000000,000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff" arch="x86_64"'
        ' vendor="GenuineIntel" familyid="6" modelid="143">'
    ) in lines
    assert (
        '      <pci busid="0000:18:00.0" class="0x030200" vendor="0x10de" device="0x2330" subsystem_vendor="0x10de"'
        ' subsystem_device="0x16c1" link_speed="32.0 GT/s PCIe" link_width="16"/>'
    ) in lines
    assert "\t" not in xml and "'" not in xml and xml.endswith("</system>\n")
    for line in lines:
        assert (len(line) - len(line.lstrip(" "))) % 2 == 0
        assert line.strip().count("<") == 1


def test_roce_and_pcie_nodes():
    quad = ("0x060400", ("0x020000", "0x020000", "0x030200", "0x030200"))
    assert tree(render(roce_node())) == {"0": [quad, quad], "1": [quad, quad]}
    # PCIe node: GPUs and the NIC on root ports hang directly off their socket's cpu
    xml = render(pcie_node())
    assert tree(xml) == {"0": ["0x030000", "0x030000"], "1": ["0x020700", "0x030000", "0x030000"]}
    assert 'busid="0000:ca:00.0" class="0x020700"' in xml
    assert check_topo_xml(xml, existing_bus_ids={d.bdf for d in pcie_node().pci}) == []


def test_link_speed_is_min_of_device_and_sysfs_parent():
    xml = render(ib_node())
    # storage NIC: Gen4 device below a Gen5 root port -> the device's Gen4
    assert 'busid="0000:10:00.0" class="0x020000" vendor="0x15b3" device="0x101d" subsystem_vendor="0x15b3" subsystem_device="0x16c1" link_speed="16.0 GT/s PCIe" link_width="16"' in xml
    # a Gen5 GPU below a Gen4 x8 downstream port -> the port's values
    rp, usp, dsp = bdf(0x40, 1), bdf(0x41), bdf(0x42)
    snap = _single_gpu([pci(rp, BRIDGE, (), 0), pci(usp, BRIDGE, (rp,), 0), pci(dsp, BRIDGE, (rp, usp), 0, speed=GEN4, width=8), pci(bdf(0x43), 0x030200, (rp, usp, dsp), 0)], bdf(0x43))
    xml = render(snap)
    assert 'busid="0000:43:00.0" class="0x030200" vendor="0x10de" device="0x2330" subsystem_vendor="0x10de" subsystem_device="0x16c1" link_speed="16.0 GT/s PCIe" link_width="8"' in xml


def _single_gpu(devs, gpu_bdf, sysinfo=None, hcas=()):
    sysinfo = sysinfo or SystemInfo(arch="x86_64", cpu_vendor="AuthenticAMD", cpu_family=25, cpu_model=17)
    return NodeSnapshot(taken_at=0, host_root="/", system=sysinfo, pci=tuple(devs), gpus=(Gpu(index=0, pci_bus_id=gpu_bdf),), hcas=hcas)


def test_two_level_switch_keeps_both_upstream_ports():
    rp, usp1, dsp1, usp2, dsp2 = bdf(0x20, 1), bdf(0x21), bdf(0x22, 3), bdf(0x23), bdf(0x24, 1)
    devs = [pci(a, BRIDGE, tuple(c), 0) for a, c in ((rp, ()), (usp1, (rp,)), (dsp1, (rp, usp1)), (usp2, (rp, usp1, dsp1)), (dsp2, (rp, usp1, dsp1, usp2)))]
    devs.append(pci(bdf(0x25), 0x030200, (rp, usp1, dsp1, usp2, dsp2), 0))
    root = ET.fromstring(render(_single_gpu(devs, bdf(0x25))))
    outer = root.find("cpu/pci")
    assert outer.get("busid") == usp1
    inner = outer.find("pci")
    assert inner.get("busid") == usp2 and inner.find("pci").get("busid") == bdf(0x25)


def test_vf_and_second_function_use_nccl_merged_busid():
    assert nic_busid("0000:18:00.1") == "0000:18:00.0"
    assert nic_busid("0000:18:02.3") == "0000:18:00.0"
    rp = bdf(0x17, 1)
    devs = [pci(rp, BRIDGE, (), 0), pci(bdf(0x18, 0, 1), 0x020700, (rp,), 0, vendor=0x15B3), pci(bdf(0x19), 0x030200, (rp,), 0)]
    hcas = (Hca(name="mlx5_1", hca_type="MT4129", pci_bus_id=bdf(0x18, 0, 1)),)
    snap = _single_gpu(devs, bdf(0x19), hcas=hcas)
    assert busids(render(snap)) == [bdf(0x18, 0, 0), bdf(0x19)]
    # function 0 does not exist in this snapshot: the checker says so before anything is written
    problems = check_topo_xml(render(snap), existing_bus_ids={d.bdf for d in snap.pci})
    assert any("0000:18:00.0 does not exist" in p for p in problems)


def test_arm64_cpu_has_no_x86_keys_and_unknown_numa_is_minus_one():
    snap = _single_gpu([pci(bdf(0x01), 0x030200, (), None)], bdf(0x01), sysinfo=SystemInfo(arch="aarch64"))
    xml = render(snap)
    assert '<cpu numaid="-1" arch="arm64">' in xml
    assert check_topo_xml(xml) == []


def test_cpu_vendor_as_cpuid_spells_it():
    # /proc/cpuinfo prints Zhaoxin's CPUID vendor "  Shanghai  " trimmed; NCCL matches the 12 bytes
    snap = _single_gpu([pci(bdf(0x01), 0x030200, (), 0)], bdf(0x01), sysinfo=SystemInfo(arch="x86_64", cpu_vendor="Shanghai", cpu_family=7, cpu_model=91))
    xml = render(snap)
    assert 'arch="x86_64" vendor="  Shanghai  " familyid="7" modelid="91"' in xml
    assert check_topo_xml(xml) == []


def test_no_file_when_facts_are_missing():
    snap = ib_node()
    assert build_topo(snap.model_copy(update={"gpus": ()}), roles_for(snap)).reason == "the node has no GPUs"
    assert build_topo(snap.model_copy(update={"pci": ()}), roles_for(snap)).reason == "the snapshot has no PCI data"
    no_arch = snap.model_copy(update={"system": SystemInfo()})
    assert render(no_arch) is None and "architecture" in build_topo(no_arch, roles_for(snap)).reason
    intel_no_model = snap.model_copy(update={"system": SystemInfo(arch="x86_64", cpu_vendor="GenuineIntel")})
    assert "familyid" in build_topo(intel_no_model, roles_for(snap)).reason
    missing_bridge = snap.model_copy(update={"pci": tuple(d for d in snap.pci if d.bdf != "0000:15:00.0")})
    assert "0000:15:00.0" in build_topo(missing_bridge, roles_for(snap)).reason


def test_deterministic_and_order_independent():
    snap = ib_node()
    shuffled = snap.model_copy(update={"pci": tuple(reversed(snap.pci)), "gpus": tuple(reversed(snap.gpus))})
    assert render(snap) == render(shuffled)


def test_old_kernel_and_unknown_speed_strings():
    dev = pci(bdf(0x01), 0x030200, (), 0, speed=("8 GT/s", 8.0))
    assert 'link_speed="8 GT/s"' in render(_single_gpu([dev], bdf(0x01)))
    dev = pci(bdf(0x01), 0x030200, (), 0, speed=("16.0 GT/s", 16.0))  # missing " PCIe": NCCL would read Gen3
    assert 'link_speed="16.0 GT/s PCIe"' in render(_single_gpu([dev], bdf(0x01)))
    dev = pci(bdf(0x01), 0x030200, (), 0).model_copy(update={"max_link_speed": "Unknown", "max_link_speed_gts": None, "max_link_width": None})
    xml = render(_single_gpu([dev], bdf(0x01)))
    assert "link_speed" not in xml and "link_width" not in xml  # left for NCCL to read from sysfs


def test_switch_without_link_capability_gets_what_nccl_writes():
    # a hypervisor hiding the PCIe link capability: sysfs has no max_link_* or says Unknown / 0
    unknown = {"max_link_speed": "Unknown", "max_link_speed_gts": None, "max_link_width": None}
    absent = {"max_link_speed": None, "max_link_speed_gts": None, "max_link_width": 0}
    rp, usp, dsp, gpu = bdf(0x40, 1), bdf(0x41), bdf(0x42), bdf(0x43)
    devs = [
        pci(rp, BRIDGE, (), 0).model_copy(update=absent),
        pci(usp, BRIDGE, (rp,), 0).model_copy(update=unknown),
        pci(dsp, BRIDGE, (rp, usp), 0).model_copy(update=absent),
        pci(gpu, 0x030200, (rp, usp, dsp), 0).model_copy(update=unknown),
    ]
    xml = render(_single_gpu(devs, gpu))
    root = ET.fromstring(xml)
    switch = root.find("cpu/pci")
    assert switch.get("busid") == usp
    # NCCL fails on a file pci above a device without the two; "" and 0 read as Gen3 x16
    assert (switch.get("link_speed"), switch.get("link_width")) == ("", "0")
    leaf = switch.find("pci")
    assert leaf.get("link_speed") is None and leaf.get("link_width") is None  # NCCL fills an endpoint itself
    assert not [p for p in check_topo_xml(xml) if ": error: " in p]


def ndv5_like() -> NodeSnapshot:
    """Azure NDv5's layout with real-looking bus ids: per NUMA node 4 switches, each one
    H100 (0x030200) and one NDR HCA (0x020700)."""
    return ib_node().model_copy(update={"hcas": ib_node().hcas[:8], "pci": tuple(d for d in ib_node().pci if not d.bdf.startswith(("0000:10:", "0000:0f:")))})


def test_same_structure_as_azure_ndv5():
    azure = (NCCL_TOPO / "azure-ndv5-topo.xml").read_text()
    mine = render(ndv5_like())
    assert tree(mine) == tree(azure)
    # and both carry the full cpu attribute set
    for text in (azure, mine):
        for cpu in ET.fromstring(text).iter("cpu"):
            assert {"numaid", "affinity", "arch", "vendor", "familyid", "modelid"} <= set(cpu.keys())
