"""Names for JSON data as ``json.loads`` returns it and ``json.dumps`` takes it.

A JSON object's values are any JSON value (objects, arrays, strings, numbers, booleans,
null), which the type system cannot say without a recursive union that every reader would
have to narrow at each step; the readers validate what they take instead (pydantic models,
``isinstance`` checks). ``Any`` here is that: a JSON value, validated where it is read.
"""

from __future__ import annotations

from typing import Any

JsonValue = Any  # any JSON value: validated where it is read (module doc)
JsonObject = dict[str, Any]  # a JSON object: its values are JSON values (module doc)
