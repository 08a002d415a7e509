"""Human and JSON views of a snapshot and of findings (pure; used by the CLI)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Sequence

from agentd.base.escape import printable
from agentd.base.jsontypes import JsonObject
from agentd.judging.findings import finding_block
from agentd.judging.placement import Placement
from agentd.judging.roles import HcaRoles
from agentd.judging.scope import STATUS as NOTHING_TO_JUDGE
from agentd.model import Finding, NodeSnapshot, TclassOverride, counted, overall_status, sort_findings
from agentd.outputs.maintenance import Maintenance, maintenance_doc, maintenance_line


def inspect_view(snap: NodeSnapshot, roles: HcaRoles | None = None) -> JsonObject:
    """The `agentd inspect --format json` document (stable keys, documented in README)."""
    netdev_mtu = {n.name: n.mtu for n in snap.netdevs}
    return {
        "host_root": snap.host_root,
        "host_mode": {"mode": snap.host_mode, "reason": snap.host_mode_reason},
        "taken_at": snap.taken_at,
        "system": snap.system.model_dump(mode="json"),
        "gpus": [
            {
                "index": g.index,
                "pci_bus_id": g.pci_bus_id,
                "name": g.name,
                "uuid": g.uuid,
                "numa_node": g.numa_node,
                "in_nvml": g.in_nvml,
                "nic_paths": dict(g.nic_paths),
            }
            for g in snap.gpus
        ],
        "hcas": [
            {
                "name": h.name,
                "role": None if roles is None else ("compute" if roles.is_compute(h.name) else "other"),
                "family": h.family,
                "physfn": h.physfn,
                "hca_type": h.hca_type,
                "fw_ver": h.fw_ver,
                "board_id": h.board_id,
                "node_guid": h.node_guid,
                "pci_bus_id": h.pci_bus_id,
                "numa_node": h.numa_node,
                "temperatures": [t.model_dump(mode="json") for t in h.temperatures],
                "ports": [
                    {
                        "port": p.port,
                        "state": p.state,
                        "state_from": p.state_from,
                        "phys_state": p.phys_state,
                        "rate_gbps": p.rate_gbps,
                        "width": p.width,
                        "generation": p.generation,
                        "link_layer": p.link_layer,
                        "lid": p.lid,
                        "netdev": p.netdev,
                        "mtu": netdev_mtu.get(p.netdev) if p.netdev else None,
                        "gids": [gid.model_dump(mode="json") for gid in p.gids],
                        "counters": dict(p.counters),
                        "hw_counters": dict(p.hw_counters),
                        "sm_sl": p.sm_sl,
                        "tclass": None if p.tclass is None else p.tclass.model_dump(mode="json"),
                        "link_diag": None if p.link_diag is None else p.link_diag.model_dump(mode="json"),
                    }
                    for p in h.ports
                ],
            }
            for h in snap.hcas
        ],
        "netdevs": [n.model_dump(mode="json") for n in snap.netdevs],
        "gdr": snap.gdr.model_dump(mode="json"),
        "nvml": {
            "available": snap.nvml.available,
            "driver_version": snap.nvml.driver_version,
            "cuda_driver_version": snap.nvml.cuda_driver_version,
            "error": snap.nvml.error,
            "gpus": [g.model_dump(mode="json") for g in snap.nvml.gpus],
        },
        "pci": [d.model_dump(mode="json") for d in snap.pci],
        "kernel": snap.kernel.model_dump(mode="json"),
        "daemons": snap.daemons.model_dump(mode="json"),
        "nccl_conf": None if snap.nccl_conf is None else snap.nccl_conf.model_dump(mode="json"),
        "versions": snap.versions.model_dump(mode="json"),
        "probes": [p.model_dump(mode="json") for p in snap.probes],
        "read_errors": [e.model_dump(mode="json") for e in snap.read_errors],
        "ignored": [d.model_dump(mode="json") for d in snap.ignored],
        "backed_off": [b.model_dump(mode="json") for b in snap.backed_off],
        "default_routes": list(snap.default_routes),
    }


def _table(rows: list[list[str]]) -> list[str]:
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _s(v: object) -> str:
    return "-" if v is None else str(v)


def _booted(at: float | None, taken_at: float | None) -> str:
    """``2026-05-04T03:02:01Z, up 3d 2h`` (up: at ``taken_at``); ``-`` when unknown."""
    if at is None:
        return "-"
    when = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    up = -1 if taken_at is None else int(taken_at - at)
    if up < 0:
        return when
    d, h, m = up // 86400, up % 86400 // 3600, up % 3600 // 60
    return f"{when}, up {f'{d}d {h}h' if d else f'{h}h {m}m' if h else f'{m}m {up % 60}s'}"


def _tclass(t: TclassOverride | None) -> str:
    """The port's mlx5 tclass override: "-" (no tc file), "none", "106", "106 +2 rules"."""
    if t is None:
        return "-"
    shown = "none" if t.global_tclass is None else str(t.global_tclass)
    return f"{shown} +{len(t.rules)} rules" if t.rules else shown


