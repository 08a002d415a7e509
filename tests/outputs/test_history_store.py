"""history.json (agentd.outputs.history_store): written atomically and bounded; a corrupt
or foreign file is set aside and reported, another boot's is not loaded, nothing raises."""

from __future__ import annotations

import json
import os

import pytest

from agentd.judging.baseline import NodeIdentity
from agentd.outputs import history_store as hs
from agentd.outputs.history_store import history_path, load_history, render_history, save_history

NODE = NodeIdentity(machine_id="a" * 32, hostname="node1", host_root="/")
BOOT = "3f1e0b7c-0000-4000-8000-000000000001"
SNAPS = [{"taken_at": 1.0 + i, "host_root": "/", "hcas": [], "netdevs": [], "gpus": [], "pci": []} for i in range(5)]


def test_round_trip(tmp_path):
    path = history_path(tmp_path)
    assert load_history(path, node=NODE, boot_id=BOOT).status == "absent"
    r = save_history(path, node=NODE, boot_id=BOOT, snapshots=SNAPS, lifecycle=[{"code": "ib.port.flapping", "since": 5}])
    assert r.ok and path.name == "history.json"
    doc = json.loads(path.read_text())
    assert doc["format"] == "agentd-history" and doc["version"] == 1 and doc["node"]["machine_id"] == "a" * 32
    got = load_history(path, node=NODE, boot_id=BOOT)
    assert got.status == "loaded" and got.snapshots == SNAPS and got.lifecycle == [{"code": "ib.port.flapping", "since": 5}]
    assert got.note is None and isinstance(got.snapshots[0]["taken_at"], float)


def test_the_byte_budget_drops_the_oldest():
    big = [{**s, "pci": [{"bdf": f"{i}", "aer": None, "pad": "x" * 400}]} for i, s in enumerate(SNAPS * 20)]
    text = render_history(node=NODE, boot_id=BOOT, snapshots=big, lifecycle=[{"x": "y" * 100}] * 50, max_bytes=20_000)
    doc = json.loads(text)
    assert len(text) <= 20_000 and 0 < len(doc["snapshots"]) < len(big)
    assert doc["snapshots"][-1] == big[-1]  # the newest stay
    only_life = render_history(node=NODE, boot_id=BOOT, snapshots=[], lifecycle=[{"n": i, "x": "y" * 100} for i in range(500)], max_bytes=20_000)
    life = json.loads(only_life)["lifecycle"]
    assert len(only_life) <= 20_000 and life[-1]["n"] == 499


def test_another_boot_is_not_loaded_and_the_file_stays(tmp_path):
    path = history_path(tmp_path)
    save_history(path, node=NODE, boot_id=BOOT, snapshots=SNAPS)
    got = load_history(path, node=NODE, boot_id="another-boot")
    assert got.status == "new_boot" and got.snapshots == [] and "another-boot" in (got.note or "")
    assert path.is_file()


@pytest.mark.parametrize("node,why", [
    (NodeIdentity(machine_id="b" * 32, hostname="node1", host_root="/"), "machine-id"),
    (NodeIdentity(machine_id=None, hostname="node2", host_root="/"), "hostname"),
])
def test_another_nodes_file_is_set_aside(tmp_path, node, why):
    path = history_path(tmp_path)
    save_history(path, node=NODE, boot_id=BOOT, snapshots=SNAPS)
    got = load_history(path, node=node, boot_id=BOOT)
    assert got.status == "set_aside" and got.snapshots == [] and why in (got.note or "")
    assert got.set_aside_to is not None and got.set_aside_to.name.startswith("history.json.foreign-")
    assert not path.exists() and got.set_aside_to.is_file()


def test_one_node_through_a_containers_root_is_the_same_node(tmp_path):
    """``/`` on the node and ``/host`` in its agentd container: the baseline's rule."""
    path = history_path(tmp_path)
    save_history(path, node=NODE, boot_id=BOOT, snapshots=SNAPS)
    got = load_history(path, node=NODE.model_copy(update={"host_root": "/host"}), boot_id=BOOT)
    assert got.status == "loaded" and len(got.snapshots) == len(SNAPS)


def _valid() -> dict:
    return json.loads(render_history(node=NODE, boot_id=BOOT, snapshots=SNAPS, lifecycle=[]))


@pytest.mark.parametrize("content,why", [
    (b"\x00\xffgarbage", "not JSON"),
    (json.dumps(_valid()).encode()[:50], "not JSON"),
    (json.dumps({**_valid(), "version": 2}).encode(), "version 2"),
    (json.dumps({**_valid(), "format": "something-else"}).encode(), "not an agentd history"),
    (json.dumps({**_valid(), "snapshots": {"a": 1}}).encode(), "wrong type"),
    (json.dumps({**_valid(), "node": {"machine_id": 7}}).encode(), "wrong type"),
    (b"[" * 100_000, "not JSON"),
    (b" " * (hs.MAX_BYTES + 1), "larger than"),
])
def test_a_corrupt_file_is_set_aside(tmp_path, content, why):
    path = history_path(tmp_path)
    path.write_bytes(content)
    got = load_history(path, node=NODE, boot_id=BOOT)
    assert got.status == "set_aside" and why in (got.note or ""), got.note
    assert got.set_aside_to is not None and got.set_aside_to.name.startswith("history.json.corrupt-")
    assert got.set_aside_to.read_bytes() == content and not path.exists()


def test_a_fifo_a_directory_or_a_symlink_is_set_aside_without_waiting(tmp_path):
    path = history_path(tmp_path)
    os.mkfifo(path)  # opened for reading with nobody writing: a plain open would wait forever
    got = load_history(path, node=NODE, boot_id=BOOT)
    assert got.status == "set_aside" and "FIFO" in (got.note or "") and not os.path.lexists(path)
    path.mkdir()
    got = load_history(path, node=NODE, boot_id=BOOT)
    assert got.status == "set_aside" and "directory" in (got.note or "") and not os.path.lexists(path)
    target = tmp_path / "elsewhere.json"
    save_history(target, node=NODE, boot_id=BOOT, snapshots=SNAPS)
    path.symlink_to(target)
    got = load_history(path, node=NODE, boot_id=BOOT)
    assert got.status == "set_aside" and "symlink" in (got.note or "") and target.is_file()


def test_only_a_few_set_aside_files_are_kept(tmp_path):
    path = history_path(tmp_path)
    for i in range(hs.KEEP_ASIDE + 3):
        path.write_text(f"garbage {i}")
        assert load_history(path, node=NODE, boot_id=BOOT).status == "set_aside"
    aside = sorted(tmp_path.glob("history.json.corrupt-*"))
    assert len(aside) == hs.KEEP_ASIDE
    assert f"garbage {hs.KEEP_ASIDE + 2}" in {p.read_text() for p in aside}  # the newest is kept


def test_a_write_that_fails_says_why_and_raises_nothing(tmp_path):
    path = history_path(tmp_path)
    path.mkdir()
    r = save_history(path, node=NODE, boot_id=BOOT, snapshots=SNAPS)
    assert not r.ok and r.error
    r = save_history(tmp_path / "x.json", node=NODE, boot_id=BOOT, snapshots=SNAPS, lifecycle=[{"t": float("nan")}])
    assert not r.ok and "not written" in (r.error or "")
