"""Run the collectives: nccl-tests binaries (runner 1) or the built-in PyTorch benchmark
(runner 2, ``agentd.ncclbench.torchbench``), each as a child process with a hard time limit
(``agentd.host.procrun.run_bounded``: own process group, killed whole on timeout).

Both get the NCCL variables of the env file agentd wrote (``paths.nccl_env``), so the
numbers measure the configuration workloads get. ``transport="net"`` adds
``NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1``: with NVLink and shared memory off, NCCL moves
every byte between the node's own GPUs through the compute HCAs (GPUDirect RDMA), which
measures the network path on a single node (Azure's "IB loopback" health check).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from agentd.host.procrun import run_bounded
from agentd.ncclbench.formulas import OPS
from agentd.ncclbench.ncclparse import parse_nccl_tests
from agentd.ncclbench.results import BenchRun, OpResult, n_ranks_of, results_from_parsed, wrong_results

RunFn = Callable[..., tuple[int, str, str, bool]]
NET_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)(?:i?[bB])?\s*$")
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


@dataclass(frozen=True)
class BenchRequest:
    ops: tuple[str, ...]
    sizes: tuple[int, ...]  # bytes, ascending
    gpus: int
    env: Mapping[str, str] = field(default_factory=dict)  # added to agentd's own environment
    time_limit_s: float = 600.0
    iters: int = 20
    warmup: int = 5
    check: bool = True
    transport: str = "nvlink"
    env_file: str | None = None


# ---------------------------------------------------------------------------
# small parsers


def parse_size(text: str) -> int:
    """nccl-tests' size syntax: a number with an optional K/M/G (powers of 1024), e.g.
    ``0.1M`` -> 104857 (truncated like nccl-tests' parsesize)."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (examples: 8, 64K, 0.1M, 256M, 1G)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def parse_sizes(text: str) -> tuple[int, ...]:
    sizes = sorted({parse_size(t) for t in text.split(",") if t.strip()})
    if not sizes or sizes[0] <= 0:
        raise ValueError("sizes must be positive")
    return tuple(sizes)


def parse_env_file(text: str) -> tuple[dict[str, str], list[str]]:
    """``KEY=VALUE`` and ``export KEY=VALUE`` lines; ``#`` comments and blank lines
    skipped; single quotes taken literally (``'\\''`` as sh writes a quote), double quotes
    with backslash escapes. Returns (variables, problems)."""
    env: dict[str, str] = {}
    problems: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = _ENV_LINE.match(s)
        if not m:
            problems.append(f"line {n}: not KEY=VALUE: {s[:80]!r}")
            continue
        key, raw = m.group(1), m.group(2).strip()
        value, ok = _unquote(raw)
        if not ok:
            problems.append(f"line {n}: unbalanced quotes in {key}")
            continue
        env[key] = value
    return env, problems


def _unquote(raw: str) -> tuple[str, bool]:
    out: list[str] = []
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == "'":
            j = raw.find("'", i + 1)
            if j < 0:
                return "", False
            out.append(raw[i + 1 : j])
            i = j + 1
        elif c == '"':
            i += 1
            while i < len(raw) and raw[i] != '"':
                if raw[i] == "\\" and i + 1 < len(raw) and raw[i + 1] in '"\\$`':
                    i += 1
                out.append(raw[i])
                i += 1
            if i >= len(raw):
                return "", False
            i += 1
        elif c == "\\" and i + 1 < len(raw):
            out.append(raw[i + 1])
            i += 2
        elif c in " \t" or (c == "#" and not out):
            break  # unquoted blank ends the value; "# ..." after it is a comment
        else:
            out.append(c)
            i += 1
    return "".join(out), True


def child_env(extra: Mapping[str, str], transport: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(extra)
    if transport == "net":
        env.update(NET_ENV)
    return env


# ---------------------------------------------------------------------------
# runner 1: nccl-tests


def find_nccl_tests(op: str, directory: Path | str | None = None, path: str | None = None) -> Path | None:
    """``<op>_perf`` in ``directory`` (config bench.nccl_tests_dir) or on PATH."""
    name = f"{op}_perf"
    if directory is not None:
        cand = Path(directory) / name
        return cand if cand.is_file() and os.access(cand, os.X_OK) else None
    found = shutil.which(name, path=path)
    return Path(found) if found else None


def plan_invocations(sizes: Sequence[int]) -> list[tuple[int, int, int]]:
    """Group ascending sizes into (minBytes, maxBytes, factor) runs that nccl-tests' ``-f``
    reproduces exactly; a size that fits no series gets its own ``-b S -e S`` run."""
    sizes = sorted(set(sizes))
    plan: list[tuple[int, int, int]] = []
    i = 0
    while i < len(sizes):
        j = i
        factor = 2
        if i + 1 < len(sizes) and sizes[i + 1] % sizes[i] == 0:
            factor = sizes[i + 1] // sizes[i]
            j = i + 1
            while j + 1 < len(sizes) and sizes[j + 1] == sizes[j] * factor:
                j += 1
        plan.append((sizes[i], sizes[j], factor))
        i = j + 1
    return plan


def _series(b: int, e: int, f: int) -> list[int]:
    out, s = [], b
    while s <= e:
        out.append(s)
        s = s * f if f > 1 else e + 1
    return out


def nccl_tests_argv(binary: Path | str, req: BenchRequest, b: int, e: int, f: int) -> list[str]:
    return [
        str(binary), "-b", str(b), "-e", str(e), "-f", str(f), "-g", str(req.gpus),
        "-n", str(req.iters), "-w", str(req.warmup), "-c", "1" if req.check else "0",
    ]  # fmt: skip


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(t.strip() for t in text.strip().splitlines()[-lines:])[:500]


def run_nccl_tests(req: BenchRequest, binaries: Mapping[str, Path], *, run: RunFn = run_bounded, clock: Callable[[], float] = time.time) -> BenchRun:
    started = clock()
    deadline = time.monotonic() + req.time_limit_s
    env = child_env(req.env, req.transport)
    results: list[OpResult] = []
    avg: dict[str, float] = {}
    errors: list[str] = []
    status, reason, n_ranks, nccl_version, tool_version = "ok", "", None, None, None
    for op in req.ops:
        for b, e, f in plan_invocations(req.sizes):
            left = deadline - time.monotonic()
            if left <= 0:
                status, reason = "timeout", f"time limit {req.time_limit_s:g}s reached before {op} {b}-{e} B"
                break
            rc, out, err, timed_out = run(nccl_tests_argv(binaries[op], req, b, e, f), env=env, timeout_s=left)
            parsed = parse_nccl_tests(out, op=op)
            got = results_from_parsed(parsed, set(_series(b, e, f)) & set(req.sizes), op)
            results = [r for r in results if (r.op, r.size_bytes) not in {(g.op, g.size_bytes) for g in got}] + list(got)
            n_ranks = n_ranks or n_ranks_of(parsed, req.gpus)
            for s in parsed.sections:
                nccl_version = nccl_version or s.nccl_version
                tool_version = tool_version or s.nccl_tests_version
                if s.avg_busbw_gbps is not None and s.op:
                    avg[s.op] = s.avg_busbw_gbps
            errors += [f"{op}: line {pe.line}: {pe.reason}" for pe in parsed.errors[:5]]
            errors += [f"{op}: {x}" for x in parsed.failures[:5]]
            if timed_out:
                status, reason = "timeout", f"{op} killed at the time limit ({req.time_limit_s:g}s)"
                break
            if rc != 0:
                status, reason = "failed", f"{binaries[op].name} exited {rc}: {_tail(err) or _tail(out)}"
                break
            if not parsed.rows:
                status, reason = "failed", f"{binaries[op].name} printed no result rows: {_tail(err) or _tail(out)}"
                break
            if wrong := wrong_results(parsed):
                status, reason = "wrong_results", "; ".join(wrong[:3])
        if status in ("timeout", "failed"):
            break
    return BenchRun(
        started_at=started, finished_at=clock(), runner="nccl-tests", transport=req.transport, status=status, reason=reason,
        n_ranks=n_ranks, ops=req.ops, env_file=req.env_file, env=_nccl_vars(env), nccl_version=nccl_version,
        tool_version=tool_version, results=tuple(results), avg_busbw_gbps=avg, errors=tuple(errors[:20]),
    )  # fmt: skip


def _nccl_vars(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")}


# ---------------------------------------------------------------------------
# runner 2: torch.distributed


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def torch_argv(req: BenchRequest, python: str = sys.executable) -> list[str]:
    return [
        python, "-m", "agentd.ncclbench.torchbench", "--ops", ",".join(req.ops), "--sizes", ",".join(map(str, req.sizes)),
        "--gpus", str(req.gpus), "--iters", str(req.iters), "--warmup", str(req.warmup), "--check" if req.check else "--no-check",
    ]  # fmt: skip


def run_torch(req: BenchRequest, *, run: RunFn = run_bounded, clock: Callable[[], float] = time.time, python: str = sys.executable) -> BenchRun:
    started = clock()
    env = child_env(req.env, req.transport)
    rc, out, err, timed_out = run(torch_argv(req, python), env=env, timeout_s=req.time_limit_s)
    doc = None
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                continue
            break
    status, reason = "ok", ""
    results: tuple[OpResult, ...] = ()
    if timed_out:
        status, reason = "timeout", f"torch benchmark killed at the time limit ({req.time_limit_s:g}s)"
    elif rc != 0 or not isinstance(doc, dict):
        status, reason = "failed", f"torch benchmark exited {rc}: {_tail(err) or _tail(out)}"
    if isinstance(doc, dict):
        try:
            results = tuple(OpResult.model_validate(r) for r in doc.get("results", []))
        except ValueError as e:
            status, reason = "failed", f"torch benchmark answered an unreadable result: {e}"
        if status == "ok" and doc.get("wrong"):
            status, reason = "wrong_results", "; ".join(map(str, doc["wrong"]))[:500]
    return BenchRun(
        started_at=started, finished_at=clock(), runner="torch", transport=req.transport, status=status, reason=reason,
        n_ranks=(doc or {}).get("world_size") if isinstance(doc, dict) else None, ops=req.ops, env_file=req.env_file,
        env=_nccl_vars(env), nccl_version=(doc or {}).get("nccl_version") if isinstance(doc, dict) else None,
        tool_version=(doc or {}).get("torch_version") if isinstance(doc, dict) else None, results=results,
        errors=tuple([_tail(err)] if err.strip() and status != "ok" else []),
    )  # fmt: skip


# ---------------------------------------------------------------------------


def choose_runner(choice: str, ops: Sequence[str], nccl_tests_dir: Path | str | None = None, path: str | None = None) -> tuple[str | None, dict[str, Path], str]:
    """(runner or None, nccl-tests binaries by op, why). ``auto`` prefers nccl-tests when
    every requested op has a binary, else torch when it is importable."""
    bins = {op: p for op in ops if (p := find_nccl_tests(op, nccl_tests_dir, path)) is not None}
    missing = [f"{op}_perf" for op in ops if op not in bins]
    where = str(nccl_tests_dir) if nccl_tests_dir is not None else "PATH"
    if choice in ("auto", "nccl-tests") and not missing:
        return "nccl-tests", bins, f"nccl-tests from {where}"
    if choice == "nccl-tests":
        return None, bins, f"nccl-tests binaries not found in {where}: {', '.join(missing)}"
    if torch_available():
        return "torch", bins, "torch.distributed (nccl-tests not found)" if choice == "auto" else "torch.distributed"
    if choice == "torch":
        return None, bins, "PyTorch is not installed (install agentd[bench])"
    return None, bins, f"no runner: nccl-tests binaries not found in {where} ({', '.join(missing)}) and PyTorch is not installed (agentd[bench])"


def validate_ops(ops: Sequence[str]) -> tuple[str, ...]:
    bad = [o for o in ops if o not in OPS]
    if bad:
        raise ValueError(f"unknown collective(s) {', '.join(bad)}; known: {', '.join(OPS)}")
    return tuple(dict.fromkeys(ops))
