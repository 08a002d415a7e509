"""Command line: run | check | render | inspect | topology | capture | simulate | baseline | maintenance.

Exit codes of `agentd check` (Slurm HealthCheckProgram, cron): 0 ok, 1 degraded
(warnings only), 2 critical, 3 agentd itself could not run (reason on stderr).
`agentd check --npd CONCERN` answers node-problem-detector instead (agentd/npd.py):
0 OK, 1 NonOK (a problem), 2 Unknown, with a one-line message on stdout.

Each command imports what it needs inside its function: `agentd check`, run by Slurm
within its HealthCheckInterval, then never loads aiohttp, the daemon or the benchmark.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from agentd import __version__
from agentd.base.escape import json_text
from agentd.base.jsontypes import JsonObject, JsonValue
from agentd.config import AgentConfig, ConfigError, load_config

if TYPE_CHECKING:  # imported where used, so that `agentd --help` stays quick
    from agentd.host.fs import HostRoot
    from agentd.model import NodeSnapshot

EXIT_OK, EXIT_DEGRADED, EXIT_CRITICAL, EXIT_INTERNAL = 0, 1, 2, 3
STATUS_EXIT = {"ok": EXIT_OK, "degraded": EXIT_DEGRADED, "critical": EXIT_CRITICAL}


# `agentd check --npd`: the concerns (agentd.npd.CONCERNS, kept here so that `agentd --help`
# loads no model) and the default deadline, below NPD's default plugin timeout of 5 s
NPD_CONCERNS = ("fabric", "nvlink", "gdr", "pcie", "net")
NPD_TIMEOUT_S = 4.0


class UsageError(Exception):
    """agentd cannot run as asked (exit 3)."""


def _common(p: argparse.ArgumentParser, *, fmt: bool = True) -> None:
    p.add_argument("--config", type=Path, help="TOML config file (default /etc/agentd/agentd.toml, optional)")
    p.add_argument("--host-root", type=Path, help="root of the node's filesystem (default /, or config host_root)")
    if fmt:
        p.add_argument("--format", choices=("text", "json"), default="text")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="agentd", description="Per-node agent for GPU clusters: fabric checks, metrics, NCCL files.")
    ap.add_argument("--version", action="version", version=f"agentd {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run the daemon (metrics, /health, NCCL files)")
    _common(p, fmt=False)
    p.add_argument("--listen", help="HOST:PORT (default 127.0.0.1:9478)")
    p.add_argument("--simulate", metavar="PROFILE", help="run on a freshly built simulated node (see `agentd simulate --list`)")
    p.add_argument("--sim-dir", type=Path, help="where to build the simulated root (default: a new temp dir)")
    p.add_argument("--fault", action="append", default=[], metavar="SPEC", help="fault to inject into the simulated node (repeatable)")

    p = sub.add_parser("check", help="collect once, print findings, exit 0/1/2 (3: could not run)")
    _common(p)
    p.add_argument("--all", action="store_true", help="text format: also list ok-severity facts")
    p.add_argument("--npd", choices=NPD_CONCERNS, metavar="CONCERN",
                   help=f"answer as a node-problem-detector custom plugin for one concern ({', '.join(NPD_CONCERNS)}): "
                        "exit 0 OK, 1 problem, 2 unknown, one line on stdout; one collection, no rate window")
    p.add_argument("--npd-timeout", type=float, default=NPD_TIMEOUT_S, metavar="S",
                   help=f"with --npd: answer unknown (\"timed out\") rather than run longer than this (default {NPD_TIMEOUT_S:g} s; "
                        "keep it below the NPD rule's timeout)")

    p = sub.add_parser("inspect", help="show what agentd reads on this node")
    _common(p)

    p = sub.add_parser("topology", help="print the node's placement: NVLink domain, GPU->NIC rails and their hash (docs/topology.md)")
    _common(p)
    slurm = p.add_mutually_exclusive_group()
    slurm.add_argument("--slurm", action="store_true", help="print the node's topology.conf line for Slurm's topology/block plugin instead")
    slurm.add_argument("--slurm-yaml", action="store_true", help="print the node's topology.yaml block entry (Slurm 25.05+) instead, one line")
    slurm.add_argument("--slurm-merge", nargs="*", type=Path, metavar="FILE",
                       help="merge many nodes' --slurm or --slurm-yaml lines (files, or stdin when none; pdsh's 'host: ' prefixes "
                            "are stripped; hostlists are expanded) into one topology.conf; reads no node")
    p.add_argument("--yaml", action="store_true", help="with --slurm-merge: write topology.yaml (Slurm 25.05+) instead of topology.conf")
    p.add_argument("--node-name", help="the Slurm node name for --slurm and --slurm-yaml (default: the node's short hostname)")

    p = sub.add_parser("capture", help="record everything agentd reads from this node into one file (docs/capture.md)")
    _common(p, fmt=False)
    p.add_argument("--out", type=Path, required=True, help="the capture file to write (tar.gz)")
    p.add_argument("--redact", action="store_true", help="replace serials, GUIDs, MACs, UUIDs, hostnames and IPs, consistently")

    p = sub.add_parser("render", help="write nccl.env, nccl.conf and nccl-topo.xml")
    _common(p, fmt=False)
    p.add_argument("--out-dir", type=Path, help="write the three files here instead of the configured paths")
    p.add_argument("--diff", action="store_true", help="show what would change, write nothing")

    p = sub.add_parser("simulate", help="write a simulated node as a host-root tree")
    p.add_argument("--profile", help="node profile")
    p.add_argument("--out", type=Path, help="directory to write the host root into")
    p.add_argument("--fault", action="append", default=[], metavar="SPEC", help="KIND[@TARGET][=VALUE] (repeatable)")
    p.add_argument("--clear-fault", action="append", default=[], metavar="SPEC", help="undo a fault in an existing root given by --out")
    p.add_argument("--booted-ago", type=float, metavar="SECONDS", help="the node booted this long ago (default: 3 days before the build); without --profile: change an existing root given by --out")
    p.add_argument("--list", action="store_true", help="list profiles and fault kinds")

    from agentd.ncclbench.cliargs import add_bench_parser

    add_bench_parser(sub)

    p = sub.add_parser("baseline", help="manage the inventory baseline")
    bsub = p.add_subparsers(dest="baseline_command", required=True)
    b = bsub.add_parser("reset", help="forget the baseline; the next healthy collection becomes the new one")
    _common(b, fmt=False)
    b = bsub.add_parser("show", help="print the baseline (of a root that is not this node: the one recorded with it)")
    _common(b, fmt=False)

    p = sub.add_parser("maintenance", help="say the node is being worked on: /health and `agentd check` answer `maintenance`, Slurm neither drains nor resumes it")
    msub = p.add_subparsers(dest="maintenance_command", required=True)
    m = msub.add_parser("on", help="put the node in maintenance (kept across restarts)")
    _common(m, fmt=False)
    m.add_argument("--reason", default="", help="why (one line, shown by /health, `agentd check` and the Slurm wrapper's log)")
    m = msub.add_parser("off", help="end maintenance")
    _common(m, fmt=False)
    m = msub.add_parser("status", help="say whether the node is in maintenance")
    _common(m)
    return ap


# ---------------------------------------------------------------------------


def _config(args: argparse.Namespace, **extra: JsonValue) -> AgentConfig:
    over: JsonObject = {k: v for k, v in extra.items() if v is not None}
    if getattr(args, "host_root", None) is not None:
        over["host_root"] = str(args.host_root)
    return load_config(args.config, overrides=over or None)


def _host(config: AgentConfig) -> HostRoot:
    from agentd.host.fs import HostRoot

    root = config.host_root
    try:
        if not root.is_dir():
            raise UsageError(f"host root {root} is not a directory")
        os.listdir(root / "sys")
    except FileNotFoundError:
        raise UsageError(f"host root {root} has no sys/ directory (expected sysfs at {root / 'sys'})") from None
    except OSError as e:
        raise UsageError(f"host root {root} cannot be read: {e.strerror or e}") from None
    return HostRoot.at(root, config.host_mode)


def _not_the_node(host: HostRoot) -> str:
    """How a root that is not the node is named in messages (DESIGN.md 3, docs/node-state.md)."""
    return f"host root {host.root} is not this node ({host.mode}: {host.mode_reason})"


def _state_dir(config: AgentConfig, host: HostRoot) -> Path | None:
    """agentd's state directory for this root: the node's ``paths.state_dir`` on a live
    root; for any other the one `agentd run` moves it to (``<root>-out``), so a command here
    sees what a daemon on that root sees. None where there is none (a root at / that is not
    the node)."""
    if host.is_live:
        return config.paths.state_dir
    from agentd.outputs.node_state import state_dir_for

    try:
        return state_dir_for(config.host_root)
    except ValueError:
        return None


def _collect(config: AgentConfig, *, rate_window: bool, host: HostRoot | None = None) -> tuple[NodeSnapshot, tuple[NodeSnapshot, ...]]:
    """One snapshot, plus the one before it when counter rates are wanted."""
    from agentd.collection.collector import Collector, probes_in

    c = Collector(host if host is not None else _host(config), config)
    c.run_sync()
    first = c.snapshot()
    window = config.intervals.check_rate_window_s
    if not rate_window or window <= 0:
        return first, ()
    time.sleep(window)
    c.run_sync(probes_in(("fast", "medium")))
    return c.snapshot(), (first,)


def cmd_inspect(args: argparse.Namespace) -> int:
    from agentd.judging.roles import hca_roles
    from agentd.views import inspect_text, inspect_view

    config = _config(args)
    snap, _ = _collect(config, rate_window=False)
    roles = hca_roles(snap, config.hca)
    if args.format == "json":
        sys.stdout.write(json_text(inspect_view(snap, roles), indent=2))  # names that are not UTF-8 as \xNN
        sys.stdout.write("\n")
    else:
        sys.stdout.write(inspect_text(snap, roles))
    return EXIT_OK


def cmd_topology(args: argparse.Namespace) -> int:
    from agentd.judging.judge import judge
    from agentd.judging.lifecycle import Tracks, advance
    from agentd.judging.placement import placement
    from agentd.outputs.slurm_topology import MergeError, merge_block_lines, short_hostname, slurm_block_lines, slurm_yaml_lines
    from agentd.views import placement_text, placement_view

    if args.yaml and args.slurm_merge is None:
        raise UsageError("--yaml goes with --slurm-merge (one node's entry: --slurm-yaml)")
    if args.slurm_merge is not None:
        texts = []
        try:
            for path in args.slurm_merge or [None]:
                texts.append(sys.stdin.read() if path is None else Path(path).read_text(errors="surrogateescape"))
        except OSError as e:
            raise UsageError(f"cannot read {e.filename}: {e.strerror or e}") from None
        try:
            sys.stdout.write(merge_block_lines((line for text in texts for line in text.splitlines()), yaml_out=args.yaml))
        except MergeError as e:
            raise UsageError(f"--slurm-merge: nothing written:\n{e}") from None
        return EXIT_OK
    config = _config(args)
    snap, history = _collect(config, rate_window=False)
    j = judge(snap, history, config, None)
    # the findings that count, as the daemon's labels use them (observe mode and boot grace applied)
    life = advance(Tracks(), j.findings, now=snap.taken_at, settings=config.lifecycle, booted_at=snap.system.booted_at, one_shot=True)
    p = placement(snap, j.roles, life.findings, config.fabric)
    node = args.node_name or short_hostname(snap.system.hostname)
    if args.slurm or args.slurm_yaml:
        if node is None:
            raise UsageError("the node reports no hostname; give --node-name")
        try:
            print("\n".join((slurm_yaml_lines if args.slurm_yaml else slurm_block_lines)(p, node)))
        except ValueError as e:
            raise UsageError(str(e)) from None
    elif args.format == "json":
        print(json_text(placement_view(p, node), indent=2))
    else:
        sys.stdout.write(placement_text(p, node))
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    if args.npd is not None:
        return _check_npd(args)
    from agentd.judging.judge import judge, node_identity
    from agentd.judging.lifecycle import Tracks, advance
    from agentd.model import overall_status
    from agentd.outputs.baseline_store import (
        BaselineError,
        load_baseline,
        load_recorded_baseline,
        recorded_baseline_path,
        save_baseline,
    )
    from agentd.outputs.maintenance import maintenance_path, read_maintenance
    from agentd.views import findings_json, findings_text

    config = _config(args)
    host = _host(config)
    snap, history = _collect(config, rate_window=True, host=host)
    try:
        # paths.baseline is the node's: only a live root reads and writes it (DESIGN.md 3).
        baseline = load_baseline(config.paths.baseline) if host.is_live else load_recorded_baseline(host)
    except BaselineError as e:
        raise UsageError(str(e)) from None
    if not host.is_live:
        rel = recorded_baseline_path(host)
        against = f"against its recorded baseline {host.abs(rel)} (read-only)" if baseline is not None and rel else "without a baseline"
        print(f"agentd: note: {_not_the_node(host)}: judged {against}; the node's {config.paths.baseline} is neither read nor written",
              file=sys.stderr)
    j = judge(snap, history, config, baseline, node_identity(snap, config))
    # observe mode and boot grace as the daemon applies them; one collection has no past,
    # so raise_after counts at once (agentd.judging.lifecycle.advance one_shot)
    life = advance(Tracks(), j.findings, now=snap.taken_at, settings=config.lifecycle, booted_at=snap.system.booted_at, one_shot=True)
    j = dataclasses.replace(j, findings=life.findings, status=overall_status(life.findings))
    if j.new_baseline is not None and host.is_live:
        res = save_baseline(config.paths.baseline, j.new_baseline)
        if not res.ok:
            print(f"agentd: note: baseline not saved: {res.error}", file=sys.stderr)
    state_dir = _state_dir(config, host)
    maint = read_maintenance(maintenance_path(state_dir)) if state_dir is not None else None
    if args.format == "json":
        sys.stdout.write(json_text(findings_json(j.findings, maint), indent=2))
        sys.stdout.write("\n")
    else:
        sys.stdout.write(findings_text(j.findings, include_ok=args.all, maintenance=maint))
    # In maintenance the node is being worked on: exit 0, as /health answers 200.
    return EXIT_OK if maint is not None else STATUS_EXIT[j.status]


def _process_age_s() -> float:
    """Seconds since this process started (NPD's timeout runs from then, interpreter start
    included); 0 where /proc/self cannot say."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read(4096)
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read(64).split()[0])
        start_ticks = int(stat.rsplit(b")", 1)[1].split()[19])  # field 22, starttime
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def _check_npd(args: argparse.Namespace) -> int:
    """One collection judged for one concern, in a worker thread: past the deadline the
    answer is Unknown "timed out" (a hung NVML must not make NPD kill us silently)."""
    import threading

    from agentd.npd import NPD_UNKNOWN, NpdAnswer, answer, unknown

    started = time.monotonic() - _process_age_s()
    if not args.npd_timeout > 0:
        raise UsageError(f"--npd-timeout must be above 0 s, not {args.npd_timeout:g}")

    def say(a: NpdAnswer) -> int:
        sys.stdout.write(a.message + "\n")
        sys.stdout.flush()
        return a.exit_code

    try:
        config = _config(args)
        # a hung NVML then costs half the deadline: the concerns that do not need it are still judged
        nvml_s = min(config.timeouts.nvml_s, args.npd_timeout / 2)
        config = config.model_copy(update={"timeouts": config.timeouts.model_copy(update={"nvml_s": nvml_s})})
        host = _host(config)
        from agentd.outputs.maintenance import maintenance_path, read_maintenance

        state_dir = _state_dir(config, host)
        maint = read_maintenance(maintenance_path(state_dir)) if state_dir is not None else None
    except (ConfigError, UsageError) as e:
        print(f"agentd: {e}", file=sys.stderr)
        return say(unknown(str(e)))
    if maint is not None:
        return say(answer(args.npd, None, (), maintenance_reason=maint.reason))
    result: list[NpdAnswer] = []

    def work() -> None:
        try:
            from agentd.judging.judge import judge, node_identity
            from agentd.judging.lifecycle import Tracks, advance

            snap, history = _collect(config, rate_window=False, host=host)
            j = judge(snap, history, config, None, node_identity(snap, config))
            life = advance(Tracks(), j.findings, now=snap.taken_at, settings=config.lifecycle,
                           booted_at=snap.system.booted_at, one_shot=True)
            result.append(answer(args.npd, snap, life.findings))
        except Exception as e:  # the plugin answers whatever happens
            result.append(unknown(f"collection failed: {type(e).__name__}: {e}"))

    worker = threading.Thread(target=work, name="npd-check", daemon=True)
    worker.start()
    margin = 0.25  # to print and exit before the deadline
    worker.join(max(0.05, args.npd_timeout - (time.monotonic() - started) - margin))
    if worker.is_alive() or not result:
        say(unknown(f"timed out: {args.npd} not judged within {args.npd_timeout:g} s (--npd-timeout)"))
        sys.stderr.flush()
        os._exit(NPD_UNKNOWN)  # the worker may sit in a hung driver call: do not wait for it
    return say(result[0])


