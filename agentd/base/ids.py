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
