"""CRD schemas as the API server applies them, for jsonschema (tests/ops: the chart's
Prometheus-operator objects and its NodeFeatureRule)."""

from __future__ import annotations

import re
from typing import Any


def structural(schema: Any) -> Any:
    """A CRD's openAPIV3Schema as the API server applies it, for jsonschema: int-or-string
    is either; an object with listed properties drops unknown fields (structural pruning),
    which for our own objects means a misspelt key silently does nothing, so fail on it."""
    if isinstance(schema, list):
        return [structural(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: structural(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if isinstance(out.get("pattern"), str):
        # Go's RE2 takes inline flags anywhere ("^(?i)..."); Python only at the start.
        out["pattern"] = re.sub(r"^\^\(\?([a-z]+)\)", r"(?\1)^", out["pattern"])
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["oneOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in schema and "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out
