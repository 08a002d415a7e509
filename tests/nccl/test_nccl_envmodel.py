"""NcclEnv: ordered variables with provenance."""

from agentd.nccl.envmodel import EnvVar, NcclEnv, clean_comment


def test_order_and_lookup():
    env = NcclEnv().with_var(EnvVar("NCCL_IB_HCA", "=mlx5_0:1", "measured", "measured: ports")).with_var(
        EnvVar("NCCL_IB_TC", "106", "config", "config: nccl.ib_tc")
    )
    assert [v.key for v in env] == ["NCCL_IB_HCA", "NCCL_IB_TC"]
    assert env.get("NCCL_IB_TC") == "106" and env.get("NCCL_ALGO") is None
    assert "NCCL_IB_HCA" in env and len(env) == 2
    assert env.items() == (("NCCL_IB_HCA", "=mlx5_0:1"), ("NCCL_IB_TC", "106"))


def test_replacement_keeps_position_and_says_what_it_replaced():
    env = NcclEnv().with_var(EnvVar("NCCL_IB_HCA", "=mlx5_0:1", "measured", "measured: ports"))
    env = env.with_var(EnvVar("NCCL_IB_TC", "106", "config", "config: nccl.ib_tc"))
    env = env.with_var(EnvVar("NCCL_IB_HCA", "=mlx5_1:1", "override", "override: nccl.overrides.NCCL_IB_HCA"))
    assert [v.key for v in env] == ["NCCL_IB_HCA", "NCCL_IB_TC"]
    var = env.var("NCCL_IB_HCA")
    assert var.value == "=mlx5_1:1" and var.source == "override"
    assert "replaces the measured value" in var.provenance


def test_setting_a_variable_clears_its_omission():
    env = NcclEnv().with_omitted("NCCL_IB_HCA", "no healthy port")
    assert [o.key for o in env.omitted] == ["NCCL_IB_HCA"]
    env = env.with_var(EnvVar("NCCL_IB_HCA", "=mlx5_0:1", "override", "override"))
    assert env.omitted == ()


def test_comments_stay_one_line_without_equals_signs():
    assert clean_comment("a=b\nc\r\n d") == "a is b c d"
    var = EnvVar("NCCL_X", "1", "config", "value =1\nsecond line")
    assert "\n" not in var.provenance and "=" not in var.provenance


def test_immutable():
    env = NcclEnv()
    env2 = env.with_note("n")
    assert env.notes == () and env2.notes == ("n",)
