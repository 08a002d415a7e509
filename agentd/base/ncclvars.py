"""Check NCCL variable values against the syntax NCCL actually parses (nccl-spec.md 2).

``validate_var`` returns problems: values NCCL would misread, ignore silently, or that
cannot be written into every file form agentd produces. ``advise_var`` returns
non-blocking notes (e.g. a Debugging-section variable set in production).

One value serves four readers: bash/sh (``export K='v'``), NCCL's own nccl.conf reader
(the line is split at the first ``=`` and taken literally: no quote removal, no
trimming, 1023 characters at most), systemd ``EnvironmentFile=`` (strips quotes and
whitespace, honours backslashes) and ``docker --env-file`` (literal). Only characters
that all four read the same way are allowed; see ``VALUE_CHARS``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection
from typing import Callable

KEY_RE = re.compile(r"NCCL_[A-Z0-9_]+")
# No whitespace, quotes, backslash, $, `, #, !, ~, glob or redirection characters.
# '^' and ';' are NCCL list syntax and need single quotes in the sh form only.
VALUE_CHARS = re.compile(r"[A-Za-z0-9_.,:/=^+@%;-]*")
MAX_VALUE_LEN = 1023  # NCCL's nccl.conf reader truncates longer values
MAX_IB_HCAS = 32

GDR_LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
DEBUG_SECTION = frozenset(
    {
        "NCCL_IB_GID_INDEX", "NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ", "NCCL_ALGO", "NCCL_PROTO",
        "NCCL_NVLS_ENABLE", "NCCL_DMABUF_ENABLE", "NCCL_IB_ADAPTIVE_ROUTING",
        "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_IB_MERGE_NICS", "NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE",
        "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_GRAPH_FILE",
    }
)
ALGOS = {"tree", "ring", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat"}
PROTOS = {"ll", "ll128", "simple"}
INT_RANGES: dict[str, tuple[int, int]] = {
    "NCCL_IB_TC": (0, 255),
    "NCCL_IB_FIFO_TC": (0, 255),
    "NCCL_IB_SL": (0, 15),
    "NCCL_CROSS_NIC": (0, 2),
    "NCCL_IB_GID_INDEX": (-1, 254),
    "NCCL_IB_ROCE_VERSION_NUM": (1, 2),
    "NCCL_IB_PCI_RELAXED_ORDERING": (0, 2),
    "NCCL_NVLS_ENABLE": (0, 2),
    "NCCL_IB_TIMEOUT": (1, 31),
    "NCCL_IB_RETRY_CNT": (0, 7),
    "NCCL_TOPO_DUMP_FILE_RANK": (0, 1 << 30),
}
BOOL_KEYS = frozenset(
    {
        "NCCL_NET_GDR_READ", "NCCL_DMABUF_ENABLE", "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_IB_MERGE_NICS",
        "NCCL_IB_MERGE_VFS", "NCCL_IGNORE_CPU_AFFINITY", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE",
        "NCCL_IB_DISABLE", "NCCL_NET_GDR_C2C", "NCCL_NVLS_DISABLE",
    }
)
PATH_KEYS = frozenset({"NCCL_TOPO_FILE", "NCCL_TOPO_DUMP_FILE", "NCCL_GRAPH_FILE", "NCCL_GRAPH_DUMP_FILE", "NCCL_CONF_FILE"})
ENUMS: dict[str, tuple[str, ...]] = {
    "NCCL_IB_ADDR_FAMILY": ("AF_INET", "AF_INET6"),
    "NCCL_DEBUG": ("VERSION", "WARN", "INFO", "ABORT", "TRACE"),
}


def validate_key(key: str) -> list[str]:
    if not KEY_RE.fullmatch(key):
        return [f"{key!r} is not an NCCL variable name (NCCL_ followed by A-Z, 0-9, _)"]
    return []


def validate_var(key: str, value: str, *, known_hcas: Collection[str] | None = None) -> list[str]:
    """Problems with ``key=value``; empty when NCCL reads it as intended.
    ``known_hcas``: the node's RDMA device names, to catch an NCCL_IB_HCA that selects none."""
    problems = validate_key(key)
    if problems:
        return problems
    if value == "":
        return [f"{key}: empty value (NCCL reads an empty value as set-but-empty; leave the key out instead)"]
    if len(value) > MAX_VALUE_LEN:
        return [f"{key}: value is {len(value)} characters; NCCL's nccl.conf reader keeps only {MAX_VALUE_LEN}"]
    bad = sorted({c for c in value if not VALUE_CHARS.fullmatch(c)})
    if bad:
        shown = " ".join(repr(c) for c in bad)
        return [
            f"{key}: value {value!r} contains {shown}; allowed are letters, digits and _ . , : / = ^ + @ % ; -"
            " (quotes, whitespace, backslashes and shell characters are read differently by NCCL's"
            " nccl.conf, systemd EnvironmentFile, docker --env-file and sh)"
        ]
    check = _CHECKS.get(key)
    if check is None:
        if key in INT_RANGES:
            return _int_range(key, value, *INT_RANGES[key])
        if key in BOOL_KEYS:
            return _int_range(key, value, 0, 1)
        if key in PATH_KEYS:
            return _path(key, value)
        if key in ENUMS:
            return _enum(key, value, ENUMS[key])
        return []
    if key == "NCCL_IB_HCA":
        return _ib_hca(key, value, known_hcas)
    return check(key, value)