def _dbm(w: float) -> str:
    return f"{10 * math.log10(w * 1000):.1f} dBm" if w > 0 else "no light"


def _optics_lines(snap: NodeSnapshot) -> list[str]:
    """The physical layer (issue 38): HCA sensors, Ethernet modules and PHYs, and once,
    that the kernel shows no module of an InfiniBand port."""
    out: list[str] = []
    for h in snap.hcas:
        if h.temperatures:
            temps = ", ".join(f"{t.label or f'temp{t.channel}'} {_s(t.temperature_c)} C" + (f" (crit {t.critical_c:g})" if t.critical_c is not None else "")
                              for t in h.temperatures)
            out.append(f"{h.name} temperatures: {temps}")
        for p in h.ports:
            d = p.link_diag
            if d is not None:
                out.append(f"{h.name}:{p.port} {d.tool}: effective BER {_s(d.effective_ber)}, raw BER {_s(d.raw_ber)}, link down {_s(d.link_down)}")
    for n in snap.netdevs:
        m, phy = n.module, n.phy
        if m is not None and m.identifier is not None:
            lit = [lane.rx_power_w for lane in m.lanes_in_use if lane.rx_power_w is not None]
            rx = f", weakest Rx {_dbm(min(lit))} of {len(lit)} lanes in use" if lit else ""
            out.append(f"{n.name} module {_s(m.identifier_name)} {_s(m.vendor)} {_s(m.part_number)} ({_s(m.spec)}, {m.source}): {_s(m.temperature_c)} C{rx}")
        elif m is not None and m.problem:
            out.append(f"{n.name} module: {m.problem}")
        if phy is not None:
            why = f" ({phy.ext_state}{'/' + phy.ext_substate if phy.ext_substate else ''})" if phy.ext_state else ""
            fec = f", FEC corrected {_s(phy.fec.corrected_blocks)} uncorrectable {_s(phy.fec.uncorrectable_blocks)}" if phy.fec is not None else ""
            link = "up" if phy.link else "down" if phy.link is False else "?"
            out.append(f"{n.name} phy: link {link}{why}, {_s(phy.link_down_events)} link-down events{fec}")
    if any(p.link_layer == "InfiniBand" for h in snap.hcas for p in h.ports):
        out.append("InfiniBand ports: the kernel shows no module EEPROM, FEC or link-down reason through IPoIB; "
                   "the HCA's hwmon module sensor, the PMA counters (symbol errors) and, opt-in, [optics] link_tool stand in")
    return [""] + out if out else []


