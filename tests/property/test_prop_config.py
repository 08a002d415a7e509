"""Properties of config loading: any file text (or bytes) and any TOML structure built from
the real key names plus strangers gives an AgentConfig or a ConfigError naming a key;
valid structures round-trip."""

from __future__ import annotations

import datetime as dt
import math
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agentd.config import AgentConfig, ConfigError, load_config

PROFILE = settings.get_profile("agentd")  # registered in conftest.py

LONG_DIGITS = "9" * 4301


@pytest.fixture(scope="module")
def cfg_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cfg")


def load(cfg_dir: Path, content: str | bytes, environ: dict[str, str] | None = None) -> AgentConfig | ConfigError:
    p = cfg_dir / "agentd.toml"
    p.write_bytes(content.encode() if isinstance(content, str) else content)
    try:
        return load_config(p, environ={} if environ is None else environ)
    except ConfigError as e:
        return e


# -- TOML writer for generated structures ----------------------------------------------


def toml_str(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out) + '"'


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return toml_str(v)
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{toml_str(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


def toml_doc(data: dict[str, Any]) -> str:
    return "".join(f"{toml_str(k)} = {toml_value(v)}\n" for k, v in data.items())


scalars = st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=12) | st.dates()
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(min_size=1, max_size=6), inner, max_size=3), max_leaves=8)


def _submodel(model: type[BaseModel], key: str) -> type[BaseModel] | None:
    f = model.model_fields.get(key)
    ann = f.annotation if f else None
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


@st.composite
def table(draw: st.DrawFn, model: type[BaseModel] = AgentConfig, depth: int = 0) -> dict[str, Any]:
    """Keys: the model's own (most of the time) and strangers; values: any TOML value,
    or a sub-table shaped by the sub-model."""
    keys = draw(st.lists(st.sampled_from(sorted(model.model_fields)) | st.text(min_size=1, max_size=8), max_size=5, unique=True))
    out: dict[str, Any] = {}
    for k in keys:
        sub = _submodel(model, k)
        out[k] = draw(table(sub, depth + 1)) if sub is not None and depth < 2 and draw(st.booleans()) else draw(values)
    return out


def shown(key: str) -> str:
    """A key as the error message writes it: as is, or repr'd when it holds anything
    but printable characters (a newline must not split the message)."""
    return key if key and key.isprintable() else repr(key)


def names_a_key(err: ConfigError, data: dict[str, Any]) -> bool:
    lines = str(err).split("\n")  # not splitlines(): a key may hold \r or \x1c
    return (
        len(lines) > 1
        and all(line.startswith("  ") and line.isprintable() for line in lines[1:])
        and any(line.startswith("  " + shown(k)) for k in data for line in lines[1:])
    )


@settings(PROFILE)
@given(table())
def test_generated_structures_load_or_name_the_key(cfg_dir: Path, data: dict[str, Any]) -> None:
    doc = toml_doc(data)
    assert tomllib.loads(doc) == data  # the writer is right, so the outcome is load_config's
    out = load(cfg_dir, doc)
    if isinstance(out, ConfigError):
        assert names_a_key(out, data), str(out)
    else:
        assert isinstance(out, AgentConfig)


toml_fragments = st.sampled_from(["[expect]", "gpus = 8", "[intervals]", "fast_s = -1", "listen = \"x\"", "a.b.c = 1", "[[x]]", "= 3", "k = [1, \"a\"]", "\"\\u0000\" = 1", "nccl = {profile = \"p\"}"])
toml_texts = st.lists(toml_fragments | st.text(max_size=20), max_size=8).map("\n".join)


@settings(PROFILE)
@given(st.text() | toml_texts | st.binary(max_size=200))
def test_any_file_content_loads_or_fails_cleanly(cfg_dir: Path, content: str | bytes) -> None:
    out = load(cfg_dir, content)
    assert isinstance(out, (AgentConfig, ConfigError))
    if isinstance(out, ConfigError):
        assert str(out).strip()


