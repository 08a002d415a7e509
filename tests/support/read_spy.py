"""A ReadRecorder (agentd.host.fs) that keeps every path a reader read or listed: tests
that prove what agentd does not open put it on the host root."""

from __future__ import annotations


class ReadSpy:
    def __init__(self) -> None:
        self.read: list[str] = []

    def file(self, path: str, data: bytes) -> None:
        self.read.append(path)

    def listing(self, path: str, names: list[str]) -> None:
        self.read.append(path)

    def touched(self, path: str) -> None:
        pass  # resolving a link or testing a path opens nothing of the device