def advise_var(key: str, value: str) -> list[str]:
    """Non-blocking notes about a valid value."""
    notes: list[str] = []
    if key == "NCCL_IB_GID_INDEX" and value != "-1":
        notes.append(
            "NCCL_IB_GID_INDEX: since NCCL 2.21 NCCL picks the RoCE v2 IPv4 GID per NIC itself and the docs say"
            " not to set this; a fixed index breaks nodes where the GID sits elsewhere, and IB ignores it since 2.22"
        )
    elif key == "NCCL_NET_GDR_LEVEL" and value == "SYS":
        notes.append("NCCL_NET_GDR_LEVEL: SYS allows GPUDirect RDMA across sockets, usually slower than NCCL's default PXB")
    elif key == "NCCL_IB_HCA" and any(e.count(":") >= 2 for e in split_list(value)[2]):
        notes.append("NCCL_IB_HCA: rail/plane fields (<device>:<port>:<rail>:<plane>) need NCCL 2.30.7 or later")
    elif key in DEBUG_SECTION:
        notes.append(f"{key} is in the Debugging section of NCCL's docs ('should not be used in production')")
    return notes


# ---------------------------------------------------------------------------


def _int(value: str) -> int | None:
    """What strtoll(value, 0) means, or None where agentd refuses the spelling."""
    if re.fullmatch(r"-?0[0-9]+", value):
        return None  # octal under strtoll base 0
    try:
        if re.fullmatch(r"-?(0|[1-9][0-9]*)", value):
            return int(value)
        if re.fullmatch(r"0[xX][0-9a-fA-F]+", value):
            return int(value, 16)
    except ValueError:
        pass
    return None


def _int_range(key: str, value: str, lo: int, hi: int) -> list[str]:
    if re.fullmatch(r"-?0[0-9]+", value):
        return [f"{key}: {value!r} has a leading zero, which NCCL (strtoll base 0) reads as octal; write it without the zero"]
    n = _int(value)
    if n is None:
        return [f"{key}: {value!r} is not an integer (NCCL would read it as 0 without a warning)"]
    if not lo <= n <= hi:
        return [f"{key}: {n} is outside {lo}-{hi}"]
    return []


def _enum(key: str, value: str, allowed: tuple[str, ...]) -> list[str]:
    if value not in allowed:
        return [f"{key}: {value!r} is not one of {', '.join(allowed)}"]
    return []


def _path(key: str, value: str) -> list[str]:
    if not value.startswith("/"):
        return [f"{key}: {value!r} is not an absolute path (it would be resolved in each job's working directory)"]
    return []


def _level(key: str, value: str) -> list[str]:
    if value == "NODE":
        return [
            f"{key}: NODE is nvidia-smi vocabulary, not an NCCL level; NCCL ignores it silently and keeps its"
            " default. Use PHB (same NUMA node) or leave the variable unset"
        ]
    if re.fullmatch(r"-?[0-9]+", value):
        return [
            f"{key}: numeric levels are discouraged by NCCL (path types changed between versions; any value >= 4"
            f" means SYS). Use one of {', '.join(GDR_LEVELS)}"
        ]
    if value.upper() in GDR_LEVELS and value not in GDR_LEVELS:
        return [f"{key}: write the level in upper case ({value.upper()})"]
    if value not in GDR_LEVELS:
        return [f"{key}: {value!r} is not an NCCL path level ({', '.join(GDR_LEVELS)}); NCCL would ignore it silently"]
    return []


def split_list(value: str) -> tuple[bool, bool, list[str]]:
    """NCCL's list prefix rules: '^' (exclude) must come first, then '=' (exact)."""
    exclude = value.startswith("^")
    rest = value[1:] if exclude else value
    exact = rest.startswith("=")
    rest = rest[1:] if exact else rest
    return exclude, exact, rest.split(",")


def _list_prefix_problems(key: str, value: str, exact: bool, names: list[str], device_name: re.Pattern[str]) -> list[str]:
    """``device_name``: what a complete device name looks like (mlx5_1, eth1). Without
    '=', such an entry is still a prefix and also matches mlx5_10 or eth10."""
    problems: list[str] = []
    if value.startswith("=^"):
        problems.append(f"{key}: '=^' is not an exclusion (NCCL reads '^' only as the first character); write '^=' instead")
    if not exact:
        ambiguous = [n for n in names if device_name.fullmatch(n)]
        if ambiguous:
            problems.append(
                f"{key}: without a leading '=' each entry is a prefix, so {ambiguous[0]} also matches"
                f" {ambiguous[0]}0-{ambiguous[0]}9...; prefix the list with '=' (or '^=' to exclude)"
            )
    return problems


