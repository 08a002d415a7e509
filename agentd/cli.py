"""Command line: run | check | render | inspect | topology | capture | simulate | baseline | maintenance | enforce.

Exit codes of `agentd check` (Slurm HealthCheckProgram, cron): 0 ok, 1 degraded
(warnings only), 2 critical, 3 agentd itself could not run (reason on stderr; usage errors
too), 4 nothing to judge (no GPUs, no RDMA devices: agentd.judging.scope; neither healthy
nor sick, so a health check that drains on 2 and resumes on 0 or 1 does neither).
`agentd check --npd CONCERN` answers node-problem-detector instead (agentd/npd.py):
0 OK, 1 NonOK (a problem), 2 Unknown, with a one-line message on stdout.

Each command imports what it needs inside its function: `agentd check`, run by Slurm
within its HealthCheckInterval, then never loads aiohttp, the daemon or the benchmark.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Sequence

from agentd import __version__
from agentd.base.escape import json_text
from agentd.base.jsontypes import JsonObject, JsonValue
from agentd.base.selfcmd import agentd_command
from agentd.config import KNOBS, AgentConfig, ConfigError, load_config

if TYPE_CHECKING:  # imported where used, so that `agentd --help` stays quick
    from agentd.host.fs import HostRoot
    from agentd.model import NodeSnapshot

EXIT_OK, EXIT_DEGRADED, EXIT_CRITICAL, EXIT_INTERNAL, EXIT_NOTHING = 0, 1, 2, 3, 4
STATUS_EXIT = {"ok": EXIT_OK, "degraded": EXIT_DEGRADED, "critical": EXIT_CRITICAL}


# `agentd check --npd`: the concerns (agentd.npd.CONCERNS, kept here so that `agentd --help`
# loads no model) and the default deadline, below NPD's default plugin timeout of 5 s
NPD_CONCERNS = ("fabric", "nvlink", "gdr", "pcie", "net")
NPD_TIMEOUT_S = 4.0
NPD_TIMEOUT_MAX_S = 3600.0  # NPD runs a plugin every few seconds to minutes; an hour is already past any rule's timeout


class UsageError(Exception):
    """agentd cannot run as asked (exit 3)."""


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error exits 3 (could not run), not argparse's 2: agentd's 2 is
    "critical", and a typo'd flag in a Slurm HealthCheckProgram or a cron line must not
    read as a sick node. Subcommand parsers are made of the same class (argparse makes them
    of their parent's), so every command, `bench` and the nested ones included, exits so."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_INTERNAL, f"{self.prog}: error: {message}\n")


def _common(p: argparse.ArgumentParser, *, fmt: bool = True) -> None:
    p.add_argument("--config", type=Path, help="TOML config file (default /etc/agentd/agentd.toml, optional)")
    p.add_argument("--host-root", type=Path, help="root of the node's filesystem (default /, or config host_root)")
    if fmt:
        p.add_argument("--format", choices=("text", "json"), default="text")


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="agentd", description="Per-node agent for GPU clusters: fabric checks, metrics, NCCL files.")
    ap.add_argument("--version", action="version", version=f"agentd {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run the daemon (metrics, /health, NCCL files)")
    _common(p, fmt=False)
    p.add_argument("--listen", help="HOST:PORT (default 127.0.0.1:9478)")
    p.add_argument("--simulate", metavar="PROFILE", help="run on a freshly built simulated node (see `agentd simulate --list`)")
    p.add_argument("--sim-dir", type=Path, help="where to build the simulated root (default: a new temp dir)")
    p.add_argument("--fault", action="append", default=[], metavar="SPEC", help="fault to inject into the simulated node (repeatable)")

    p = sub.add_parser("check", help="collect once, print findings, exit 0/1/2 (3: could not run, 4: nothing to judge)")
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

    p = sub.add_parser("render", help="write the NCCL files once, where the daemon writes them (paths.nccl_env, and paths.nccl_topo "
                                      "and paths.nccl_conf as nccl.write_topo and nccl.write_conf say); with --out-dir: nccl.env, "
                                      "nccl.conf and nccl-topo.xml there")
    _common(p, fmt=False)
    p.add_argument("--out-dir", type=Path, help="write nccl.env, nccl.conf and nccl-topo.xml here instead of the configured paths")
    p.add_argument("--diff", action="store_true", help="show what would change, write nothing")

    p = sub.add_parser("simulate", help="write a simulated node as a host-root tree")
    p.add_argument("--profile", help="node profile")
    p.add_argument("--out", type=Path, help="directory to write the host root into")
    p.add_argument("--fault", action="append", default=[], metavar="SPEC", help="KIND[@TARGET][=VALUE] (repeatable)")
    p.add_argument("--clear-fault", action="append", default=[], metavar="SPEC", help="undo a fault in an existing root given by --out (repeatable; clears go before the --fault ones)")
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
    _add_enforce_parser(sub)
    return ap


def _add_enforce_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser("enforce", help="keep the node's fabric configuration as the checks expect it (docs/enforce.md)")
    esub = p.add_subparsers(dest="enforce_command", required=True)
    helps = {
        "plan": "what differs from the desired state, per knob and target, and the command for each; exit 0 none, 1 drift",
        "apply": "apply the plan one change at a time (journal, change, read back, roll back what does not verify); exit 0 no drift left, 1 some",
        "rollback": "restore the prior values the journal holds; exit 0 all back, 1 not",
        "status": "the journal and each knob's last outcome; --reset forgets this boot's attempts and stuck settings",
    }
    for name, text in helps.items():
        c = esub.add_parser(name, help=text)
        c.add_argument("--config", type=Path, help="TOML config file (default /etc/agentd/agentd.toml, optional)")
        c.add_argument("--host-root", type=Path, help="root of the node's filesystem (default /, or config host_root)")
        c.add_argument("--knob", action="append", choices=KNOBS, metavar="KNOB",
                       help=f"only this knob (repeatable; one of {', '.join(KNOBS)}); default enforce.knobs")
        c.add_argument("--format", choices=("text", "json"), default="text")
        if name in ("apply", "rollback"):
            c.add_argument("--yes", action="store_true", help="change the node without asking (required when stdin is not a terminal)")
        if name == "status":
            c.add_argument("--reset", action="store_true", help="forget this boot's attempts and stuck settings (the daemon tries them again)")


# ---------------------------------------------------------------------------


def _config(args: argparse.Namespace, **extra: JsonValue) -> AgentConfig:
    over: JsonObject = {k: v for k, v in extra.items() if v is not None}
    if getattr(args, "host_root", None) is not None:
        over["host_root"] = str(args.host_root)
    return load_config(args.config, overrides=over or None)


# The captures this process unpacked (``--host-root FILE``): the unpacked directory -> the
# file, so that messages name the file the user gave, not a temporary directory.
_CAPTURES: dict[Path, Path] = {}


def _capture_of(root: Path) -> Path | None:
    """The capture file ``root`` was unpacked from by this process (None: not one)."""
    for unpacked, file in _CAPTURES.items():
        if os.path.realpath(unpacked) == os.path.realpath(root):
            return file
    return None


def _root_name(root: Path) -> str:
    """A host root as messages name it: ``host root DIR``, or ``capture FILE (unpacked in DIR)``."""
    file = _capture_of(root)
    return f"capture {file} (unpacked in {root})" if file is not None else f"host root {root}"


def _host(config: AgentConfig, *, judged: bool = False) -> HostRoot:
    """The configured host root; ``judged``: for a command that judges it (check, topology,
    render, capture), refused when its recording cannot be read (HostRoot.unjudgeable)."""
    from agentd.host.fs import HostRoot

    root = config.host_root
    try:
        if not root.is_dir():
            raise UsageError(f"{_root_name(root)} is not a directory")
        os.listdir(root / "sys")
    except FileNotFoundError:
        raise UsageError(f"{_root_name(root)} has no sys/ directory (expected sysfs at {root / 'sys'})") from None
    except OSError as e:
        raise UsageError(f"{_root_name(root)} cannot be read: {e.strerror or e}") from None
    host = HostRoot.at(root, config.host_mode)
    why = host.unjudgeable() if judged else None
    if why is not None:
        raise UsageError(why)
    return host


def _not_the_node(host: HostRoot) -> str:
    """How a root that is not the node is named in messages (docs/node-state.md)."""
    return f"{_root_name(host.root)} is not this node ({host.mode}: {host.mode_reason})"


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
    snap, history = _collect(config, rate_window=False, host=_host(config, judged=True))
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
    host = _host(config, judged=True)
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
    nothing = j.nothing_to_judge if j.status == "ok" else None
    if j.new_baseline is not None and host.is_live:
        res = save_baseline(config.paths.baseline, j.new_baseline)
        if not res.ok:
            print(f"agentd: note: baseline not saved: {res.error}", file=sys.stderr)
    state_dir = _state_dir(config, host)
    maint = read_maintenance(maintenance_path(state_dir)) if state_dir is not None else None
    if args.format == "json":
        sys.stdout.write(json_text(findings_json(j.findings, maint, nothing_to_judge=nothing), indent=2))
        sys.stdout.write("\n")
    else:
        sys.stdout.write(findings_text(j.findings, include_ok=args.all, maintenance=maint, nothing_to_judge=nothing))
    # In maintenance the node is being worked on: exit 0, as /health answers 200.
    if maint is not None:
        return EXIT_OK
    return EXIT_NOTHING if nothing is not None else STATUS_EXIT[j.status]


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

    def say(a: NpdAnswer) -> int:
        sys.stdout.write(a.message + "\n")
        sys.stdout.flush()
        return a.exit_code

    if not (math.isfinite(args.npd_timeout) and 0 < args.npd_timeout <= NPD_TIMEOUT_MAX_S):
        # a usage error (exit 3, which NPD reads as unknown), with its one line for NPD to show
        why = f"--npd-timeout must be a number of seconds above 0 and at most {NPD_TIMEOUT_MAX_S:g}, not {args.npd_timeout:g}"
        print(f"agentd: {why}", file=sys.stderr)
        say(unknown(why))
        return EXIT_INTERNAL

    try:
        config = _config(args)
        # a hung NVML then costs half the deadline: the concerns that do not need it are still judged
        nvml_s = min(config.timeouts.nvml_s, args.npd_timeout / 2)
        config = config.model_copy(update={"timeouts": config.timeouts.model_copy(update={"nvml_s": nvml_s})})
        host = _host(config, judged=True)
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
        _remove_unpacked_captures()  # the answer is out; os._exit runs no atexit
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
    host = _host(config, judged=True)
    if args.out_dir is None and not host.is_live:
        raise UsageError(f"{_not_the_node(host)}: its NCCL files are not the node's {config.paths.nccl_env}, "
                         f"{config.paths.nccl_conf} and {config.paths.nccl_topo}; give --out-dir DIR to write (or --diff against) them there")
    snap, history = _collect(config, rate_window=False, host=host)
    if (capture := _capture_of(host.root)) is not None:  # the files name the capture, not a directory gone at exit
        snap = snap.model_copy(update={"host_root": str(capture)})
    if args.out_dir is not None:
        targets = {"env": args.out_dir / "nccl.env", "conf": args.out_dir / "nccl.conf", "topo": args.out_dir / "nccl-topo.xml"}
    else:
        targets = {"env": config.paths.nccl_env, "conf": config.paths.nccl_conf, "topo": config.paths.nccl_topo}
    j = judge(snap, history, config, None)
    if j.nothing_to_judge is not None:
        print(f"agentd: nothing to judge ({j.nothing_to_judge}): no NCCL files for workloads here; nothing written", file=sys.stderr)
        return EXIT_NOTHING
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
    from agentd.sim import fault_scope

    if args.list:
        for name, prof in sim.PROFILES.items():
            print(f"{name}: {getattr(prof, 'description', '')}")
        print("\nfault kinds (--fault KIND[@TARGET][=VALUE]; where each shows, what agentd reports, how it clears):\n")
        print(fault_scope.describe_all())
        return EXIT_OK
    if args.out is None:
        raise UsageError("--out DIR is required")
    cmd = agentd_command()
    try:
        if args.booted_ago is not None and not (args.booted_ago >= 0 and args.booted_ago != float("inf")):
            raise UsageError(f"--booted-ago {args.booted_ago}: expected seconds >= 0")
        if args.profile is None and args.booted_ago is not None:
            sim.set_boot_time(args.out, time.time() - args.booted_ago)
            if not (args.fault or args.clear_fault):
                print(f"{args.out}: boot time updated")
                return EXIT_OK
        if args.clear_fault or (args.fault and args.profile is None):
            profile = sim.root_profile(args.out)
            notes = []
            # clears first, then faults: "--clear-fault old --fault new" ends with new
            # applied (a clear restores what its fault changed, which a new fault may share)
            for spec in args.clear_fault:
                before = sim.applied_faults(args.out)
                f = sim.clear_fault(args.out, spec)
                if sim.applied_faults(args.out) == before:
                    notes.append(f"{spec} was not applied: nothing to clear")
                elif (held := fault_scope.held_note(f.kind)) is not None:
                    notes.append(f"{spec}: {held}")
            for spec in args.fault:
                f = sim.apply_fault(args.out, spec)
                note = fault_scope.unseen_note(f.kind, profile)
                if note is not None:
                    notes.append(f"{note}; see `{cmd} simulate --list`")
            print(f"{args.out}: faults updated")
            for note in notes:
                print(f"agentd: note: {note}", file=sys.stderr)
            return EXIT_OK
        if args.profile is None:
            raise UsageError("--profile is required (see --list)")
        booted = {} if args.booted_ago is None else {"booted_ago_s": args.booted_ago}
        root = sim.build_tree(args.profile, args.out, faults=args.fault, **booted)
    except (ValueError, KeyError) as e:
        raise UsageError(str(e)) from None
    print(f"simulated node '{args.profile}' written to {root}")
    print(f"  {cmd} inspect --host-root {root}")
    return EXIT_OK


def cmd_baseline(args: argparse.Namespace) -> int:
    from agentd.outputs.baseline_store import BaselineError, load_baseline, load_recorded_baseline, recorded_baseline_path, reset_baseline

    config = _config(args)
    host = _host(config)
    path = config.paths.baseline
    if not host.is_live:  # the node's baseline is not this root's (DESIGN.md 3)
        kept = _kept_baseline(config)
        if args.baseline_command == "reset":
            daemon = (f"; the one `agentd run` keeps for this root is {kept}: remove that file (with that daemon stopped) "
                      "to start it over") if kept is not None and kept.exists() else ""
            raise UsageError(f"{_not_the_node(host)}: `agentd baseline reset` resets only the node's own {path}; "
                             f"a baseline recorded with a capture is part of it and is never changed{daemon}")
        if kept is not None and kept.exists():
            print(f"agentd: note: `agentd run` on this root keeps its own baseline in {kept} (not shown here)", file=sys.stderr)
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


def _kept_baseline(config: AgentConfig) -> Path | None:
    """Where `agentd run` keeps the baseline of a root that is not the node (its
    ``<root>-out/``, docs/node-state.md); None where it has none (a root at /)."""
    from agentd.outputs.node_state import moved_paths, state_dir_for

    try:
        moved = moved_paths(config.paths, state_dir_for(config.host_root)).get("baseline")
    except ValueError:
        return None
    return Path(moved) if moved else None


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


def cmd_enforce(args: argparse.Namespace) -> int:
    from agentd.daemon.logging import configure_logging, get_logger
    from agentd.enforce_cmd import run
    from agentd.outputs.enforce import EnforceError, collector_for
    from agentd.outputs.history_store import node_now

    config = _config(args)
    host = _host(config)
    collect = collector_for(host, config)

    configure_logging(config.log_format, config.log_level)  # the audit lines, on stderr
    state_dir = _state_dir(config, host)
    if not host.is_live and args.enforce_command != "plan":
        print(f"agentd: note: {_not_the_node(host)}: its journal and lock are in {state_dir}", file=sys.stderr)
    try:
        return run(args, config=config, host=host, state_dir=state_dir, user=_user(), collect=collect,
                   boot_id=node_now(host, str(config.host_root))[1], log=get_logger("agentd.enforce"))
    except EnforceError as e:
        raise UsageError(str(e)) from None


def cmd_bench(args: argparse.Namespace) -> int:
    from agentd.ncclbench.command import cmd_bench as bench

    return bench(args)


def cmd_capture(args: argparse.Namespace) -> int:
    from agentd.base.escape import printable
    from agentd.capture.record import CaptureWriteError, capture

    config = _config(args)
    try:
        res = capture(_host(config, judged=True), config, args.out, redact=args.redact)
    except CaptureWriteError as e:
        raise UsageError(str(e)) from None
    what = ", ".join(res.answers) or "none"
    print(f"agentd: captured {printable(res.snapshot.host_root)} ({res.snapshot.host_mode}) into {res.out}: {res.files} files, {res.bytes_written} bytes; recorded answers: {what}{'; redacted' if res.redacted else ''}")
    for p in res.problems:
        print(f"agentd: note: {printable(p)}", file=sys.stderr)
    return EXIT_OK


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _open_capture(args: argparse.Namespace) -> None:
    """``--host-root FILE``: the capture's unpacked tree stands in for the root. SIGTERM and
    SIGHUP then end the command as an exit (whose atexit removes the unpacked tree, up to
    2 GiB) rather than by the signal's default action, which runs nothing (``agentd run``
    installs its own handlers once it serves)."""
    root = getattr(args, "host_root", None)
    if root is not None and root.is_file():
        import atexit
        import shutil
        import signal

        from agentd.capture.replay import CaptureError, open_capture
        from agentd.outputs.node_state import state_dir_for

        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _exit_on_signal)
        try:
            args.host_root = open_capture(root)
        except CaptureError as e:
            raise UsageError(str(e)) from None
        _CAPTURES[args.host_root] = args.capture_file = root
        # what `agentd run` writes for the unpacked root (<root>-out, docs/node-state.md) goes
        # with it: a replay keeps no state, so it leaves none behind
        atexit.register(shutil.rmtree, state_dir_for(args.host_root), True)


def _remove_unpacked_captures() -> None:
    """Before an ``os._exit`` (which runs no atexit): remove the captures this process
    unpacked, if it unpacked any."""
    replay = sys.modules.get("agentd.capture.replay")
    if replay is not None:
        replay.remove_unpacked()


def cmd_run(args: argparse.Namespace) -> int:
    from agentd.daemon.app import main_run

    _end_process(main_run(args))


def _end_process(code: int) -> NoReturn:
    """End the daemon's process here, not by the interpreter's shutdown. Its lanes are daemon
    threads (one may sit in a hung read for ever); one that is writing a log line when the
    shutdown begins is frozen holding stdout's or stderr's lock, and the shutdown's own flush
    then aborts the process (SIGABRT: "could not acquire lock for <stdout> at interpreter
    shutdown, possibly due to daemon threads"): a clean stop read as a crash by systemd. So:
    the exit handlers (they remove unpacked captures and demo trees), a flush bounded to a
    second (a thread may hold the lock in a write to a pipe nobody reads), then ``os._exit``.
    Only for ``agentd run``, which ends the process: never call it in a test's process."""
    import atexit
    import threading

    atexit._run_exitfuncs()  # what the interpreter's shutdown would run first

    def flush() -> None:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except (OSError, ValueError):  # a closed pipe, a closed file
                pass

    flusher = threading.Thread(target=flush, name="exit-flush", daemon=True)
    flusher.start()
    flusher.join(1.0)
    os._exit(code)


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
    "enforce": cmd_enforce,
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
