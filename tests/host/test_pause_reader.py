"""Global pause: the recorded ``ethtool -a`` text (real output, tests/fixtures/SOURCES.md)
and what agentd writes for a capture read back the same; a veth's missing pause
parameters are the kernel's EOPNOTSUPP, no entry and no error (tests/host/test_enforce_netns.py
asks a real kernel)."""

from __future__ import annotations

import pytest

from agentd.base.recorded import format_ethtool_a
from agentd.host.pause import parse_ethtool_a
from agentd.model import PauseConfig
from tests.support.fixtures import FIXTURES


def test_real_ethtool_output_parses() -> None:
    text = (FIXTURES / "outputs" / "ethtool-a.autoneg.txt").read_text()
    assert parse_ethtool_a(text) == PauseConfig(autoneg=True, rx=True, tx=True)


@pytest.mark.parametrize("autoneg,rx,tx", [(False, False, False), (True, True, False), (None, False, True)])
def test_what_a_capture_records_reads_back(autoneg: bool | None, rx: bool, tx: bool) -> None:
    got = parse_ethtool_a(format_ethtool_a("ens1np0", autoneg, rx, tx))
    assert got == PauseConfig(autoneg=bool(autoneg), rx=rx, tx=tx)


@pytest.mark.parametrize("text", ["", "Pause parameters for eth0:\nAutonegotiate:\ton\n", "RX:\t\tmaybe\nTX:\t\ton\n",
                                  "Pause parameters for eth0:\nCannot get device pause settings: Operation not supported\n"])
def test_anything_else_is_no_pause(text: str) -> None:
    assert parse_ethtool_a(text) is None
