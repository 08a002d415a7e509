"""The enforcement journal: atomic, bounded without dropping a prior value, a bad file set
aside, attempts per boot."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentd.outputs.enforce_journal import (
    MAX_ENTRIES,
    Entry,
    Journal,
    JournalError,
    journal_path,
    load_journal,
    parse_journal,
    render_journal,
    save_journal,
)


def entry(i: int, state: str = "applied", knob: str = "mtu") -> Entry:
    return Entry(id=i, at=1.0 * i, by="daemon", why="config.drift", knob=knob, target=f"eth{i}", before=1500, desired=9000,
                 command="ip link set dev eth mtu 9000", state=state)


def test_round_trip(tmp_path: Path) -> None:
    j = Journal(entries=(entry(1), entry(2, "failed")), boot_id="b1", attempts={"mtu@eth1": 1}, stuck={"mtu@eth2": "failed: EINVAL"},
                healthy_at=1_790_000_000.5)
    path = journal_path(tmp_path)
    assert save_journal(path, j).ok
    assert load_journal(path) == j
    assert parse_journal(render_journal(j).encode()) == j


def test_the_bound_drops_finished_entries_never_a_prior_value() -> None:
    j = Journal()
    for i in range(1, MAX_ENTRIES + 50):
        j = j.with_entry(entry(i, "applied" if i % 100 == 1 else "failed"))
    assert len(j.entries) == MAX_ENTRIES
    assert {e.id for e in j.outstanding()} == {i for i in range(1, MAX_ENTRIES + 50) if i % 100 == 1}


def test_a_file_that_is_not_a_journal_is_set_aside(tmp_path: Path) -> None:
    path = journal_path(tmp_path)
    path.write_text("{ not json")
    j = load_journal(path)
    assert j.entries == () and "set aside" in j.note
    (aside,) = tmp_path.glob("enforce-journal.json.bad-*")
    assert aside.read_text() == "{ not json" and not path.exists()


def test_enforce_status_reads_a_damaged_journal_without_moving_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`agentd enforce status` is read-only and takes no lock: a damaged journal is said,
    and left where it is for the next apply or rollback (which hold the lock) to set aside."""
    from agentd.cli import main

    (tmp_path / "agentd.toml").write_text(f'[paths]\nstate_dir = "{tmp_path}"\n[enforce]\nknobs = ["mtu"]\n')
    path = journal_path(tmp_path)
    path.write_text("{ not json")
    assert main(["enforce", "status", "--config", str(tmp_path / "agentd.toml")]) == 3
    assert "is not a journal" in capsys.readouterr().err
    assert path.read_text() == "{ not json" and list(tmp_path.glob("enforce-journal.json.bad-*")) == []


def test_a_file_that_cannot_be_set_aside_stops_every_change(tmp_path: Path) -> None:
    path = journal_path(tmp_path)
    path.write_text("[]")
    now = int(time.time())
    for t in range(now, now + 30):  # where it would be set aside: directories that are not empty
        (tmp_path / f"{path.name}.bad-{t}" / "x").mkdir(parents=True)
    with pytest.raises(JournalError):
        load_journal(path)
    assert path.read_text() == "[]"  # never overwritten


def test_a_new_boot_forgets_attempts_and_stuck_settings() -> None:
    j = Journal(entries=(entry(1),), boot_id="b1", attempts={"mtu@eth1": 3}, stuck={"mtu@eth1": "failed"}, healthy_at=5.0)
    assert j.for_boot("b1") is j
    new = j.for_boot("b2")
    assert (new.attempts, new.stuck, new.healthy_at, new.entries) == ({}, {}, None, j.entries)
    assert j.tried("mtu@eth1").attempts == {"mtu@eth1": 4} and j.reset().stuck == {}
    assert j.reset().healthy_at == 5.0  # `status --reset` forgets attempts, not that the node was healthy


@pytest.mark.parametrize("value", ["true", '"yesterday"', "[1]", "NaN", "Infinity"])
def test_a_healthy_mark_that_is_not_a_time_is_not_a_journal(value: str) -> None:
    bad = render_journal(Journal(healthy_at=1.0)).replace('"healthy_at": 1.0', f'"healthy_at": {value}')
    assert value in bad
    with pytest.raises(ValueError):
        parse_journal(bad.encode())


def test_a_journal_written_before_the_healthy_mark_reads_as_never_healthy() -> None:
    old = render_journal(Journal(boot_id="b1")).replace(' "healthy_at": null,\n', "")
    assert "healthy_at" not in old
    assert parse_journal(old.encode()).healthy_at is None


def test_unknown_states_are_refused() -> None:
    bad = render_journal(Journal(entries=(entry(1),))).replace('"applied"', '"whatever"')
    with pytest.raises(ValueError):
        parse_journal(bad.encode())
