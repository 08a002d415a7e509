"""The live actuators never raise (agentd.base.actuation.Actuators): a rollback's netdev
name comes from the journal, a file a person may have edited."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.base.actuation import Setting
from agentd.host.actuators import LiveActuators
from agentd.host.fs import HostRoot


@pytest.mark.parametrize("name", ["ens1\x00np0", "x" * 40, "no-such-netdev0"])
def test_a_netdev_name_no_device_has_is_refused_not_raised(tmp_path: Path, name: str) -> None:
    a = LiveActuators(HostRoot.at(tmp_path), tmp_path / "modprobe")
    out = a.apply(Setting(knob="mtu", target=name, value=9000, netdev=name, ifindex=7), 1.0)
    assert not out.ok and "not the device that was read" in out.detail
