"""``capture --redact`` on the identity shapes the red team found surviving (issue 42):
a netdev named from its MAC (``enx`` + 12 hex, systemd's ``NamePolicy=mac``) in member
paths, link targets, the recorded answers, ``etc/nccl.conf`` and the kernel log; a node
GUID printed in ``0x`` form; another host's fully qualified name and the site domain; an
e-mail address; serial numbers in the kernel log. The redacted capture still replays to
the same findings.

Kernel log lines marked ``redact-test`` are test records that carry values to redact,
not a driver's wording; the NFS and USB lines follow the kernel's own format strings
(fs/nfs "server %s not responding", drivers/usb/core "SerialNumber: %s")."""

from __future__ import annotations

import json
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from agentd import sim
from agentd.base import recorded
from agentd.capture.redact import Redactor
from agentd.cli import main
from agentd.sim.profiles import PROFILES
from agentd.sim.rdma import mac_of

pytestmark = pytest.mark.tree

FQDN = "gpu-a17.prod.example.com"
OTHER_HOST = "storage01.prod.example.com"
EMAIL = "hpc-ops@prod.example.com"
GPU_SERIAL, USB_SERIAL = "1652823054321", "A1B2C3D4E5"


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, str, str]:
    """A RoCE node whose first compute netdev is named from its MAC, with an FQDN, an
    nccl.conf naming that netdev and a kernel log with the other shapes."""
    base = PROFILES["h100-roce"]
    hca = base.hcas[0]
    mac = mac_of(hca)
    name = "enx" + mac.replace(":", "")
    monkeypatch.setitem(PROFILES, "h100-roce-enx", replace(base, hostname=FQDN, hcas=(replace(hca, netdev=name), *base.hcas[1:])))
    root = sim.build_tree("h100-roce-enx", tmp_path / "node")
    guid = "0x" + hca.node_guid.replace(":", "")
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/nccl.conf").write_text(f"# owner: {EMAIL}\nNCCL_SOCKET_IFNAME=={name}\n")
    (root / "dev").mkdir(exist_ok=True)
    (root / "dev/kmsg").write_text(
        f"6,100,5000,-;redact-test: mlx5_core {hca.bdf} {name}: renamed from eth0\n"
        f"6,101,5001,-;redact-test: mlx5_ib {hca.bdf}: port 1 GUID {guid}\n"
        f"5,102,5002,-;nfs: server {OTHER_HOST} not responding, still trying\n"
        f"6,103,5003,-;redact-test: NVRM: GPU Board Serial Number: {GPU_SERIAL}\n"
        f"6,104,5004,-;usb 1-1: SerialNumber: {USB_SERIAL}\n"
    )
    return root, name, mac, guid


def check(capsys: pytest.CaptureFixture[str], cfg: Path, root: Path) -> list[tuple[str, str, str]]:
    main(["check", "--config", str(cfg), "--host-root", str(root), "--format", "json", "--all"])
    return sorted((f["code"], f["severity"], f["subject"]) for f in json.loads(capsys.readouterr().out)["findings"])


def test_redaction_leaves_none_of_the_other_forms_and_replays_alike(tmp_path: Path, node, capsys: pytest.CaptureFixture[str]) -> None:
    root, name, mac, guid = node
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(f'[paths]\nbaseline = "{tmp_path / "baseline.json"}"\nstate_dir = "{tmp_path}"\n')
    before = check(capsys, cfg, root)
    out = tmp_path / "r.tgz"
    assert main(["capture", "--config", str(cfg), "--host-root", str(root), "--out", str(out), "--redact"]) == 0
    capsys.readouterr()
    with tarfile.open(out) as tar:
        members = tar.getmembers()
        texts = [m.name for m in members] + [m.linkname for m in members if m.issym()]
        texts += [tar.extractfile(m).read().decode("utf-8", "replace") for m in members if m.isfile()]  # type: ignore[union-attr]
        manifest = json.loads(tar.extractfile(recorded.MANIFEST).read())  # type: ignore[union-attr]
    secrets = [mac, mac.replace(":", ""), guid, guid[2:], "gpu-a17", "storage01", "prod.example.com", "hpc-ops", GPU_SERIAL, USB_SERIAL]
    leaks = {s for s in secrets for t in texts if s.lower() in t.lower()}
    assert leaks == set()
    new = next(Path(t).name for t in texts if t.startswith("sys/class/net/enx"))
    assert new != name and any(a == f"ethtool/{new}" for a in manifest["answers"])
    assert any(f"NCCL_SOCKET_IFNAME=={new}" in t for t in texts)  # the name and its file still agree
    assert "free text" in manifest["redaction_note"]
    assert {"other_host", "email", "serial", "mac", "guid"} <= set(manifest["redactions"])
    after = check(capsys, cfg, out)
    assert after == sorted((c, s, subj.replace(name, new)) for c, s, subj in before)


def test_the_patterns_keep_what_is_not_identity() -> None:
    r = Redactor(b"k" * 32)
    kept = [
        "RIP: 0010:mlx5_cmd_exec+0x2a/0x40 at 0xffffffffc0a1b2c3",  # kernel addresses
        "BIOS-e820: [mem 0x0000200000000000-0x00002000ffffffff] usable",  # a physical range, no GUID middle
        "libibverbs.so.1.14.50.0 libnccl-net.so snap.lxd.activate org.freedesktop.DBus",  # file and bus names
        "ens1np0 eno1 enp3s0f0np0 enx12",  # netdev names that are no MAC
        "NCCL_IB_HCA==mlx5_0,mlx5_1 serial console ttyS0",  # 'serial' without a value
    ]
    for text in kept:
        assert r.redact_text(text) == text, text
    assert r.redact_text("GUID: 0x0002c903000e1f2a") != "GUID: 0x0002c903000e1f2a"  # a GUID line: mapped whatever its OUI
    assert r.redact_text("sys_image_guid 0XA088C20300425F10").startswith("sys_image_guid 0XA088C2")  # OUI and case kept
