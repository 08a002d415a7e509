"""The one way to make a Finding, and the subjects findings are about.

Every finding in agentd (checks, staleness, file findings, the NCCL benchmark) is built
by :func:`finding`: the message is always one line, and the subject is a typed
:class:`~agentd.model.Subject` (never text). ``tests/judging/test_findings.py`` fails on a raw
``Finding(...)`` anywhere else in ``agentd/``. Pure.
"""

from __future__ import annotations

import time

from agentd.base.jsontypes import JsonValue
from agentd.model import Finding, Severity, Subject

NODE = Subject(kind="node")


def finding(
    code: str,
    severity: Severity,
    subject: Subject,
    message: str,
    remediation: str = "",
    *,
    measured: str | float | None = None,
    expected: str | float | None = None,
) -> Finding:
    if not isinstance(subject, Subject) or subject.kind == "text":
        raise TypeError(f"a finding is about a typed Subject, not {subject!r}")
    return Finding(
        code=code,
        severity=severity,
        subject=str(subject),
        about=subject,
        message=" ".join(message.split()),  # always one line
        remediation=remediation,
        measured=measured,
        expected=expected,
    )


def hca_subject(name: str) -> Subject:
    return Subject(kind="hca", name=name)


def port_subject(hca: str, port: int) -> Subject:
    return Subject(kind="port", name=hca, port=port)


def pci_subject(bus_id: str) -> Subject:
    return Subject(kind="pci", bus_id=bus_id)


def gpu_subject(index: int | None = None, bus_id: str | None = None) -> Subject:
    """``gpu3``; a GPU known only by its bus id (a baseline GPU gone from the node) shows as it."""
    return Subject(kind="gpu", index=index, bus_id=bus_id)


def nvlink_subject(gpu: int, link: int) -> Subject:
    return Subject(kind="nvlink", index=gpu, link=link)


def netdev_subject(name: str) -> Subject:
    return Subject(kind="netdev", name=name)


def probe_subject(name: str, path: str | None = None) -> Subject:
    """A data source (``nvml``), or one read of it (``infiniband:class/...``; ``*``: the rest)."""
    return Subject(kind="probe", name=name, path=path)


def check_subject(name: str) -> Subject:
    return Subject(kind="check", name=name)


def file_subject(name: str) -> Subject:
    return Subject(kind="file", name=name)


def bench_subject(name: str) -> Subject:
    return Subject(kind="bench", name=name)


def utc_text(unix_time: float) -> str:
    """RFC 3339 UTC to the second: 2026-11-24T03:12:40Z (a time no calendar holds: as given)."""
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix_time))
    except (OverflowError, ValueError, OSError):
        return f"{unix_time!r}"


def finding_line(f: Finding) -> str:
    """One line a finding: ``critical ib.port.down mlx5_3:1: message [since ...]``, usable as
    a Slurm drain reason. The lifecycle's times close the line (a cut reason loses them
    first); a withheld finding starts with why, ``(observe)``, so nothing that looks for a
    severity at the start of a line acts on it."""
    times = []
    if f.since is not None:
        times.append(f"since {utc_text(f.since)}")
    if f.raises_at is not None:
        times.append(f"counts from {utc_text(f.raises_at)}")
    if f.clears_at is not None:
        times.append(f"clears at {utc_text(f.clears_at)}")
    tail = f" [{', '.join(times)}]" if times else ""
    head = f"({f.withheld}) " if f.withheld is not None else ""
    return f"{head}{f.severity} {f.code} {f.subject}: {f.message}{tail}"


def restored(data: JsonValue) -> Finding:
    """A finding read back from agentd's own state file (the lifecycle's tracks: its JSON
    plus ``about``, the typed subject), built by ``finding`` like any other. Raises
    (ValueError, TypeError, KeyError) on anything else."""
    if not isinstance(data, dict):
        raise TypeError("a finding is a JSON object")
    about = Subject.model_validate(data["about"])
    f = finding(data["code"], data["severity"], about, data["message"], data.get("remediation", ""),
                measured=data.get("measured"), expected=data.get("expected"))
    check = data.get("check")
    return f.model_copy(update={"check": check}) if isinstance(check, str) else f
