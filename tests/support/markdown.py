"""Reading the repository's Markdown as GitHub renders it: the links of a page (outside code)
and the anchors its headings get."""

from __future__ import annotations

import re
from pathlib import Path

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def without_code(text: str) -> str:
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    """Every link target of the page, code blocks and code spans left out."""
    return LINK.findall(without_code(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lowercase, punctuation but
    hyphens and underscores dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors a page has: its headings' (repeats get -1, -2, ...) and explicit ones."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, title in HEADING.findall(FENCE.sub("", text)):
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found | set(HTML_ANCHOR.findall(text))


def pages(repo: Path) -> list[Path]:
    """The Markdown a reader of the repository follows: the README, docs/, and the READMEs
    of the other folders (vendored fixtures left out)."""
    out = [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]
    out += sorted(p for p in repo.glob("*/**/README.md") if "fixtures" not in p.parts and ".venv" not in p.parts
                  and not any(part.startswith(".") for part in p.relative_to(repo).parts))
    return out