def cmd_render(args: argparse.Namespace) -> int:
    import difflib

    from agentd.base.atomic import read_current
    from agentd.judging.judge import judge
    from agentd.judging.lifecycle import Tracks, advance
    from agentd.model import counted
    from agentd.nccl import render_all
    from agentd.outputs.managed import ManagedFile, stable_text

    config = _config(args)
    host = _host(config)
    if args.out_dir is None and not host.is_live:
        raise UsageError(f"{_not_the_node(host)}: its NCCL files are not the node's {config.paths.nccl_env}, "
                         f"{config.paths.nccl_conf} and {config.paths.nccl_topo}; give --out-dir DIR to write (or --diff against) them there")
    snap, history = _collect(config, rate_window=False, host=host)
    if args.out_dir is not None:
        targets = {"env": args.out_dir / "nccl.env", "conf": args.out_dir / "nccl.conf", "topo": args.out_dir / "nccl-topo.xml"}
    else:
        targets = {"env": config.paths.nccl_env, "conf": config.paths.nccl_conf, "topo": config.paths.nccl_topo}
    j = judge(snap, history, config, None)
    # the findings that count, as the daemon renders from (observe mode and boot grace applied)
    life = advance(Tracks(), j.findings, now=snap.taken_at, settings=config.lifecycle, booted_at=snap.system.booted_at, one_shot=True)
    write_topo = config.nccl.write_topo
    render = render_all(snap, counted(life.findings), config, j.roles, topo_path=str(targets["topo"]) if write_topo else None)
    for note in render.notes:
        print(f"agentd: note: {note}", file=sys.stderr)
    if render.problems:
        for p in render.problems:
            print(f"agentd: render problem: {p}", file=sys.stderr)
        raise UsageError("rendered NCCL files failed validation; nothing written")
    contents = {"env": render.env_sh, "conf": render.env_conf, "topo": render.topo_xml if write_topo else None}
    if args.out_dir is None and not config.nccl.write_conf:
        contents["conf"] = None
    rc = EXIT_OK
    for key, text in contents.items():
        path = targets[key]
        if text is None:
            continue
        if args.diff:
            # Compare what matters: the generated-at and seal lines change on every render.
            old = stable_text((read_current(path) or b"").decode("utf-8", "replace"))
            diff = difflib.unified_diff(old.splitlines(True), stable_text(text).splitlines(True), str(path), f"{path} (new)")
            sys.stdout.writelines(diff)
            continue
        res = ManagedFile(path).write(text, restore_drift=True)
        if not res.ok:
            print(f"agentd: could not write {path}: {res.error} (previous file kept)", file=sys.stderr)
            rc = EXIT_INTERNAL
        else:
            print(f"{path}: {res.action}" + (f" (was {res.drift})" if res.drift else ""))
    return rc


