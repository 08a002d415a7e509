"""Opt-in: what ``mstlink`` (mstflint, open source) or ``mlxlink`` (NVIDIA MFT) says of an
InfiniBand port, whose PHY the kernel does not show.

mlx5's IPoIB netdev has no ``get_module_info``/``get_module_eeprom*`` ethtool ops
(drivers/net/ethernet/mellanox/mlx5/core/ipoib/ethtool.c), so the kernel gives no module
EEPROM, link-down reason or FEC statistics for an InfiniBand port; its PMA counters
(``symbol_error``, ``link_error_recovery``, ``link_downed``) are the kernel's only PHY
signals, and agentd judges those (ib.counter.*). The vendor tool reads the firmware's PHY
registers directly: effective (post-FEC) and raw BER, the link-down counter, the module's
temperature and per-lane Rx power. It is off by default (``[optics] link_tool``).

Each HCA port is one run, ``<tool> -d <PCI bus id> -c -m`` (counters and module info), in
its own process group with a hard time limit (agentd.host.procrun.run_bounded), no shell.
The tool serialises on the device's register interface, so runs go one after another
(sichek caps its mlxlink workers at 8 for the same reason), in the slow tier, through the
firmware-read gate (issue 36).

Its output is sections of ``Name : value`` lines (mlxlink's text form, kept since MFT 4.x)::

    Physical Counters and BER Info
    ------------------------------
    Effective Physical BER          : 15E-255
    Raw Physical BER                : 1E-8
    Link Down Counter               : 0

Recorded (a capture or a simulated node): ``.agentd/link-tool/<hca>_<port>`` holds that
text (docs/capture.md).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping, Sequence

from agentd.base import recorded
from agentd.host.fs import ReadContext
from agentd.host.gate import Gate, allow_all
from agentd.host.procrun import run_bounded
from agentd.model import LinkDiag

MAX_OUTPUT = 256 * 1024
_LINE = re.compile(r"^([A-Za-z][^:]{0,60}?)\s*:\s*(.*?)\s*$")
_RANGE = re.compile(r"\s*\[[^\]]*\]\s*$")  # mlxlink appends the allowed range: "44 [-5..75]"
Runner = Callable[..., tuple[int, str, str, bool]]  # run_bounded's signature
Port = tuple[str, int, str]  # (hca, port, PCI bus id)

FIELDS: Mapping[str, str] = {  # LinkDiag field <- the tool's line name
    "effective_ber": "Effective Physical BER",
    "raw_ber": "Raw Physical BER",
    "symbol_ber": "Symbol BER",
    "effective_errors": "Effective Physical Errors",
    "link_down": "Link Down Counter",
    "link_error_recovery": "Link Error Recovery Counter",
    "module_temperature_c": "Temperature [C]",
    "rx_power_dbm": "Rx Power Current [dBm]",
    "recommendation": "Recommendation",
}


def lines(text: str) -> dict[str, str]:
    """``Name : value`` lines of the tool's output (the first of a repeated name)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            out.setdefault(m.group(1).strip(), m.group(2))
    return out


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    t = _RANGE.sub("", text).strip()
    try:
        v = float(t)
    except ValueError:
        return None
    return v if v == v and abs(v) != float("inf") else None


def _int(text: str | None) -> int | None:
    v = _float(text)
    return int(v) if v is not None and v >= 0 and v == int(v) else None


def parse(text: str, tool: str) -> LinkDiag | None:
    """The LinkDiag of one run's output; None when it holds none of the fields."""
    got = lines(text)
    if not any(name in got for name in FIELDS.values()):
        return None
    rx = got.get(FIELDS["rx_power_dbm"])
    lanes = tuple(v for v in (_float(x) for x in _RANGE.sub("", rx).split(",")) if v is not None) if rx else ()
    rec = got.get(FIELDS["recommendation"])
    return LinkDiag(
        tool=tool,
        effective_ber=_float(got.get(FIELDS["effective_ber"])),
        raw_ber=_float(got.get(FIELDS["raw_ber"])),
        symbol_ber=_float(got.get(FIELDS["symbol_ber"])),
        effective_errors=_int(got.get(FIELDS["effective_errors"])),
        link_down=_int(got.get(FIELDS["link_down"])),
        link_error_recovery=_int(got.get(FIELDS["link_error_recovery"])),
        module_temperature_c=_float(got.get(FIELDS["module_temperature_c"])),
        rx_power_dbm=lanes,
        recommendation=rec.strip() or None if rec is not None else None,
    )


def format_output(d: LinkDiag) -> str:
    """The tool's text form of ``d`` (what ``agentd capture`` records; ``parse`` reads it back)."""
    rows: list[tuple[str, str]] = []
    for field, name in FIELDS.items():
        v = getattr(d, field)
        if v is None or v == ():
            continue
        text = ",".join(f"{x:g}" for x in v) if isinstance(v, tuple) else (f"{v:g}" if isinstance(v, float) else str(v))
        rows.append((name, text))
    return "".join(f"{name:<32}: {text}\n" for name, text in rows)


def _recorded_path(ctx: ReadContext, hca: str, port: int) -> str:
    return f"{ctx.host.answers}/{recorded.LINK_TOOL}/{hca}_{port}"


def read_link_diag(ctx: ReadContext, tool: str, ports: Sequence[Port], *, timeout_s: float, may_read: Gate = allow_all,
                   runner: Runner = run_bounded, which: Callable[[str], str | None] = shutil.which) -> dict[tuple[str, int], LinkDiag]:
    """``{(hca, port): LinkDiag}``. Never raises: a missing tool, a failed or timed-out run
    is a read error of that port (or of the tool, once)."""
    out: dict[tuple[str, int], LinkDiag] = {}
    if ctx.host.is_live:
        path = which(tool)
        if path is None:
            ctx.error(f"exec({tool})", "unavailable", f"[optics] link_tool = {tool!r} but {tool} is not on PATH")
            return out
        for hca, port, bus in ports:
            if not may_read(bus):
                continue
            where = f"exec({tool} -d {bus})"
            rc, stdout, stderr, timed_out = runner([path, "-d", bus, "-c", "-m"], env=None, timeout_s=timeout_s, max_output_bytes=MAX_OUTPUT)
            if timed_out:
                ctx.error(where, "timeout", f"no answer within {timeout_s:g}s (process group killed)")
                continue
            diag = parse(stdout, tool)
            if diag is None:
                detail = (stderr.strip() or stdout.strip()).splitlines()[-1:] or [f"exit status {rc}"]
                ctx.error(where, "unreadable", f"exit status {rc}: {detail[0][:200]}")
                continue
            out[(hca, port)] = diag
        return out
    if ctx.host.answers is None:
        return out
    for hca, port, _bus in ports:
        text = ctx.text(_recorded_path(ctx, hca, port), max_bytes=MAX_OUTPUT)
        if text is None:
            continue
        diag = parse(text, tool)
        if diag is None:
            ctx.error(_recorded_path(ctx, hca, port), "unparsable", "no `Name : value` lines of mstlink/mlxlink output")
        else:
            out[(hca, port)] = diag
    return out