def _ib_hca(key: str, value: str, known_hcas: Collection[str] | None) -> list[str]:
    exclude, exact, entries = split_list(value)
    problems: list[str] = []
    names: list[str] = []
    seen: set[str] = set()
    for entry in entries:
        m = re.fullmatch(r"([A-Za-z0-9_.+-]+)(?::([1-9][0-9]*)(?::([0-9]+)(?::([0-9]+))?)?)?", entry)
        if not m:
            problems.append(
                f"{key}: entry {entry!r} is not <device>[:<port>[:<rail>[:<plane>]]] (ports count from 1; an empty"
                " port field never matches)"
            )
            continue
        names.append(m.group(1))
        if entry in seen:
            problems.append(f"{key}: {entry} is listed twice")
        seen.add(entry)
    if len(entries) > MAX_IB_HCAS:
        problems.append(f"{key}: {len(entries)} entries; NCCL reads at most {MAX_IB_HCAS}")
    problems += _list_prefix_problems(key, value, exact, names, re.compile(r".*_[0-9]+"))
    if not problems and known_hcas is not None and not exact:
        for n in names:
            also = sorted(h for h in known_hcas if h.startswith(n) and h != n)
            if n in known_hcas and also:
                problems.append(f"{key}: without a leading '=', {n} also matches {', '.join(also)} on this node")
    if not problems and known_hcas is not None and not exclude and names:
        def hit(n: str) -> bool:
            return any((h == n) if exact else h.startswith(n) for h in known_hcas)

        if not any(hit(n) for n in names):
            problems.append(
                f"{key}: {value!r} selects none of this node's RDMA devices ({', '.join(sorted(known_hcas)) or 'none'});"
                " NCCL would fall back to TCP sockets without an error"
            )
    return problems


def _socket_ifname(key: str, value: str) -> list[str]:
    _exclude, exact, entries = split_list(value)
    problems: list[str] = []
    names: list[str] = []
    for entry in entries:
        if ":" in entry:
            problems.append(
                f"{key}: {entry!r}: ':' starts a port field in NCCL's list syntax, so alias interfaces such as"
                " eth0:1 cannot be selected; use the base interface"
            )
            continue
        if not re.fullmatch(r"[A-Za-z0-9_.@+-]{1,15}", entry):
            problems.append(f"{key}: {entry!r} is not an interface name (1-15 characters, no '/' or ',')")
            continue
        names.append(entry)
    if len(set(names)) != len(names):
        problems.append(f"{key}: an interface is listed twice")
    return problems + _list_prefix_problems(key, value, exact, names, re.compile(r".*[0-9]"))


def _token_list(key: str, value: str, tokens: set[str]) -> list[str]:
    # NCCL 2.24+: "[^]tok,tok" or per function "func:[^]tok,tok;func:[^]tok" with unknown tokens rejected.
    problems: list[str] = []
    for segment in value.split(";"):
        body = segment.split(":", 1)[1] if ":" in segment else segment
        if ":" in segment and not re.fullmatch(r"[A-Za-z]+", segment.split(":", 1)[0]):
            problems.append(f"{key}: {segment!r}: the part before ':' must be a collective name")
        body = body[1:] if body.startswith("^") else body
        for tok in body.split(","):
            if tok.lower() not in tokens:
                problems.append(f"{key}: unknown token {tok!r} (known: {', '.join(sorted(tokens))})")
    return problems


def _net_plugin(key: str, value: str) -> list[str]:
    if not re.fullmatch(r"[A-Za-z0-9_.+/-]+", value):
        return [f"{key}: {value!r} is not a plugin name or path"]
    return []


def _addr_range(key: str, value: str) -> list[str]:
    try:
        if "/" not in value:
            raise ValueError("no prefix length")
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        return [f"{key}: {value!r} is not a CIDR range such as 10.0.0.0/8 (NCCL ignores invalid ranges silently)"]
    return []


_CHECKS: dict[str, Callable[[str, str], list[str]]] = {
    "NCCL_IB_HCA": lambda k, v: _ib_hca(k, v, None),
    "NCCL_SOCKET_IFNAME": _socket_ifname,
    "NCCL_NET_GDR_LEVEL": _level,
    "NCCL_P2P_LEVEL": _level,
    "NCCL_ALGO": lambda k, v: _token_list(k, v, ALGOS),
    "NCCL_PROTO": lambda k, v: _token_list(k, v, PROTOS),
    "NCCL_NET_PLUGIN": _net_plugin,
    "NCCL_IB_ADDR_RANGE": _addr_range,
}
