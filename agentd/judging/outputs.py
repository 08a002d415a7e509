"""Findings about the files agentd writes, for others and for itself (the baseline). Pure."""

from __future__ import annotations

from typing import Sequence

from agentd.judging.findings import NODE, file_subject, finding
from agentd.model import Finding
from agentd.records import FileStatus


def output_findings(files: Sequence[FileStatus], nccl_problems: Sequence[str] = (), topo_problems: Sequence[str] = ()) -> list[Finding]:
    """Findings about what agentd writes for others (pure): a workload on this node may be
    running with an outdated NCCL file, so it shows in /health (as a warning: the node
    itself may be fine) and not only in metrics."""
    out: list[Finding] = []
    for f in files:
        if not f.ok:
            out.append(finding(
                "nccl.file.write_failed", "warning", file_subject(f.name),
                f"cannot write {f.path}: {f.error or 'unknown error'}; the previous file is kept and the write is retried every cycle ({f.failures_total} failures so far)",
                "check the filesystem (full, read-only, hung, permissions) and that the path is a regular file; with the packaged unit only /etc/nccl is writable",
                measured=f.failures_total,
            ))
        if f.drift:
            out.append(finding(
                "nccl.file.drift", "warning", file_subject(f.name),
                f"{f.path} was changed by someone else and is not restored (nccl.restore_drift is off)",
                "move local NCCL settings into nccl.overrides in agentd's config, or set nccl.restore_drift = true",
            ))
    if nccl_problems:
        out.append(finding(
            "nccl.render.invalid", "warning", file_subject("nccl"),
            "NCCL files not updated, the rendered values fail validation: " + "; ".join(nccl_problems)[:400],
            "fix the nccl.* settings named in the message (agentd check --format json shows them)",
        ))
    if topo_problems:
        out.append(finding(
            "nccl.topo.invalid", "warning", file_subject("nccl"),
            f"topology XML not written, it fails NCCL's parser rules ({len(topo_problems)} problems): {topo_problems[0]}",
            "report this with `agentd inspect --format json`; NCCL falls back to its own detection meanwhile (NCCL_TOPO_FILE is left out)",
        ))
    return out


def baseline_unreadable(path: str, error: str) -> Finding:
    """``baseline.unreadable``: the baseline file is there but cannot be read. It is left
    alone (only content that does not parse is ever replaced), so a GPU lost before is not
    forgotten; meanwhile lost devices are not judged against it. A warning, as
    ``baseline.foreign``: a fact about agentd's file, not about the node's hardware."""
    return finding(
        "baseline.unreadable", "warning", NODE,
        f"the baseline {path} cannot be read ({error}): it is left alone and read again every collection; "
        "until then lost GPUs, HCAs and ports are not judged against it and no new baseline is saved",
        f"make it readable by agentd's user again (`ls -l {path}`; a package upgrade or a restore as root can change its "
        "owner), or check the filesystem for I/O errors (dmesg); do not delete it unless this node's GPUs and HCAs are all there",
        measured="unreadable", expected="readable",
    )
