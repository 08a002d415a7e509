"""``agentd capture`` and ``--host-root FILE``: a node recorded into one file replays to the
same findings and inspect sections (docs/capture.md)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from agentd import sim
from agentd.base import recorded
from agentd.cli import main
from tests.host.test_odd_names import odd_tree

# (profile, faults): every profile, healthy and with faults of each area
CASES = [
    ("h100-ib", ()),
    ("h100-ib", ("port_down", "nvlink_down@gpu1", "pcie_downtrained")),
    ("h100-ib", ("nvml_init_error",)),
    ("h100-roce", ()),
    ("h100-roce", ("pfc_off", "mtu_mismatch", "ecn_off")),
    ("h100-roce", ("module_hot@ens2np0", "rx_power_low@ens3np0", "link_down_reason@ens4np0", "fec_errors@ens5np0")),
    ("pcie-4gpu", ()),
    ("pcie-4gpu", ("gpu_removed",)),
]


def _config(tmp: Path) -> Path:
    """State of the test's own, never the machine's."""
    cfg = tmp / "agentd.toml"
    cfg.write_text(f'[paths]\nbaseline = "{tmp / "baseline.json"}"\nstate_dir = "{tmp}"\n')
    return cfg


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _inspect(capsys: pytest.CaptureFixture[str], cfg: Path, root: Path) -> dict:
    code, out, err = _run(capsys, "inspect", "--config", str(cfg), "--host-root", str(root), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    for k in ("host_root", "taken_at"):
        doc.pop(k)
    mode = doc.pop("host_mode")
    doc["probes"] = sorted((p["name"], p["ok"], p["error"]) for p in doc["probes"])
    return {"mode": mode["mode"], **doc}


def _check(capsys: pytest.CaptureFixture[str], cfg: Path, root: Path) -> tuple[int, list]:
    code, out, err = _run(capsys, "check", "--config", str(cfg), "--host-root", str(root), "--format", "json", "--all")
    doc = json.loads(out)
    return code, sorted((f["code"], f["severity"], f["subject"], f["message"]) for f in doc["findings"])


def _members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path, encoding="utf-8", errors="surrogateescape") as tar:
        return {m.name: m for m in tar.getmembers()}


@pytest.mark.tree
@pytest.mark.parametrize("profile, faults", CASES, ids=[f"{p}-{'+'.join(f) or 'healthy'}" for p, f in CASES])
def test_a_capture_of_a_simulated_node_replays_to_the_same_findings_and_inspect(tmp_path, capsys, profile, faults):
    assert {f.partition("@")[0] for f in faults} <= set(sim.FAULT_KINDS)
    cfg = _config(tmp_path)
    root = sim.build_tree(profile, tmp_path / "node", faults=list(faults))
    before_check = _check(capsys, cfg, root)
    before_inspect = _inspect(capsys, cfg, root)

    out = tmp_path / "node.tar.gz"
    code, said, err = _run(capsys, "capture", "--config", str(cfg), "--host-root", str(root), "--out", str(out))
    assert code == 0, err
    assert str(out) in said

    assert _check(capsys, cfg, out) == before_check
    after = _inspect(capsys, cfg, out)
    assert (before_inspect.pop("mode"), after.pop("mode")) == ("simulated", "offline")
    assert after == before_inspect


def test_a_capture_of_this_machine_replays_to_its_inspect_sections(tmp_path, capsys):
    """Live: whatever this machine has (CI's container, a GPU node). Counters move between
    the two looks, so they are compared by name; everything else must be equal."""
    cfg = _config(tmp_path)
    out = tmp_path / "live.tar.gz"
    code, _, err = _run(capsys, "capture", "--config", str(cfg), "--out", str(out))
    assert code == 0, err
    live, replay = _inspect(capsys, cfg, Path("/")), _inspect(capsys, cfg, out)
    assert (live.pop("mode"), replay.pop("mode")) == ("live", "offline")
    # The kernel log moves on between the looks, and the capture redacts its boot id: the
    # recorded tail (the newest 1 MiB) holds events of the live log it was taken from.
    klive, krec = live.pop("kernel"), replay.pop("kernel")
    if klive["available"]:
        assert krec["available"] and krec["source"] == "dev/kmsg"
        events = lambda k: [(e["kind"], e["code"], e["device"]) for e in k["events"]]  # noqa: E731
        assert set(events(krec)) <= set(events(klive))

    def by_name(doc: dict) -> dict:
        doc["netdevs"] = [{**n, "ethtool": sorted(n["ethtool"]) if n.get("ethtool") is not None else None} for n in doc["netdevs"]]
        for h in doc["hcas"]:
            for p in h["ports"]:
                p["counters"], p["hw_counters"] = sorted(p["counters"]), sorted(p["hw_counters"])
        for g in doc["nvml"]["gpus"]:
            for link in g.get("nvlinks") or []:
                link["errors"] = sorted(link.get("errors") or {})
        return doc

    assert by_name(replay) == by_name(live)
    manifest = json.loads(tarfile.open(out).extractfile(recorded.MANIFEST).read())
    assert manifest["kind"] == "capture" and manifest["source"]["mode"] == "live"
    assert recorded.NVML in manifest["answers"] and recorded.UNAME in manifest["answers"]


@pytest.mark.tree
def test_the_file_keeps_sysfs_symlinks_and_holds_only_files_directories_and_links(tmp_path, capsys):
    cfg = _config(tmp_path)
    root = sim.build_tree("h100-roce", tmp_path / "node")
    out = tmp_path / "c.tgz"
    assert _run(capsys, "capture", "--config", str(cfg), "--host-root", str(root), "--out", str(out))[0] == 0
    m = _members(out)
    net = m["sys/class/net/ens1np0"]
    assert net.issym() and net.linkname == os.readlink(root / "sys/class/net/ens1np0")
    assert m["sys/class/infiniband/mlx5_0"].issym()
    assert all(x.isdir() or x.isfile() or x.issym() for x in m.values())
    assert all(not x.name.startswith("/") and ".." not in x.name.split("/") for x in m.values())
    doc = json.loads(tarfile.open(out).extractfile(recorded.MANIFEST).read())
    assert (doc["format"], doc["version"], doc["kind"]) == (recorded.FORMAT, recorded.VERSION, "capture")
    assert doc["source"]["mode"] == "simulated" and "dcb/ens1np0" in doc["answers"] and "ethtool/ens1np0" in doc["answers"]
    # the recorded answers are the formats the readers take
    text = tarfile.open(out).extractfile(f"{recorded.DIR}/dcb/ens1np0").read().decode()
    assert "PFC configuration:" in text


@pytest.mark.tree
def test_odd_bytes_in_names_survive_the_round_trip(tmp_path, capsys):
    cfg = _config(tmp_path)
    root = odd_tree(tmp_path / "node")
    before = _inspect(capsys, cfg, root)
    out = tmp_path / "c.tgz"
    assert _run(capsys, "capture", "--config", str(cfg), "--host-root", str(root), "--out", str(out))[0] == 0
    after = _inspect(capsys, cfg, out)
    before.pop("mode"), after.pop("mode")
    assert after == before


# ---------------------------------------------------------------------------
# a capture is data from elsewhere


def _tar_with(tmp: Path, *members: tuple[tarfile.TarInfo, bytes | None]) -> Path:
    out = tmp / "hostile.tgz"
    with tarfile.open(out, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out


def _info(name: str, **kw: object) -> tarfile.TarInfo:
    i = tarfile.TarInfo(name)
    for k, v in kw.items():
        setattr(i, k, v)
    return i


@pytest.mark.parametrize(
    "member, why",
    [
        (_info("sys/class/net/x", type=tarfile.SYMTYPE, linkname="/etc"), "refused"),
        (_info("sys/class/net/x", type=tarfile.SYMTYPE, linkname="../../../../../etc"), "refused"),
        (_info("../escape", size=1), "refused"),
        (_info("dev/evil", type=tarfile.CHRTYPE, devmajor=1, devminor=3), "not a file, directory or symlink"),
        (_info("sys/fifo", type=tarfile.FIFOTYPE), "not a file, directory or symlink"),
    ],
    ids=["absolute-link", "link-out", "dotdot", "device", "fifo"],
)
def test_a_hostile_capture_is_refused_and_nothing_lands_outside(tmp_path, capsys, member, why):
    data = b"x" if member.isreg() else None
    path = _tar_with(tmp_path, (_info("sys", type=tarfile.DIRTYPE), None), (member, data))
    code, _, err = _run(capsys, "inspect", "--config", str(_config(tmp_path)), "--host-root", str(path))
    assert code == 3 and why in err
    assert not (tmp_path.parent / "escape").exists()


def test_not_a_capture_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    code, _, err = _run(capsys, "check", "--config", str(_config(tmp_path)), "--host-root", str(bad))
    assert code == 3 and "not a capture" in err


@pytest.mark.tree
def test_a_redacted_capture_hides_identities_and_replays_to_the_same_findings(tmp_path, capsys):
    cfg = _config(tmp_path)
    root = sim.build_tree("h100-roce", tmp_path / "node", faults=["port_down", "pfc_off"])
    before = [(c, s, subj) for c, s, subj, _ in _check(capsys, cfg, root)[1]]
    out = tmp_path / "r.tgz"
    code, said, err = _run(capsys, "capture", "--config", str(cfg), "--host-root", str(root), "--out", str(out), "--redact")
    assert code == 0 and "redacted" in said, err
    secrets = {
        (root / "sys/class/infiniband/mlx5_0/node_guid").read_text().strip(),
        (root / "sys/class/net/ens1np0/address").read_text().strip(),
        json.loads((root / recorded.DIR / recorded.NVML).read_text())["gpus"][0]["uuid"].removeprefix("GPU-"),
        (root / "proc/sys/kernel/hostname").read_text().strip(),
    }
    with tarfile.open(out) as tar:
        blobs = [tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()]
        manifest = json.loads(tar.extractfile(recorded.MANIFEST).read())
    for secret in secrets:
        assert not any(secret.encode() in b for b in blobs), secret
    assert manifest["redacted"] is True and manifest["source"]["hostname"] is None and manifest["redactions"]
    after = [(c, s, subj) for c, s, subj, _ in _check(capsys, cfg, out)[1]]
    assert after == before


@pytest.mark.tree
def test_a_capture_keeps_the_qos_chain_and_version_inputs(tmp_path, capsys):
    """What the RoCE QoS chain and the version fingerprint read (issue 17): the tclass
    override and sm_sl of every port, /etc/nccl.conf, the mlx5_core version, libibverbs'
    link and a DSCP map other than the default all replay as the node had them."""
    from agentd.capture.replay import unpack
    from agentd.collection.collector import collect_once
    from agentd.config import AgentConfig
    from agentd.host.fs import HostRoot

    cfg = _config(tmp_path)
    root = sim.build_tree("h100-roce", tmp_path / "node")
    tcs = []
    for dev in sorted((root / "sys/class/infiniband").iterdir()):
        real = dev.resolve()
        for port in (real / "ports").iterdir():
            (port / "sm_sl").write_text("0\n")
            tc = real / "tc" / port.name / "traffic_class"
            tc.parent.mkdir(parents=True, exist_ok=True)
            tc.write_text("Global tclass=106\n" if dev.name == "mlx5_0" else "")
            tcs.append(tc.relative_to(root).as_posix())
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/nccl.conf").write_text("NCCL_IB_TC=106\nNCCL_IB_GID_INDEX=3\n")
    (root / "sys/module/mlx5_core").mkdir(parents=True, exist_ok=True)
    (root / "sys/module/mlx5_core/version").write_text("5.8-4.1.5\n")
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "libibverbs.so.1.14.48.0").write_bytes(b"\x7fELF")  # another version than the simulator's
    (lib / "libibverbs.so.1").unlink(missing_ok=True)
    os.symlink("libibverbs.so.1.14.48.0", lib / "libibverbs.so.1")
    dcb_files = sorted((root / recorded.DIR / recorded.DCB).iterdir())
    dscp = {d: d >> 3 for d in range(64)} | {26: 0}
    dcb_files[0].write_text(recorded.format_mlnx_qos((3,), "dscp", dscp))

    def snap(at: Path):
        return collect_once(HostRoot.at(at), AgentConfig(host_root=at))

    before = snap(root)
    out = tmp_path / "c.tgz"
    assert _run(capsys, "capture", "--config", str(cfg), "--host-root", str(root), "--out", str(out))[0] == 0
    m = _members(out)
    for rel in [*tcs, "etc/nccl.conf", "sys/module/mlx5_core/version"]:
        assert m[rel].isfile(), rel
    assert m["usr/lib/x86_64-linux-gnu/libibverbs.so.1"].issym()
    assert m["usr/lib/x86_64-linux-gnu/libibverbs.so.1"].linkname == "libibverbs.so.1.14.48.0"
    replayed = tmp_path / "replayed"
    replayed.mkdir()
    unpack(out, replayed)
    after = snap(replayed)

    def qos(s):
        return (
            s.nccl_conf,
            s.versions,
            [(h.name, p.port, p.sm_sl, p.tclass) for h in s.hcas for p in h.ports],
            {n.name: n.pfc.dscp2prio for n in s.netdevs if n.pfc is not None},
        )

    assert qos(after) == qos(before)
    assert before.versions.rdma_core == "48.0" and before.nccl_conf is not None
    assert any(p.tclass is not None and p.tclass.global_tclass == 106 for h in before.hcas for p in h.ports)
    assert {n.name: n.pfc.dscp2prio for n in before.netdevs if n.pfc is not None}[dcb_files[0].name] == dscp
