"""Expected values exported beside the measured ones (``..._expected``), from the same
rules the checks apply, so alert rules need no hard-coded thresholds. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from agentd.config import AgentConfig
from agentd.judging.checks.ib import expected_port_values
from agentd.judging.checks.mtu import mtu_rules
from agentd.judging.roles import HcaRoles
from agentd.model import NodeSnapshot


@dataclass(frozen=True)
class Expected:
    port_rate_gbps: Mapping[tuple[str, int], float] = field(default_factory=dict)
    port_width: Mapping[tuple[str, int], int] = field(default_factory=dict)
    netdev_mtu: Mapping[str, int] = field(default_factory=dict)


def expected_values(snap: NodeSnapshot, roles: HcaRoles, config: AgentConfig) -> Expected:
    """Port rate and width from agentd.judging.checks.ib, netdev MTU from
    agentd.judging.checks.mtu's ``mtu_rules`` (one definition each for the check and the
    exported value; an IPoIB MTU is expected only when expect.ipoib_mtu is set)."""
    rates: dict[tuple[str, int], float] = {}
    widths: dict[tuple[str, int], int] = {}
    for key, (rate, width) in expected_port_values(snap, roles, config.expect).items():
        if rate:
            rates[key] = rate
        if width:
            widths[key] = width
    mtus = {r.netdev.name: r.expected for r in mtu_rules(snap, roles, config.expect) if r.expected is not None}
    return Expected(port_rate_gbps=rates, port_width=widths, netdev_mtu=mtus)
