"""Identifiers every layer spells the same way: names sorted as NCCL and humans count.

A leaf module: it imports nothing from agentd.
"""

from __future__ import annotations


def natural_key(name: str) -> tuple[object, ...]:
    """mlx5_2 < mlx5_10 (NCCL and humans both count this way)."""
    out: list[object] = []
    num = ""
    text = ""
    for ch in name:
        if ch.isdigit():
            if text:
                out.append(text)
                text = ""
            num += ch
        else:
            if num:
                out.append(int(num))
                num = ""
            text += ch
    if num:
        out.append(int(num))
    if text:
        out.append(text)
    return tuple((0, x) if isinstance(x, int) else (1, x) for x in out)


def bus_id_label(bdf: str | None) -> str:
    """sysfs 0000:1b:00.0 -> NVML/dcgm-exporter 00000000:1B:00.0 (joins with DCGM series)."""
    if not bdf:
        return ""
    dom, sep, rest = bdf.partition(":")
    if not sep or len(dom) > 8:
        return bdf.upper()
    return f"{dom.upper():0>8}:{rest.upper()}"
