"""``agentd bench nccl``: measure the node's collectives with the NCCL settings agentd wrote.

Exit codes (like ``agentd check``): 0 every result at or above its minimum; 1 a result
below its minimum; 2 wrong results (data corruption) or the run failed or hit the time
limit; 3 nothing was measured (refused because the GPUs are busy, no runner, bad
arguments or configuration).

Wiring (agentd/cli.py): ``add_bench_parser(sub)`` (agentd.ncclbench.cliargs) in ``build_parser`` and
``COMMANDS["bench"] = cmd_bench``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from agentd.collection.collector import collect_once
from agentd.config import AgentConfig, ConfigError, load_config
from agentd.host.fs import HostRoot
from agentd.judging.judge import judge
from agentd.model import Finding, NodeSnapshot
from agentd.ncclbench.job import BenchOptions, run_bench_job
from agentd.ncclbench.report import compare_text, outcome_json, outcome_text
from agentd.ncclbench.run_history import compare, history_path, load_history
from agentd.ncclbench.runners import parse_sizes, validate_ops

EXIT = {"ok": 0, "below_min": 1, "wrong_results": 2, "failed": 2, "timeout": 2, "refused": 3, "unavailable": 3}


def _collect(config: AgentConfig) -> tuple[NodeSnapshot | None, list[Finding], list[str] | None, list[str]]:
    """(snapshot, current findings, compute HCAs, notes); never fails the benchmark."""
    notes: list[str] = []
    root = Path(config.host_root)
    if not (root / "sys").is_dir():
        return None, [], None, [f"{root} has no sys/: fabric unknown, no default expectations"]
    try:
        snap = collect_once(HostRoot.at(root, config.host_mode), config)
        j = judge(snap, (), config, None)
        return snap, list(j.findings), list(j.roles.compute), notes
    except Exception as e:
        return None, [], None, [f"node collection failed ({type(e).__name__}: {e}): fabric unknown"]


def _compare_only(config: AgentConfig, fmt: str) -> int:
    runs, problem = load_history(history_path(config.paths.state_dir))
    measured = [r for r in runs if r.results]
    if problem:
        print(f"agentd: {problem}", file=sys.stderr)
    if len(measured) < 2:
        print(f"agentd: need two stored runs with results to compare, have {len(measured)}", file=sys.stderr)
        return 3
    before, after = measured[-2], measured[-1]
    deltas = compare(before, after)
    if fmt == "json":
        json.dump({"before_started_at": before.started_at, "after_started_at": after.started_at, "compare": [d.model_dump(mode="json") for d in deltas]}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(compare_text(deltas, before.started_at, after.started_at))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    if getattr(args, "bench_command", "nccl") != "nccl":
        print(f"agentd: unknown bench command {args.bench_command!r}", file=sys.stderr)
        return 3
    try:
        over = {"host_root": str(args.host_root)} if args.host_root is not None else None
        config = load_config(args.config, overrides=over)
    except ConfigError as e:
        print(f"agentd: {e}", file=sys.stderr)
        return 3
    if args.compare_only:
        return _compare_only(config, args.format)
    try:
        ops = validate_ops([o.strip() for o in args.ops.split(",") if o.strip()])
        sizes = parse_sizes(args.sizes)
        if args.gpus is not None and args.gpus < 1:
            raise ValueError("--gpus must be at least 1")
    except ValueError as e:
        print(f"agentd: {e}", file=sys.stderr)
        return 3
    snap, current, compute, notes = _collect(config)
    opts = BenchOptions(
        ops=ops, sizes=sizes, gpus=args.gpus, env_file=args.env_file, env_file_explicit=args.env_file is not None,
        runner=args.runner, transport=args.transport, force=args.force, time_limit_s=args.time_limit,
        iters=args.iters, warmup=args.warmup, check=not args.no_check, save=not args.no_save,
    )  # fmt: skip
    outcome = run_bench_job(config, opts, snapshot=snap, current_findings=current, compute_hcas=compute)
    outcome = dataclasses.replace(outcome, notes=notes + outcome.notes)
    if args.format == "json":
        json.dump(outcome_json(outcome), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(outcome_text(outcome))
        if args.compare:
            prev = outcome.previous
            sys.stdout.write("\n" + compare_text(outcome.deltas, prev.started_at if prev else None, outcome.run.started_at))
    return EXIT.get(outcome.run.status, 3)
