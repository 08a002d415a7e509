"""The live PFC actuator changes the knob's priority only (as `dcb pfc set ... prio-pfc
3:on` does), keeping what the device has on the others at the moment of the change."""

from __future__ import annotations

import contextlib
from typing import Iterator

import pytest

from agentd.host import dcb_write


@pytest.mark.parametrize(("device", "enabled", "only", "written"), [
    (0b0010_0000, [3], 3, 0b0010_1000),  # 5 on since the plan: kept, 3 added
    (0b0010_1000, [], 3, 0b0010_0000),  # the rollback: 3 off, 5 kept
    (0b0010_0000, [3], None, 0b0000_1000),  # without ``only``: exactly ``enabled``
])
def test_set_pfc_only_changes_its_priority(device: int, enabled: list[int], only: int | None, written: int,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[bytes] = []

    @contextlib.contextmanager
    def sock(_proto: int) -> Iterator[None]:
        yield None

    monkeypatch.setattr(dcb_write, "open_socket", sock)
    monkeypatch.setattr(dcb_write, "_ieee_pfc", lambda s, ifname, seq, t: bytes((0xFF, device)) + bytes(3))
    monkeypatch.setattr(dcb_write, "_set", lambda s, request, seq, t: sent.append(request))
    assert dcb_write.set_pfc("ens1np0", enabled, 1.0, only=only).ok
    (req,) = sent
    assert req == dcb_write.build_set_pfc("ens1np0", bytes((0xFF, written)) + bytes(3), req_seq(req))


def req_seq(req: bytes) -> int:
    return int.from_bytes(req[8:12], "little")
