"""Config: TOML + AGENTD_* overrides; every bad key or value named with its path."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.config import AgentConfig, ConfigError, env_overrides, load_config


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "agentd.toml"
    p.write_text(text)
    return p


def test_defaults_from_an_empty_file(tmp_path):
    cfg = load_config(write(tmp_path, ""), environ={})
    assert cfg == AgentConfig()
    assert cfg.listen == "127.0.0.1:9478"
    assert cfg.paths.nccl_env == Path("/etc/nccl.env")
    assert cfg.expect.gpus is None
    assert cfg.roce.priority == 3


def test_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", environ={})


def test_full_file_loads(tmp_path):
    p = write(tmp_path, """
host_root = "/host"
listen = "0.0.0.0:9478"
[expect]
gpus = 8
hca_ports = 8
rate_gbps = 400
width = 4
[hca]
compute = ["mlx5_[0-7]"]
exclude = ["mlx5_bond_*"]
[intervals]
fast_s = 1
[thresholds.counters.symbol_error]
per_s = 0.5
severity = "critical"
[nccl]
ib_tc = 106
overrides = { NCCL_IB_QPS_PER_CONNECTION = "2" }
""")
    cfg = load_config(p, environ={})
    assert cfg.host_root == Path("/host")
    assert cfg.expect.gpus == 8 and cfg.expect.rate_gbps == 400.0
    assert cfg.hca.compute == ["mlx5_[0-7]"]
    assert cfg.intervals.fast_s == 1.0
    assert set(cfg.thresholds.counters) == {"symbol_error"}
    assert cfg.nccl.ib_tc == 106
    assert cfg.nccl.overrides == {"NCCL_IB_QPS_PER_CONNECTION": "2"}


@pytest.mark.parametrize(
    "text, key, reason",
    [
        ("[expect]\ngpus = 'eight'\n", "expect.gpus", "valid integer"),
        ("[expect]\ngpuz = 8\n", "expect.gpuz", "unknown key"),
        ("bogus = 1\n", "bogus", "unknown key"),
        ("listen = 'localhost'\n", "listen", "HOST:PORT"),
        ("listen = '127.0.0.1:99999'\n", "listen", "HOST:PORT"),
        ("[roce]\npriority = 9\n", "roce.priority", "less than or equal to 7"),
        ("[intervals]\nfast_s = -1\n", "intervals.fast_s", "greater than 0"),
        ("[nccl]\nib_sl = 16\n", "nccl.ib_sl", "less than or equal to 15"),
        ("[nccl]\noverrides = { IB_HCA = 'x' }\n", "nccl.overrides", "not an NCCL_"),
        ("[nccl]\nprofile = 'training'\n", "nccl", "not defined"),
        ("[thresholds.counters.symbol_error]\nseverity = 'critical'\n", "thresholds.counters.symbol_error.per_s", "Field required"),
    ],
)
def test_bad_values_name_the_key(tmp_path, text, key, reason):
    with pytest.raises(ConfigError) as ei:
        load_config(write(tmp_path, text), environ={})
    msg = str(ei.value)
    assert f"  {key}:" in msg, msg
    assert reason in msg, msg


def test_not_toml_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "[expect\n"), environ={})


def test_env_overrides_nested_and_typed(tmp_path):
    p = write(tmp_path, "[expect]\ngpus = 4\n")
    env = {
        "AGENTD_EXPECT__GPUS": "8",
        "AGENTD_LISTEN": "[::1]:9100",
        "AGENTD_HCA__COMPUTE": '["mlx5_0", "mlx5_1"]',
        "AGENTD_NCCL__WRITE_CONF": "true",
        "UNRELATED": "1",
    }
    cfg = load_config(p, environ=env)
    assert cfg.expect.gpus == 8
    assert cfg.listen == "[::1]:9100"
    assert cfg.hca.compute == ["mlx5_0", "mlx5_1"]
    assert cfg.nccl.write_conf is True


def test_env_override_errors_name_the_key():
    with pytest.raises(ConfigError) as ei:
        load_config(None, environ={"AGENTD_EXPECT__GPUS": "many"})
    assert "expect.gpus" in str(ei.value) and "environment" in str(ei.value)


def test_cli_overrides_win_over_env(tmp_path):
    cfg = load_config(None, environ={"AGENTD_HOST_ROOT": "/a"}, overrides={"host_root": "/b"})
    assert cfg.host_root == Path("/b")


def test_env_overrides_tree():
    assert env_overrides({"AGENTD_A__B__C": "1", "AGENTD_X": "'s'", "AGENTD_Y": "plain"}) == {
        "a": {"b": {"c": 1}},
        "x": "s",
        "y": "plain",
    }


def test_config_is_immutable():
    cfg = AgentConfig()
    with pytest.raises(pydantic.ValidationError):
        cfg.listen = "x:1"  # type: ignore[misc]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_never_crashes(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("cfg") / "agentd.toml"
    p.write_text(text)
    try:
        load_config(p, environ={})
    except ConfigError as e:
        assert str(e)