env_names = st.sampled_from(["AGENTD_LISTEN", "AGENTD_EXPECT__GPUS", "AGENTD_HCA__COMPUTE", "AGENTD_INTERVALS__FAST_S", "AGENTD_NCCL", "AGENTD_X__Y", "AGENTD_"]) | st.text(max_size=10).map("AGENTD_{}".format)


@settings(PROFILE)
@given(st.dictionaries(env_names, st.text(max_size=20) | st.sampled_from(["8", "[1, 2]", "{a = 1}", "true", "\"s\""]), max_size=4))
def test_environment_overrides_load_or_name_the_variable(cfg_dir: Path, environ: dict[str, str]) -> None:
    out = load(cfg_dir, "", environ)
    assert isinstance(out, (AgentConfig, ConfigError))


@pytest.mark.parametrize("key", ["x\\n  expect.gpus: forged", "x\\r  forged", "\\u001b[2Kforged", "x\\u2028forged", "x\\u001cforged"])
def test_error_for_a_key_with_control_characters_stays_on_one_line(cfg_dir: Path, key: str) -> None:
    err = load(cfg_dir, f'"{key}" = 1\n')
    assert isinstance(err, ConfigError) and len(str(err).split("\n")) == 2, str(err)
    assert str(err).split("\n")[1].isprintable(), repr(str(err))


def test_error_quotes_a_long_value_shortened(cfg_dir: Path) -> None:
    err = load(cfg_dir, f'listen = "{"a" * 10_000}"\n')
    assert isinstance(err, ConfigError) and len(str(err)) < 500


valid = st.fixed_dictionaries(
    {},
    optional={
        "listen": st.builds("{}:{}".format, st.sampled_from(["127.0.0.1", "0.0.0.0", "[::1]", "node1"]), st.integers(1, 65535)),
        "expect": st.fixed_dictionaries({}, optional={"gpus": st.integers(0, 64), "rate_gbps": st.floats(0.001, 1e4), "roce_mtu": st.integers(576, 65535)}),
        "intervals": st.fixed_dictionaries({}, optional={"fast_s": st.floats(0.001, 3600), "stale_after": st.floats(1.5, 100)}),
        "roce": st.fixed_dictionaries({}, optional={"priority": st.integers(0, 7), "require_ecn": st.booleans()}),
        "hca": st.fixed_dictionaries({}, optional={"compute": st.lists(st.text(max_size=10), max_size=4)}),
        "nccl": st.fixed_dictionaries({}, optional={"overrides": st.dictionaries(st.from_regex(r"NCCL_ZZ_[A-Z0-9_]{1,8}", fullmatch=True), st.from_regex(r"[A-Za-z0-9_.,:/=+@%-]{1,10}", fullmatch=True), max_size=3)}),
    },
)


@settings(PROFILE)
@given(valid)
def test_valid_structures_round_trip(cfg_dir: Path, data: dict[str, Any]) -> None:
    cfg = load(cfg_dir, toml_doc(data))
    assert isinstance(cfg, AgentConfig), str(cfg)
    for key, value in data.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                assert getattr(getattr(cfg, key), sub) == v
        else:
            assert getattr(cfg, key) == value


@pytest.mark.parametrize(
    "content,environ",
    [
        pytest.param(f"[expect]\ngpus = {LONG_DIGITS}\n", {}, id="file-int-over-digit-limit"),
        pytest.param("x = " + "[" * 5000 + "]" * 5000 + "\n", {}, id="file-deep-nesting"),
        pytest.param("", {"AGENTD_EXPECT__GPUS": LONG_DIGITS}, id="env-int-over-digit-limit"),
        pytest.param("", {"AGENTD_HCA__COMPUTE": "[" * 5000 + "]" * 5000}, id="env-deep-nesting"),
    ],
)
def test_tomllib_limits_become_config_errors(cfg_dir: Path, content: str, environ: dict[str, str]) -> None:
    err = load(cfg_dir, content, environ)
    assert isinstance(err, ConfigError)
    assert (next(iter(environ)) if environ else "agentd.toml") in str(err)  # names the variable / file
