"""Metrics about agentd itself: health and findings, probes, collections, written files,
configuration reloads, udev and rtnetlink events, build and process."""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING, Final

from agentd import __version__
from agentd.base.expo import Exposition, Family, MetricType
from agentd.judging.staleness import STALE_CODE, stale_findings, stale_probe_names
from agentd.metrics.registry import Area
from agentd.metrics.source import MetricsSource

if TYPE_CHECKING:  # psutil is imported when first asked (it stays out of agentd check's start-up)
    import psutil

G: Final[MetricType] = "gauge"
C: Final[MetricType] = "counter"
FAMILIES: tuple[Family, ...] = (
    Family("agentd_build_info", G, "agentd version and Python version (value 1).", ("version", "python")),
    Family("agentd_node_info", G, "The node as agentd reads it (value 1): hostname (node_exporter's nodename), kernel release, architecture, virtualization (empty on bare metal).", ("nodename", "kernel_release", "arch", "virtualization")),
    Family("agentd_ready", G, "1 once the first full collection has completed (/readyz).", ()),
    Family("agentd_health_status", G, "Overall node health from the findings that count: 0 ok, 1 degraded, 2 critical (stale data is critical); in maintenance as measured (agentd_maintenance says /health answers maintenance).", ()),
    Family("agentd_healthy", G, "1 when /health answers 200 (no critical finding and data fresh, or maintenance), else 0.", ()),
    Family("agentd_maintenance", G, "1 while the node is in maintenance (agentd maintenance on; after off until a full fresh collection): /health answers 200 'maintenance', the Slurm wrapper changes nothing, NCCL files are kept.", ()),
    Family("agentd_maintenance_start_timestamp_seconds", G, "Unix time the current maintenance started.", ()),
    Family("agentd_finding", G, "One series (value 1) per current finding that counts toward health (withheld ones: agentd_finding_withheld).", ("code", "severity", "subject")),
    Family("agentd_finding_withheld", G, "One series (value 1) per current finding that does not count toward health, and why: observe (lifecycle.observe), pending (lifecycle raise_after not met yet), boot_grace.", ("code", "severity", "subject", "reason")),
    Family("agentd_finding_since_timestamp_seconds", G, "Unix time each current non-ok finding was first seen in this episode (lifecycle; survives restarts).", ("code", "subject")),
    Family("agentd_finding_clears_at_timestamp_seconds", G, "Unix time a sticky finding that is no longer seen stops counting (lifecycle clear_after_s).", ("code", "subject")),
    Family("agentd_findings", G, "Number of current findings that count, per severity.", ("severity",)),
    Family("agentd_probe_duration_seconds", G, "Duration of the latest run of the probe (the timeout when it timed out).", ("probe",)),
    Family("agentd_probe_success", G, "1 when the latest run of the probe finished without a source-level failure or timeout.", ("probe",)),
    Family("agentd_probe_last_success_timestamp_seconds", G, "Unix time the probe last finished successfully.", ("probe",)),
    Family("agentd_probe_stale", G, "1 when the probe's data is older than intervals.stale_after times its tier interval, or it never succeeded (/health is 503).", ("probe",)),
    Family("agentd_probe_stale_limit_seconds", G, "Age after which the probe's data counts as stale.", ("probe",)),
    Family("agentd_probe_read_errors", G, "Read errors (missing, unreadable, unparsable files) in the probe's latest data.", ("probe",)),
    Family("agentd_probe_files_read", G, "Files the probe's latest successful run read.", ("probe",)),
    Family("agentd_collection_duration_seconds", G, "Wall time of the latest collection of the tier (probes, checks, renders, writes).", ("tier",)),
    Family("agentd_collection_cpu_seconds", G, "CPU time of the agentd process during the latest collection of the tier.", ("tier",)),
    Family("agentd_last_collection_timestamp_seconds", G, "Unix time the latest collection of the tier finished.", ("tier",)),
    Family("agentd_state_generated_timestamp_seconds", G, "Unix time the state these metrics come from was built.", ()),
    Family("agentd_nccl_file_write_success", G, "1 when the latest write of the managed file succeeded or nothing needed writing.", ("file", "path")),
    Family("agentd_nccl_file_last_write_timestamp_seconds", G, "Unix time agentd last changed the managed file on disk.", ("file", "path")),
    Family("agentd_nccl_file_write_failures_total", C, "Failed writes of the managed file since agentd started.", ("file", "path")),
    Family("agentd_nccl_file_drift", G, "1 when the managed file on disk differs from what agentd last wrote (edited by someone else).", ("file", "path")),
    Family("agentd_nccl_file_drift_total", C, "Times the managed file was found changed by someone else (restored when nccl.restore_drift).", ("file", "path")),
    Family("agentd_nccl_env_info", G, "One series (value 1) per variable the NCCL env file sets.", ("variable", "value")),
    Family("agentd_nccl_render_problems", G, "Problems the NCCL renderer reported (e.g. no healthy compute port).", ()),
    Family("agentd_hca_compute_info", G, "HCAs that carry GPU traffic (value 1); source is config or inferred.", ("device", "source")),
    Family("agentd_config_last_reload_success", G, "1 when the latest SIGHUP configuration reload succeeded (or none happened).", ()),
    Family("agentd_config_last_reload_timestamp_seconds", G, "Unix time of the latest configuration reload attempt.", ()),
    Family("agentd_udev_monitor_active", G, "1 when the udev monitor is running (live host root only).", ()),
    Family("agentd_udev_events_total", C, "udev events received, by subsystem and action.", ("subsystem", "action")),
    Family("agentd_rtnetlink_monitor_active", G, "1 when rtnetlink link notifications are watched (events.rtnetlink).", ()),
    Family("agentd_rtnetlink_link_events_total", C, "rtnetlink link notifications, by outcome: changed (a watched netdev's carrier or operstate changed: fast-tier collection), unchanged, unwatched, malformed, overrun.", ("outcome",)),
    Family("agentd_start_time_seconds", G, "Unix time the daemon started.", ()),
    Family("agentd_process_resident_memory_bytes", G, "Resident set size of the agentd process.", ()),
    Family("agentd_process_cpu_seconds_total", C, "User and system CPU time of the agentd process.", ()),
    Family("agentd_process_open_fds", G, "Open file descriptors of the agentd process.", ()),
    Family("agentd_process_threads", G, "Threads of the agentd process (hung probes keep theirs).", ()),
)

