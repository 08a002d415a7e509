"""Red-team reproductions: `agentd enforce` must not change a setting on a reading that
the kernel could not have produced, nor lose or misstate a prior value."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agentd import sim
from agentd.base.actuation import Actuators, Outcome, Setting
from agentd.cli import main
from agentd.config import AgentConfig, load_config
from agentd.host import actuators as live
from agentd.host import dcb
from agentd.host.fs import HostRoot
from agentd.outputs.enforce import Session, actuators_for, collector_for
from agentd.outputs.enforce_journal import journal_path, save_journal
from agentd.sim.actuate import SimActuators

pytestmark = pytest.mark.tree


class _Log:
    def info(self, event: str, **kw: object) -> None: ...

    warning = info


def _session(tmp_path: Path, host: HostRoot, cfg: AgentConfig, actuators: Actuators) -> Session:
    return Session(host=host, config=cfg, state_dir=tmp_path / "state", actuators=actuators,
                   collect=collector_for(host, cfg), by="cli:test", log=_Log())


def _cfg(tmp: Path, knobs: str) -> Path:
    p = tmp / "agentd.toml"
    p.write_text(f"[intervals]\ncheck_rate_window_s = 0\n[enforce]\nknobs = {knobs}\n")
    return p


def _apply(capsys: pytest.CaptureFixture[str], root: Path, cfg: Path) -> tuple[int, dict[str, Any]]:  # Any: the CLI's JSON
    rc = main(["enforce", "apply", "--yes", "--host-root", str(root), "--config", str(cfg), "--format", "json"])
    return rc, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("text", ["-5", "99999999999999999999999", "4294967296"])
def test_an_mtu_the_kernel_cannot_print_is_not_a_reading_to_act_on(text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The kernel prints a netdev's MTU as an unsigned int: a negative or larger number in
    the file is not the device's MTU. agentd must not change it (nor journal it as the
    prior value a rollback would try to put back)."""
    root = sim.build_tree("h100-roce", tmp_path / "node")
    mtu = Path(os.path.realpath(root / "sys/class/net/ens2np0/mtu"))
    mtu.write_text(text + "\n")
    rc, out = _apply(capsys, root, _cfg(tmp_path, '["mtu"]'))
    assert not [r for r in out["results"] if r["target"] == "ens2np0"], out["results"]
    assert mtu.read_text() == text + "\n"


def test_a_capture_forced_live_is_never_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`host_mode = "live"` (documented for a container's /host without proc) left in the
    node's config makes any --host-root live: a capture (of this very node: the same
    netdev names) would then be planned from its own files and changed on the *running
    kernel* (netlink by netdev name). A capture is not the node, whatever the config."""
    calls: list[str] = []
    monkeypatch.setattr(live.LiveActuators, "apply", lambda self, s, t: calls.append(s.target))
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["mtu_mismatch@ens2np0"])
    manifest = root / ".agentd/manifest.json"
    manifest.write_text(manifest.read_text().replace('"simulation"', '"capture"'))  # as an unpacked `agentd capture`
    cfg = _cfg(tmp_path, '["mtu"]')
    cfg.write_text('host_mode = "live"\n' + cfg.read_text())
    assert actuators_for(HostRoot.at(root, "live"), load_config(cfg)) is None
    rc = main(["enforce", "apply", "--yes", "--host-root", str(root), "--config", str(cfg), "--format", "json"])
    assert rc == 3 and calls == []


def test_a_read_back_whose_probe_failed_is_not_judged_from_the_earlier_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session's collector keeps a failed probe's previous data (marked stale). When
    the DCB read fails right after PFC was changed, the read-back judged the reading from
    *before* the change: "failed, it reads PFC on none still", the entry closed (not
    outstanding) while the node had changed, its prior value out of `rollback`'s reach."""
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["pfc_off@ens4np0"])
    cfg = load_config(_cfg(tmp_path, '["pfc"]'), overrides={"host_root": str(root)})
    host = HostRoot.at(root)

    def broken(*a: object, **k: object) -> object:
        raise OSError(110, "DCB netlink timed out")

    class ThenDcbFails(SimActuators):
        def apply(self, s: Setting, timeout_s: float) -> Outcome:
            out = super().apply(s, timeout_s)
            monkeypatch.setattr(dcb, "read_pfc", broken)
            return out

    s = _session(tmp_path, host, cfg, ThenDcbFails(root))
    (c,) = s.plan(["pfc"]).drift
    try:
        r = s.apply(c)
    except Exception:  # a run that stops here leaves the entry pending: also right
        r = None
    changed = "enabled     0   0   0   1" in (root / ".agentd/dcb/ens4np0").read_text()
    assert r is None or r.outcome != "failed" or not changed, r
    if changed:  # the node holds the new value: its prior value must stay outstanding
        assert [e.state for e in s.journal.entries] != ["failed"], r
        assert s.journal.outstanding(), [(e.state, e.verify) for e in s.journal.entries]


