"""One judgement of a snapshot: roles, findings, and whether it should become the baseline.

Pure; shared by `agentd check` and the daemon so both judge a node the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from agentd.config import AgentConfig
from agentd.judging.baseline import Baseline, NodeIdentity, adopted, baseline_from, foreign_reason
from agentd.judging.checks import CheckInput, run_checks
from agentd.judging.checks.inventory import foreign_baseline
from agentd.judging.roles import HcaRoles, hca_roles
from agentd.model import Finding, HistoryEntry, NodeSnapshot, NodeStatus, overall_status, sort_findings


@dataclass(frozen=True)
class Judgement:
    snapshot: NodeSnapshot
    roles: HcaRoles
    findings: tuple[Finding, ...]
    status: NodeStatus
    # To save: a first one when there was none and this snapshot is healthy, or the one
    # there was with this node's identity added (``baseline.adopted``).
    new_baseline: Baseline | None


def node_identity(snapshot: NodeSnapshot, config: AgentConfig) -> NodeIdentity:
    """The node as judged: the snapshot's machine-id and hostname, and the configured host root."""
    return NodeIdentity(machine_id=snapshot.system.machine_id, hostname=snapshot.system.hostname, host_root=str(config.host_root))


def judge(snapshot: NodeSnapshot, history: Sequence[HistoryEntry], config: AgentConfig, baseline: Baseline | None,
          identity: NodeIdentity | None = None) -> Judgement:
    """``identity``: the node's (default: ``node_identity``). A
    baseline of another node is not used: ``baseline.foreign`` says so, and no new one is
    saved over it (``agentd baseline reset`` does that)."""
    node = identity if identity is not None else node_identity(snapshot, config)
    foreign = foreign_reason(baseline, node) if baseline is not None else None
    roles = hca_roles(snapshot, config.hca)
    used = None if foreign else baseline
    found = run_checks(CheckInput(snapshot=snapshot, history=tuple(history), config=config, baseline=used, roles=roles))
    if foreign and baseline is not None:
        found = sort_findings([*found, foreign_baseline(baseline, node, foreign)])
    findings = tuple(found)
    status = overall_status(findings)
    if baseline is None:
        new_baseline = baseline_from(snapshot, roles, node) if status == "ok" else None
    else:
        new_baseline = None if foreign else adopted(baseline, node)
    return Judgement(snapshot, roles, findings, status, new_baseline)
