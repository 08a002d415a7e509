"""Every relative link in the README, docs/ and the folders' READMEs resolves inside the
repository, to a file or folder that exists and, with an anchor, to a heading it has
(issue 43: the README linked DESIGN.md and docs linked nccl-spec.md, neither of them in the
repository)."""

from __future__ import annotations

import os
import re

import pytest

from tests.support.markdown import anchors, links, pages
from tests.support.paths import REPO

PAGES = pages(REPO)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # https:, mailto:, ...


def test_the_pages_are_found():
    names = {p.relative_to(REPO).as_posix() for p in PAGES}
    assert {"README.md", "docs/operator-guide.md", "docs/development.md", "grafana/README.md", "packaging/slurm/README.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_resolves_inside_the_repository(page):
    text = page.read_text()
    broken = []
    for target in links(text):
        if EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if os.path.commonpath([dest, REPO]) != str(REPO):
            broken.append(f"{target}: outside the repository")
        elif not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    assert broken == []
