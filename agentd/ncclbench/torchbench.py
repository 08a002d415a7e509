"""Built-in NCCL benchmark on PyTorch (runner 2): ``python -m agentd.ncclbench.torchbench``.

Spawns one process per local GPU (``torch.multiprocessing``), joins an NCCL process group
through a rendezvous file, and times each collective the way nccl-tests does: float32
buffers, ``--warmup`` untimed runs, then ``--iters`` back-to-back runs between two CUDA
events; the per-op time is averaged over ranks (nccl-tests' default ``-a 1``). Sizes mean
what they mean in nccl-tests (the whole buffer: all_gather's output, reduce_scatter's
input), and algbw/busbw come from ``agentd.ncclbench.formulas``. With ``--check`` one more
run on known values counts wrong elements, like nccl-tests' ``#wrong``.

Prints one JSON line on stdout: ``{"runner": "torch", "world_size": n, "torch_version",
"nccl_version", "results": [OpResult...], "wrong": [...]}``. Exit status 1 on failure
(message on stderr). PyTorch is an optional extra (``agentd[bench]``) and is imported only
here, in the child process that agentd starts with a hard time limit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

from agentd.ncclbench.formulas import bandwidths

TORCH_OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv")
ELEM = 4  # float32


def layout(op: str, size_bytes: int, world: int) -> tuple[int, int, int]:
    """(send elements, receive elements, size in bytes as nccl-tests reports it) of one
    rank, for a requested size. Sizes are rounded down to what divides evenly."""
    if op in ("all_gather",):
        per = size_bytes // (ELEM * world)
        return per, per * world, per * world * ELEM
    if op in ("reduce_scatter",):
        per = size_bytes // (ELEM * world)
        return per * world, per, per * world * ELEM
    if op == "alltoall":
        per = size_bytes // (ELEM * world)
        return per * world, per * world, per * world * ELEM
    count = size_bytes // ELEM
    return count, count, count * ELEM


def _run_op(dist: Any, op: str, send: Any, recv: Any, rank: int, world: int) -> None:  # Any: torch (optional, not type-checked)
    if op == "all_reduce":
        dist.all_reduce(send)
    elif op == "all_gather":
        dist.all_gather_into_tensor(recv, send)
    elif op == "reduce_scatter":
        dist.reduce_scatter_tensor(recv, send)
    elif op == "alltoall":
        dist.all_to_all_single(recv, send)
    elif op == "broadcast":
        dist.broadcast(send, src=0)
    elif op == "reduce":
        dist.reduce(send, dst=0)
    elif op == "sendrecv":
        reqs = dist.batch_isend_irecv([
            dist.P2POp(dist.isend, send, (rank + 1) % world),
            dist.P2POp(dist.irecv, recv, (rank - 1) % world),
        ])  # fmt: skip
        for r in reqs:
            r.wait()
    else:  # pragma: no cover - validated by main()
        raise ValueError(op)


def _check(torch: Any, dist: Any, op: str, send: Any, recv: Any, rank: int, world: int) -> int:  # Any: torch (optional, not type-checked)
    """Run once on known values; the number of wrong elements on this rank."""
    n_send = send.numel()
    if op in ("all_reduce", "reduce", "reduce_scatter"):
        send.fill_(float(rank + 1))
    elif op == "alltoall":
        per = n_send // world
        send.copy_((torch.arange(world, device=send.device, dtype=send.dtype) + rank * world).repeat_interleave(per))
    elif op == "broadcast":
        send.fill_(1.0 if rank == 0 else 0.0)
    else:
        send.fill_(float(rank))
    if recv is not send:
        recv.fill_(-1.0)
    _run_op(dist, op, send, recv, rank, world)
    torch.cuda.synchronize()
    total = world * (world + 1) / 2
    if op == "all_reduce":
        bad = send != total
    elif op == "reduce":
        bad = (send != total) if rank == 0 else torch.zeros(1, dtype=torch.bool)
    elif op == "reduce_scatter":
        bad = recv != total
    elif op == "broadcast":
        bad = send != 1.0
    elif op == "all_gather":
        per = recv.numel() // world
        bad = recv != torch.arange(world, device=recv.device, dtype=recv.dtype).repeat_interleave(per)
    elif op == "alltoall":
        per = recv.numel() // world
        bad = recv != (torch.arange(world, device=recv.device, dtype=recv.dtype) * world + rank).repeat_interleave(per)
    else:  # sendrecv
        bad = recv != float((rank - 1) % world)
    return int(bad.sum().item())


def _worker(rank: int, world: int, init_file: str, ops: list[str], sizes: list[int], iters: int, warmup: int, check: bool, out_file: str) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world)
    results: list[dict[str, Any]] = []  # Any: OpResult fields by name, JSON for the parent process
    wrong: list[str] = []
    try:
        for op in ops:
            for size in sizes:
                n_send, n_recv, reported = layout(op, size, world)
                if reported == 0:
                    continue
                send = torch.ones(n_send, dtype=torch.float32, device=dev)
                recv = send if op in ("all_reduce", "broadcast", "reduce") else torch.empty(n_recv, dtype=torch.float32, device=dev)
                for _ in range(warmup):
                    _run_op(dist, op, send, recv, rank, world)
                torch.cuda.synchronize()
                dist.barrier(device_ids=[rank])
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(iters):
                    _run_op(dist, op, send, recv, rank, world)
                end.record()
                end.synchronize()
                t = torch.tensor([start.elapsed_time(end) * 1000.0 / iters], dtype=torch.float64, device=dev)
                dist.all_reduce(t)
                time_us = float(t.item()) / world
                bad = 0
                if check:
                    w = torch.tensor([_check(torch, dist, op, send, recv, rank, world)], dtype=torch.int64, device=dev)
                    dist.all_reduce(w)
                    bad = int(w.item())
                    if bad:
                        wrong.append(f"{op} {reported} B: {bad} wrong elements")
                alg, bus = bandwidths(op, reported, time_us, world)
                results.append(
                    dict(op=op, size_bytes=reported, count=n_recv if op == "reduce_scatter" else n_send, dtype="float", time_us=time_us,
                         algbw_gbps=alg, busbw_gbps=bus, busbw_out_of_place_gbps=bus if recv is not send else None,
                         busbw_in_place_gbps=bus if recv is send else None, wrong=float(bad) if check else None)
                )  # fmt: skip
                del send, recv
                torch.cuda.empty_cache()
        if rank == 0:
            nccl = getattr(torch.cuda, "nccl", None)
            ver = nccl.version() if nccl is not None else None
            doc = {
                "runner": "torch", "world_size": world, "torch_version": torch.__version__,
                "nccl_version": ".".join(map(str, ver)) if isinstance(ver, tuple) else (str(ver) if ver else None),
                "results": results, "wrong": wrong,
            }  # fmt: skip
            with open(out_file, "w", encoding="utf-8") as f:
                json.dump(doc, f)
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m agentd.ncclbench.torchbench")
    ap.add_argument("--ops", required=True)
    ap.add_argument("--sizes", required=True, help="comma-separated sizes in bytes")
    ap.add_argument("--gpus", type=int, default=0, help="0: all visible GPUs")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--check", dest="check", action="store_true", default=True)
    ap.add_argument("--no-check", dest="check", action="store_false")
    args = ap.parse_args(argv)
    ops = [o for o in args.ops.split(",") if o]
    bad = [o for o in ops if o not in TORCH_OPS]
    if bad:
        print(f"torchbench: unsupported collective(s): {', '.join(bad)} (supported: {', '.join(TORCH_OPS)})", file=sys.stderr)
        return 2
    sizes = sorted({int(s) for s in args.sizes.split(",") if s})
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"torchbench: PyTorch is not installed ({e}); install agentd[bench]", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("torchbench: CUDA is not available", file=sys.stderr)
        return 1
    world = args.gpus or torch.cuda.device_count()
    if world < 1 or world > torch.cuda.device_count():
        print(f"torchbench: asked for {world} GPUs, {torch.cuda.device_count()} visible", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="agentd-torchbench-") as tmp:
        init_file, out_file = os.path.join(tmp, "rendezvous"), os.path.join(tmp, "result.json")
        mp.spawn(_worker, args=(world, init_file, ops, sizes, args.iters, args.warmup, args.check, out_file), nprocs=world, join=True)
        with open(out_file, encoding="utf-8") as f:
            doc = json.load(f)
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
