"""The NCCL-rule checker: it must fail where NCCL's own reader fails or misreads."""

import pytest

from agentd.nccl.topo import render_topo_xml
from agentd.nccl.xmlcheck import check_topo_xml, scan_topo_xml
from tests.support.fixtures import NCCL_TOPO
from tests.support.nccl_snapshots import ib_node, roles_for

MINI = """<system version="1">
  <cpu numaid="0" affinity="0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:15:00.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:17:00.0" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16"/>
      <pci busid="0000:18:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"/>
    </pci>
  </cpu>
</system>
"""


def errors(text, **kw):
    return [i for i in scan_topo_xml(text, **kw) if i.severity == "error"]


def only(text, fragment, severity="error", line=None, **kw):
    issues = scan_topo_xml(text, **kw)
    hits = [i for i in issues if fragment in i.message and i.severity == severity]
    assert hits, [str(i) for i in issues]
    if line is not None:
        assert hits[0].line == line, str(hits[0])
    return hits


def test_clean_file_passes():
    assert check_topo_xml(MINI) == []
    assert check_topo_xml(MINI, existing_bus_ids={"0000:15:00.0", "0000:17:00.0", "0000:18:00.0"}) == []


def test_rendered_file_passes():
    snap = ib_node()
    xml = render_topo_xml(snap, roles_for(snap))
    assert check_topo_xml(xml, existing_bus_ids={d.bdf for d in snap.pci}) == []


@pytest.mark.parametrize("name", ["azure-ndv2-topo.xml", "azure-ndv4-topo.xml", "azure-ndv5-topo.xml"])
def test_azure_files_pass(name):
    assert check_topo_xml((NCCL_TOPO / name).read_text()) == []


def test_azure_ncv4_report():
    """NCv4 carries gpu/nvlink/nic/net elements and link_speed="": NCCL parses it, but the
    values override detection. What the checker says, for the record."""
    issues = scan_topo_xml((NCCL_TOPO / "azure-ncv4-topo.xml").read_text())
    kinds = {(i.severity, i.message.split(" ")[0]) for i in issues}
    assert ("error", "<gpu>") in kinds and ("error", "<nvlink>") in kinds
    assert ("error", "<nic>") in kinds and ("error", "<net>") in kinds
    assert any('link_speed=""' in i.message and i.severity == "warning" for i in issues)
    assert not any("expected" in i.message for i in issues)  # lexically fine for NCCL
    print("\n".join(str(i) for i in issues))


def test_prolog():
    only('<?xml version="1.0"?>\n' + MINI, "expected >, got '?'", line=1)


def test_tab_indent():
    only(MINI.replace("  <cpu", "\t<cpu"), "got '\\t'", line=2)


def test_tab_between_attributes():
    only(MINI.replace('busid="0000:17:00.0" class', 'busid="0000:17:00.0"\tclass'), "expected '>', got '\\t'", line=4)


def test_single_quotes_warn():
    hits = only(MINI.replace('version="1"', "version='1'"), "2.27", severity="warning", line=1)
    assert hits


def test_unquoted_value():
    only(MINI.replace('version="1"', "version=1"), "double quotes", line=1)


def test_newline_inside_tag():
    only(MINI.replace('class="0x020700" link_speed', 'class="0x020700"\n      link_speed'), "one line", line=4)


def test_entity():
    only(MINI.replace('vendor="GenuineIntel"', 'vendor="Genuine&amp;Intel"'), "entities", line=2)


def test_too_many_nodes():
    leaves = "".join(f'    <pci busid="0000:{b // 256:02x}:{b % 32:02x}.{b % 8}" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"/>\n' for b in range(300))
    text = '<system version="1">\n  <cpu numaid="0" arch="arm64">\n' + leaves + "  </cpu>\n</system>\n"
    only(text, "fails at 256")


def test_node_headroom_warning():
    leaves = "".join(f'    <pci busid="0000:{b:02x}:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"/>\n' for b in range(200))
    text = '<system version="1">\n  <cpu numaid="0" arch="arm64">\n' + leaves + "  </cpu>\n</system>\n"
    only(text, "little room", severity="warning")
    only(text, "NCCL 2.21-2.27 accept only 128", severity="warning")


def test_octal_numaid():
    only(MINI.replace('numaid="0"', 'numaid="08"'), "octal", line=2)


def test_unknown_bus_id():
    only(MINI, "0000:18:00.0 does not exist", line=5, existing_bus_ids={"0000:15:00.0", "0000:17:00.0"})


def test_attribute_limit():
    extra = " ".join(f'x{i}="1"' for i in range(16))
    only(MINI.replace('<system version="1"', f'<system version="1" {extra}'), "reads 16", line=1)


