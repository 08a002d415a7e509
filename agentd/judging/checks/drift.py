"""config.drift: a setting ``[enforce]`` keeps right differs from what the checks expect
(agentd.judging.enforce). One warning per knob and target, with the difference, whether
agentd may apply it now and the command a person would run. Only for the named knobs,
and not at all with ``enforce.mode = "off"``.
"""

from __future__ import annotations

from agentd.judging.checks.common import CheckInput
from agentd.model import Finding


def check_config_drift(inp: CheckInput) -> list[Finding]:
    """config.drift."""
    cfg = inp.config.enforce
    if cfg.mode == "off" or not cfg.knobs:
        return []
    # imported here: agentd.judging.enforce derives its desired state from the other checks'
    # modules, which import this package first
    from agentd.judging.enforce import drift_findings, plan

    return drift_findings(plan(inp.snapshot, inp.config, roles=inp.resolved_roles()), cfg.mode)
