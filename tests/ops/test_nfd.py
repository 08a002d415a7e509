"""NFD features.d rendering (pure) and its atomic write."""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path

import pytest

from agentd.config import AgentConfig
from agentd.judging.roles import HcaRoles
from agentd.model import Finding, GdrInfo, Gpu, Hca, IbPort, NodeSnapshot, NvLink, NvmlGpu, NvmlInfo
from agentd.outputs.nfd import (
    LABEL_VALUE_RE,
    default_expiry_s,
    label_value,
    nfd_labels,
    render_nfd_features,
    write_nfd_features,
)

pytestmark = pytest.mark.packaging

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z
# Kubernetes qualified label name: optional DNS-subdomain prefix + '/' + name (<= 63).
LABEL_NAME_RE = re.compile(r"^(?:[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _port(state: str = "ACTIVE", rate: float = 400.0, layer: str = "InfiniBand") -> IbPort:
    return IbPort(port=1, state=state, rate_gbps=rate, width=4, link_layer=layer)


def _node(*, ports: list[IbPort] | None = None, storage: bool = True, peermem: bool = True, nvlink_up: bool = True) -> NodeSnapshot:
    ports = ports if ports is not None else [_port() for _ in range(8)]
    hcas = [Hca(name=f"mlx5_{i}", ports=(p,)) for i, p in enumerate(ports)]
    if storage:
        hcas.append(Hca(name="mlx5_8", ports=(_port(rate=200.0, layer="Ethernet"),)))
    gpus = tuple(Gpu(index=i, pci_bus_id=f"0000:{0x18 + i:02x}:00.0") for i in range(8))
    links = tuple(NvLink(link=n, state="up" if nvlink_up or n else "down") for n in range(18))
    nvml = NvmlInfo(available=True, gpus=tuple(NvmlGpu(index=g.index, pci_bus_id=g.pci_bus_id, nvlinks=links) for g in gpus))
    gdr = GdrInfo(peermem_loaded=peermem, nvidia_loaded=True, nvidia_open_module=True, dmabuf_kernel_ok=True)
    return NodeSnapshot(taken_at=T0, host_root="/", hcas=tuple(hcas), gpus=gpus, nvml=nvml, gdr=gdr)


COMPUTE = HcaRoles(compute=tuple(f"mlx5_{i}" for i in range(8)), other=("mlx5_8",), source="config")


def _parse(text: str) -> tuple[list[str], dict[str, str]]:
    """Split like nfd-worker: '#' lines are comments/directives, others name=value."""
    directives, labels = [], {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith("# +"):
                directives.append(line[3:])
            continue
        name, _, value = line.partition("=")
        labels[name] = value
    return directives, labels


def test_healthy_ib_node_labels() -> None:
    text = render_nfd_features("ok", [], _node(), expiry_s=180, roles=COMPUTE)
    directives, labels = _parse(text)
    assert directives == ["expiry-time=2023-11-14T22:16:20Z"]
    assert labels == {
        "agentd.io/fabric-health": "ok",
        "agentd.io/gpus": "8",
        "agentd.io/ib-ports-active": "8",
        "agentd.io/ib-rate-gbps": "400",
        "agentd.io/link-layer": "infiniband",
        "agentd.io/gdr": "peermem",
        "agentd.io/nvlink": "ok",
    }
    # The directive precedes every label (nfd applies it to the lines after it).
    lines = text.splitlines()
    first_label = next(i for i, l in enumerate(lines) if not l.startswith("#"))
    assert lines.index("# +expiry-time=2023-11-14T22:16:20Z") < first_label


def test_expiry_is_rfc3339_utc_and_counts_from_now() -> None:
    directives, _ = _parse(render_nfd_features("ok", [], _node(), expiry_s=90, now=T0 + 3600))
    stamp = directives[0].split("=", 1)[1]
    parsed = dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    assert parsed.timestamp() == T0 + 3600 + 90
    with pytest.raises(ValueError):
        render_nfd_features("ok", [], _node(), expiry_s=0)


def test_no_plain_comment_looks_like_a_directive() -> None:
    text = render_nfd_features("ok", [], _node(), expiry_s=60)
    assert [l for l in text.splitlines() if l.startswith("# +")] == ["# +expiry-time=2023-11-14T22:14:20Z"]


def test_degraded_node_port_down_peermem_gone_nvlink_down() -> None:
    ports = [_port() for _ in range(7)] + [_port(state="DOWN", rate=0.0)]
    findings = [
        Finding(code="ib.port.down", severity="critical", subject="mlx5_7:1", message="port DOWN"),
        Finding(code="nvlink.link.down", severity="critical", subject="gpu0", message="link 0 down"),
    ]
    snap = _node(ports=ports, peermem=False, nvlink_up=False)
    labels = nfd_labels(None, findings, snap, roles=COMPUTE)
    assert labels["agentd.io/fabric-health"] == "critical"  # derived from findings
    assert labels["agentd.io/ib-ports-active"] == "7"
    assert labels["agentd.io/gdr"] == "dmabuf"  # open module + kernel DMA-BUF, no peermem
    assert labels["agentd.io/nvlink"] == "degraded"
    gdr_down = [Finding(code="gdr.unavailable", severity="critical", subject="node", message="no GDR")]
    assert nfd_labels("critical", gdr_down, snap)["agentd.io/gdr"] == "none"


def test_roles_select_compute_ports_and_mixed_layers() -> None:
    snap = _node()
    # Without roles every HCA counts: 8 IB ports + the storage RoCE port.
    labels = nfd_labels("ok", [], snap)
    assert labels["agentd.io/ib-ports-active"] == "9"
    assert labels["agentd.io/link-layer"] == "mixed"
    assert labels["agentd.io/ib-rate-gbps"] == "200"


def test_node_without_fabric_or_gpus() -> None:
    snap = NodeSnapshot(taken_at=T0, host_root="/")
    labels = nfd_labels("ok", [], snap)
    assert labels["agentd.io/ib-ports-active"] == "0"
    assert "agentd.io/ib-rate-gbps" not in labels and "agentd.io/link-layer" not in labels
    assert labels["agentd.io/gdr"] == "none"
    assert labels["agentd.io/nvlink"] == "none"
    gpus_no_nvml = NodeSnapshot(taken_at=T0, host_root="/", gpus=(Gpu(index=0, pci_bus_id="0000:18:00.0"),))
    assert nfd_labels("ok", [], gpus_no_nvml)["agentd.io/nvlink"] == "unknown"


@pytest.mark.parametrize("status", ["ok", "degraded", "critical", "stale"])
def test_every_name_and_value_is_a_valid_kubernetes_label(status: str) -> None:
    for snap in (_node(), _node(ports=[_port(rate=12.5, layer="Ethernet")]), NodeSnapshot(taken_at=T0, host_root="/")):
        for name, value in nfd_labels(status, [], snap, prefix="gpu.example.com/").items():
            assert LABEL_NAME_RE.match(name), name
            assert LABEL_VALUE_RE.match(value) and len(value) <= 63, value
    assert nfd_labels("ok", [], _node(ports=[_port(rate=12.5)]))["agentd.io/ib-rate-gbps"] == "12.5"


@pytest.mark.parametrize(
    "raw, expected",
    [("ok", "ok"), ("a b/c", "a-b-c"), ("-x-", "x"), ("", ""), ("é", ""), ("x" * 80, "x" * 63), ("a" * 62 + "_-b", "a" * 62)],
)
def test_label_value_sanitising(raw: str, expected: str) -> None:
    assert label_value(raw) == expected
    assert LABEL_VALUE_RE.match(label_value(raw))


def test_bad_prefix_is_rejected() -> None:
    for prefix in ("agentd.io", "Agentd.IO/", "-x.io/", "/"):
        with pytest.raises(ValueError):
            nfd_labels("ok", [], _node(), prefix=prefix)


def test_default_expiry_outlives_the_staleness_limit() -> None:
    cfg = AgentConfig()
    stale_s = cfg.intervals.stale_after * cfg.intervals.slow_s
    assert default_expiry_s(cfg) >= stale_s + cfg.intervals.slow_s


def test_atomic_write_replaces_whole_file_and_leaves_no_visible_temp(tmp_path: Path) -> None:
    features_d = tmp_path / "features.d"
    target = features_d / "agentd"
    first = render_nfd_features("ok", [], _node(), expiry_s=60)
    assert write_nfd_features(target, first).changed
    second = render_nfd_features("critical", [], _node(), expiry_s=60, now=T0 + 30)
    res = write_nfd_features(target, second)
    assert res.ok and res.changed
    assert target.read_text() == second
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    # nfd-worker reads every non-hidden file: nothing else may be visible there.
    assert [p.name for p in features_d.iterdir() if not p.name.startswith(".")] == ["agentd"]
    assert not list(features_d.iterdir())[1:]


def test_failed_write_keeps_the_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "agentd"
    write_nfd_features(target, "a=1\n")

    def refuse(src: object, dst: object) -> None:
        raise OSError(30, "Read-only file system", str(dst))

    monkeypatch.setattr(os, "replace", refuse)
    res = write_nfd_features(target, "a=2\n")
    assert not res.ok and "Read-only" in (res.error or "")
    assert target.read_text() == "a=1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["agentd"]  # temp file removed
