"""Names that are not valid UTF-8, escaped for every output. A leaf.

The kernel accepts any byte in a netdev name except ``/``, ``:`` and whitespace (RDMA
device names and counter file names can carry odd bytes too). ``os.listdir`` and
``os.readlink`` on str paths decode such a byte losslessly as a lone surrogate
(``surrogateescape``: byte 0xff -> U+DCFF), and that is how a name lives in the model: it
still names the file, and equal bytes give equal names.

A surrogate cannot be encoded as UTF-8, so every output escapes it, the same way
everywhere: byte 0xNN becomes the four characters ``\\xNN`` (a surrogate that is not
from surrogateescape, ``\\uNNNN``). Text whose own syntax writes a backslash as ``\\\\``
(the exposition's label values, JSON strings) gets the escaped backslash, so the value a
parser reads back is ``\\xNN`` there too. Valid names are never touched: these helpers cost
one failed encode only when there is something to escape.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Callable

from agentd.base.jsontypes import JsonValue

if TYPE_CHECKING:
    from pydantic import BaseModel

_SURROGATE = re.compile("[\ud800-\udfff]")
# A JSON document dumped with ensure_ascii: a backslash pair, a surrogate pair (a valid
# astral character) or a lone surrogate escape, scanned left to right so that a literal
# backslash followed by "ud..." is never taken for an escape.
_JSON_ESCAPE = re.compile(r"\\(?:\\|ud[89ab][0-9a-f]{2}\\ud[c-f][0-9a-f]{2}|ud[89a-f][0-9a-f]{2})")


def _hex(c: str) -> str:
    n = ord(c)
    return f"\\x{n - 0xDC00:02x}" if 0xDC80 <= n <= 0xDCFF else f"\\u{n:04x}"


def printable(s: str) -> str:
    """``s`` for plain text (logs, ``agentd check`` text): each undecodable byte as ``\\xNN``."""
    if s.isascii():
        return s
    return _SURROGATE.sub(lambda m: _hex(m.group()), s)


def escaped_utf8(text: str) -> bytes:
    """UTF-8 of ``text`` in a syntax that writes a backslash as ``\\\\`` (exposition label
    values, JSON strings with ensure_ascii off): a surrogate becomes ``\\\\xNN``."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(lambda m: "\\" + _hex(m.group()), text).encode("utf-8")


def _json_unescape_surrogate(m: re.Match[str]) -> str:
    tok = m.group()
    if tok == "\\\\" or len(tok) == 12:  # a literal backslash, or a valid surrogate pair
        return tok
    return "\\" + _hex(chr(int(tok[2:], 16)))


def json_text(obj: JsonValue, *, indent: int | None = None, separators: tuple[str, str] | None = None,
              default: Callable[[object], object] | None = None) -> str:
    """``json.dumps`` (ASCII, as by default) with lone surrogates as ``\\xNN`` text: every
    parser reads the same value, none has to accept a lone surrogate escape."""
    s = json.dumps(obj, indent=indent, separators=separators, default=default)
    if "\\ud" not in s:
        return s
    return _JSON_ESCAPE.sub(_json_unescape_surrogate, s)


def model_json(model: BaseModel, *, indent: int | None = None) -> str:
    """A pydantic model's JSON (``model_dump_json``), or, when it holds a name that is not
    UTF-8 (pydantic refuses to encode a lone surrogate), the same document through
    ``json_text``: dict keys and values keep their name, escaped as ``\\xNN``."""
    try:
        return model.model_dump_json(indent=indent)
    except ValueError:  # PydanticSerializationError
        compact = (",", ":") if indent is None else None
        return json_text(model.model_dump(mode="python"), indent=indent, separators=compact, default=str)
