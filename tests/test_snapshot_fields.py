"""Every NodeSnapshot field is classified once (agentd.model.SNAPSHOT_FIELDS), and the
lists derived from it (the evaluation memo, the writer's memo, what history.share shares)
follow: a new field that is not classified fails here."""

from __future__ import annotations

from agentd.model import CONTENT_FIELDS, SNAPSHOT_FIELDS, NodeSnapshot


def test_every_snapshot_field_is_classified():
    assert list(SNAPSHOT_FIELDS) == list(NodeSnapshot.model_fields), (
        "classify the new NodeSnapshot field in agentd.model.SNAPSHOT_FIELDS (time, probes or content)")


def test_content_is_everything_but_the_time_and_the_probes():
    assert set(CONTENT_FIELDS) == set(NodeSnapshot.model_fields) - {"taken_at", "probes"}


def test_share_shares_every_content_field():
    """Two equal snapshots in new objects: after ``share`` every content part is the
    previous snapshot's very object."""
    from agentd.collection.history import share
    from tests.support import check_snapshots as cs

    a = cs.node(gpus=2)
    b = NodeSnapshot.model_validate(a.model_dump(by_alias=True) | {"taken_at": a.taken_at + 2})
    shared = share(a, b)
    assert shared.taken_at == b.taken_at
    assert [f for f in CONTENT_FIELDS if getattr(shared, f) is not getattr(a, f) and getattr(a, f) is not None] == []
