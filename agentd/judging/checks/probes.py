"""Readers that failed, timed out, went stale or met garbage become ``probe.failed``.

Subjects: the probe name for a probe-level problem (``nvml``, ``ethtool``); ``source:path``
for one read error (``infiniband:class/infiniband/mlx5_0/ports/1/rate``); ``source:*`` for
the summary when one source has more than ``MAX_PER_SOURCE`` read errors, so a broken
tree yields a bounded number of findings. All are warnings: agentd could not look, which
is not the same as the hardware being broken, but a node nobody can see is not "ok".
NVML answering "unavailable" while NVIDIA GPUs are on the PCI bus is not a probe failure
but ``nvml.blind`` (checks/nvlink.py), raised there and only there.
"""

from __future__ import annotations

from collections import Counter

from agentd.judging.checks.common import CheckInput, fmt
from agentd.judging.checks.nvlink import nvml_blind
from agentd.judging.findings import finding, probe_subject
from agentd.model import Finding, ProbeStatus, ReadError

MAX_PER_SOURCE = 5

_KIND_HINT = {
    "missing": "the file is absent: the driver may not expose it (driver/kernel version) or the device went away",
    "unreadable": "permission or I/O error: run agentd as root (config space needs CAP_SYS_ADMIN) and check dmesg",
    "unparsable": "the content is not what the kernel ABI documents: check the driver version, report it with the file's content",
    "timeout": "the read hung: check the device and its driver in dmesg; a hanging NVML often means a GPU fault",
    "unavailable": "the source is absent: NVML needs the NVIDIA driver; ethtool/DCB need privileges (CAP_NET_ADMIN)",
    "escape": "a symlink points outside the host root: check how the host root is mounted",
}


def _timeout_for(inp: CheckInput, name: str) -> float:
    t = inp.config.timeouts
    return t.nvml_s if "nvml" in name else t.probe_s


def _probe(inp: CheckInput, st: ProbeStatus) -> Finding | None:
    if st.ok and not st.timed_out and not st.stale:
        return None
    parts = []
    if st.timed_out:
        limit = _timeout_for(inp, st.name)
        what = "NVML did not answer" if "nvml" in st.name else f"probe {st.name} did not finish"
        parts.append(f"{what} within {fmt(limit)} s (timeouts.{'nvml_s' if 'nvml' in st.name else 'probe_s'})")
    elif not st.ok:
        parts.append(f"probe {st.name} failed" + (f": {st.error}" if st.error else ""))
    if st.stale:
        if st.last_success_at is not None:
            age = inp.snapshot.taken_at - st.last_success_at
            parts.append(f"its data is stale, from the last success {fmt(age)} s ago")
        else:
            parts.append("it has never succeeded: no data")
    hint = ("a hung NVML usually means a GPU or driver fault: check dmesg for Xid errors and `nvidia-smi`"
            if "nvml" in st.name else "check dmesg and the device's driver; run `agentd inspect` for the read errors")
    return finding("probe.failed", "warning", probe_subject(st.name), "; ".join(parts), hint,
                   measured="timeout" if st.timed_out else "stale" if st.stale else "failed")


def _read_errors(errors: tuple[ReadError, ...]) -> list[Finding]:
    by_source: dict[str, list[ReadError]] = {}
    for e in errors:
        by_source.setdefault(e.source, []).append(e)
    out: list[Finding] = []
    for source, errs in by_source.items():
        by_path: dict[str, list[ReadError]] = {}
        for e in errs:
            by_path.setdefault(e.path, []).append(e)
        paths = list(by_path)
        for path in paths[:MAX_PER_SOURCE]:
            es = by_path[path]
            e = es[0]
            detail = f": {e.detail}" if e.detail else ""
            more = f" (+{len(es) - 1} more)" if len(es) > 1 else ""
            out.append(finding("probe.failed", "warning", probe_subject(source, path), f"{source} read {e.kind}: {e.path}{detail}{more}",
                               _KIND_HINT.get(e.kind, ""), measured=e.kind))
        rest = [e for p in paths[MAX_PER_SOURCE:] for e in by_path[p]]
        if rest:
            kinds = Counter(e.kind for e in rest)
            shown = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
            out.append(finding("probe.failed", "warning", probe_subject(source, "*"),
                               f"{len(rest)} more {source} read errors ({shown}), first: {rest[0].path}",
                               "run `agentd inspect` to list every read error", measured=len(rest)))
    return out


def check_probes(inp: CheckInput) -> list[Finding]:
    """probe.failed for failed/timed-out/stale probes and for read errors."""
    snap = inp.snapshot
    out = [f for st in snap.probes if (f := _probe(inp, st)) is not None]
    errors = snap.read_errors
    if not snap.nvml.available and nvml_blind(snap):
        # Why NVML is unavailable (nvmlInit's error) is in nvml.blind's message: not twice.
        errors = tuple(e for e in errors if e.source != "nvml")
    out.extend(_read_errors(errors))
    return out
