"""Issue 12 item 1: a sysfs name that is not valid UTF-8 costs nothing but its own escaping.

The kernel accepts any byte in a netdev name but ``/``, ``:`` and whitespace
(``ip link add $'v\\xffx' type veth``), and RDMA device names can be changed the same way.
Such a name enters the model losslessly (a lone surrogate, as ``os.listdir`` gives it) and
every output escapes it as ``\\xNN``: the exposition, the JSON documents, ``agentd check``
and ``agentd inspect``. It never reaches an NCCL file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentd import sim
from agentd.base.escape import json_text, printable
from agentd.cli import main
from agentd.collection.collector import collect_once
from agentd.config import AgentConfig
from agentd.daemon.health import checks_json, health, health_json, health_text
from agentd.host.fs import HostRoot
from agentd.model import Finding, NodeSnapshot
from agentd.nccl.env import derive_env
from tests.support import service_snapshots as fixtures

HANG_GUARD_S = 120  # a guard against a wedged subprocess, not a timing assertion
ODD_NETDEV = b"v\xffx"
ODD_HCA = b"mlx5_\xfe8"


def _rename_link(cls_dir: bytes, old: bytes, new: bytes) -> None:
    """Rename class entry ``old`` (a symlink into sys/devices) and its device directory."""
    target = os.readlink(cls_dir + old)
    os.unlink(cls_dir + old)
    real = os.path.normpath(os.path.join(cls_dir, target))
    os.rename(real, os.path.join(os.path.dirname(real), new))
    os.symlink(target[: -len(old)] + new, cls_dir + new)


def odd_tree(root: Path, profile: str = "h100-ib", netdev: bytes = b"ib0") -> Path:
    """``profile`` with ``netdev`` renamed to b"v\\xffx" (the HCA's ndevs follow) and the
    HCA mlx5_8, if any, renamed to b"mlx5_\\xfe8"."""
    sim.build_tree(profile, root)
    r = os.fsencode(root)
    _rename_link(r + b"/sys/class/net/", netdev, ODD_NETDEV)
    for dirpath, _dirs, files in os.walk(r + b"/sys/devices"):
        if dirpath.endswith(b"/ndevs"):
            for f in files:
                p = os.path.join(dirpath, f)
                with open(p, "rb") as fh:
                    data = fh.read()
                if data.strip() == netdev:
                    with open(p, "wb") as fh:
                        fh.write(ODD_NETDEV + b"\n")
    # A counter file and a PCI entry with odd bytes in their names.
    port = os.path.realpath(r + b"/sys/class/infiniband/mlx5_0") + b"/ports/1"
    with open(port + b"/hw_counters/odd\xffc", "wb") as fh:
        fh.write(b"5\n")
    os.symlink(b"../../../devices/nowhere", r + b"/sys/bus/pci/devices/0000:1\xfe:00.0")
    if os.path.lexists(r + b"/sys/class/infiniband/mlx5_8"):
        _rename_link(r + b"/sys/class/infiniband/", b"mlx5_8", ODD_HCA)
    return root


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return odd_tree(tmp_path_factory.mktemp("odd") / "root")


@pytest.fixture(scope="module")
def snap(tree: Path) -> NodeSnapshot:
    return collect_once(HostRoot.at(tree), AgentConfig(timeouts={"nvml_s": 1}))


@pytest.mark.tree
def test_names_enter_the_model_losslessly(snap: NodeSnapshot) -> None:
    mlx5_0 = snap.hca("mlx5_0")
    assert mlx5_0 is not None and mlx5_0.ports[0].hw_counters.get("odd\udcffc") == 5
    assert [(e.kind, e.path) for e in snap.read_errors] == [("unparsable", "sys/bus/pci/devices/0000:1\udcfe:00.0")]
    assert os.fsdecode(ODD_NETDEV) in [n.name for n in snap.netdevs]
    assert os.fsdecode(ODD_HCA) in [h.name for h in snap.hcas]
    mlx5_0 = snap.hca("mlx5_0")
    assert mlx5_0 is not None and mlx5_0.ports[0].netdev == os.fsdecode(ODD_NETDEV)


@pytest.mark.tree
def test_roce_port_finds_its_odd_netdev_through_ndevs(tmp_path: Path) -> None:
    """A RoCE port names its netdev in gid_attrs/ndevs/<i>: a name, read as one."""
    tree = odd_tree(tmp_path / "root", "h100-roce", b"ens1np0")
    snap = collect_once(HostRoot.at(tree), AgentConfig(timeouts={"nvml_s": 1}))
    mlx5_0 = snap.hca("mlx5_0")
    assert mlx5_0 is not None and mlx5_0.ports[0].netdev == os.fsdecode(ODD_NETDEV)
    assert [g.netdev for g in mlx5_0.ports[0].gids if g.netdev] and all(g.netdev == os.fsdecode(ODD_NETDEV) for g in mlx5_0.ports[0].gids if g.netdev)
    assert [e.source for e in snap.read_errors] == ["pci"]  # the odd PCI entry only, not the ndevs
    assert r'netdev="v\\xffx"' in fixtures.state(snap=snap).metrics_bytes().decode("utf-8")  # the exposition escapes the backslash


def test_printable_and_json_escape_bytes_as_hex() -> None:
    name = os.fsdecode(ODD_NETDEV)
    assert printable(name) == "v\\xffx"
    assert printable("mlx5_0") == "mlx5_0"
    doc = json.loads(json_text({name: [name, "\U0001f600", "a\\udcffb"]}))
    assert doc == {"v\\xffx": ["v\\xffx", "\U0001f600", "a\\udcffb"]}  # an escape-looking literal is kept


@pytest.mark.tree
def test_metrics_render_as_utf8_with_escaped_labels(snap: NodeSnapshot) -> None:
    state = fixtures.state(snap=snap)
    text = state.metrics_bytes().decode("utf-8")  # UnicodeEncodeError before the fix
    labels = {v for fam in text_string_to_metric_families(text) for s in fam.samples for v in s.labels.values()}
    assert "v\\xffx" in labels
    assert "mlx5_\\xfe8" in labels
    assert "mlx5_0" in labels
    assert "odd\\xffc" in labels  # a counter file name


def test_json_documents_are_valid_utf8(snap: NodeSnapshot) -> None:
    name = os.fsdecode(ODD_NETDEV)
    finding = Finding(code="netdev.mtu", severity="critical", subject=f"netdev {name}", message=f"{name} is odd")
    state = fixtures.state(snap=snap, findings=(finding,))
    topo = json.loads(state.topology_json().decode("utf-8"))  # PydanticSerializationError before the fix
    assert "v\\xffx" in [n["name"] for n in topo["netdevs"]]
    assert [e["path"] for e in topo["read_errors"]] == ["sys/bus/pci/devices/0000:1\\xfe:00.0"]
    assert "odd\\xffc" in topo["hcas"][0]["ports"][0]["hw_counters"]  # a dict key keeps its name
    h = health(state, time.time())
    body = json.loads(health_json(state, h).decode("utf-8"))
    assert "v\\xffx is odd" in [f["message"] for f in body["findings"]]
    assert "netdev v\\xffx" in [f["subject"] for f in json.loads(checks_json(state))["findings"]]
    assert "netdev v\\xffx" in health_text(h).decode("utf-8")


def test_inspect_json_escapes_names(tree: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTD_TIMEOUTS__NVML_S", "0.5")
    monkeypatch.delenv("AGENTD_CONFIG", raising=False)
    capsys.readouterr()
    assert main(["inspect", "--host-root", str(tree), "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert "\\ud" not in out  # no lone surrogate escape: not every JSON parser accepts one
    doc = json.loads(out)
    assert "mlx5_\\xfe8" in [h["name"] for h in doc["hcas"]]
    assert "v\\xffx" in [n["name"] for n in doc["netdevs"]]
    assert all("mlx5_\\xfe8" in g["nic_paths"] for g in doc["gpus"])


@pytest.mark.proc
def test_check_runs_and_names_stay_out_of_nccl(tree: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(f'[timeouts]\nnvml_s = 1\n[paths]\nbaseline = "{tmp_path / "b.json"}"\nstate_dir = "{tmp_path}"\n')
    for fmt in ("json", "text", "json"):  # the second json run reads the baseline the first wrote
        p = subprocess.run(
            [sys.executable, "-m", "agentd", "check", "--host-root", str(tree), "--config", str(cfg), "--format", fmt],
            capture_output=True, timeout=HANG_GUARD_S, env={"PATH": "/usr/bin:/bin"},
        )
        assert p.returncode in (0, 1), p.stderr.decode(errors="replace")  # 3 before the fix
        p.stdout.decode("utf-8")
        if fmt == "json":
            doc = json.loads(p.stdout)
            assert not [f for f in doc["findings"] if f["code"].startswith("inventory.") and f["severity"] != "ok"]


def test_odd_netdev_never_reaches_nccl_env(snap: NodeSnapshot) -> None:
    cfg = AgentConfig(hca={"compute": ["mlx5_0", "mlx5_1", os.fsdecode(ODD_HCA)]})
    env = derive_env(snap, (), cfg, topo_path=None)
    ib_hca = env.get("NCCL_IB_HCA")
    assert ib_hca is not None and ib_hca.startswith("=mlx5_0:1,mlx5_1:1")
    for var in env.variables:
        var.value.encode("ascii")
        assert os.fsdecode(ODD_HCA) not in var.value and os.fsdecode(ODD_NETDEV) not in var.value


def test_live_readers_address_an_odd_netdev_by_its_bytes() -> None:
    """The ioctl (ethtool) and netlink (DCB) requests carry the kernel's name bytes: an odd
    name is asked for as itself, and a name the node does not have is a typed read error."""
    from agentd.host import dcb, ethtool
    from agentd.host.fs import ReadContext

    name = os.fsdecode(ODD_NETDEV)
    assert b"v\xffx\0" in dcb.build_ieee_get(name, 1)
    ctx = ReadContext(HostRoot.at("/"), "ethtool")
    assert ethtool.read_ethtool(ctx, ["agentd-no\udcffne"]) == {}  # UnicodeEncodeError before the fix
    assert [(e.path, e.kind) for e in ctx.errors] in (
        [("ioctl(SIOCETHTOOL, agentd-no\udcffne)", "unreadable")],
        [("ioctl(SIOCETHTOOL)", "unavailable")],  # no socket in this sandbox
    )


@pytest.mark.tree
def test_a_compute_hca_nccl_cannot_be_given_is_a_finding(tmp_path: Path) -> None:
    """mlx5_0 renamed to b"mlx5_\\xfe8" is still a compute HCA (inferred roles), left out of
    NCCL_IB_HCA by its name: that costs a warning naming it, escaped, not silence."""
    from agentd.judging.checks import CheckInput, run_checks

    tree = tmp_path / "root"
    sim.build_tree("h100-ib", tree)
    r = os.fsencode(tree)
    _rename_link(r + b"/sys/class/infiniband/", b"mlx5_0", ODD_HCA)
    snap = collect_once(HostRoot.at(tree), AgentConfig(timeouts={"nvml_s": 1}))
    findings = run_checks(CheckInput(snap, (), AgentConfig()))
    odd = [f for f in findings if f.code == "ib.hca.name_unusable"]
    assert [(f.severity, f.about.name) for f in odd] == [("warning", os.fsdecode(ODD_HCA))]
    assert "mlx5_\\xfe8" in odd[0].message
    env = derive_env(snap, findings, AgentConfig(), topo_path=None)
    assert os.fsdecode(ODD_HCA) not in (env.get("NCCL_IB_HCA") or "")


@pytest.mark.e2e
def test_the_daemon_publishes_on_a_node_with_odd_names(tmp_path: Path) -> None:
    """The issue's report: with such a name no State was ever published (/health 503
    "starting" forever, systemd restarting the service). Now /health, /metrics, /checks
    and /topology answer, the name escaped in each."""
    from tests.support.daemon_harness import agentd_cmd, config_text, free_port, http_get, poll, stop_process

    root = odd_tree(tmp_path / "root")
    out = tmp_path / "out"
    out.mkdir()
    cfg = tmp_path / "agentd.toml"
    cfg.write_text(config_text(out=out, stale_after=100.0))
    base = f"http://127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_") and k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    with open(tmp_path / "agentd.log", "wb") as log:
        proc = subprocess.Popen([*agentd_cmd(), "run", "--config", str(cfg), "--host-root", str(root), "--listen", base[7:]],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            def published() -> tuple[int, bytes] | None:
                try:
                    code, body = http_get(base + "/health", timeout=2)
                except OSError:
                    return None
                return (code, body) if json.loads(body)["status"] != "starting" else None

            got = poll(published, 60.0, 0.1)
            assert got is not None and proc.poll() is None, (tmp_path / "agentd.log").read_text(errors="replace")[-3000:]
            code, metrics = http_get(base + "/metrics")
            assert code == 200
            assert r'netdev="v\\xffx"' in metrics.decode("utf-8")
            assert "v\\xffx" in [n["name"] for n in json.loads(http_get(base + "/topology")[1])["netdevs"]]
            assert any("v\\xffx" in f["subject"] for f in json.loads(http_get(base + "/checks")[1])["findings"])
        finally:
            stop_process(proc)


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_log_lines_escape_names(fmt: str) -> None:
    """A finding about an odd netdev is logged with the name as \\xNN in both formats, the
    same text every other output shows (JSON's own \\udcNN escape is not read alike by every
    log shipper)."""
    import io

    from agentd.daemon.logging import configure_logging, get_logger, log_state_changes

    name = os.fsdecode(ODD_NETDEV)
    buf = io.StringIO()
    try:
        configure_logging(fmt, "info", stream=buf)
        finding = Finding(code="netdev.mtu", severity="critical", subject=f"netdev {name}", message=f"{name} is odd")
        log_state_changes(get_logger(), fixtures.state(ready=False), fixtures.state(findings=(finding,)))
    finally:
        configure_logging("json", "info")
    text = buf.getvalue()
    text.encode("utf-8")
    raised = [line for line in text.splitlines() if "finding.raised" in line]
    assert raised and "\\ud" not in text
    if fmt == "json":
        assert json.loads(raised[0])["subject"] == "netdev v\\xffx"
    else:
        assert "v\\xffx" in raised[0].replace("\\\\", "\\")  # the console renderer shows repr()


def test_nfd_labels_carry_no_odd_name(snap: NodeSnapshot) -> None:
    """NFD label values are Kubernetes label syntax: a name never gets there unescaped."""
    from agentd.outputs.nfd import LABEL_VALUE_RE, nfd_labels, render_nfd_features

    name = os.fsdecode(ODD_NETDEV)
    finding = Finding(code="netdev.mtu", severity="critical", subject=f"netdev {name}", message=f"{name} is odd")
    render_nfd_features(None, (finding,), snap, expiry_s=60).encode("ascii")
    assert all(LABEL_VALUE_RE.match(v) for v in nfd_labels(None, (finding,), snap).values())