_SEV_VALUE = {"ok": 0, "degraded": 1, "critical": 2}


def render(x: Exposition, s: MetricsSource) -> None:
    x.add("agentd_build_info", (__version__, platform.python_version()), 1)
    if s.snapshot is not None:
        sysi, gdr = s.snapshot.system, s.snapshot.gdr
        x.add("agentd_node_info", (sysi.hostname or "", gdr.kernel_release or "", sysi.arch or "", sysi.virtualization or ""), 1)
    x.add("agentd_ready", (), s.ready)
    x.add("agentd_start_time_seconds", (), s.started_at)
    x.add("agentd_state_generated_timestamp_seconds", (), s.generated_at)

    # Staleness as of the moment this State was built (the exposition is built with it).
    stale = stale_probe_names(s.snapshot, s.stale_limits, s.generated_mono) if s.ready else ()
    findings = list(s.findings)
    if stale and not any(f.code == STALE_CODE for f in findings):
        findings += stale_findings(s.snapshot, s.stale_limits, stale, s.generated_mono)
    if s.ready:
        status = "critical" if stale else s.measured_status
        x.add("agentd_health_status", (), _SEV_VALUE[status])
        x.add("agentd_healthy", (), status != "critical" or s.in_maintenance)
    else:
        x.add("agentd_health_status", (), 2)
        x.add("agentd_healthy", (), 0)
    x.add("agentd_maintenance", (), s.in_maintenance)
    since = getattr(s.maintenance, "since", None)
    if since is not None:
        x.add("agentd_maintenance_start_timestamp_seconds", (), since)
    seen = set()
    timed = set()
    counts = {"ok": 0, "warning": 0, "critical": 0}
    for f in findings:
        key = (f.code, f.severity, f.subject)
        if f.withheld is None:
            counts[f.severity] += 1
        if key in seen:
            continue
        seen.add(key)
        if f.withheld is None:
            x.add("agentd_finding", key, 1)
        else:
            x.add("agentd_finding_withheld", (*key, f.withheld), 1)
        if f.severity != "ok" and (f.code, f.subject) not in timed:
            timed.add((f.code, f.subject))
            if f.since is not None:
                x.add("agentd_finding_since_timestamp_seconds", (f.code, f.subject), f.since)
            if f.clears_at is not None:
                x.add("agentd_finding_clears_at_timestamp_seconds", (f.code, f.subject), f.clears_at)
    for sev, n in counts.items():
        x.add("agentd_findings", (sev,), n)

    snap = s.snapshot
    if snap is not None:
        errors: dict[str, int] = {}
        for e in snap.read_errors:
            errors[e.source] = errors.get(e.source, 0) + 1
        for p in snap.probes:
            lab: tuple[str, ...] = (p.name,)
            x.add("agentd_probe_duration_seconds", lab, p.duration_s)
            x.add("agentd_probe_success", lab, p.ok)
            if p.last_success_at is not None:
                x.add("agentd_probe_last_success_timestamp_seconds", lab, p.last_success_at)
            x.add("agentd_probe_stale", lab, p.name in stale)
            if p.name in s.stale_limits:
                x.add("agentd_probe_stale_limit_seconds", lab, s.stale_limits[p.name])
            x.add("agentd_probe_read_errors", lab, errors.get(p.name, 0))
            if p.ok:
                x.add("agentd_probe_files_read", lab, p.files_read)
    for t in s.tiers:
        x.add("agentd_collection_duration_seconds", (t.tier,), t.duration_s)
        x.add("agentd_collection_cpu_seconds", (t.tier,), t.cpu_s)
        x.add("agentd_last_collection_timestamp_seconds", (t.tier,), t.finished_at)

    for fs in s.files:
        lab = (fs.name, fs.path)
        x.add("agentd_nccl_file_write_success", lab, fs.ok)
        if fs.last_write_at is not None:
            x.add("agentd_nccl_file_last_write_timestamp_seconds", lab, fs.last_write_at)
        x.add("agentd_nccl_file_write_failures_total", lab, fs.failures_total)
        x.add("agentd_nccl_file_drift", lab, fs.drift)
        x.add("agentd_nccl_file_drift_total", lab, fs.drift_total)
    for var, value in s.nccl_env:
        x.add("agentd_nccl_env_info", (var, value), 1)
    if s.ready and s.config.nccl.enabled:
        x.add("agentd_nccl_render_problems", (), len(s.nccl_problems))
    for hca in s.compute_hcas:
        x.add("agentd_hca_compute_info", (hca, s.hca_roles_source), 1)

    x.add("agentd_config_last_reload_success", (), s.reload.ok)
    if s.reload.at is not None:
        x.add("agentd_config_last_reload_timestamp_seconds", (), s.reload.at)
    x.add("agentd_udev_monitor_active", (), s.udev_active)
    for (subsystem, action), n in sorted(s.udev_events.items()):
        x.add("agentd_udev_events_total", (subsystem, action), n)
    x.add("agentd_rtnetlink_monitor_active", (), s.link_active)
    for outcome, n in sorted(s.link_events.items()):
        x.add("agentd_rtnetlink_link_events_total", (outcome,), n)

    proc = s.process
    if "rss_bytes" in proc:
        x.add("agentd_process_resident_memory_bytes", (), proc["rss_bytes"])
    if "cpu_seconds" in proc:
        x.add("agentd_process_cpu_seconds_total", (), proc["cpu_seconds"])
    if "open_fds" in proc:
        x.add("agentd_process_open_fds", (), proc["open_fds"])
    if "threads" in proc:
        x.add("agentd_process_threads", (), proc["threads"])


_PROC: psutil.Process | None = None  # this daemon's, created on first use


def process_stats() -> dict[str, float]:
    """agentd's own RSS, CPU, fds and threads for the agentd_process_* metrics."""
    global _PROC
    try:
        import psutil

        if _PROC is None:
            _PROC = psutil.Process()
        proc = _PROC
        with proc.oneshot():
            cpu = proc.cpu_times()
            return {"rss_bytes": float(proc.memory_info().rss), "cpu_seconds": cpu.user + cpu.system,
                    "open_fds": float(proc.num_fds()), "threads": float(proc.num_threads())}
    except Exception:
        return {}


AREA = Area("agent", FAMILIES, render)
