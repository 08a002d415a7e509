"""The node's ``/etc/nccl.conf``, read as NCCL reads it.

NCCL (``src/misc/param.cc``, ``setEnvFile``) reads the file line by line at its first use
of a parameter: a line whose first character is ``#`` is a comment; the trailing newline
is dropped; a line without ``=`` is skipped; the key is everything before the first
``=`` and the value everything after it, neither trimmed (at most 1023 bytes each, and C
strings: a NUL ends them). Each is set with ``setenv(key, value, 0)``: a variable already
in the environment wins, and so does the first line that sets a key (a later line for
the same key changes nothing). The job's own environment, ``NCCL_CONF_FILE`` or
``~/.nccl.conf`` come first; agentd sees only this file.

Only ``NCCL_*`` keys are kept (a key with a leading space is another variable to NCCL).
The file is read up to ``MAX_BYTES``; a longer one is read that far (its complete lines)
with an ``unparsable`` error. Absent: None.
"""

from __future__ import annotations

from agentd.host.fs import ReadContext
from agentd.model import NcclConf

PATH = "etc/nccl.conf"
MAX_BYTES = 64 * 1024
_NCCL_MAX = 1023  # envVar/envValue buffers of setEnvFile


def parse_nccl_conf(data: bytes) -> tuple[dict[str, str], list[int]]:
    """(``{key: value}`` of the NCCL_* variables, numbers of lines skipped because they are
    not UTF-8). NCCL's rules (module docstring): first assignment wins."""
    out: dict[str, str] = {}
    bad: list[int] = []
    for n, raw in enumerate(data.split(b"\n"), start=1):
        if raw[:1] == b"#":
            continue
        line = raw.split(b"\0", 1)[0]  # setEnvFile copies C strings
        key, eq, value = line.partition(b"=")
        if not eq or not key.startswith(b"NCCL_"):
            continue
        try:
            k = key[:_NCCL_MAX].decode("utf-8")
            v = value[:_NCCL_MAX].decode("utf-8")
        except UnicodeDecodeError:
            bad.append(n)
            continue
        out.setdefault(k, v)
    return out, bad


def read_nccl_conf(ctx: ReadContext) -> NcclConf | None:
    """``/etc/nccl.conf`` under the host root; None when there is none. Never raises.

    The path may be a symlink (agentd's packages link it to ``nccl/nccl.conf``, the file
    agentd writes when ``nccl.write_conf`` is on): followed as NCCL's fopen follows it,
    without leaving the host root; a dangling link is no file."""
    real = ctx.resolve(PATH)
    if real is None:
        return None
    data = ctx.raw(real, max_bytes=MAX_BYTES + 1)
    if data is None:
        return None
    if len(data) > MAX_BYTES:
        ctx.error(PATH, "unparsable", f"longer than {MAX_BYTES} bytes: only the lines in its first {MAX_BYTES} read")
        data = data[:MAX_BYTES].rpartition(b"\n")[0]
    variables, bad = parse_nccl_conf(data)
    if bad:
        more = f" (+{len(bad) - 5} more)" if len(bad) > 5 else ""
        ctx.error(PATH, "unparsable", "not UTF-8 text on line " + ", ".join(map(str, bad[:5])) + more)
    return NcclConf(path=PATH, variables=variables)
