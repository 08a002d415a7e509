"""agentd.base.memo: results reused only for the very same input objects."""

from __future__ import annotations

from agentd.base.memo import IdentityMemo, same_objects


def test_same_objects_is_identity_not_equality() -> None:
    a, b = [1, 2], [1, 2]
    assert same_objects((a,), (a,))
    assert not same_objects((a,), (b,))  # equal, but another object
    assert not same_objects((a,), (a, a))


def test_memo_reuses_for_the_same_objects_and_rebuilds_for_equal_copies() -> None:
    memo: IdentityMemo[list[int]] = IdentityMemo()
    builds: list[int] = []

    def build(x: list[int]) -> list[int]:
        builds.append(1)
        return [v * 2 for v in x]

    inp = [1, 2, 3]
    first = memo.get((inp,), lambda: build(inp))
    assert memo.get((inp,), lambda: build(inp)) is first
    copy = list(inp)
    second = memo.get((copy,), lambda: build(copy))
    assert second == first and second is not first
    assert (memo.hits, memo.misses, len(builds)) == (1, 2, 2)
    assert memo.would_reuse((copy,)) and not memo.would_reuse((inp,))


def test_memo_max_age_bounds_reuse() -> None:
    now = [0.0]
    memo: IdentityMemo[object] = IdentityMemo(max_age_s=10, clock=lambda: now[0])
    key = (object(),)
    first = memo.get(key, object)
    now[0] = 9.9
    assert memo.get(key, object) is first
    now[0] = 10.0
    assert memo.get(key, object) is not first


def test_memo_clear_forgets() -> None:
    memo: IdentityMemo[object] = IdentityMemo()
    key = (object(),)
    first = memo.get(key, object)
    memo.clear()
    assert memo.get(key, object) is not first


def test_lazy_mapping_builds_once_when_first_read() -> None:
    from agentd.base.memo import LazyMapping

    calls: list[int] = []

    def build() -> dict[str, float]:
        calls.append(1)
        return {"rss_bytes": 1.0}

    m = LazyMapping(build)
    assert calls == []
    assert m["rss_bytes"] == 1.0 and dict(m) == {"rss_bytes": 1.0} and len(m) == 1
    assert calls == [1]
