"""The files one collection read, as a tree to record: what ``agentd capture`` keeps.

``PathRecorder`` is told of every read, listing and followed path (``HostRoot.recorder``).
``RecordedTree`` turns them into members laid out like the node: each path is walked
component by component on the real tree (``lstat``/``readlink`` under the root), so every
symlink on the way is kept as a symlink and its target too; a listed directory keeps its
symlinks and subdirectories (files only when something read them, with the bytes read).
Links that are absolute or lead out of the root are kept as links and not followed, as
the readers refuse them. Blocking I/O: a command's, never the event loop's.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class PathRecorder:
    """A ``ReadRecorder``: the paths (absolute, as spelled) one collection touched."""

    files: dict[str, bytes] = field(default_factory=dict)
    listings: dict[str, list[str]] = field(default_factory=dict)
    paths: set[str] = field(default_factory=set)

    def file(self, path: str, data: bytes) -> None:
        self.files[path] = data

    def listing(self, path: str, names: list[str]) -> None:
        self.listings[path] = list(names)

    def touched(self, path: str) -> None:
        self.paths.add(path)


class RecordedTree:
    """The members of the capture, keyed by root-relative path (deduplicated, ordered on
    write). Paths are walked component by component on the real tree so that every
    symlink on the way is kept as a symlink and its target is kept too."""

    def __init__(self, root: Path):
        self.root = str(root).rstrip("/") or "/"
        self.members: dict[str, tuple[str, Any]] = {}  # rel -> ("dir"|"file"|"link", data/target); Any: bytes, a str or None by kind
        self.problems: list[str] = []

    def _rel(self, absolute: str) -> str | None:
        r = self.root
        if r == "/":
            return absolute.lstrip("/") or None
        if absolute == r:
            return None
        if absolute.startswith(r + "/"):
            return absolute[len(r) + 1 :]
        return None

    def _abs(self, rel: str) -> str:
        return (self.root.rstrip("/") + "/" + rel) if rel else self.root

    def add(self, absolute: str, data: bytes | None = None, *, listing: list[str] | None = None) -> None:
        rel = self._rel(absolute)
        if rel is None:
            return
        real = self._walk(rel.split("/"), depth=0)
        if real is None:
            return
        if data is not None:
            self.members[real] = ("file", data)
        elif listing is not None:
            self.members.setdefault(real, ("dir", None))
            for name in listing:
                self._entry(f"{real}/{name}" if real else name)

    def _entry(self, rel: str) -> None:
        """A listed entry: a symlink as itself, a directory as an (empty) directory; a
        file only when something read it (its bytes come with the read)."""
        if rel in self.members:
            return
        try:
            st = os.lstat(self._abs(rel))
        except OSError:
            return
        if stat.S_ISLNK(st.st_mode):
            try:
                self.members[rel] = ("link", os.readlink(self._abs(rel)))
            except OSError:
                pass
        elif stat.S_ISDIR(st.st_mode):
            self.members[rel] = ("dir", None)

    def _walk(self, parts: list[str], depth: int) -> str | None:
        """Record every component of ``parts``; return the real root-relative path they
        name (symlinks followed inside the root), None when it leaves the root or is gone."""
        if depth > 40:
            return None  # a symlink loop
        cur = ""
        for part in parts:
            if part in ("", "."):
                continue
            if part == "..":
                cur = cur.rpartition("/")[0]
                continue
            nxt = f"{cur}/{part}" if cur else part
            try:
                st = os.lstat(self._abs(nxt))
            except OSError:
                return None
            if stat.S_ISLNK(st.st_mode):
                try:
                    target = os.readlink(self._abs(nxt))
                except OSError:
                    return None
                self.members.setdefault(nxt, ("link", target))
                if target.startswith("/"):
                    return None  # the readers refuse absolute links out of the root too
                base = cur.split("/") if cur else []
                resolved = self._walk(base + target.split("/"), depth + 1)
                if resolved is None:
                    return None
                cur = resolved
            else:
                if stat.S_ISDIR(st.st_mode):
                    self.members.setdefault(nxt, ("dir", None))
                cur = nxt
        return cur

    def put(self, rel: str, data: bytes) -> None:
        """A member that is not on the node's tree (recorded answers, manifest): no I/O."""
        parts = rel.split("/")
        for i in range(1, len(parts)):
            self.members.setdefault("/".join(parts[:i]), ("dir", None))
        self.members[rel] = ("file", data)
