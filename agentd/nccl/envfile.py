"""How each consumer reads a ``KEY=VALUE`` file, re-implemented faithfully.

agentd writes one plain ``KEY=VALUE`` form (nccl.conf) that must mean the same thing to
NCCL, systemd ``EnvironmentFile=`` and ``docker --env-file``. These readers let the
renderer check that before writing and let tests prove it:

- ``read_nccl_conf``: NCCL's ``setEnvFile`` (src/misc/param.cc). Lines are split at the
  first ``=`` and taken literally; ``#`` lines are skipped only since 2.26; only ``\\n``
  is removed; key and value are cut at 1023 bytes; ``setenv(.., overwrite=0)`` so the
  first assignment of a key wins.
- ``read_systemd_env_file``: systemd's ``parse_env_file_internal`` state machine
  (src/basic/env-file.c, v252): ``#``/``;`` comments, whitespace trimming, single and
  double quotes, backslash escapes and continuation lines; invalid names are dropped;
  the last assignment wins.
- ``read_docker_env_file``: docker CLI ``parseKeyValueFile`` (opts/envfile.go): leading
  whitespace trimmed, ``#`` comments, split at the first ``=``, value literal, a name
  with whitespace is an error, a line without ``=`` imports the host's value.
"""

from __future__ import annotations

import re

NCCL_MAX = 1023
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class EnvFileError(ValueError):
    pass


def read_nccl_conf(text: str, *, skip_hash_lines: bool = True) -> dict[str, str]:
    """``skip_hash_lines=False`` reads like NCCL before 2.26."""
    out: dict[str, str] = {}
    for line in text.splitlines(keepends=True):
        if skip_hash_lines and line.startswith("#"):
            continue
        if line.endswith("\n"):
            line = line[:-1]
        key, sep, value = line.partition("=")
        if not sep or not key:
            continue  # no '=': skipped; empty name: setenv fails
        out.setdefault(key[:NCCL_MAX], value[:NCCL_MAX])
    return out


_NEWLINE = "\n\r"
_WHITESPACE = " \t\n\r"
_COMMENTS = "#;"
_SHELL_NEED_ESCAPE = '"\\`$'


def read_systemd_env_file(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    state = "PRE_KEY"
    key: list[str] = []
    value: list[str] = []
    key_ws: int | None = None  # index where trailing whitespace of the key starts
    value_ws: int | None = None

    def push() -> None:
        k = "".join(key[:key_ws] if key_ws is not None else key)
        v = "".join(value)
        if _ENV_NAME.fullmatch(k):  # invalid names are dropped with a warning
            out.pop(k, None)
            out[k] = v

    for c in text:
        if state == "PRE_KEY":
            if c in _COMMENTS:
                state = "COMMENT"
            elif c not in _WHITESPACE:
                state, key, key_ws, value = "KEY", [c], None, []
        elif state == "KEY":
            if c in _NEWLINE:
                state, key = "PRE_KEY", []
            elif c == "=":
                state, value_ws = "PRE_VALUE", None
            else:
                if c not in _WHITESPACE:
                    key_ws = None
                elif key_ws is None:
                    key_ws = len(key)
                key.append(c)
        elif state == "PRE_VALUE":
            if c in _NEWLINE:
                push()
                state, key, value = "PRE_KEY", [], []
            elif c == "'":
                state = "SINGLE_QUOTE_VALUE"
            elif c == '"':
                state = "DOUBLE_QUOTE_VALUE"
            elif c == "\\":
                state = "VALUE_ESCAPE"
            elif c not in _WHITESPACE:
                state = "VALUE"
                value.append(c)
        elif state == "VALUE":
            if c in _NEWLINE:
                if value_ws is not None:
                    del value[value_ws:]
                push()
                state, key, value = "PRE_KEY", [], []
            elif c == "\\":
                state, value_ws = "VALUE_ESCAPE", None
            else:
                if c not in _WHITESPACE:
                    value_ws = None
                elif value_ws is None:
                    value_ws = len(value)
                value.append(c)
        elif state == "VALUE_ESCAPE":
            state = "VALUE"
            if c not in _NEWLINE:
                value.append(c)
        elif state == "SINGLE_QUOTE_VALUE":
            if c == "'":
                state = "PRE_VALUE"
            else:
                value.append(c)
        elif state == "DOUBLE_QUOTE_VALUE":
            if c == '"':
                state = "PRE_VALUE"
            elif c == "\\":
                state = "DOUBLE_QUOTE_VALUE_ESCAPE"
            else:
                value.append(c)
        elif state == "DOUBLE_QUOTE_VALUE_ESCAPE":
            state = "DOUBLE_QUOTE_VALUE"
            if c in _SHELL_NEED_ESCAPE:
                value.append(c)
            elif c != "\n":
                value += ["\\", c]
        elif state == "COMMENT":
            if c == "\\":
                state = "COMMENT_ESCAPE"
            elif c in _NEWLINE:
                state = "PRE_KEY"
        elif state == "COMMENT_ESCAPE":
            state = "COMMENT"  # v252; since v254 a newline here ends the comment
    if state in ("PRE_VALUE", "VALUE", "VALUE_ESCAPE", "SINGLE_QUOTE_VALUE", "DOUBLE_QUOTE_VALUE", "DOUBLE_QUOTE_VALUE_ESCAPE"):
        if state == "VALUE" and value_ws is not None:
            del value[value_ws:]
        push()
    return out


def read_docker_env_file(text: str, host_env: dict[str, str] | None = None) -> dict[str, str]:
    out: dict[str, str] = {}
    for n, raw in enumerate(text.split("\n"), start=1):
        if raw.endswith("\r"):
            raw = raw[:-1]
        if n == 1:
            raw = raw.removeprefix("\ufeff")
        line = raw.lstrip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not name:
            raise EnvFileError(f"line {n}: no variable name")
        if any(c in name for c in " \t\n\v\f\r"):
            raise EnvFileError(f"line {n}: variable {name!r} contains whitespaces")
        if sep:
            out.pop(name, None)
            out[name] = value
        elif host_env is not None and name in host_env:
            out[name] = host_env[name]
    return out