def cmd_simulate(args: argparse.Namespace) -> int:
    from agentd import sim

    if args.list:
        for name, prof in sim.PROFILES.items():
            print(f"{name}: {getattr(prof, 'description', '')}")
        print("fault kinds: " + ", ".join(sim.FAULT_KINDS))
        return EXIT_OK
    if args.out is None:
        raise UsageError("--out DIR is required")
    try:
        if args.booted_ago is not None and not (args.booted_ago >= 0 and args.booted_ago != float("inf")):
            raise UsageError(f"--booted-ago {args.booted_ago}: expected seconds >= 0")
        if args.profile is None and args.booted_ago is not None:
            sim.set_boot_time(args.out, time.time() - args.booted_ago)
            if not (args.fault or args.clear_fault):
                print(f"{args.out}: boot time updated")
                return EXIT_OK
        if args.clear_fault or (args.fault and args.profile is None):
            for spec in args.fault:
                sim.apply_fault(args.out, spec)
            for spec in args.clear_fault:
                sim.clear_fault(args.out, spec)
            print(f"{args.out}: faults updated")
            return EXIT_OK
        if args.profile is None:
            raise UsageError("--profile is required (see --list)")
        booted = {} if args.booted_ago is None else {"booted_ago_s": args.booted_ago}
        root = sim.build_tree(args.profile, args.out, faults=args.fault, **booted)
    except (ValueError, KeyError) as e:
        raise UsageError(str(e)) from None
    print(f"simulated node '{args.profile}' written to {root}")
    print(f"  agentd inspect --host-root {root}")
    return EXIT_OK