def test_pfc_on_another_priority_set_between_plan_and_apply_is_kept(tmp_path: Path) -> None:
    """docs/enforce.md: PFC on roce.priority, "the other priorities kept". Something else
    (a boot script, DCBX) turns PFC on for priority 5 after the plan read "none": the
    apply writes PFC on {3} (the planned set), turning 5 off, and the read-back (3 = 3)
    calls it applied."""
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["pfc_off@ens4np0"])
    cfg = load_config(_cfg(tmp_path, '["pfc"]'), overrides={"host_root": str(root)})
    host = HostRoot.at(root)
    dcb_file = root / ".agentd/dcb/ens4np0"

    s = _session(tmp_path, host, cfg, SimActuators(root))
    (c,) = s.plan(["pfc"]).drift
    assert c.current == () and c.desired == (3,)
    text = dcb_file.read_text()
    dcb_file.write_text(text.replace("enabled     0   0   0   0   0   0   0   0", "enabled     0   0   0   0   0   1   0   0"))
    r = s.apply(c)
    now = dcb.parse_mlnx_qos(dcb_file.read_text())
    assert now is not None and now.enabled == (3, 5), f"PFC on 5 was turned off: {now}"
    assert r.outcome == "applied", r
    s.rollback(["pfc"])  # undoes agentd's own change only: priority 3
    now = dcb.parse_mlnx_qos(dcb_file.read_text())
    assert now is not None and now.enabled == (5,), now


def test_a_netdev_renamed_between_plan_and_apply_is_not_changed(tmp_path: Path) -> None:
    """The change names its netdev (netlink by name, sysfs by path): when udev renames
    devices between the plan's read and the change (boot grace is exactly when it does),
    the name planned on may now be another device. The change must go to the device that
    was read (its ifindex), or nowhere."""
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["mtu_mismatch@ens2np0"])
    cfg = load_config(_cfg(tmp_path, '["mtu"]'), overrides={"host_root": str(root)})
    host = HostRoot.at(root)

    s = _session(tmp_path, host, cfg, SimActuators(root))
    (c,) = s.plan(["mtu"]).drift
    d = Path(os.path.realpath(root / "sys/class/net/ens2np0"))
    ifindex = int((d / "ifindex").read_text())
    (d / "ifindex").write_text(f"{ifindex + 100}\n")  # the name ens2np0 now belongs to another device
    r = s.apply(c)
    assert r.outcome != "applied" and (d / "mtu").read_text() == "1500\n", r


def test_a_rollback_after_a_driver_reload_restores_the_device_of_that_name(tmp_path: Path) -> None:
    """A driver reload (or a reboot) gives a netdev a new ifindex: the prior value the
    journal keeps for ens2np0 goes back to the device named ens2np0 now, as read before
    the rollback, instead of being refused as a rename for ever."""
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["mtu_mismatch@ens2np0"])
    cfg = load_config(_cfg(tmp_path, '["mtu"]'), overrides={"host_root": str(root)})
    host = HostRoot.at(root)

    def session() -> Session:
        return _session(tmp_path, host, cfg, SimActuators(root))

    s = session()
    (c,) = s.plan(["mtu"]).drift
    assert s.apply(c).outcome == "applied"
    d = Path(os.path.realpath(root / "sys/class/net/ens2np0"))
    assert (d / "mtu").read_text() == "9000\n"
    (d / "ifindex").write_text(f"{int((d / 'ifindex').read_text()) + 100}\n")  # mlx5_core reloaded
    (r,) = session().rollback(["mtu"])
    assert r.outcome == "restored" and (d / "mtu").read_text() == "1500\n", r


@pytest.mark.parametrize("kind", ["fifo", "dir", "symlink"])
def test_a_lock_path_that_is_not_a_file_stops_the_run_with_a_reason(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A FIFO, a directory or a symlink where enforce.lock goes: nothing changes (it held),
    but the CLI died with a traceback ('internal error') instead of saying why."""
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["mtu_mismatch@ens2np0"])
    out = Path(f"{root}-out")
    out.mkdir()
    lock = out / "enforce.lock"
    if kind == "fifo":
        os.mkfifo(lock)
    elif kind == "dir":
        lock.mkdir()
    else:
        lock.symlink_to(tmp_path / "elsewhere")
    rc = main(["enforce", "apply", "--yes", "--host-root", str(root), "--config", str(_cfg(tmp_path, '["mtu"]'))])
    err = capsys.readouterr().err
    assert rc == 3 and "enforce.lock" in err and "Traceback" not in err and "internal error" not in err, err
    assert Path(os.path.realpath(root / "sys/class/net/ens2np0/mtu")).read_text() == "1500\n"


def test_a_pending_entry_of_an_earlier_boot_is_not_rolled_back_onto_this_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run killed between the journal entry and the change leaves it pending; the node
    then reboots (runtime settings start anew: the boot's own configuration now says MTU
    4200). The next run, here an apply of PFC only, 'recovered' the MTU entry from what the
    node reads now: neither before (1500) nor desired (9000), so it 'rolled back' the MTU
    to 1500, a value of another boot, of a knob no longer named."""
    from agentd.outputs.enforce_journal import Entry, Journal

    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["pfc_off@ens4np0"])
    mtu = Path(os.path.realpath(root / "sys/class/net/ens2np0/mtu"))
    mtu.write_text("4200\n")
    out = Path(f"{root}-out")
    out.mkdir()
    pending = Entry(id=1, at=1.0, by="daemon", why="config.drift mtu@ens2np0 (mtu.mismatch)", knob="mtu", target="ens2np0",
                    before=1500, desired=9000, command="ip link set dev ens2np0 mtu 9000",
                    setting={"knob": "mtu", "target": "ens2np0", "netdev": "ens2np0", "entries": []})
    assert save_journal(journal_path(out), Journal(entries=(pending,), boot_id="an-earlier-boot")).ok
    rc = main(["enforce", "apply", "--yes", "--host-root", str(root), "--config", str(_cfg(tmp_path, '["pfc"]')), "--format", "json"])
    capsys.readouterr()
    assert mtu.read_text() == "4200\n", "an earlier boot's pending MTU change was rolled back onto this boot"
    assert rc in (0, 1)
