"""What a ConnectX firmware version changes in the meaning of what agentd reads.

The node says which firmware runs: ``/sys/class/infiniband/<dev>/fw_ver``
(``Hca.fw_ver``, "28.45.1020"; the major number is the product: 22 ConnectX-6 Dx and DE,
28 ConnectX-7). The congestion-control *mode* (DCQCN or Programmable Congestion Control)
is a non-volatile firmware parameter (mlxconfig ``USER_PROGRAMMABLE_CC``) that neither
sysfs, devlink nor ethtool shows: where a mode changes a counter's meaning, the findings
say so whenever the firmware is one where it can, instead of judging the number.

From NVIDIA's firmware release notes (Known Issues):

- ConnectX-7 28.45.1020 and later, ConnectX-6 Dx/DE 22.45.1020 and later, issue 4394475:
  "The existing congestion control configuration applies globally, rather than on a
  per-priority basis." Workaround: the same values for every priority
  (``ecn/roce_rp/enable/<prio>`` or mlxconfig ``ROCE_CC_PRIO_MASK_P<port>``). Still listed
  in 28.46.3048. A per-priority ECN switch then does not say what the NIC does for that
  priority when the switches differ: judged only when they agree (``cc_global``).
- ConnectX-7 28.36.1010 and later, issue 3327847: "CNP received, handled, and ignored
  counters in the hardware counters cannot work after moving to Programmable Congestion
  Control mode." A CNP rate of zero then says nothing (``cnp_note``).
"""

from __future__ import annotations

import re

from agentd.model import Hca, Netdev

_FW_RE = re.compile(r"(\d{1,3})\.(\d{1,4})\.(\d{1,5})")
# firmware major -> (product, first version with congestion control applied globally)
GLOBAL_CC: dict[int, tuple[str, tuple[int, int]]] = {
    22: ("ConnectX-6 Dx/DE", (45, 1020)),
    28: ("ConnectX-7", (45, 1020)),
}
# firmware major -> (product, first version whose CNP counters stop in Programmable CC mode)
PCC_CNP: dict[int, tuple[str, tuple[int, int]]] = {
    28: ("ConnectX-7", (36, 1010)),
}


def parse_fw(text: str | None) -> tuple[int, int, int] | None:
    """``"28.45.1020"`` (or ``"28.45.1020 (MT_0000000838)"``) -> (28, 45, 1020)."""
    m = _FW_RE.match(text or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def _from(table: dict[int, tuple[str, tuple[int, int]]], hca: Hca | None) -> tuple[str, str] | None:
    fw = parse_fw(hca.fw_ver) if hca is not None and hca.family == "mlx5" else None
    if fw is None or fw[0] not in table:
        return None
    product, since = table[fw[0]]
    return (product, f"{fw[0]}.{since[0]}.{since[1]}") if fw[1:] >= since else None


def cc_global(hca: Hca | None) -> str | None:
    """Why per-priority congestion-control switches do not tell (None: they do)."""
    hit = _from(GLOBAL_CC, hca)
    if hit is None or hca is None:
        return None
    return (f"{hit[0]} firmware {hca.fw_ver} applies congestion control to every priority alike "
            f"(release notes from {hit[1]}, issue 4394475)")


def cnp_note(hca: Hca | None) -> str | None:
    """Why a CNP counter that does not move may mean nothing (None: no known reason)."""
    hit = _from(PCC_CNP, hca)
    if hit is None or hca is None:
        return None
    return (f"{hit[0]} firmware {hca.fw_ver} does not count CNPs in Programmable Congestion Control mode "
            f"(release notes from {hit[1]}, issue 3327847): a flat CNP counter is no evidence")


def ecn_mixed(nd: Netdev) -> dict[str, tuple[list[int], list[int]]]:
    """side ("np", "rp") -> (priorities on, priorities off), for the sides whose switches
    differ across the priorities read."""
    out: dict[str, tuple[list[int], list[int]]] = {}
    if nd.ecn is None:
        return out
    for side, table in (("np", nd.ecn.np), ("rp", nd.ecn.rp)):
        on = sorted(p for p, v in table.items() if v)
        off = sorted(p for p, v in table.items() if not v)
        if on and off:
            out[side] = (on, off)
    return out
