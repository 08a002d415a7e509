"""`simulate --list` says on which profiles each fault kind shows (agentd.sim.fault_scope):
held to what agentd reports, kind by kind, on every profile (issue 43: 9 of 44 kinds
showed nothing on the default profile and nothing said so)."""

from __future__ import annotations

import time

import pytest

from agentd import sim
from agentd.collection.collector import Collector
from agentd.config import AgentConfig, Timeouts
from agentd.host.fs import HostRoot
from agentd.judging.judge import judge
from agentd.sim.fault_kinds import KINDS
from agentd.sim.fault_scope import SCOPES, holds_after_clear, profiles_shown, scope
from tests.support.cli import run_cli

# specs that keep a kind from spoiling the kinds after it on the same tree
SPEC = {"nvml_hang": "nvml_hang=1"}


def _shown(findings) -> set[tuple[str, str, str, str | None]]:
    return {(f.code, f.severity, f.subject, str(f.measured)) for f in findings if f.withheld is None}


def test_every_kind_has_a_scope():
    assert set(SCOPES) == set(sim.FAULT_KINDS)


@pytest.mark.tree
@pytest.mark.slow
@pytest.mark.parametrize("profile", sorted(sim.PROFILES))
def test_a_kind_shows_exactly_on_the_profiles_its_scope_names(profile, tmp_path):
    """Each kind in turn on one tree of the profile: applied, judged against the two
    collections before it (a new finding, or a fact that changed, is what shows), cleared.
    Every judgement sees only its own three collections, so what an earlier kind left
    advanced is no rate, and a kernel event it left is in the findings before and after."""
    root = sim.build_tree(profile, tmp_path / "root")
    wrong = []
    baseline = None
    # kernel log kinds last: the log keeps their lines, and a held event renames nothing later
    for kind in sorted(sim.FAULT_KINDS, key=lambda k: (holds_after_clear(KINDS[k]), k)):
        cfg = AgentConfig.model_validate({"host_root": root, "timeouts": Timeouts(nvml_s=0.3), "fabric": {"imex": bool(scope(kind).needs)}})
        c = Collector(HostRoot.at(root), cfg)
        t = time.time()  # kernel log events are dated when read
        c.run_sync()
        s0 = c.snapshot(taken_at=t - 10)
        c.run_sync()
        s1 = c.snapshot(taken_at=t)
        healthy = judge(s1, (s0,), cfg, baseline)
        if baseline is None:  # the pristine node's inventory, which the inventory kinds lose
            baseline = judge(s1, (), cfg, None).new_baseline
        try:
            sim.apply_fault(root, SPEC.get(kind, kind))
        except ValueError:
            applied = False  # the profile has nothing it can target
        else:
            applied = True
            c.run_sync()
            s2 = c.snapshot(taken_at=t + 10)
            faulted = judge(s2, (s0, s1), cfg, baseline)
            sim.clear_fault(root, SPEC.get(kind, kind))
            if kind == "nvml_hang":
                c._lanes["nvml"].submit(lambda: None)[0].result(timeout=10)
        expected = scope(kind)
        new = _shown(faulted.findings) - _shown(healthy.findings) if applied else set()
        # what shows: a finding above ok, or for a kind that changes a fact (ok), that fact
        seen = {code for code, severity, _, _ in new if severity != "ok" or code == expected.code}
        if bool(seen) != (profile in profiles_shown(kind)):
            wrong.append((kind, f"shows {sorted(seen)}" if seen else "shows nothing"))
        elif seen and expected.code not in seen and not seen & set(expected.instead):
            wrong.append((kind, f"shows {sorted(seen)}, not {expected.code}"))
    assert wrong == [], wrong


def test_list_says_where_each_kind_shows_and_how_it_clears(capsys):
    out = run_cli("simulate", "--list").stdout
    pfc = out[out.index("\npfc_off"):].split("\n")
    assert pfc[2].startswith("    shows on: h100-roce (") and "roce.pfc.disabled critical" in pfc[3] and "at the next collection" in pfc[4]
    down = out[out.index("\nport_down"):].split("\n")
    assert "its finding goes at the next collection" in down[4] and "stay advanced" in down[4]  # ib.port.down goes; a flap finding waits
    xid = out[out.index("\nxid"):].split("\n")
    assert "kernel.hold_s" in xid[4]
    for kind in sim.FAULT_KINDS:
        assert f"\n{kind}" in out


@pytest.mark.tree
def test_clears_go_before_faults_whatever_the_order_given(tmp_path):
    """`--clear-fault peermem_gone --fault no_gdr`: the clear restores peermem, then no_gdr
    takes it away again (with clears after faults the clear undid what no_gdr needs)."""
    import json

    root = sim.build_tree("h100-ib", tmp_path / "root")
    sim.apply_fault(root, "peermem_gone")
    assert run_cli("simulate", "--out", str(root), "--fault", "no_gdr", "--clear-fault", "peermem_gone").returncode == 0
    assert [f.split("@")[0] for f in sim.applied_faults(root)] == ["no_gdr"]
    doc = json.loads(run_cli("check", "--host-root", str(root), "--format", "json").stdout)
    assert ("gdr.unavailable", "critical") in {(f["code"], f["severity"]) for f in doc["findings"]}
