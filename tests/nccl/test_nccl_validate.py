"""Validation of NCCL values against the syntax NCCL parses."""

import pytest

from agentd.base.ncclvars import advise_var, split_list, validate_key, validate_var


def ok(key, value, **kw):
    assert validate_var(key, value, **kw) == [], validate_var(key, value, **kw)


def bad(key, value, *fragments, **kw):
    problems = validate_var(key, value, **kw)
    assert problems, f"{key}={value!r} accepted"
    text = " ".join(problems)
    for frag in fragments:
        assert frag in text, text
    return text


def test_keys():
    assert validate_key("NCCL_IB_HCA") == []
    assert validate_key("NCCL_ib_hca") and validate_key("CUDA_VISIBLE_DEVICES") and validate_key("NCCL_X=Y")


@pytest.mark.parametrize("value", ["=mlx5_0:1,mlx5_1:1", "^=mlx5_8", "mlx5", "=mlx5_bond_0", "=mlx5_0:1:0:1", "^mlx5_"])
def test_ib_hca_valid(value):
    ok("NCCL_IB_HCA", value)


def test_ib_hca_prefix_pitfall():
    text = bad("NCCL_IB_HCA", "mlx5_1", "mlx5_10", "'='")
    assert "prefix" in text
    bad("NCCL_IB_HCA", "^mlx5_1,mlx5_2", "prefix")


def test_ib_hca_caret_must_come_first():
    bad("NCCL_IB_HCA", "=^mlx5_1", "'^=' instead")


@pytest.mark.parametrize("value", ["=mlx5_0:", "=mlx5_0::1", "=mlx5_0:0", "=,mlx5_0", "=mlx5_0:x"])
def test_ib_hca_entry_syntax(value):
    bad("NCCL_IB_HCA", value, "entry")


def test_ib_hca_limits_and_duplicates():
    bad("NCCL_IB_HCA", "=mlx5_0:1,mlx5_0:1", "twice")
    bad("NCCL_IB_HCA", "=" + ",".join(f"mlx5_{i}:1" for i in range(33)), "at most 32")


def test_ib_hca_that_selects_nothing_here():
    text = bad("NCCL_IB_HCA", "=mlx5_10", "sockets", known_hcas=["mlx5_0", "mlx5_1"])
    assert "mlx5_0, mlx5_1" in text
    ok("NCCL_IB_HCA", "=mlx5_1", known_hcas=["mlx5_0", "mlx5_1"])
    ok("NCCL_IB_HCA", "^=mlx5_7", known_hcas=["mlx5_0"])  # exclusion of an absent device is harmless


def test_socket_ifname():
    ok("NCCL_SOCKET_IFNAME", "=eth0")
    ok("NCCL_SOCKET_IFNAME", "^docker,lo")
    ok("NCCL_SOCKET_IFNAME", "=bond0.100")
    bad("NCCL_SOCKET_IFNAME", "=eth0:1", "alias")
    bad("NCCL_SOCKET_IFNAME", "eth0", "eth00")
    bad("NCCL_SOCKET_IFNAME", "=averyveryverylongname0", "1-15")


def test_gdr_level():
    for v in ("LOC", "PIX", "PXB", "PHB", "SYS", "P2C"):
        ok("NCCL_NET_GDR_LEVEL", v)
    bad("NCCL_NET_GDR_LEVEL", "NODE", "silently", "PHB")
    bad("NCCL_NET_GDR_LEVEL", "5", "SYS")
    bad("NCCL_NET_GDR_LEVEL", "pxb", "upper case")
    bad("NCCL_NET_GDR_LEVEL", "CLOSE", "not an NCCL path level")
    bad("NCCL_P2P_LEVEL", "NODE", "PHB")


def test_numeric_ranges():
    ok("NCCL_IB_TC", "106")
    ok("NCCL_IB_TC", "0x6a")
    bad("NCCL_IB_TC", "256", "0-255")
    bad("NCCL_IB_TC", "010", "octal")
    bad("NCCL_IB_TC", "high", "not an integer")
    ok("NCCL_IB_SL", "15")
    bad("NCCL_IB_SL", "16", "0-15")
    for v in ("0", "1", "2"):
        ok("NCCL_CROSS_NIC", v)
    bad("NCCL_CROSS_NIC", "3", "0-2")
    ok("NCCL_IB_GID_INDEX", "-1")
    ok("NCCL_IB_GID_INDEX", "3")
    bad("NCCL_IB_GID_INDEX", "-2", "outside")
    bad("NCCL_IB_GID_INDEX", "03", "octal")
    bad("NCCL_NET_GDR_READ", "2", "0-1")


@pytest.mark.parametrize(
    "value,frag",
    [
        ("a b", "' '"),
        ('"=mlx5_0"', "'\"'"),
        ("'x'", '"\'"'),
        ("$HOME", "'$'"),
        ("a;b`c`", "'`'"),
        ("x\ny", "'\\n'"),
        ("~/x", "'~'"),
        ("a\\b", "'\\\\'"),
        ("#1", "'#'"),
        ("*", "'*'"),
    ],
)
def test_unsafe_characters_rejected(value, frag):
    bad("NCCL_NET_PLUGIN", value, frag)


def test_empty_and_too_long():
    bad("NCCL_IB_TC", "", "empty")
    bad("NCCL_DEBUG_SUBSYS", "A" * 1024, "1023")


def test_other_variables():
    ok("NCCL_ALGO", "Ring,Tree")
    ok("NCCL_ALGO", "^NVLS")
    ok("NCCL_ALGO", "allreduce:tree;broadcast:ring")
    bad("NCCL_ALGO", "Rings", "unknown token")
    ok("NCCL_PROTO", "^LL128")
    bad("NCCL_PROTO", "fast", "unknown token")
    ok("NCCL_IB_ADDR_FAMILY", "AF_INET6")
    bad("NCCL_IB_ADDR_FAMILY", "inet6", "AF_INET")
    ok("NCCL_IB_ADDR_RANGE", "10.0.0.0/8")
    bad("NCCL_IB_ADDR_RANGE", "10.0.0.0", "CIDR")
    ok("NCCL_TOPO_FILE", "/etc/nccl/topo.xml")
    bad("NCCL_TOPO_FILE", "topo.xml", "absolute")
    ok("NCCL_NET_PLUGIN", "none")
    ok("NCCL_DEBUG", "WARN")
    bad("NCCL_DEBUG", "verbose", "INFO")
    ok("NCCL_SOME_FUTURE_KNOB", "17")  # unknown variables: only the character rules


def test_advice_is_not_an_error():
    assert any("2.21" in n for n in advise_var("NCCL_IB_GID_INDEX", "3"))
    assert any("PXB" in n for n in advise_var("NCCL_NET_GDR_LEVEL", "SYS"))
    assert any("Debugging" in n for n in advise_var("NCCL_ALGO", "Ring"))
    assert any("2.30.7" in n for n in advise_var("NCCL_IB_HCA", "=mlx5_0:1:0:1"))
    assert advise_var("NCCL_IB_TC", "106") == []


def test_split_list():
    assert split_list("^=a,b") == (True, True, ["a", "b"])
    assert split_list("=^a") == (False, True, ["^a"])


def test_ib_hca_prefix_checked_against_the_node():
    bad("NCCL_IB_HCA", "mlx5_bond", "mlx5_bond_0", known_hcas=["mlx5_bond", "mlx5_bond_0"])
    ok("NCCL_IB_HCA", "mlx5", known_hcas=["mlx5_0", "mlx5_1"])
