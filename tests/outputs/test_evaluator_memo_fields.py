"""The evaluation memo (agentd.outputs.evaluate.Evaluator) is keyed by every snapshot field
that can change a finding: a change of any one of them alone is judged again."""

from __future__ import annotations

import pytest

from agentd.model import FabricDaemons, NcclConf, NodeSnapshot
from agentd.outputs.evaluate import Evaluator, evaluate
from tests.support import check_snapshots as cs

RUNNING = ("nv-fabricmanager", "nvidia-imex")


def _codes(ev):
    return {f.code for f in ev.findings}


def test_fabric_daemons_changing_alone_are_judged_again():
    """nvidia-imex stopping is seen at the next publish, not a medium interval later (the
    memo missed ``daemons``: aesthetics review 2.7)."""
    config = cs.cfg(fabric={"imex": True})
    up = cs.node(gpus=4).model_copy(update={"daemons": FabricDaemons(asked=True, complete=True, running=RUNNING)})
    down = cs.later(up, 2.0).model_copy(update={"daemons": FabricDaemons(asked=True, complete=True, running=RUNNING[:1])})
    assert "fabric.imex.down" in _codes(evaluate(down, (), config, None))
    memo = Evaluator()
    assert "fabric.imex.down" not in _codes(memo(up, (), config, None, refresh_s=10.0))
    ev = memo(down, (), config, None, refresh_s=10.0)
    assert memo.hits == 0
    assert "fabric.imex.down" in _codes(ev)


_FOR_NONE = {"host_mode": "simulated", "host_mode_reason": "a simulated node", "nccl_conf": NcclConf(path="etc/nccl.conf")}


def _another(field, value):
    """Another object for a field's value."""
    if value is None:
        return _FOR_NONE[field]
    if isinstance(value, tuple):
        return (*value, *value[:1]) if value else (None,)
    if isinstance(value, str):
        return value + "/"
    return value.model_copy()


@pytest.mark.parametrize("field", [f for f in NodeSnapshot.model_fields if f not in ("taken_at", "probes")])
def test_every_content_field_is_in_the_memo_key(field):
    """Whatever the field, the memo does not hand back the previous evaluation once it is
    another object (the probes are compared by their flags, the time by the refresh)."""
    config = cs.cfg()
    snap = cs.node(gpus=2)
    memo = Evaluator()
    memo(snap, (), config, None, refresh_s=60.0)
    assert memo.reuse(cs.later(snap, 1.0), config, None, refresh_s=60.0) is not None  # the memo works at all
    changed = cs.later(snap, 2.0).model_copy(update={field: _another(field, getattr(snap, field))})
    assert memo.reuse(changed, config, None, refresh_s=60.0) is None