def cmd_baseline(args: argparse.Namespace) -> int:
    from agentd.outputs.baseline_store import BaselineError, load_baseline, load_recorded_baseline, recorded_baseline_path, reset_baseline

    config = _config(args)
    host = _host(config)
    path = config.paths.baseline
    if not host.is_live:  # the node's baseline is not this root's (DESIGN.md 3)
        if args.baseline_command == "reset":
            raise UsageError(f"{_not_the_node(host)}: `agentd baseline reset` resets only the node's own {path}; "
                             "a baseline recorded with a capture is part of it and is never changed")
        rel = recorded_baseline_path(host)
        shown = host.abs(rel) if rel else f"{host.root} (no recorded answers)"
        try:
            b = load_recorded_baseline(host)
        except BaselineError as e:
            raise UsageError(str(e)) from None
        print(f"agentd: note: {_not_the_node(host)}: showing the baseline recorded with it, not the node's {path}", file=sys.stderr)
        print(json_text(b.model_dump(mode="json"), indent=2) if b is not None else f"{shown}: no recorded baseline")
        return EXIT_OK
    if args.baseline_command == "reset":
        print(f"{path}: {'removed' if reset_baseline(path) else 'no baseline'}")
        return EXIT_OK
    try:
        b = load_baseline(path)
    except BaselineError as e:
        raise UsageError(str(e)) from None
    print(json_text(b.model_dump(mode="json"), indent=2) if b is not None else f"{path}: no baseline")
    return EXIT_OK


