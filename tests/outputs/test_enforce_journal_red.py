"""Red-team: the journal's bound must hold when every entry is outstanding."""

from __future__ import annotations

from pathlib import Path

from agentd.outputs.enforce_journal import MAX_BYTES, MAX_ENTRIES, Entry, Journal, journal_path, load_journal, render_journal, save_journal


def test_a_setting_fixed_every_boot_does_not_grow_the_journal_without_bound(tmp_path: Path) -> None:
    """Runtime settings are lost at each reboot; a node whose boot-time services set them
    wrong gets them fixed in every boot-grace window: one more `applied` (outstanding)
    entry per setting and boot, none ever dropped. The journal grew without bound until
    it passed MAX_BYTES, when the next load set it aside: every prior value gone. Only the
    oldest outstanding entry of a setting holds the value rollback restores."""
    keys = [f"eth{n}" for n in range(8)]
    j, i = Journal(), 0
    for _boot in range(MAX_ENTRIES // 2):
        for k in keys:
            i += 1
            j = j.with_entry(Entry(id=i, at=float(i), by="daemon", why="config.drift", knob="mtu", target=k, before=1500 + i,
                                   desired=9000, command="ip link set", state="applied"))
    assert len(j.entries) <= MAX_ENTRIES + len(keys), len(j.entries)
    oldest = {e.target: e.before for e in sorted(j.outstanding(), key=lambda e: e.id, reverse=True)}
    assert oldest == {k: 1501 + n for n, k in enumerate(keys)}  # each setting's first prior value
    assert len(render_journal(j)) < MAX_BYTES
    path = journal_path(tmp_path)
    assert save_journal(path, j).ok
    assert load_journal(path).note == ""