def test_double_space_is_an_empty_attribute():
    only(MINI.replace('version="1">', 'version="1"  name="x">'), "empty attribute", severity="warning", line=1)


def test_bus_id_format():
    only(MINI.replace("0000:17:00.0", "0000:1B:00.0"), "lower case", line=4)
    only(MINI.replace("0000:17:00.0", "00000000:17:00.0"), "dddd:bb:dd.f", line=4)
    only(MINI.replace("0000:18:00.0", "0000:17:00.0"), "also appears on line 4", line=5)


def test_link_values():
    only(MINI.replace('class="0x020700" link_speed="32.0 GT/s PCIe"', 'class="0x020700" link_speed="16.0 GT/s"'), "falls back to Gen3", line=4)
    only(MINI.replace('class="0x020700" link_speed="32.0 GT/s PCIe"', 'class="0x020700" link_speed=""'), "assumes Gen3", severity="warning", line=4)
    only(MINI.replace('class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16"', 'class="0x020700"'), "no link_speed", severity="warning", line=4)
    assert check_topo_xml(MINI.replace("32.0 GT/s PCIe", "16 GT/s")) == []  # kernel <= 5.6 form


def test_switch_without_link_attributes_is_fatal_for_nccl():
    # NCCL never fills a pci element of the file that a device hangs below: it fails reading it
    switch = 'class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16"'
    only(MINI.replace(switch, 'class="0x060400" link_width="16"'), "no link_speed: NCCL fails", line=3)
    only(MINI.replace(switch, 'class="0x060400" link_speed="32.0 GT/s PCIe"'), "no link_width: NCCL fails", line=3)
    # what NCCL's own sysfs walk writes when the capability files say nothing: accepted, with warnings
    vm = scan_topo_xml(MINI.replace(switch, 'class="0x060400" link_speed="" link_width="0"'))
    assert [(i.line, i.severity) for i in vm] == [(3, "warning"), (3, "warning")]


def test_structure_and_required_attributes():
    only(MINI.replace('version="1"', 'version="2"'), "only version 1", line=1)
    only(MINI.replace(' arch="x86_64"', ""), "needs arch", line=2)
    only(MINI.replace(' modelid="143"', ""), "needs modelid", line=2)
    only(MINI.replace(' vendor="GenuineIntel"', ' vendor="Intel"'), "not one NCCL knows", line=2)
    only(MINI.replace(' class="0x030200"', ""), "needs class", line=5)
    only(MINI.replace('affinity="0000ffff"', 'affinity="0-15"'), "cpumask", line=2)
    only(MINI.replace("  </cpu>\n", "  </cpu>\n  <gpu dev=\"0\"/>\n", 1), "not read inside <system>", line=8)
    only(MINI.replace('link_width="16"/>\n    </pci>', 'link_width="16">\n        <gpu dev="0" sm="90" gdr="1" rank="0"/>\n      </pci>\n    </pci>'), "agentd policy", line=6)
    only(MINI + MINI, "second <system>", line=9)
    only("", "no <system>")
    only("<graphs version=\"1\"/>\n", "not read at the top level")


def test_parse_errors():
    only(MINI.replace("    </pci>\n", "    </pcie>\n"), "does not close <pci>", line=6)
    only(MINI.replace("</system>\n", ""), "never closed", line=1)
    only(MINI.replace('<pci busid="0000:18:00.0"', 'text <pci busid="0000:18:00.0"'), "text outside a tag", line=5)
    only(MINI.replace("</cpu>", "</cpu >"), "closing tag", line=7)
    only('<system version="1" name="' + "x" * 254 + '"/>\n', "longer than 253")
    assert check_topo_xml('<system version="1" name="' + "x" * 253 + '"/>\n') == []
    only(MINI[:60], "end of file", line=2)


def test_comments_and_layout():
    text = "<!-- a comment -- with dashes -->\n<!---->\n" + MINI.replace("  <cpu", "  <!-- x --><cpu")
    issues = scan_topo_xml(text)
    assert all(i.severity == "warning" for i in issues), [str(i) for i in issues]
    only(MINI.replace("<system version=\"1\">\n  <cpu", "<system version=\"1\"><cpu"), "2 tags on one line", severity="warning", line=1)
    only("<!-- never ends\n" + MINI, "unterminated comment")


def test_messages_are_one_line_with_line_numbers():
    for issue in check_topo_xml(MINI.replace('numaid="0"', 'numaid="08"') + "junk"):
        assert issue.startswith("line ") and "\n" not in issue