def _user() -> str | None:
    """Who runs this command (the person behind sudo first); from the environment or the
    local user database, never the network."""
    for key in ("SUDO_USER", "USER", "LOGNAME"):
        if name := os.environ.get(key):
            return name
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return None


def cmd_maintenance(args: argparse.Namespace) -> int:
    from agentd.base.escape import printable
    from agentd.outputs.maintenance import (
        clear_maintenance,
        maintenance_doc,
        maintenance_path,
        one_line,
        read_maintenance,
        rfc3339,
        set_maintenance,
    )

    config = _config(args)
    host = _host(config)
    state_dir = _state_dir(config, host)
    if state_dir is None:
        raise UsageError(f"{_not_the_node(host)}, and a root at / has no state directory beside it")
    path = maintenance_path(state_dir)
    where = printable(str(path))
    pickup = f"the running agentd picks it up within {config.intervals.fast_s:g} s (intervals.fast_s)"
    if not host.is_live:
        print(f"agentd: note: {_not_the_node(host)}: its maintenance file is {where}, where `agentd run --host-root {printable(str(config.host_root))}` looks",
              file=sys.stderr)
    if args.maintenance_command == "on":
        by = _user()
        res = set_maintenance(path, args.reason, by)
        if not res.ok:
            raise UsageError(f"could not write {where}: {res.error}")
        reason = one_line(args.reason) or "no reason given"
        print(f"maintenance on: {reason} (by {by or 'unknown'}); wrote {where}")
        print(f"{pickup}: /health answers 200 \"maintenance\", `agentd check` prints \"maintenance\" and exits 0, "
              "and the Slurm wrapper neither drains nor resumes this node until `agentd maintenance off`")
        return EXIT_OK
    if args.maintenance_command == "off":
        try:
            removed = clear_maintenance(path)
        except OSError as e:
            raise UsageError(f"could not remove {where}: {e.strerror or e}") from None
        if not removed:
            print(f"not in maintenance (no {where}); nothing changed")
            return EXIT_OK
        print(f"maintenance off: removed {where}")
        print(f"{pickup}; the Slurm wrapper resumes a node agentd drained only after one full fresh collection")
        return EXIT_OK
    m = read_maintenance(path)
    if args.format == "json":
        print(json_text({"maintenance": maintenance_doc(m) if m is not None else None, "path": str(path)}, indent=2))
    elif m is None:
        print("not in maintenance")
    else:
        by = f", by {m.by}" if m.by else ""
        print(f"maintenance: {m.reason or 'no reason given'} (since {rfc3339(m.since)}{by})")
    return EXIT_OK


