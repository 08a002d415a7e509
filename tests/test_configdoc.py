"""docs/config.md is generated from the models and must not drift from them."""

from pathlib import Path

from agentd.config import AgentConfig
from agentd.configdoc import render

DOC = Path(__file__).resolve().parents[1] / "docs" / "config.md"


def test_config_reference_is_current():
    assert DOC.read_text() == render(), "run: python -m agentd.configdoc > docs/config.md"


def test_every_key_is_documented():
    text = render()

    def walk(model, prefix=""):
        for name, field in model.model_fields.items():
            ann = field.annotation
            if isinstance(ann, type) and hasattr(ann, "model_fields"):
                yield from walk(ann, f"{prefix}{name}.")
            else:
                yield prefix + name

    keys = list(walk(AgentConfig))
    assert len(keys) > 40
    for key in keys:
        assert f"| `{key}` |" in text, key
