"""`agentd capture` and `--host-root FILE` say what happened in the user's words (issue 43):
a capture that cannot be written is an error message, not a traceback; a replay names the
capture file the user gave, not the temporary directory it was unpacked in."""

from __future__ import annotations

import io
import tarfile

import pytest

from tests.support.cli import run_cli


@pytest.mark.slow  # a collection of the node to record
def test_capture_into_a_directory_that_cannot_hold_it_is_a_clean_error(shared_tree, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where a directory should be")
    out = blocker / "node.tar.gz"
    r = run_cli("capture", "--host-root", str(shared_tree("h100-ib")), "--out", str(out))
    assert r.returncode == 3
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert r.stderr.startswith(f"agentd: capture not written to {out}:")


def test_a_replay_names_the_capture_file_not_its_temporary_directory(tmp_path):
    notes = tmp_path / "notcap.tar.gz"  # a tar.gz, but not of a node
    with tarfile.open(notes, "w:gz") as tar:
        info = tarfile.TarInfo("etc/hostname")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"node\n"))
    r = run_cli("check", "--host-root", str(notes))
    assert r.returncode == 3
    assert r.stderr.startswith(f"agentd: capture {notes} (unpacked in ") and "has no sys/ directory" in r.stderr


@pytest.mark.slow  # a capture, then a collection of it
def test_notes_on_a_replayed_capture_name_the_file(shared_tree, tmp_path):
    cap = tmp_path / "node.tar.gz"
    assert run_cli("capture", "--host-root", str(shared_tree("h100-ib")), "--out", str(cap)).returncode == 0
    r = run_cli("check", "--host-root", str(cap), env={"AGENTD_INTERVALS__CHECK_RATE_WINDOW_S": "0"})
    assert r.returncode in (0, 1), r.stderr  # judged (a slow NVML read on a loaded machine is a warning)
    assert f"agentd: note: capture {cap} (unpacked in " in r.stderr
    out = tmp_path / "nccl"
    r = run_cli("render", "--host-root", str(cap), "--out-dir", str(out), env={"AGENTD_INTERVALS__CHECK_RATE_WINDOW_S": "0"})
    assert r.returncode == 0, r.stderr
    header = [line for line in (out / "nccl.conf").read_text().splitlines() if line.startswith("# host root: ")]
    assert header == [f"# host root: {cap}"]  # not the directory it was unpacked in, gone at exit
