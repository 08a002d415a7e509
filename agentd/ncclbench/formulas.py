"""Algorithm and bus bandwidth exactly as nccl-tests computes them.

Source: NVIDIA/nccl-tests ``doc/PERFORMANCE.md`` ("Performance reported by NCCL tests")
and the ``*GetBw`` functions in ``src/*.cu``:

- ``algbw = S / t``: S is the number nccl-tests prints in its ``size`` column, which is
  ``max(sendBytes, recvBytes)`` of one rank, i.e. the *whole* buffer: for all_gather
  ``n x`` the per-rank send count, for reduce_scatter ``n x`` the per-rank receive count,
  for alltoall the full send buffer. t is the average time of one operation. GB are 1e9
  bytes (decimal), t is printed in microseconds.
- ``busbw = algbw x factor(op, n)`` with n the number of ranks:

  ============== ===================== =========================================
  all_reduce     2(n-1)/n              every element: n-1 additions, n copies
  reduce_scatter (n-1)/n               the addition half of all_reduce
  all_gather     (n-1)/n               the copy half of all_reduce
  alltoall       (n-1)/n
  broadcast      1                     all data leaves the root once
  reduce         1                     all data reaches the root once
  sendrecv       1                     point to point
  gather/scatter (n-1)/n               as all_gather/reduce_scatter in src/*.cu
  ============== ===================== =========================================

  busbw is meant to be compared with the hardware's bottleneck bandwidth (NVLink, PCIe,
  network) independently of n. With NVLink SHARP or IB SHARP (in-network reduction) the
  all_reduce busbw is still computed with 2(n-1)/n, so it can exceed the link rate.

History: nccl-tests from about 2019 (the layout without ``root``/``redop`` columns for
all_gather) computed all_gather and reduce_scatter as ``count x typesize x (n-1) / t``
with a factor of 1 and printed algbw equal to busbw. busbw is the same number under both
definitions (``S (n-1)/n / t``); only the printed algbw differs. The parser keeps what
was printed; these functions implement the current definition.
"""

from __future__ import annotations

from typing import Callable

# nccl-tests binary stem (``all_reduce_perf`` -> ``all_reduce``) -> factor(n)
_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}

OPS: tuple[str, ...] = tuple(_FACTORS)
GB = 1e9  # nccl-tests divides by 1.0E9


def known_op(op: str) -> bool:
    return op in _FACTORS


def bus_factor(op: str, n_ranks: int) -> float:
    """busbw / algbw for ``op`` on ``n_ranks`` ranks. Raises ValueError for an unknown op
    or fewer than one rank."""
    if op not in _FACTORS:
        raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    if n_ranks < 1:
        raise ValueError(f"number of ranks must be >= 1, got {n_ranks}")
    return _FACTORS[op](n_ranks)


def algbw_gbps(size_bytes: int | float, time_us: float) -> float:
    """``S / t`` in GB/s (1e9 bytes per second); 0 when the time is not positive."""
    if time_us <= 0:
        return 0.0
    return float(size_bytes) / (time_us * 1e-6) / GB


def busbw_gbps(op: str, algbw: float, n_ranks: int) -> float:
    return algbw * bus_factor(op, n_ranks)


def bandwidths(op: str, size_bytes: int | float, time_us: float, n_ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one measured operation."""
    alg = algbw_gbps(size_bytes, time_us)
    return alg, busbw_gbps(op, alg, n_ranks)


def time_resolution_us(time_us: float) -> float:
    """Half a unit of the last digit nccl-tests prints for a time (``%7.0f`` from 10 ms,
    ``%7.1f`` from 100 us, else ``%7.2f``): the rounding error of a printed time."""
    if time_us >= 10000.0:
        return 0.5
    if time_us >= 100.0:
        return 0.05
    return 0.005


def infer_n_ranks(op: str, algbw: float, busbw: float) -> int | None:
    """The rank count that makes ``busbw / algbw`` equal the op's factor, for outputs
    that print no rank lines. None when the op's factor does not depend on n (broadcast,
    reduce, sendrecv), the numbers are too small to tell, or no n >= 2 fits."""
    if op not in _FACTORS or _FACTORS[op](2) == _FACTORS[op](3) or algbw < 1.0 or busbw <= 0:
        return None
    ratio = busbw / algbw
    scale = 2.0 if op == "all_reduce" else 1.0  # factor = scale * (n-1)/n
    frac = ratio / scale
    if not 0.0 < frac < 1.0:
        return None
    n = round(1.0 / (1.0 - frac))
    return n if n >= 2 else None
