"""Slurm hostlists read and written as Slurm does (agentd.outputs.slurm_hostlist)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.outputs.slurm_hostlist import MAX_HOSTS, HostlistError, compress, expand


@pytest.mark.parametrize("expr, names", [
    ("gpu001", ["gpu001"]),
    ("gpu[001-004,010]", ["gpu001", "gpu002", "gpu003", "gpu004", "gpu010"]),
    ("tux[0-3,12],tux20", ["tux0", "tux1", "tux2", "tux3", "tux12", "tux20"]),
    ("n[9-10]", ["n9", "n10"]),  # width of lo as typed: 1
    ("n[09-10]", ["n09", "n10"]),
    ("rack[1-2]-gpu[01-02]", ["rack1-gpu01", "rack1-gpu02", "rack2-gpu01", "rack2-gpu02"]),  # a prefix's own group
    ("n[1-2]-ib", ["n1-ib", "n2-ib"]),  # a suffix after the group
    ("login,gpu[7]", ["login", "gpu7"]),
])
def test_expand(expr: str, names: list[str]) -> None:
    assert expand(expr) == names


@pytest.mark.parametrize("expr", [
    "n3[", "n[1-3", "a]", "x[1-2]y[3]z]", "a[1]]",  # brackets that do not pair
    "n[3-1]", "n[x]", "n[]", "n[1-]", "n[-1]", "n[1,,2]", "n[0x1]",  # ranges Slurm refuses
    "a,,b", ",a", "a,",  # empty names
])
def test_expand_refuses_what_slurm_would_not_read(expr: str) -> None:
    with pytest.raises(HostlistError):
        expand(expr)


def test_expand_refuses_more_hosts_than_slurm_takes_before_building_them() -> None:
    assert len(expand(f"n[1-{MAX_HOSTS}]")) == MAX_HOSTS
    for expr in ("gpu[0-999999999]", f"n[1-{MAX_HOSTS}],x", "a[0-99999]-b[0-99999]"):
        with pytest.raises(HostlistError, match="more than"):
            expand(expr)


@pytest.mark.parametrize("names, text", [
    ([], ""),
    (["gpu7"], "gpu7"),
    (["gpu003", "gpu001", "gpu002", "gpu010", "gpu004"], "gpu[001-004,010]"),
    (["gpu9", "gpu10"], "gpu[9-10]"),
    (["gpu9", "gpu010"], "gpu[9,010]"),  # different widths stay apart
    (["gpu1", "gpu01"], "gpu[1,01]"),
    (["n2", "n1", "n2"], "n[1-2]"),
    (["login", "b1", "a10", "a9"], "a[9-10],b1,login"),
    (["rack1-gpu01", "rack1-gpu02", "rack2-gpu01"], "rack1-gpu[01-02],rack2-gpu01"),
])
def test_compress(names: list[str], text: str) -> None:
    assert compress(names) == text


_NAMES = st.builds(
    lambda prefix, n, width: f"{prefix}{n:0{width}d}",
    st.sampled_from(["gpu", "n", "rack1-gpu", "a.b"]), st.integers(0, 300), st.integers(1, 4),
) | st.sampled_from(["login", "gpu", "head-a"])


@given(st.lists(_NAMES, max_size=60))
def test_expand_gives_back_what_compress_wrote(names: list[str]) -> None:
    text = compress(names)
    back = expand(text) if text else []
    assert sorted(back) == sorted(set(names))
