"""Generate the configuration reference from the pydantic models, so it cannot drift.

    python -m agentd.configdoc > docs/config.md   (a test compares the two)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from agentd.config import AgentConfig, _default_counter_thresholds


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "(required)"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, Path):
        return f"`{value}`"
    if isinstance(value, dict) and value and all(isinstance(v, BaseModel) for v in value.values()):
        return "see below"
    return "`" + json.dumps(value, default=str) + "`" if value is not None else "unset"


def _type(field: FieldInfo) -> str:
    t = field.annotation
    text = t.__name__ if isinstance(t, type) else str(t)
    for noise in ("typing.", "pathlib.", "agentd.config."):
        text = text.replace(noise, "")
    text = text.replace("NoneType", "None")
    if text.startswith("Optional[") and text.endswith("]"):
        text = text[len("Optional[") : -1] + " | None"
    return text


def _section(model: type[BaseModel], prefix: str, out: list[str], nested: list[tuple[str, type[BaseModel]]]) -> None:
    rows = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            nested.append((f"{prefix}{name}", ann))
            continue
        env = "AGENTD_" + "__".join(p.upper() for p in (prefix + name).split("."))
        desc = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{prefix}{name}` | {_type(field).replace('|', chr(92) + '|')} | {_default(field)} | `{env}` | {desc} |")
    if rows:
        out.append("| key | type | default | environment | meaning |")
        out.append("|---|---|---|---|---|")
        out.extend(rows)


def render() -> str:
    out = [
        "# Configuration reference",
        "",
        "Generated from `agentd/config.py` by `python -m agentd.configdoc`; a test fails when",
        "this file and the models differ. File: `/etc/agentd/agentd.toml` (`--config` to",
        "override). Every key can also be set with the environment variable shown",
        "(`AGENTD_<SECTION>__<KEY>`, values parsed as TOML). Unknown keys and bad values are",
        "rejected at start and on reload (SIGHUP) with the key path and the reason; on reload",
        "the running configuration stays. The file must be a regular file of at most 1 MiB: a",
        "FIFO or a device at the path (a link to `/dev/zero`) is refused at once.",
        "",
        "## Top level",
        "",
    ]
    queue: list[tuple[str, type[BaseModel]]] = []
    _section(AgentConfig, "", out, queue)
    while queue:
        prefix, model = queue.pop(0)
        out += ["", f"## [{prefix}]", ""]
        if model.__doc__ and "Section" not in model.__doc__:
            out += [" ".join(model.__doc__.split()), ""]
        _section(model, prefix + ".", out, queue)
        if prefix == "thresholds":
            out += ["", "Default `thresholds.counters` (events per second, severity):", ""]
            for k, v in _default_counter_thresholds().items():
                out.append(f"- `{k}`: {v.per_s:g}/s, {v.severity}")
    return "\n".join(out) + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
