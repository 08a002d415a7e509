"""A port of NCCL's topology-file reader (src/graph/xml.cc: xmlGetNode, xmlGetToken,
xmlGetValue, xmlSkipComment, xmlLoadSub), written to find the same failures.

It reads a character at a time like NCCL: before ``<`` only space, ``\\n`` and ``\\r``
are skipped; a token ends at space, ``>``, ``/``, ``\\n`` or ``\\r``; values must be
quoted; ``<!-- -->`` comments are skipped; elements not in NCCL's handler tables
(``CHILDREN``) are skipped with everything inside them. The first fatal problem stops
the read, as it stops NCCL. ``xmlcheck`` judges the tree this returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

MAX_STR = 253  # NCCL's MAX_STR_LEN is 255 including the terminator and the closing delimiter
CHILDREN: dict[str | None, tuple[str, ...]] = {
    None: ("system",),
    "system": ("cpu",),
    "cpu": ("pci", "nic"),
    "pci": ("pci", "gpu", "nic", "pcilink"),
    "gpu": ("nvlink", "c2c"),
    "nic": ("net",),
}


@dataclass(frozen=True)
class XmlIssue:
    line: int
    severity: Literal["error", "warning"]
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.severity}: {self.message}"


@dataclass
class Element:
    name: str
    attrs: list[tuple[str, str]]
    line: int
    single: bool
    known: bool = True
    children: list["Element"] = field(default_factory=list)

    def get(self, key: str) -> str | None:
        return next((v for k, v in self.attrs if k == key), None)


class ReaderError(Exception):
    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line
        self.message = message


class NcclXmlReader:
    """A port of NCCL's xmlGetNode/xmlGetToken/xmlGetValue/xmlLoadSub."""

    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self.line = 1
        self.tag_line = 1
        self.nodes = 0
        self.tags_per_line: dict[int, int] = {}
        self.issues: list[XmlIssue] = []
        self.top: list[Element] = []

    def warn(self, message: str) -> None:
        self.issues.append(XmlIssue(self.tag_line, "warning", message))

    def getc(self) -> str:
        if self.pos >= len(self.text):
            raise ReaderError(self.tag_line, "unexpected end of file inside a tag (NCCL: Unexpected EOF)")
        c = self.text[self.pos]
        self.pos += 1
        if c == "\n":
            self.line += 1
        return c

    def value(self) -> tuple[str, str]:
        c = self.getc()
        if c not in "\"'":
            raise ReaderError(self.tag_line, f"attribute value must be in double quotes, got {c!r} (NCCL: Expected (double) quote)")
        if c == "'":
            self.warn("single-quoted value: NCCL accepts single quotes only since 2.27; older versions fail")
        quote, buf = c, []
        while (c := self.getc()) != quote:
            buf.append(c)
            if len(buf) > MAX_STR:
                raise ReaderError(self.tag_line, f"value longer than {MAX_STR} characters (NCCL: value too long)")
        return "".join(buf), self.getc()

    def token(self, want_value: bool) -> tuple[str, str | None, str]:
        buf: list[str] = []
        while True:
            c = self.getc()
            if c == "=":
                name = "".join(buf)
                if not want_value:
                    hint = " (a tab cannot separate a name from its attributes)" if "\t" in name else ""
                    raise ReaderError(self.tag_line, f"unexpected '=' after element name {name!r}{hint}")
                value, last = self.value()
                return name, value, last
            if c in " >/\n\r":
                return "".join(buf), None, c
            buf.append(c)
            if len(buf) > MAX_STR:
                raise ReaderError(self.tag_line, f"name longer than {MAX_STR} characters (NCCL: name too long)")

    def skip_comment(self, start: str) -> None:
        window = ("..." + start)[-3:]
        while window != "-->":
            if self.pos >= len(self.text):
                raise ReaderError(self.tag_line, "unterminated comment")
            window = window[1:] + self.getc()

    def node(self) -> tuple[str, str, list[tuple[str, str]], int] | None:
        while True:
            c = " "
            while c in " \n\r":
                if self.pos >= len(self.text):
                    return None
                c = self.getc()
            self.tag_line = self.line
            if c != "<":
                hint = {"\t": " (tab: indent with spaces only)", "\ufeff": " (byte order mark)"}.get(c, " (text outside a tag)")
                raise ReaderError(self.line, f"expected '<', got {c!r}{hint}; NCCL stops here")
            name, _, c = self.token(False)
            if not name.startswith("!--"):
                break
            self.skip_comment(name[3:] + c)
        self.tags_per_line[self.tag_line] = self.tags_per_line.get(self.tag_line, 0) + 1
        if name.startswith(("?", "!")):
            raise ReaderError(self.tag_line, f"<{name} ...> declaration: NCCL fails with \"expected >, got '?'\"; write no prolog")
        if name == "" and c == "/":
            name, _, c = self.token(False)
            if c != ">":
                raise ReaderError(self.tag_line, f"unexpected {c!r} in closing tag </{name}>")
            return "close", name, [], self.tag_line
        attrs: list[tuple[str, str]] = []
        while c == " ":
            key, value, c = self.token(True)
            attrs.append((key, value if value is not None else ""))
        kind = "open"
        if c == "/":
            kind = "single"
            _, _, c = self.token(False)
        if c != ">":
            hint = " (newline inside a tag: keep each tag on one line)" if c in "\n\r" else ""
            raise ReaderError(self.tag_line, f"expected '>', got {c!r}{hint}")
        return kind, name, attrs, self.tag_line

    def load(self, head: Element | None, depth: int = 0) -> None:
        if head is not None and head.single:
            return
        if depth > 64:
            raise ReaderError(self.tag_line, "elements nested more than 64 deep")
        while True:
            got = self.node()
            if got is None:
                if head is not None:
                    raise ReaderError(head.line, f"<{head.name}> is never closed (NCCL: unterminated {head.name})")
                return
            kind, name, attrs, line = got
            if kind == "close":
                if head is None:
                    raise ReaderError(line, f"</{name}> closes nothing")
                if name != head.name:
                    raise ReaderError(line, f"</{name}> does not close <{head.name}> from line {head.line} (NCCL: XML Mismatch)")
                return
            el = Element(name, attrs, line, kind == "single")
            head_known = head is None or head.known
            allowed = CHILDREN.get(head.name if head else None, ())
            if head_known and name in allowed:
                self.nodes += 1
                (head.children if head is not None else self.top).append(el)
            else:
                el.known = False
                if head_known:
                    where = f"inside <{head.name}>" if head is not None else "at the top level"
                    self.issues.append(XmlIssue(line, "error", f"<{name}> is not read {where}; NCCL skips it and everything in it"))
            self.load(el, depth + 1)
