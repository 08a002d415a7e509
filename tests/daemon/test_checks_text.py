"""Text output carries the remediation (issue 43; on main only JSON did): `agentd check`'s
text and ``/checks?format=text`` put what to do on the line under each finding, while
``/health?format=text`` stays one line a finding (a Slurm drain reason)."""

from __future__ import annotations

import aiohttp
import pytest

from agentd.daemon.http import build_app, start_server
from agentd.judging.findings import finding, netdev_subject, port_subject
from agentd.views import findings_text
from tests.support import service_snapshots as fixtures

DOWN = finding("ib.port.down", "critical", port_subject("mlx5_1", 1), "port mlx5_1:1 is DOWN (expected ACTIVE)",
               "enable it (`ibportstate <lid> 1 enable`), then check the cable and the switch port")
MTU = finding("mtu.mismatch", "warning", netdev_subject("ens1np0"), "MTU 1500, expected 9000", "set the MTU to 9000 on ens1np0")
FACT = finding("gdr.path", "ok", netdev_subject("node"), "GDR through nvidia-peermem", "")


class Source:
    def __init__(self, state):
        self.state = state

    def alive(self):
        return True, "alive"


@pytest.fixture
async def base():
    srv = await start_server(build_app(Source(fixtures.state(findings=(DOWN, MTU, FACT)))), "127.0.0.1:0", 8192)
    host, port = srv.addresses[0]
    yield f"http://{host}:{port}"
    await srv.close()


def test_check_text_puts_the_remediation_under_each_finding():
    lines = findings_text([MTU, DOWN]).splitlines()
    assert lines[0] == "critical"
    assert lines[1].startswith("critical ib.port.down mlx5_1:1: port mlx5_1:1 is DOWN")
    assert lines[2] == "  remediation: enable it (`ibportstate <lid> 1 enable`), then check the cable and the switch port"
    assert lines[3].startswith("warning mtu.mismatch ens1np0:") and lines[4] == "  remediation: set the MTU to 9000 on ens1np0"
    # what reads severities at the start of a line (the Slurm wrapper) sees the same findings
    assert [line.split()[0] for line in lines[1:] if not line.startswith(" ")] == ["critical", "warning"]


async def test_checks_text_has_every_finding_with_its_remediation(base):
    async with aiohttp.ClientSession() as s:
        async with s.get(base + "/checks?format=text") as r:
            assert r.status == 200 and r.content_type == "text/plain"
            text = await r.text()
        async with s.get(base + "/health?format=text") as r:
            health = await r.text()
    lines = text.splitlines()
    assert lines[0] == "critical"
    assert "  remediation: set the MTU to 9000 on ens1np0" in lines
    assert any(line.startswith("ok gdr.path node:") for line in lines)  # facts too, as `agentd check --all`
    # /health's text stays one line a finding, no remediation: a Slurm reason line
    assert not any("remediation" in line for line in health.splitlines())
    assert health.splitlines()[1].startswith("critical ib.port.down mlx5_1:1:")
