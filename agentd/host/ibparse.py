"""Pure parsers for the InfiniBand text sysfs prints: port ``rate`` and ``state`` /
``phys_state`` strings, and GIDs.

No I/O here (``agentd.host.infiniband`` reads the files). Every function returns ``None``
(or an empty result) for text it does not understand; none of them raises on bad input.
Parsers of ``ibstat``/``ibstatus`` output and NCCL's GID-index pick live on as test
oracles in ``tests/support/ib_oracles.py``.
"""

from __future__ import annotations

import ipaddress
import re

from agentd.host.fs import parse_decimal

# ---------------------------------------------------------------------------
# rate

# Kernel rate_show: "%d%s Gb/sec (%dX%s)", e.g. "400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)",
# "10 Gb/sec (4X)" (i40iw: no speed name). ibstat prints only the number ("Rate: 400");
# ibstatus prints the kernel string after a "rate:" label.
_RATE_RE = re.compile(
    r"""^\s*(?:rate\s*:\s*)?
        (?P<gbps>\d+(?:\.\d+)?)\s*
        (?:Gb/s(?:ec)?)?\s*
        (?:\(\s*(?P<width>\d+)\s*X(?:\s+(?P<gen>[A-Za-z][A-Za-z0-9]*))?\s*\))?
        \s*$""",
    re.IGNORECASE | re.VERBOSE | re.ASCII,
)


def parse_rate(text: str | None) -> tuple[float | None, int | None, str | None]:
    """``"400 Gb/sec (4X NDR)"`` -> ``(400.0, 4, "NDR")``; unknown text -> ``(None, None, None)``."""
    if not text:
        return None, None, None
    m = _RATE_RE.match(text)
    if not m:
        return None, None, None
    width = None
    if m.group("width"):
        width = parse_decimal(m.group("width"))
        if width is None:  # a width no port has (past u64, past int()'s digit limit)
            return None, None, None
    gbps = float(m.group("gbps"))
    gen = m.group("gen").upper() if m.group("gen") else None
    return gbps, width, gen


# ---------------------------------------------------------------------------
# state / phys_state

# Kernel spellings (drivers/infiniband/core/sysfs.c state_show / phys_state_show).
PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
PHYS_STATES = {
    1: "Sleep",
    2: "Polling",
    3: "Disabled",
    4: "PortConfigurationTraining",
    5: "LinkUp",
    6: "LinkErrorRecovery",
    7: "Phy Test",
}

# Plain names (ibstat, operators) -> (id, kernel name). The two vocabularies do not overlap.
_PLAIN_STATES: dict[str, tuple[int, str | None]] = {
    **{n.lower().replace(" ", ""): (i, n) for i, n in PORT_STATES.items()},
    **{n.lower().replace(" ", ""): (i, n) for i, n in PHYS_STATES.items()},
    "initializing": (2, "INIT"),  # ibstat's word for INIT
    "nostatechange": (0, None),  # ibstat's phys state 0
}

_STATE_RE = re.compile(r"^\s*(?P<id>\d+)\s*(?::\s*(?P<name>.*?))?\s*$", re.ASCII)


def parse_state(text: str | None) -> tuple[int | None, str | None]:
    """``"4: ACTIVE"`` -> ``(4, "ACTIVE")``; ``"Active"`` -> ``(4, "ACTIVE")``.

    The sysfs form is kept as printed, so a ``phys_state`` of ``"4: ACTIVE"`` (a fixture
    quirk) stays ``(4, "ACTIVE")`` rather than being renamed by its number.
    """
    if not text:
        return None, None
    m = _STATE_RE.match(text)
    if m:
        sid = parse_decimal(m.group("id"))
        if sid is None:  # past u64 / int()'s digit limit: not a state
            return None, None
        name = (m.group("name") or "").strip()
        if not name or name.startswith("<"):  # "0: <unknown>"
            return sid, None
        return sid, name
    return _PLAIN_STATES.get(text.strip().lower().replace(" ", ""), (None, None))


# ---------------------------------------------------------------------------
# GIDs


def gid_int(gid: str | None) -> int | None:
    """A GID as a 128-bit integer; None when it is not one."""
    if not gid:
        return None
    try:
        return int(ipaddress.IPv6Address(gid.strip()))
    except ValueError:
        return None


def is_gid(text: str | None) -> bool:
    """A 128-bit GID in any IPv6 spelling (sysfs prints 8 groups of 4 hex digits)."""
    return gid_int(text) is not None


def is_zero(gid: str | None) -> bool:
    """All-zero GID: an empty table slot (the kernel prints zeros for it)."""
    return gid_int(gid) == 0
