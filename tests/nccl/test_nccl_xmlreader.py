"""The port of NCCL's XML reader: tokens, comments, skipping and counting like xml.cc."""

import pytest

from agentd.nccl.xmlreader import NcclXmlReader, ReaderError


def read(text):
    r = NcclXmlReader(text)
    r.load(None)
    return r


def test_counts_only_elements_nccl_keeps():
    r = read('<system version="1">\n  <cpu numaid="0" arch="arm64">\n    <foo><pci busid="x"/></foo>\n    <pci busid="a"/>\n  </cpu>\n</system>\n')
    assert r.nodes == 3  # system, cpu, pci; <foo> and its child are skipped
    system = r.top[0]
    assert [c.name for c in system.children[0].children] == ["pci"]
    assert any("<foo> is not read inside <cpu>" in i.message for i in r.issues)


def test_self_closing_forms_and_attributes():
    r = read('<system version="1"><cpu numaid="0" arch="arm64"/></system>')
    cpu = r.top[0].children[0]
    assert cpu.single and cpu.attrs == [("numaid", "0"), ("arch", "arm64")]
    r = read('<system version="1" />')  # a space before '/>' adds an empty attribute, as in NCCL
    assert r.top[0].attrs == [("version", "1"), ("", "")]
    r = read('<system version="1" name="a b > c"></system>')
    assert r.top[0].get("name") == "a b > c"


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("<!--x=1 -->\n<system/>", "unexpected '='"),  # NCCL reads a comment's first word as a name
        ("<system\tversion=\"1\"/>", "tab"),
        ("<system version=\"1\"\n/>", "one line"),
        ("<system version=\"1\"></system >", "closing tag"),
    ],
)
def test_fatal_like_nccl(text, fragment):
    with pytest.raises(ReaderError, match=fragment):
        read(text)


def test_comment_window():
    r = read("<!---->\n<!-- a -- b --->\n<system version=\"1\"/>\n")
    assert r.nodes == 1 and r.top[0].name == "system"
