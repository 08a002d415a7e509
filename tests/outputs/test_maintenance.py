"""Maintenance (issue 15): the file under the state dir, `agentd maintenance on|off|status`,
and `agentd check` answering `maintenance`.

The file's presence alone means maintenance: whatever it holds (automation may `touch`
it or echo a line into it, or something hostile may sit there) is read without raising,
and its reason is one printable line.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from agentd import cli, sim
from agentd.model import Finding
from agentd.outputs.maintenance import (
    REASON_MAX,
    Maintenance,
    clear_maintenance,
    maintenance_path,
    parse_maintenance,
    read_maintenance,
    set_maintenance,
)
from agentd.views import findings_json, findings_text
from tests.support.cli import Ran, run_cli

MTIME = 1714557600.0  # 2024-05-01T10:00:00Z
HANG_GUARD_S = 120  # a guard against a wedged test, not a timing assertion


# --- parse: presence means on, whatever the bytes -------------------------------------


def test_json_written_by_agentd() -> None:
    m = parse_maintenance(b'{"reason": "swapping cables", "since": 1714000000.5, "by": "alice"}\n', MTIME)
    assert m == Maintenance(reason="swapping cables", since=1714000000.5, by="alice")


def test_json_without_fields_uses_the_mtime() -> None:
    assert parse_maintenance(b"{}", MTIME) == Maintenance(reason="", since=MTIME, by=None)


@pytest.mark.parametrize("doc", [
    b'{"reason": 5, "since": "yesterday", "by": ["x"]}',
    b'{"reason": null, "since": NaN, "by": ""}',
    b'{"reason": {"a": 1}, "since": Infinity, "by": 7}',
    b'{"reason": [], "since": -5, "by": null}',
    b'{"reason": false, "since": true}',
    b'{"since": 1' + b"0" * 400 + b"}",  # an integer no float holds
    b'{"since": 1e400}',
])
def test_json_of_the_wrong_types(doc: bytes) -> None:
    assert parse_maintenance(doc, MTIME) == Maintenance(reason="", since=MTIME, by=None)


def test_text_first_line_is_the_reason() -> None:
    m = parse_maintenance(b"\n  \n  firmware update on rail 3  \nsecond line\n", MTIME)
    assert m == Maintenance(reason="firmware update on rail 3", since=MTIME, by=None)


def test_a_json_string_is_its_text() -> None:
    assert parse_maintenance(b'"cable swap"\n', MTIME).reason == "cable swap"


@pytest.mark.parametrize("data", [b"", b"\n\n", b"   "])
def test_empty_file_is_maintenance_without_reason(data: bytes) -> None:
    assert parse_maintenance(data, MTIME) == Maintenance(reason="", since=MTIME, by=None)


def test_json_that_does_not_parse_is_text() -> None:
    assert parse_maintenance(b'{"reason": "cut off', MTIME).reason == '{"reason": "cut off'
    assert parse_maintenance(b"[1, 2]", MTIME).reason == "[1, 2]"


@pytest.mark.parametrize("data", [
    b"\xff\xfe bad \xc3",
    b"a\x1b[31mred\x1b[0m\x00b\rc\td\x7f",
    "x\u2028y\u0085z\u200b".encode(),
    b"{" * 100_000,
    b"[" * 100_000,
    b'{"reason": "' + b"\x01" * 5000 + b'"}',
    b"x" * (1 << 20),
    os.urandom(4096),
])
def test_hostile_bytes_give_one_printable_line(data: bytes) -> None:
    m = parse_maintenance(data, MTIME)
    assert m.reason.isprintable() and "\n" not in m.reason
    assert len(m.reason) <= REASON_MAX
    m.reason.encode("utf-8")  # no lone surrogate left
    assert math.isfinite(m.since)


def test_undecodable_bytes_are_escaped_not_dropped() -> None:
    assert parse_maintenance(b"rail \xff3 \x1b down", MTIME).reason == "rail \\xff3 down"


def test_a_hostile_mtime_is_not_a_time() -> None:
    assert parse_maintenance(b"", float("nan")).since == 0.0


# --- read: regular files only, never a hang ------------------------------------------


def test_no_file_no_maintenance(tmp_path: Path) -> None:
    assert read_maintenance(tmp_path / "maintenance.json") is None
    assert read_maintenance(tmp_path / "absent-dir" / "maintenance.json") is None


def test_touched_file_is_maintenance(tmp_path: Path) -> None:
    p = maintenance_path(tmp_path)
    assert p == tmp_path / "maintenance.json"
    p.touch()
    os.utime(p, (MTIME, MTIME))
    assert read_maintenance(p) == Maintenance(reason="", since=MTIME, by=None)


def test_a_large_file_is_read_bounded(tmp_path: Path) -> None:
    p = maintenance_path(tmp_path)
    p.write_bytes(b"why " * (4 << 20))
    m = read_maintenance(p)
    assert m is not None and m.reason.startswith("why why") and len(m.reason) <= REASON_MAX


def test_a_fifo_is_maintenance_and_no_hang(tmp_path: Path) -> None:
    p = maintenance_path(tmp_path)
    os.mkfifo(p)
    m = read_maintenance(p)  # a blocking read would wait here for a writer forever
    assert m is not None and m.reason.startswith("unreadable maintenance file: ") and "a FIFO" in m.reason


def test_a_directory_is_maintenance(tmp_path: Path) -> None:
    p = maintenance_path(tmp_path)
    p.mkdir()
    m = read_maintenance(p)
    assert m is not None and m.reason.startswith("unreadable maintenance file: ") and "a directory" in m.reason


@pytest.mark.parametrize("target", ["real.json", "absent.json"])
def test_a_symlink_is_maintenance_not_followed(tmp_path: Path, target: str) -> None:
    (tmp_path / "real.json").write_text('{"reason": "from elsewhere"}')
    p = maintenance_path(tmp_path)
    p.symlink_to(tmp_path / target)
    m = read_maintenance(p)
    assert m is not None and m.reason.startswith("unreadable maintenance file: ") and "a symlink" in m.reason
    assert "from elsewhere" not in m.reason


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_a_file_this_user_cannot_read_is_maintenance(tmp_path: Path) -> None:
    p = maintenance_path(tmp_path)
    p.write_text("secret reason")
    p.chmod(0)
    m = read_maintenance(p)
    assert m is not None and m.reason.startswith("unreadable maintenance file: ")


# --- set and clear -------------------------------------------------------------------


def test_set_read_clear_round_trip(tmp_path: Path) -> None:
    p = maintenance_path(tmp_path / "state")
    res = set_maintenance(p, "rail 3\nrecabling\x1b", "bob", now=MTIME)
    assert res.ok and p.exists()
    assert read_maintenance(p) == Maintenance(reason="rail 3 recabling", since=MTIME, by="bob")
    assert json.loads(p.read_text()) == {"reason": "rail 3 recabling", "since": MTIME, "by": "bob"}
    assert clear_maintenance(p) is True
    assert read_maintenance(p) is None
    assert clear_maintenance(p) is False  # already off: fine


def test_set_refuses_a_fifo_without_hanging(tmp_path: Path) -> None:
    p = maintenance_path(tmp_path)
    os.mkfifo(p)
    res = set_maintenance(p, "x", None)
    assert not res.ok and "FIFO" in (res.error or "")


# --- views: pure, given the maintenance ------------------------------------------------

PORT_DOWN = Finding(code="ib.port.down", severity="critical", subject="mlx5_3:1", message="port state DOWN", remediation="check the cable")


def test_findings_text_in_maintenance() -> None:
    m = Maintenance(reason="cable swap", since=MTIME, by="alice")
    assert findings_text([PORT_DOWN], maintenance=m).splitlines() == [
        "maintenance",
        "maintenance agentd.maintenance node: cable swap (since 2024-05-01T10:00:00Z)",
        "critical ib.port.down mlx5_3:1: port state DOWN",
    ]
    assert findings_text([], maintenance=Maintenance("", MTIME, None)).splitlines()[1] == \
        "maintenance agentd.maintenance node: no reason given (since 2024-05-01T10:00:00Z)"
    assert findings_text([PORT_DOWN]).splitlines()[0] == "critical"


def test_findings_json_in_maintenance() -> None:
    doc = findings_json([PORT_DOWN], Maintenance(reason="cable swap", since=MTIME, by=None))
    assert doc["status"] == "maintenance" and doc["measured_status"] == "critical"
    assert doc["maintenance"] == {"reason": "cable swap", "since": MTIME, "by": None}
    assert [f["code"] for f in doc["findings"]] == ["ib.port.down"]
    assert set(findings_json([PORT_DOWN])) == {"status", "findings"}


# --- the CLI ---------------------------------------------------------------------------


def write_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(f"""
[intervals]
check_rate_window_s = 0.2
fast_s = 3
[timeouts]
nvml_s = 1
[paths]
baseline = "{tmp_path / 'state' / 'baseline.json'}"
state_dir = "{tmp_path / 'state'}"
""")
    return cfg


def test_cli_on_status_off_on_a_live_root(tmp_path: Path, capsys, monkeypatch) -> None:
    # No --host-root: / is the live node, so the file is the config's paths.state_dir's.
    cfg = write_config(tmp_path)
    monkeypatch.setenv("SUDO_USER", "alice")
    path = tmp_path / "state" / "maintenance.json"
    assert cli.main(["maintenance", "status", "--config", str(cfg)]) == 0
    assert capsys.readouterr().out == "not in maintenance\n"

    assert cli.main(["maintenance", "on", "--reason", "swapping cables", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert f"maintenance on: swapping cables (by alice); wrote {path}" in out
    assert "within 3 s (intervals.fast_s)" in out
    m = read_maintenance(path)
    assert m is not None and (m.reason, m.by) == ("swapping cables", "alice")

    assert cli.main(["maintenance", "status", "--config", str(cfg)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("maintenance: swapping cables (since ") and line.endswith("Z, by alice)")

    assert cli.main(["maintenance", "status", "--format", "json", "--config", str(cfg)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"maintenance": {"reason": "swapping cables", "since": m.since, "by": "alice"}, "path": str(path)}

    assert cli.main(["maintenance", "off", "--config", str(cfg)]) == 0
    assert f"maintenance off: removed {path}" in capsys.readouterr().out
    assert not path.exists()
    assert cli.main(["maintenance", "off", "--config", str(cfg)]) == 0  # already off
    assert "not in maintenance" in capsys.readouterr().out
    assert cli.main(["maintenance", "status", "--format", "json", "--config", str(cfg)]) == 0
    assert json.loads(capsys.readouterr().out) == {"maintenance": None, "path": str(path)}


def test_cli_on_fails_with_exit_3(tmp_path: Path, capsys) -> None:
    cfg = write_config(tmp_path)
    (tmp_path / "state").write_text("a file where the state directory should be")
    assert cli.main(["maintenance", "on", "--config", str(cfg)]) == 3
    assert "could not write" in capsys.readouterr().err


@pytest.mark.tree
def test_cli_on_a_simulated_root_uses_the_moved_state_dir(tmp_path: Path, capsys) -> None:
    root = sim.build_tree("h100-ib", tmp_path / "sim")
    cfg = write_config(tmp_path)
    assert cli.main(["maintenance", "on", "--reason", "demo", "--host-root", str(root), "--config", str(cfg)]) == 0
    capsys.readouterr()
    moved = tmp_path / "sim-out" / "maintenance.json"  # where `agentd run --host-root` looks
    assert read_maintenance(moved) is not None
    assert not (tmp_path / "state" / "maintenance.json").exists()  # the node's is untouched
    assert cli.main(["maintenance", "off", "--host-root", str(root), "--config", str(cfg)]) == 0
    assert not moved.exists()


def run_check(root: Path, cfg: Path, *extra: str) -> Ran:
    return run_cli("check", "--host-root", str(root), "--config", str(cfg), *extra)


@pytest.mark.tree
def test_check_in_maintenance_reports_and_exits_0(tmp_path: Path) -> None:
    root = sim.build_tree("h100-ib", tmp_path / "sim", faults=["port_down@mlx5_3"])
    cfg = write_config(tmp_path)
    assert run_check(root, cfg).returncode == 2
    set_maintenance(tmp_path / "sim-out" / "maintenance.json", "recabling rail 3", "alice", now=MTIME)

    t = run_check(root, cfg)
    assert t.returncode == 0, t.stderr
    lines = t.stdout.splitlines()
    assert lines[:2] == ["maintenance", "maintenance agentd.maintenance node: recabling rail 3 (since 2024-05-01T10:00:00Z)"]
    assert lines[2].startswith("critical ib.port.down mlx5_3:1: ")  # everything else still reported

    j = run_check(root, cfg, "--format", "json")
    assert j.returncode == 0
    doc = json.loads(j.stdout)
    assert doc["status"] == "maintenance" and doc["measured_status"] == "critical"
    assert doc["maintenance"] == {"reason": "recabling rail 3", "since": MTIME, "by": "alice"}
    assert doc["findings"][0]["code"] == "ib.port.down"

    clear_maintenance(tmp_path / "sim-out" / "maintenance.json")
    t = run_check(root, cfg)
    assert t.returncode == 2 and t.stdout.splitlines()[0] == "critical"


@pytest.mark.tree
def test_check_ignores_the_configured_state_dir_for_another_root(tmp_path: Path) -> None:
    # The node's own maintenance file says nothing about a simulated root.
    root = sim.build_tree("h100-ib", tmp_path / "sim")
    cfg = write_config(tmp_path)
    set_maintenance(tmp_path / "state" / "maintenance.json", "the node's", None)
    t = run_check(root, cfg)
    assert t.returncode == 0 and t.stdout.splitlines()[0] == "ok"
