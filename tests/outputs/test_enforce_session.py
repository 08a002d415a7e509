"""`agentd enforce` on simulated nodes: every simulator config fault is cleared by `apply`
(`agentd check` is clean after), `rollback` brings it back byte for byte; a knob not
named is never changed; what the node refuses is rolled back or left alone; a capture is
planned, never changed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from agentd import sim
from agentd.cli import main
from agentd.collection.collector import collect_once
from agentd.config import KNOBS, load_config
from agentd.host.fs import HostRoot
from agentd.outputs.enforce import Session
from agentd.sim.actuate import SimActuators

pytestmark = pytest.mark.tree

ALL_KNOBS = "[" + ", ".join(f'"{k}"' for k in KNOBS) + "]"
# fault -> (profile, the knob that clears it)
CONFIG_FAULTS = {
    "pfc_off": ("h100-roce", "pfc"),
    "ecn_off": ("h100-roce", "ecn"),
    "trust_pcp": ("h100-roce", "trust"),
    "dscp_map_lossy": ("h100-roce", "dscp2prio"),
    "tclass_override": ("h100-roce", "tclass"),
    "mtu_mismatch": ("h100-roce", "mtu"),
    "pause_on": ("h100-roce", "pause"),
    "peermem_gone": ("pcie-4gpu", "peermem"),  # pcie-4gpu runs the proprietary module: no DMA-BUF
}


def config(tmp: Path, knobs: str = ALL_KNOBS, **extra: str) -> Path:
    p = tmp / "agentd.toml"
    # one collection per `agentd check` (no counter rates needed here)
    body = "[intervals]\ncheck_rate_window_s = 0\n" + f"[enforce]\nknobs = {knobs}\n" + "".join(f"{k} = {v}\n" for k, v in extra.items())
    p.write_text(body)
    return p


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def enforce(capsys: pytest.CaptureFixture[str], cmd: str, root: Path, cfg: Path, *more: str) -> tuple[int, dict]:
    rc, out, err = run(capsys, "enforce", cmd, "--host-root", str(root), "--config", str(cfg), "--format", "json", *more)
    assert out, err
    return rc, json.loads(out)


def files(root: Path, spec: str) -> dict[str, bytes]:
    out = {}
    for rel in sim.faults.touched_paths(root, spec):
        p = root / rel
        for f in ([p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else []):
            out[str(f.relative_to(root))] = f.read_bytes()
    return out


def check(capsys: pytest.CaptureFixture[str], root: Path, cfg: Path) -> tuple[int, set[str]]:
    rc, out, _ = run(capsys, "check", "--host-root", str(root), "--config", str(cfg), "--format", "json")
    return rc, {f["code"] for f in json.loads(out)["findings"] if f["severity"] != "ok"}


@pytest.mark.parametrize("fault", sorted(CONFIG_FAULTS))
def test_apply_clears_the_fault_and_rollback_brings_it_back(fault: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile, knob = CONFIG_FAULTS[fault]
    root = sim.build_tree(profile, tmp_path / "node", faults=[fault])
    cfg = config(tmp_path)
    faulted = files(root, fault)
    rc, found = check(capsys, root, cfg)
    assert rc != 0 and "config.drift" in found

    rc, plan = enforce(capsys, "plan", root, cfg)
    assert rc == 1 and any(c["knob"] == knob and c["drift"] and c["applicable"] for c in plan["changes"])

    rc, applied = enforce(capsys, "apply", root, cfg, "--yes")
    assert rc == 0, applied
    assert {r["knob"] for r in applied["results"] if r["outcome"] == "applied"} >= {knob}
    assert all(r["outcome"] == "applied" for r in applied["results"]) and applied["remaining"] == []
    assert check(capsys, root, cfg) == (0, set())  # agentd check is clean
    assert files(root, fault) != faulted

    rc, back = enforce(capsys, "rollback", root, cfg, "--yes")
    assert rc == 0 and {r["outcome"] for r in back["results"]} == {"restored"}
    assert files(root, fault) == faulted  # the node as the fault left it, byte for byte
    rc, found = check(capsys, root, cfg)
    assert rc != 0 and "config.drift" in found


def test_a_knob_not_named_is_never_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["pfc_off", "ecn_off@ens2np0"])
    cfg = config(tmp_path, '["ecn"]')
    pfc_before = files(root, "pfc_off")
    rc, doc = enforce(capsys, "apply", root, cfg, "--yes")
    assert rc == 0 and [(r["knob"], r["target"]) for r in doc["results"]] == [("ecn", "ens2np0")]
    assert files(root, "pfc_off") == pfc_before
    rc, _, err = run(capsys, "enforce", "apply", "--host-root", str(root), "--config", str(cfg), "--knob", "pfc", "--yes")
    assert rc == 3 and "not in enforce.knobs" in err
    assert files(root, "pfc_off") == pfc_before
    rc, plan = enforce(capsys, "plan", root, cfg, "--knob", "pfc")  # planned on request, never applied
    assert rc == 1 and [c["knob"] for c in plan["changes"] if c["drift"]] == ["pfc"]


def test_a_value_the_node_refuses_is_left_as_it_was(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = sim.build_tree("h100-roce", tmp_path / "node")
    cfg = tmp_path / "agentd.toml"
    cfg.write_text('[expect]\nroce_mtu = 9999\n[enforce]\nknobs = ["mtu"]\n')  # mlx5's maximum is 9978
    rc, doc = enforce(capsys, "apply", root, cfg, "--yes")
    assert rc == 1
    r = doc["results"][0]
    assert r["outcome"] == "failed" and "mtu greater than device maximum" in r["detail"] and r["after"] == 9000
    assert all(x["outcome"] == "failed" for x in doc["results"]) and len(doc["remaining"]) == 8


def test_a_port_without_carrier_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["mtu_mismatch@ens1np0", "port_down@ens1np0"])
    rc, doc = enforce(capsys, "apply", root, config(tmp_path, '["mtu"]'), "--yes")
    (r,) = doc["results"]
    assert rc == 1 and r["outcome"] == "refused" and "no carrier" in r["detail"]
    assert (root / "sys/class/net/ens1np0/mtu").read_text() == "1500\n"


def test_mode_off_refuses_to_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["pfc_off"])
    cfg = config(tmp_path, mode='"off"')
    rc, _, err = run(capsys, "enforce", "apply", "--host-root", str(root), "--config", str(cfg), "--yes")
    assert rc == 3 and "enforce.mode is off" in err


def test_without_yes_and_no_terminal_nothing_changes(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["pfc_off"])
    before = files(root, "pfc_off")
    monkeypatch.setattr("sys.stdin", open("/dev/null"))
    rc, _, err = run(capsys, "enforce", "apply", "--host-root", str(root), "--config", str(config(tmp_path)))
    assert rc == 3 and "--yes" in err and files(root, "pfc_off") == before


def test_a_capture_is_planned_never_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["pfc_off"])
    cap = tmp_path / "node.tar.gz"
    assert run(capsys, "capture", "--host-root", str(root), "--out", str(cap))[0] == 0
    cfg = config(tmp_path)
    rc, plan = enforce(capsys, "plan", cap, cfg)
    (c,) = [x for x in plan["changes"] if x["drift"]]
    assert rc == 1 and plan["host_mode"] == "offline" and c["knob"] == "pfc" and not c["applicable"] and "offline" in c["blocked"]
    rc, _, err = run(capsys, "enforce", "apply", "--host-root", str(cap), "--config", str(cfg), "--yes")
    assert rc == 3 and "never changed" in err


def test_status_lists_the_journal_and_reset_forgets_the_attempts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["pfc_off"])
    cfg = config(tmp_path, '["pfc"]')
    enforce(capsys, "apply", root, cfg, "--yes")
    rc, st = enforce(capsys, "status", root, cfg)
    assert rc == 0 and st["last"]["pfc"]["state"] == "applied" and st["attempts"] == {"pfc@ens1np0": 1}
    assert [e["before"] for e in st["outstanding"]] == [[]]
    rc, st = enforce(capsys, "status", root, cfg, "--reset")
    assert rc == 0 and st["attempts"] == {} and st["stuck"] == {}
    assert len(st["outstanding"]) == 1  # the prior value is kept: only the attempts are forgotten


class _OtherValue(SimActuators):
    """A driver that takes an MTU, but not the one asked: the change reads back wrong."""

    def apply(self, s, timeout_s):  # type: ignore[no-untyped-def]
        if s.knob == "mtu" and s.value == 9000:
            s = dataclasses.replace(s, value=4200)
        return super().apply(s, timeout_s)


def test_a_change_that_does_not_read_back_is_rolled_back(tmp_path: Path) -> None:
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["mtu_mismatch@ens1np0"])
    cfg = load_config(config(tmp_path, '["mtu"]'), overrides={"host_root": str(root)})
    host = HostRoot.at(root)
    lines: list[tuple[str, dict]] = []

    class Log:
        def info(self, event: str, **kw: object) -> None:
            lines.append((event, kw))

        warning = info

    s = Session(host=host, config=cfg, state_dir=tmp_path / "state", actuators=_OtherValue(root),
                collect=lambda: collect_once(host, cfg), by="cli:test", log=Log())
    (c,) = s.plan(["mtu"]).drift
    r = s.apply(c)
    assert r.outcome == "failed" and "read back 4200, not 9000: rolled back to 1500" in r.verify
    assert (root / "sys/class/net/ens1np0/mtu").read_text() == "1500\n"
    (e,) = s.journal.entries
    assert (e.state, e.before, e.desired, e.after) == ("failed", 1500, 9000, 1500)
    (event, audit), = lines
    assert event == "enforce.apply" and audit["who"] == "cli:test" and audit["why"] == "config.drift mtu@ens1np0 (mtu.mismatch)"
    assert (audit["before"], audit["desired"], audit["after"], audit["outcome"]) == (1500, 9000, 1500, "failed")


def test_every_apply_and_rollback_is_an_audit_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["pfc_off"])
    cfg = config(tmp_path, '["pfc"]')
    enforce(capsys, "apply", root, cfg, "--yes")
    rc, out, err = run(capsys, "enforce", "rollback", "--host-root", str(root), "--config", str(cfg), "--yes")
    assert rc == 0
    # the apply's line went to stderr of the first call (captured by enforce()); the rollback's here
    (line,) = [json.loads(x) for x in err.splitlines() if x.startswith("{")]
    assert line["event"] == "enforce.rollback" and line["who"].startswith("cli:") and line["why"] == "rollback of journal entries 1"
    assert (line["before"], line["desired"], line["after"], line["verify"]) == ([3], [], [], "read back PFC on none")
