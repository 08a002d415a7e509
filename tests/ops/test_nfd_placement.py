"""The placement labels in the NFD features file: NVLink domain, rails, rail hash (issue 16)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agentd.config import AgentConfig
from agentd.judging.expected import Expected
from agentd.judging.roles import HcaRoles
from agentd.model import IbPort
from agentd.outputs.evaluate import Evaluation
from agentd.outputs.nfd import LABEL_VALUE_RE, nfd_labels, render_nfd_features
from agentd.outputs.writer import NfdKeeper
from tests.support.check_snapshots import node, with_hca
from tests.support.placement_snapshots import COMPUTE, DOMAIN_ID, fabric_finding, gb200_tray

pytestmark = pytest.mark.packaging

# Kubernetes qualified label name: optional DNS-subdomain prefix + '/' + name part (<= 63).
LABEL_NAME_RE = re.compile(r"^(?:[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
COMPUTE_H100 = HcaRoles(compute=tuple(f"mlx5_{i}" for i in range(8)), other=("mlx5_8",), source="config")
HOSTILE_NETDEVS = ["ib\udcff0", "x" * 80, "-lead-", "::::", "ib0 with space", "ib0/evil\n=x", "\udcfe\udcff", "ü-net", ".ib."]


def _assert_valid(labels: dict[str, str]) -> None:
    for name, value in labels.items():
        assert LABEL_NAME_RE.match(name) and len(name.partition("/")[2]) <= 63, name
        assert LABEL_VALUE_RE.match(value) and len(value) <= 63, (name, value)


def test_gb200_tray_labels_its_domain_and_rails() -> None:
    labels = nfd_labels("ok", [], gb200_tray(), roles=COMPUTE)
    assert labels["agentd.io/nvlink-domain"] == DOMAIN_ID  # nvidia.com/gpu.clique's value
    assert labels["agentd.io/nvlink-domain-gpus"] == "4"
    assert labels["agentd.io/nvlink-domain-health"] == "ok"
    assert re.fullmatch(r"[0-9a-f]{12}", labels["agentd.io/rail-hash"])
    assert {k.removeprefix("agentd.io/"): v for k, v in labels.items() if ".gpu1." in k} == {
        "rail.gpu1.nic": "mlx5_1",
        "rail.gpu1.port": "1",
        "rail.gpu1.netdev": "ibp1s0",
        "rail.gpu1.path": "NODE",
        "rail.gpu1.pcie-root": "pci0009-00",
        "rail.gpu1.nic-pcie-root": "pci0002-00",
    }
    _assert_valid(labels)


def test_hgx_node_has_rails_but_no_domain_labels() -> None:
    labels = nfd_labels("ok", [], node(), roles=COMPUTE_H100)
    assert not any("nvlink-domain" in k for k in labels)
    assert [labels[f"agentd.io/rail.gpu{i}.nic"] for i in range(8)] == [f"mlx5_{i}" for i in range(8)]
    assert labels["agentd.io/rail.gpu7.path"] == "PIX"
    _assert_valid(labels)


def test_domain_health_label_follows_counted_findings() -> None:
    def health(*findings) -> str:
        return nfd_labels(None, list(findings), gb200_tray(), roles=COMPUTE)["agentd.io/nvlink-domain-health"]

    assert health(fabric_finding("nvlink.fabric.degraded", "warning")) == "degraded"
    assert health(fabric_finding("nvlink.fabric.unhealthy", "critical")) == "unhealthy"
    assert health(fabric_finding("nvlink.fabric.unhealthy", "critical", withheld="pending")) == "ok"


def test_maintenance_keeps_the_placement_labels() -> None:
    labels = nfd_labels("maintenance", [], gb200_tray(), roles=COMPUTE)
    assert labels["agentd.io/fabric-health"] == "maintenance"
    assert labels["agentd.io/nvlink-domain"] == DOMAIN_ID and "agentd.io/rail-hash" in labels


def test_no_domain_label_when_the_gpus_disagree_or_are_unassigned() -> None:
    split = gb200_tray(gpu3={"fabric_clique_id": 7})
    unassigned = gb200_tray(**{f"gpu{i}": {"fabric_clique_id": 0} for i in range(4)})
    for snap in (split, unassigned):
        labels = nfd_labels("critical", [], snap, roles=COMPUTE)
        assert not any("nvlink-domain" in k for k in labels)
        assert "agentd.io/rail.gpu0.nic" in labels  # the rails stand on their own


@pytest.mark.parametrize("netdev", HOSTILE_NETDEVS)
def test_every_name_and_value_is_valid_with_hostile_netdev_names(netdev: str) -> None:
    snap = with_hca(gb200_tray(), "mlx5_2", ports=(IbPort(port=1, state="ACTIVE", netdev=netdev),))
    labels = nfd_labels("ok", [], snap, roles=COMPUTE, prefix="gpu.example.com/")
    _assert_valid(labels)
    # The file nfd-worker reads stays one name=value a line, ASCII.
    text = render_nfd_features("ok", [], snap, expiry_s=60, roles=COMPUTE)
    text.encode("ascii")
    assert all("=" in line for line in text.splitlines() if not line.startswith("#"))
    assert len(text.splitlines()) == 3 + len(nfd_labels("ok", [], snap, roles=COMPUTE))


def test_netdev_label_left_out_when_nothing_valid_remains() -> None:
    snap = with_hca(gb200_tray(), "mlx5_2", ports=(IbPort(port=1, state="ACTIVE", netdev="\udcfe\udcff"),))
    labels = nfd_labels("ok", [], snap, roles=COMPUTE)
    assert "agentd.io/rail.gpu2.netdev" not in labels and labels["agentd.io/rail.gpu2.nic"] == "mlx5_2"


def test_the_daemon_writes_the_placement_labels(tmp_path: Path) -> None:
    path = tmp_path / "features.d" / "agentd"
    config = AgentConfig(paths={"nfd_features": str(path)})
    ev = Evaluation(findings=(), status="ok", roles=COMPUTE, expected=Expected())
    st = NfdKeeper().write(gb200_tray(), ev, "ok", config, 1000.0)
    assert st is not None and st.ok
    text = path.read_text()
    assert f"agentd.io/nvlink-domain={DOMAIN_ID}\n" in text
    assert "agentd.io/rail.gpu3.nic=mlx5_3\n" in text

