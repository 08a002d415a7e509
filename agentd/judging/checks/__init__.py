"""Checks: pure functions from a snapshot (plus history, config, baseline) to findings.

Adding a check = one function ``(CheckInput) -> list[Finding]`` in a module of this
package + one line in ``CHECKS``. Finding codes are catalogued in docs/findings.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from agentd.judging.checks import (
    collect,
    drift,
    fabric,
    gdr,
    ib,
    ib_counters,
    inventory,
    kernel,
    mtu,
    names,
    nvlink,
    optics,
    pcie,
    pcie_errors,
    probes,
    qos,
    roce,
    versions,
)
from agentd.judging.checks.common import CheckInput
from agentd.judging.findings import check_subject, finding
from agentd.judging.roles import HcaRoles, hca_roles
from agentd.model import Finding, sort_findings

__all__ = ["CHECKS", "CheckInput", "check_name", "run_checks"]

Check = Callable[[CheckInput], list[Finding]]

CHECKS: tuple[Check, ...] = (
    ib.check_ports,
    ib.check_flapping,
    names.check_hca_names,
    ib_counters.check_counters,
    gdr.check_gdr,
    pcie.check_links,
    pcie.check_gpu_nic_paths,
    pcie.check_acs,
    pcie.check_config_space,
    pcie_errors.check_aer,
    pcie_errors.check_replay,
    pcie_errors.check_retrained,
    mtu.check_mtu,
    roce.check_roce,
    optics.check_temperatures,
    optics.check_rx_power,
    optics.check_fec,
    optics.check_link_tool,
    qos.check_roce_qos,
    nvlink.check_nvml_blind,
    nvlink.check_nvlink,
    fabric.check_fabric,
    kernel.check_events,
    inventory.check_inventory,
    probes.check_probes,
    versions.check_versions,
    collect.check_collect,
    drift.check_config_drift,
)


def check_name(check: Check) -> str:
    """``ib.check_ports`` for agentd.judging.checks.ib.check_ports (the subject of agentd.check.error)."""
    module = getattr(check, "__module__", "") or ""
    return f"{module.rsplit('.', 1)[-1]}.{getattr(check, '__name__', repr(check))}"


def _error(name: str, exc: BaseException) -> Finding:
    text = " ".join(str(exc).split())[:200]
    return finding(
        "agentd.check.error",
        "warning",
        check_subject(name),
        f"check {name} raised {type(exc).__name__}{': ' + text if text else ''}; its findings are missing",
        "an agentd bug: report it with `agentd inspect --format json` output; the other checks still ran",
        measured=type(exc).__name__,
    )


def run_checks(inp: CheckInput, checks: tuple[Check, ...] = CHECKS) -> list[Finding]:
    """All findings, sorted with model.sort_findings. Never raises: a check that raises
    becomes a warning ``agentd.check.error`` naming it."""
    out: list[Finding] = []
    if inp.roles is None:
        try:
            roles = hca_roles(inp.snapshot, inp.config.hca)
        except Exception as exc:
            out.append(_error("roles.hca_roles", exc))
            roles = HcaRoles(compute=(), other=tuple(h.name for h in inp.snapshot.hcas), source="error")
        inp = replace(inp, roles=roles)
    for check in checks:
        name = check_name(check)
        try:
            found = check(inp)
        except Exception as exc:
            out.append(_error(name, exc))
            continue
        # each finding names its check (lifecycle policies and observe mode may name checks)
        out.extend(f if f.check is not None else f.model_copy(update={"check": name}) for f in found)
    return sort_findings(out)
