"""``agentd bench``'s arguments, apart from the command (agentd.ncclbench.command): building
the CLI's parser, which every command does, imports only this, not the collector and
judge the benchmark runs with (nor asyncio, and through it ssl: agentd.base.openssl_gate)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TypeVar

from agentd.ncclbench.formulas import OPS

P = TypeVar("P", bound=argparse.ArgumentParser)  # the CLI's parser class (its usage errors exit 3)


def add_bench_parser(subparsers: argparse._SubParsersAction[P]) -> P:
    p = subparsers.add_parser("bench", help="measure collectives on this node's GPUs (opt-in, needs idle GPUs)")
    bsub = p.add_subparsers(dest="bench_command", required=True)
    n = bsub.add_parser("nccl", help="NCCL bus bandwidth per collective and size, judged against the fabric's expected values")
    n.add_argument("--config", type=Path, help="TOML config file (default /etc/agentd/agentd.toml, optional)")
    n.add_argument("--host-root", type=Path, help="root of the node's filesystem (default /)")
    n.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter", help=f"comma-separated collectives ({', '.join(OPS)})")
    n.add_argument("--sizes", default="0.1M,1M,16M,64M,256M", help="comma-separated sizes, nccl-tests syntax (K/M/G = 2^10/2^20/2^30)")
    n.add_argument("--gpus", type=int, help="GPUs to use (default: all)")
    n.add_argument("--env-file", type=Path, help="NCCL env file to run with (default: paths.nccl_env when it exists)")
    n.add_argument("--format", choices=("text", "json"), default="text")
    n.add_argument("--compare", action="store_true", help="also show the change against the previous stored run")
    n.add_argument("--compare-only", action="store_true", help="run nothing: compare the two most recent stored runs")
    n.add_argument("--force", action="store_true", help="run even when other processes use the GPUs (or that cannot be checked)")
    n.add_argument("--runner", choices=("auto", "nccl-tests", "torch"), default="auto")
    n.add_argument("--transport", choices=("nvlink", "net"), default="nvlink", help="net: NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, every byte through the HCAs")
    n.add_argument("--time-limit", type=float, help="hard limit in seconds (default bench.time_limit_s)")
    n.add_argument("--iters", type=int, default=20)
    n.add_argument("--warmup", type=int, default=5)
    n.add_argument("--no-check", action="store_true", help="skip the data check (nccl-tests -c 0)")
    n.add_argument("--no-save", action="store_true", help="do not add this run to the history")
    return p
