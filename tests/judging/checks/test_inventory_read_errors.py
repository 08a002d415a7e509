"""A listing that fails is a read error, never absence (issue 42, item 1).

Through `agentd check` on a simulated node judged against its recorded baseline: when the
directory that lists the HCAs or the GPUs cannot be read (EMFILE because the fds ran out,
a symlink loop; anything but ENOENT), the devices it would have shown are not "missing":
the read error is a probe finding (warning), and the node is degraded, not critical.
ENOENT (the listing is gone) stays absence.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from agentd import sim
from agentd.cli import main
from tests.support.recorded_baseline import baseline_of, record_baseline

pytestmark = pytest.mark.tree

CLASS_IB = "sys/class/infiniband"
PCI_DEVICES = "sys/bus/pci/devices"


@pytest.fixture
def node(tmp_path: Path) -> tuple[Path, Path]:
    root = sim.build_tree("h100-ib", tmp_path / "root")
    record_baseline(root, baseline_of(root))
    cfg = tmp_path / "agentd.toml"
    cfg.write_text("[intervals]\ncheck_rate_window_s = 0.1\n[timeouts]\nnvml_s = 2\n")
    return root, cfg


def check(root: Path, cfg: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, str]]]:
    rc = main(["check", "--host-root", str(root), "--config", str(cfg), "--format", "json"])
    out = capsys.readouterr().out
    return rc, json.loads(out)["findings"]


def codes(findings: list[dict[str, str]], severity: str | None = None) -> set[tuple[str, str]]:
    return {(f["code"], f["subject"]) for f in findings if severity is None or f["severity"] == severity}


def missing(findings: list[dict[str, str]]) -> set[tuple[str, str]]:
    return {c for c in codes(findings) if c[0].startswith("inventory.")}


def _loop(path: Path) -> None:
    """``path`` replaced by a symlink to itself: listing it fails with ELOOP."""
    os.rename(path, path.with_name(path.name + ".real"))
    os.symlink(path.name, path)


@pytest.mark.parametrize("listing", [CLASS_IB, PCI_DEVICES])
def test_a_listing_that_loops_is_a_read_error_not_every_device_missing(node, capsys, listing):
    root, cfg = node
    if listing == PCI_DEVICES:
        sim.apply_fault(root, "nvml_init_error")  # else NVML alone shows the GPUs
    _loop(root / listing)
    rc, findings = check(root, cfg, capsys)
    assert missing(findings) == set(), missing(findings)
    assert any(code == "probe.failed" and listing in subject for code, subject in codes(findings, "warning")), codes(findings)
    assert rc == 1  # degraded: agentd could not look, which is not the hardware being gone


def test_emfile_on_the_hca_listing_is_a_read_error_not_every_hca_missing(node, capsys, monkeypatch):
    root, cfg = node
    real_listdir = os.listdir
    target = str(root / CLASS_IB)

    def listdir(path=None):  # the fds ran out just as the HCAs were listed (a flood holds the rest)
        where = os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else os.fspath(path)
        if where == target:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    rc, findings = check(root, cfg, capsys)
    assert missing(findings) == set(), missing(findings)
    assert ("probe.failed", f"ib:{CLASS_IB}") in codes(findings, "warning"), codes(findings)
    assert rc == 1


def test_a_listing_that_is_gone_is_absence(node, capsys):
    """ENOENT is absence: the same node with the class directory removed is critical."""
    root, cfg = node
    os.rename(root / CLASS_IB, root / "sys/class/infiniband.gone")
    rc, findings = check(root, cfg, capsys)
    assert ("inventory.hca.missing", "mlx5_0") in codes(findings, "critical")
    assert rc == 2
