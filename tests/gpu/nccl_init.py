#!/usr/bin/env python3
"""One NCCL communicator of one rank on GPU 0, created and destroyed: what makes NCCL
detect the node's topology, read ``NCCL_TOPO_FILE`` and write ``NCCL_TOPO_DUMP_FILE``
(tests/gpu/gpu_check.py runs it twice, with the environment that says which).

NCCL comes from the ``nvidia-nccl-cu*`` wheel, called through ctypes (``ncclGetUniqueId``,
``ncclCommInitRank`` with nranks 1, ``ncclCommDestroy``); where that library cannot be
found or loaded, from PyTorch (a one-rank NCCL process group and one all_reduce, which
creates the communicator). Prints one JSON line: ``{"ok", "via", "library",
"nccl_version", "error", "seconds"}``; exit status 0 when the communicator was created.

Only the standard library (and torch, when it is the way): it runs with the device
image's Python before or without agentd.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

NCCL_UNIQUE_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES in nccl.h


class NcclUniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * NCCL_UNIQUE_ID_BYTES)]


def version_text(code: int) -> str:
    """ncclGetVersion's integer as NCCL prints it: 22703 -> 2.27.3 (NCCL_VERSION_CODE is
    major*10000 + minor*100 + patch since 2.9; 1000 per major and 100 per minor before)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def wheel_libraries(paths: list[str] | None = None) -> list[Path]:
    """libnccl.so.2 of the NCCL wheels importable here: ``nvidia/<dir>/lib`` of an
    nvidia-nccl-cu* wheel (``nvidia/nccl/lib``; the CUDA 13 wheels' common ``nvidia/cu13/lib``
    too) or torch's own ``torch/lib``, in sys.path order, each file once."""
    out: list[Path] = []
    seen: set[str] = set()
    for entry in sys.path if paths is None else paths:
        base = Path(entry or ".")
        for lib in [*sorted(base.glob("nvidia/*/lib/libnccl.so.2")), *sorted(base.glob("torch/lib/libnccl.so.2"))]:
            real = os.path.realpath(lib)
            if real not in seen and lib.is_file():
                seen.add(real)
                out.append(lib)
    return out


def via_ctypes(lib: ctypes.CDLL, result: dict[str, object]) -> None:
    """The communicator through the library's C API, its version into ``result`` first;
    RuntimeError says which call failed."""
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    lib.ncclGetErrorString.argtypes = [ctypes.c_int]
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, NcclUniqueId, ctypes.c_int]
    lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]
    version = ctypes.c_int()
    if lib.ncclGetVersion(ctypes.byref(version)) == 0:
        result["nccl_version"] = version_text(version.value)

    def check(rc: int, call: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{call}: {lib.ncclGetErrorString(rc).decode(errors='replace')} ({rc})")

    uid = NcclUniqueId()
    check(lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    comm = ctypes.c_void_p()
    # the current CUDA device is 0 in a fresh process: the one rank's GPU
    check(lib.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0), "ncclCommInitRank")
    check(lib.ncclCommDestroy(comm), "ncclCommDestroy")


def via_torch() -> dict[str, object]:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    with tempfile.TemporaryDirectory(prefix="nccl-init-") as d:
        dist.init_process_group("nccl", init_method=f"file://{d}/rendezvous", rank=0, world_size=1)
        try:
            t = torch.ones(1, device="cuda")
            dist.all_reduce(t)  # the communicator is created at the first collective
            torch.cuda.synchronize()
        finally:
            dist.destroy_process_group()
    return {"via": "torch", "library": None, "nccl_version": ".".join(map(str, torch.cuda.nccl.version()))}


def main() -> int:
    """The first NCCL library that loads is the answer, created or failed (a second try in
    this process would find NCCL's state and its log file already set up by the first);
    torch only when no library loads."""
    start = time.monotonic()
    errors: list[str] = []
    result: dict[str, object] | None = None
    tried: dict[str, object] | None = None
    candidates = [str(p) for p in wheel_libraries()]
    found = ctypes.util.find_library("nccl")
    if found:
        candidates.append(found)
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"cannot load {path}: {e}")
            continue
        tried = {"via": "ctypes", "library": path, "nccl_version": None}
        try:
            via_ctypes(lib, tried)
            result = tried
        except (RuntimeError, AttributeError) as e:
            errors.append(f"{path}: {e}")
        break
    if tried is None:
        if not candidates:
            errors.append("no libnccl.so.2 found (nvidia-nccl-cu* wheel or the loader's path)")
        tried = {"via": "torch", "library": None, "nccl_version": None}
        try:
            result = via_torch()
        except Exception as e:  # torch missing, no GPU, NCCL failing: each is the answer
            errors.append(f"torch: {type(e).__name__}: {e}")
    out = {**(result or tried), "ok": result is not None, "error": "; ".join(errors) or None,
           "seconds": round(time.monotonic() - start, 2), "topo_file": os.environ.get("NCCL_TOPO_FILE")}  # fmt: skip
    print(json.dumps(out), flush=True)
    if errors:
        print("\n".join(errors), file=sys.stderr)
    return 0 if result is not None else 1


if __name__ == "__main__":
    sys.exit(main())
