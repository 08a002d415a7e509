"""NCCL files derived from measurement: the env file, nccl.conf and the topology XML.

``render_all`` is the one entry point for the daemon and ``agentd render``: pure, no I/O.
It renders the topology XML first, checks it with NCCL's parser rules, and only points
``NCCL_TOPO_FILE`` at it when it passed; then derives and validates the environment and
renders both env forms, re-reading the KEY=VALUE form with each consumer's parser.

Contract for the caller: each file stands on its own.
- ``file_problems`` names a file: do not write that file (keep the previous one) and report
  why; a value that fails validation (an override NCCL would misread, an internal
  inconsistency) costs the files that carry it, ``nccl.env`` and ``nccl.conf``, never
  ``topo.xml``; a value only the KEY=VALUE form cannot carry costs ``nccl.conf`` alone.
  ``problems`` is all of them, for findings and ``agentd render``.
- ``topo_xml`` None: do not write the XML (``notes``/``topo_problems`` say why; the env
  then has no NCCL_TOPO_FILE, and NCCL detects the topology itself). ``topo_problems``
  non-empty means agentd produced an XML that failed its own check: report it (a
  warning finding), it is a bug or a hardware layout agentd does not understand.
  Only the check's errors (what NCCL rejects or misreads) block the XML. Its warnings
  (what NCCL reads as meant but with a default, e.g. ``link_speed=""`` on a VM whose
  hypervisor hides the PCIe link capability, which NCCL's own detection writes too)
  become ``notes``, one a kind: the node is not sick, and the file is what NCCL would use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import EllipsisType

from agentd.config import AgentConfig, host_visible_path
from agentd.judging.roles import HcaRoles
from agentd.model import Finding, NodeSnapshot
from agentd.nccl.env import derive_env, render_env_conf, render_env_sh
from agentd.nccl.envfile import read_docker_env_file, read_nccl_conf, read_systemd_env_file
from agentd.nccl.envmodel import EnvVar, NcclEnv
from agentd.nccl.topo import build_topo, render_topo_xml
from agentd.nccl.xmlcheck import check_topo_xml, scan_topo_xml
from agentd.nccl.xmlreader import XmlIssue

ENV_FILE, CONF_FILE, TOPO_FILE = "nccl.env", "nccl.conf", "topo.xml"

__all__ = [
    "CONF_FILE",
    "ENV_FILE",
    "EnvVar",
    "NcclEnv",
    "NcclRender",
    "TOPO_FILE",
    "check_topo_xml",
    "derive_env",
    "render_all",
    "render_env_conf",
    "render_env_sh",
    "render_topo_xml",
]


@dataclass(frozen=True)
class NcclRender:
    env: NcclEnv
    env_sh: str
    env_conf: str
    topo_xml: str | None
    problems: tuple[str, ...]  # every blocking problem, whichever file it costs
    notes: tuple[str, ...] = ()  # non-blocking: advice, why the XML was not rendered
    topo_problems: tuple[str, ...] = ()  # the rendered XML failed the NCCL-rule check
    # file label (ENV_FILE, CONF_FILE, TOPO_FILE) -> the problems that keep it unwritten
    file_problems: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


def render_all(
    snapshot: NodeSnapshot,
    findings: Sequence[Finding],
    config: AgentConfig,
    roles: HcaRoles,
    *,
    generated_at: float | None = None,
    topo_path: str | None | EllipsisType = ...,
) -> NcclRender:
    """Everything agentd writes for NCCL, validated. ``generated_at`` (default: the
    snapshot time) only goes into the header comment. ``topo_path``: where the XML will
    be written, for NCCL_TOPO_FILE (default ``paths.nccl_topo``; ``agentd render
    --out-dir`` passes its own; None: the XML is not written, so no NCCL_TOPO_FILE)."""
    notes: list[str] = []
    topo_xml: str | None = None
    topo_problems: tuple[str, ...] = ()
    if config.nccl.write_topo:
        topo = build_topo(snapshot, roles)
        if topo.xml is None:
            notes.append(f"topology XML not written: {topo.reason}")
        else:
            issues = scan_topo_xml(topo.xml, existing_bus_ids={d.bdf for d in snapshot.pci})
            errors = [i for i in issues if i.severity == "error"]
            if errors:
                topo_problems = tuple(str(i) for i in errors)
                notes.append(f"topology XML not written: it fails the NCCL-rule check ({len(errors)} problems)")
            else:
                topo_xml = topo.xml
                notes += _warning_notes(issues)
    target = host_visible_path(config.paths.nccl_topo, config.host_root) if topo_path is ... else topo_path
    env = derive_env(snapshot, findings, config, topo_path=target if topo_xml is not None else None, roles=roles)
    env_problems = list(env.problems)  # the values both env forms carry
    conf_problems: list[str] = []  # what only the KEY=VALUE form cannot carry
    notes += env.notes
    when = snapshot.taken_at if generated_at is None else generated_at
    host = snapshot.system.hostname
    env_sh = render_env_sh(env, generated_at=when, hostname=host)
    try:
        env_conf = render_env_conf(env, generated_at=when, hostname=host)
    except ValueError as e:
        conf_problems.append(str(e))
        env_conf = ""
    else:
        expected = env.as_dict()
        readers = (
            ("NCCL's nccl.conf reader", read_nccl_conf(env_conf)),
            ("NCCL's nccl.conf reader before 2.26", read_nccl_conf(env_conf, skip_hash_lines=False)),
            ("systemd EnvironmentFile", read_systemd_env_file(env_conf)),
            ("docker --env-file", read_docker_env_file(env_conf)),
        )
        for reader, got in readers:
            if got != expected:
                conf_problems.append(f"{reader} would read the KEY=VALUE form differently: {got} instead of {expected}")
    return NcclRender(
        env=env,
        env_sh=env_sh,
        env_conf=env_conf,
        topo_xml=topo_xml,
        problems=tuple(env_problems + conf_problems),
        notes=tuple(notes),
        topo_problems=topo_problems,
        file_problems=tuple(
            (file, tuple(blocked))
            for file, blocked in ((ENV_FILE, env_problems), (CONF_FILE, env_problems + conf_problems))
            if blocked
        ),
    )


def _warning_notes(issues: Sequence[XmlIssue]) -> list[str]:
    """One note per kind of warning, with how many elements have it and the first line."""
    kinds: dict[str, list[int]] = {}
    for i in issues:
        if i.severity == "warning":
            kinds.setdefault(i.message, []).append(i.line)
    return [
        f"topology XML: {msg} ({len(lines)} element{'s' if len(lines) > 1 else ''}, first on line {lines[0]})"
        for msg, lines in kinds.items()
    ]