def inspect_text(snap: NodeSnapshot, roles: HcaRoles | None = None) -> str:
    out: list[str] = []
    sysi = snap.system
    out.append(f"node {_s(sysi.hostname)}  root {snap.host_root}  arch {_s(sysi.arch)}  numa nodes {len(sysi.numa_nodes)}  virt {_s(sysi.virtualization)}")
    out.append(f"mode {_s(snap.host_mode)}: {_s(snap.host_mode_reason)}")
    # "up" only where the snapshot's time is the node's now (a capture is replayed later)
    taken = None if snap.host_mode == "offline" else snap.taken_at
    out.append(f"booted {_booted(sysi.booted_at, taken)} ({sysi.boot_time_source or 'the root does not say'})")
    g = snap.gdr
    out.append(
        f"driver {_s(g.nvidia_driver_version)} ({'open' if g.nvidia_open_module else 'proprietary' if g.nvidia_open_module is False else 'unknown'} module)  "
        f"kernel {_s(g.kernel_release)}  nvidia_peermem {'loaded' if g.peermem_loaded else 'not loaded'}  "
        f"NVML {'ok' if snap.nvml.available else 'unavailable: ' + _s(snap.nvml.error)}"
    )
    v = snap.versions
    if v.mlx5_core or v.rdma_core:
        out.append(f"rdma stack: mlx5_core {v.mlx5_core or 'inbox (no version file)'}  rdma-core {_s(v.rdma_core)}")
    if snap.nccl_conf is not None:
        shown = " ".join(f"{k}={val}" for k, val in sorted(snap.nccl_conf.variables.items())) or "no NCCL_* variables"
        out.append(f"/{snap.nccl_conf.path}: {shown}")
    k = snap.kernel
    if k.available:
        out.append(f"kernel log {k.source}: {k.records} records, {len(k.events)} recent events ({', '.join(sorted({f'{e.kind} {e.code}' for e in k.events})) or 'none'})")
    elif k.asked:
        out.append(f"kernel log unreadable: {_s(k.error)}")
    d = snap.daemons
    if d.asked:
        seen = "the whole process table" if d.complete else "a partial process table (absence says nothing)"
        out.append(f"fabric daemons {', '.join(d.running) or 'none'} ({seen})")
    for ng in snap.nvml.gpus:
        if ng.fabric_state in (None, "not_supported"):
            continue
        ident = f"{ng.fabric_cluster_uuid}.{ng.fabric_clique_id}" if ng.fabric_cluster_uuid is not None else "-"
        health = ng.fabric_health.summary if ng.fabric_health is not None and ng.fabric_health.summary else "-"
        out.append(f"fabric gpu{ng.index} {ng.fabric_state}/{_s(ng.fabric_status)} domain {ident} health {health}")
    out.append("")
    hca_names = [h.name for h in snap.hcas]
    rows = [["GPU", "BUS ID", "NUMA", "NAME", *hca_names]]
    for gpu in snap.gpus:
        rows.append([str(gpu.index), gpu.pci_bus_id, _s(gpu.numa_node), _s(gpu.name), *[gpu.nic_paths.get(h, "-") for h in hca_names]])
    out.extend(_table(rows) if snap.gpus else ["no GPUs"])
    out.append("")
    mtu = {n.name: n.mtu for n in snap.netdevs}
    rows = [["HCA", "PORT", "ROLE", "FAMILY", "TYPE", "BUS ID", "NUMA", "STATE", "PHYS", "RATE", "WIDTH", "LAYER", "NETDEV", "MTU", "TCLASS"]]
    for h in snap.hcas:
        role = "-" if roles is None else ("compute" if roles.is_compute(h.name) else "other")
        family = f"{h.family} (VF of {h.physfn})" if h.physfn else h.family
        for p in h.ports:
            state = f"{p.state} (netdev)" if p.state_from and p.state else _s(p.state)
            rows.append([
                h.name, str(p.port), role, family, _s(h.hca_type), _s(h.pci_bus_id), _s(h.numa_node), state, _s(p.phys_state),
                f"{p.rate_gbps:g}G" if p.rate_gbps is not None else "-",
                f"{p.width}X" if p.width else "-", _s(p.link_layer), _s(p.netdev), _s(mtu.get(p.netdev) if p.netdev else None),
                _tclass(p.tclass),
            ])
    out.extend(_table(rows) if snap.hcas else ["no RDMA devices"])
    out.append("")
    rows = [["NETDEV", "MTU", "STATE", "CARRIER", "SPEED", "BUS ID", "ECN(np/rp prios)", "PFC", "TRUST"]]
    for n in snap.netdevs:
        if n.is_virtual and n.name == "lo":
            continue
        ecn = "-"
        if n.ecn is not None:
            np_on = ",".join(str(p) for p, on in sorted(n.ecn.np.items()) if on) or "none"
            rp_on = ",".join(str(p) for p, on in sorted(n.ecn.rp.items()) if on) or "none"
            ecn = f"{np_on}/{rp_on}"
        pfc = "-" if n.pfc is None else (",".join(map(str, n.pfc.enabled)) or "none")
        rows.append([n.name, _s(n.mtu), _s(n.operstate), _s(n.carrier), _s(n.speed_mbps), _s(n.pci_bus_id), ecn, pfc,
                     "-" if n.pfc is None else _s(n.pfc.trust)])
    out.extend(_table(rows))
    if snap.ignored or snap.backed_off:
        out.append("")
    for ig in snap.ignored:
        out.append(f"ignored {ig.kind} {ig.name}{f' ({ig.pci_bus_id})' if ig.pci_bus_id and ig.pci_bus_id != ig.name else ''}: collect.ignore {ig.pattern!r}")
    for b in snap.backed_off:
        out.append(f"backed off {b.pci_bus_id} ({b.reads}, {b.reason}): {b.evidence}")
    out.extend(_optics_lines(snap))
    if snap.read_errors:
        out.append("")
        out.append(f"read errors ({len(snap.read_errors)}):")
        for e in snap.read_errors[:50]:
            out.append(f"  {e.source}: {e.kind} {e.path} {e.detail}".rstrip())
        if len(snap.read_errors) > 50:
            out.append(f"  ... {len(snap.read_errors) - 50} more")
    return printable("\n".join(out) + "\n")  # names that are not UTF-8 as \xNN