def cmd_bench(args: argparse.Namespace) -> int:
    from agentd.ncclbench.command import cmd_bench as bench

    return bench(args)


def cmd_capture(args: argparse.Namespace) -> int:
    from agentd.base.escape import printable
    from agentd.capture.record import capture

    config = _config(args)
    res = capture(_host(config), config, args.out, redact=args.redact)
    what = ", ".join(res.answers) or "none"
    print(f"agentd: captured {printable(res.snapshot.host_root)} ({res.snapshot.host_mode}) into {res.out}: {res.files} files, {res.bytes_written} bytes; recorded answers: {what}{'; redacted' if res.redacted else ''}")
    for p in res.problems:
        print(f"agentd: note: {printable(p)}", file=sys.stderr)
    return EXIT_OK


def _open_capture(args: argparse.Namespace) -> None:
    """``--host-root FILE``: the capture's unpacked tree stands in for the root."""
    root = getattr(args, "host_root", None)
    if root is not None and root.is_file():
        from agentd.capture.replay import CaptureError, open_capture

        try:
            args.host_root = open_capture(root)
        except CaptureError as e:
            raise UsageError(str(e)) from None


def cmd_run(args: argparse.Namespace) -> int:
    from agentd.daemon.app import main_run

    return main_run(args)


COMMANDS = {
    "run": cmd_run,
    "check": cmd_check,
    "inspect": cmd_inspect,
    "topology": cmd_topology,
    "render": cmd_render,
    "capture": cmd_capture,
    "simulate": cmd_simulate,
    "baseline": cmd_baseline,
    "maintenance": cmd_maintenance,
    "bench": cmd_bench,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _open_capture(args)
        return COMMANDS[args.command](args)
    except (ConfigError, UsageError) as e:
        print(f"agentd: {e}", file=sys.stderr)
        return EXIT_INTERNAL
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as e:
        import traceback

        traceback.print_exc(file=sys.stderr)
        print(f"agentd: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
