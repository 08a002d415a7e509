"""collect.ignore: no reader opens anything of an ignored device, nothing hangs, and the
only thing said about it is the fact collect.device.ignored (issue 36).

The ignored function's every file is made a FIFO (with a writer holding it open, so a read
that reached one would get EAGAIN or, without O_NONBLOCK, block), and mode 000: a reader
that touched it would report read errors or stall; a recorder on the host root sees every
path any reader lists or reads.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest

from agentd import sim
from agentd.cli import main
from agentd.collection.collector import Collector
from agentd.config import AgentConfig
from agentd.host.fs import HostRoot
from agentd.judging.judge import judge
from tests.support.read_spy import ReadSpy

pytestmark = pytest.mark.tree


def _fifo_everything(fn: Path, writers: list[int]) -> int:
    """Every regular file under ``fn`` becomes a FIFO (mode 000) with a writer open on it."""
    n = 0
    for dirpath, _dirs, files in os.walk(fn):
        for name in files:
            p = Path(dirpath, name)
            if not stat.S_ISREG(p.lstat().st_mode):
                continue
            p.unlink()
            os.mkfifo(p, 0o000)
            writers.append(os.open(p, os.O_RDWR | os.O_NONBLOCK))  # O_RDWR: opens without a reader
            n += 1
    return n


@pytest.fixture
def node(tmp_path: Path):
    root = sim.build_tree("h100-ib", tmp_path / "root")
    target = os.readlink(root / "sys/class/infiniband/mlx5_3")  # ../../devices/.../0000:5a:00.0/infiniband/mlx5_3
    fn = (root / "sys/class/infiniband" / target).resolve().parent.parent
    bdf = fn.name
    netdev = next(n for n in os.listdir(root / "sys/class/net") if f"/{bdf}/net/" in os.readlink(root / "sys/class/net" / n))
    writers: list[int] = []
    assert _fifo_everything(fn, writers) > 50
    for rec in (root / ".agentd/ethtool" / netdev, root / ".agentd/dcb" / netdev):  # its recorded answers too
        if rec.is_file():
            rec.unlink()
            os.mkfifo(rec, 0o000)
            writers.append(os.open(rec, os.O_RDWR | os.O_NONBLOCK))
    yield root, fn, bdf, netdev
    for fd in writers:
        os.close(fd)


def _rel(root: Path, p: Path) -> str:
    return str(p.relative_to(root))


@pytest.mark.parametrize("which", ["rdma", "netdev", "bdf"])
def test_an_ignored_device_is_never_read_and_is_one_fact(node, which):
    root, fn, bdf, netdev = node
    pattern = {"rdma": "mlx5_3", "netdev": netdev, "bdf": bdf}[which]
    spy = ReadSpy()
    host = dataclasses.replace(HostRoot.at(root), recorder=spy)
    config = AgentConfig.model_validate({"host_root": str(root), "collect": {"ignore": [pattern]}})
    c = Collector(host, config)
    c.run_sync()
    snap = c.snapshot()

    forbidden = (str(fn), str(root / "sys/class/infiniband/mlx5_3"), str(root / "sys/class/net" / netdev),
                 str(root / "sys/bus/pci/devices" / bdf), str(root / ".agentd/ethtool" / netdev), str(root / ".agentd/dcb" / netdev))
    assert not [p for p in spy.read if p.startswith(forbidden)]
    assert all(p.ok and not p.timed_out for p in snap.probes)

    assert snap.hca("mlx5_3") is None and snap.netdev(netdev) is None and snap.pci_device(bdf) is None
    assert {(d.kind, d.name) for d in snap.ignored} == {("rdma", "mlx5_3"), ("netdev", netdev), ("pci", bdf)}
    assert not [e for e in snap.read_errors if bdf in e.path or "mlx5_3" in e.path or netdev in e.path]

    findings = judge(snap, (), config, None).findings
    about = [f for f in findings if bdf in f.subject or "mlx5_3" in f.subject or netdev in f.subject
             or bdf in f.message or "mlx5_3" in f.message or f" {netdev}" in f.message]
    assert [(f.code, f.severity, f.subject) for f in about] == [("collect.device.ignored", "ok", bdf)]
    assert repr(pattern) in about[0].message


def test_the_check_command_says_one_fact_about_it(node, tmp_path, capsys):
    root, _fn, bdf, netdev = node
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(f'host_root = "{root}"\n[intervals]\ncheck_rate_window_s = 0\n[collect]\nignore = ["mlx5_3"]\n')
    main(["check", "--config", str(cfg), "--format", "json", "--all"])
    doc = json.loads(capsys.readouterr().out)
    about = [f for f in doc["findings"] if bdf in f["subject"] or "mlx5_3" in f["subject"] or netdev in f["subject"]]
    assert [(f["code"], f["severity"]) for f in about] == [("collect.device.ignored", "ok")]


def test_a_reload_that_ignores_a_device_stops_reading_it(node):
    root, fn, bdf, _netdev = node
    spy = ReadSpy()
    host = dataclasses.replace(HostRoot.at(root), recorder=spy)
    c = Collector(host, AgentConfig.model_validate({"host_root": str(root)}))
    c.run_sync(["ib"])
    assert c.snapshot().hca("mlx5_3") is not None  # read (its FIFOs read as empty)
    c = c.with_config(AgentConfig.model_validate({"host_root": str(root), "collect": {"ignore": ["mlx5_3"]}}))
    spy.read.clear()
    c.run_sync(["ib", "ib_counters", "pci", "netdev"])
    assert not [p for p in spy.read if p.startswith((str(fn), str(root / "sys/class/infiniband/mlx5_3")))]
    assert c.snapshot().hca("mlx5_3") is None


def test_an_ignore_pattern_must_be_a_name_glob():
    with pytest.raises(ValueError, match="not a device name glob"):
        AgentConfig.model_validate({"collect": {"ignore": ["mlx5 3"]}})
