"""One judgement of a snapshot: roles, findings, and whether it should become the baseline.

Pure; shared by `agentd check` and the daemon so both judge a node the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from agentd.config import AgentConfig
from agentd.judging.baseline import Baseline, baseline_from
from agentd.judging.checks import CheckInput, run_checks
from agentd.judging.roles import HcaRoles, hca_roles
from agentd.model import Finding, NodeSnapshot, overall_status


@dataclass(frozen=True)
class Judgement:
    snapshot: NodeSnapshot
    roles: HcaRoles
    findings: tuple[Finding, ...]
    status: str  # ok | degraded | critical
    new_baseline: Baseline | None  # set when there was none and this snapshot is healthy


def judge(snapshot: NodeSnapshot, history: Sequence[NodeSnapshot], config: AgentConfig, baseline: Baseline | None) -> Judgement:
    roles = hca_roles(snapshot, config.hca)
    findings = tuple(run_checks(CheckInput(snapshot=snapshot, history=tuple(history), config=config, baseline=baseline, roles=roles)))
    status = overall_status(findings)
    new_baseline = baseline_from(snapshot, roles) if baseline is None and status == "ok" else None
    return Judgement(snapshot, roles, findings, status, new_baseline)