def findings_json(findings: Sequence[Finding], maintenance: Maintenance | None = None, *, nothing_to_judge: str | None = None) -> JsonObject:
    """In maintenance, ``status`` is ``maintenance``, ``measured_status`` what it would have
    been and ``maintenance`` the file's reason, since and by; the findings are all there.
    ``nothing_to_judge`` (why: agentd.judging.scope): ``status`` is ``nothing-to-judge``
    and ``nothing_to_judge`` says why."""
    ordered = sort_findings(list(findings))
    measured = overall_status(ordered)
    doc: JsonObject = {"status": measured}
    if maintenance is not None:
        doc = {"status": "maintenance", "measured_status": measured, "maintenance": maintenance_doc(maintenance)}
    elif nothing_to_judge is not None:
        doc = {"status": NOTHING_TO_JUDGE, "measured_status": measured, "nothing_to_judge": nothing_to_judge}
    doc["findings"] = [f.model_dump(mode="json") for f in ordered]
    return doc


def findings_text(findings: Sequence[Finding], *, include_ok: bool = False, maintenance: Maintenance | None = None,
                  nothing_to_judge: str | None = None) -> str:
    """One line a finding, most severe first: usable as a Slurm drain reason; under each,
    indented, what to do about it (agentd.judging.findings.finding_block). In maintenance
    the first line is ``maintenance`` and the next one says why and since when (the Slurm
    wrapper then neither drains nor resumes); the findings follow as usual. With
    ``nothing_to_judge`` the first line is ``nothing-to-judge`` and the next says why."""
    ordered = sort_findings(list(findings))
    lines: list[str] = [overall_status(ordered)]
    if maintenance is not None:
        lines = ["maintenance", maintenance_line(maintenance)]
    elif nothing_to_judge is not None:
        lines = [NOTHING_TO_JUDGE, f"nothing to judge: {nothing_to_judge}"]
    # the findings that count, then the withheld ones ("(observe) critical ...": no line
    # of theirs starts with a severity, so nothing that drains on one acts on it)
    for f in [*counted(ordered), *(f for f in ordered if f.withheld is not None)]:
        if f.severity == "ok" and not include_ok:
            continue
        lines.extend(finding_block(f))
    return printable("\n".join(lines) + "\n")


def placement_view(p: Placement, node: str | None) -> JsonObject:
    """The `agentd topology --format json` document: the node name and /topology's placement object."""
    return {"node": node, **p.model_dump(mode="json")}


def placement_text(p: Placement, node: str | None) -> str:
    """`agentd topology`: the NVLink domain, the rail hash and one line a rail."""
    d = p.domain
    if d is not None:
        domain = f"{d.id} ({d.gpus} GPUs, health {d.health})"
    else:
        domain = "none (" + ("a multi-node domain is expected: see `agentd check`" if p.multi_node else "no multi-node domain") + ")"
    lines = [f"node           {printable(node or '?')}", f"nvlink domain  {domain}", f"rail hash      {p.rail_hash or 'none'}"]
    if p.rails:
        rows = [["gpu", "bus id", "nic", "port", "netdev", "path", "gpu pcie root", "nic pcie root"]]
        rows += [[str(r.gpu), r.gpu_bus_id, printable(r.nic), _s(r.port), printable(r.netdev or "-"), r.path,
                  _s(r.gpu_pcie_root), _s(r.nic_pcie_root)] for r in p.rails]
        lines += ["", *_table(rows)]
    else:
        lines.append("rails          none (no GPU with a compute HCA)")
    return "\n".join(lines) + "\n"
