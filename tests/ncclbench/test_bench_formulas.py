"""busbw/algbw formulas against the numbers nccl-tests printed in real outputs."""

from __future__ import annotations

import pytest

from agentd.ncclbench.formulas import algbw_gbps, bandwidths, bus_factor, busbw_gbps, infer_n_ranks, time_resolution_us
from agentd.ncclbench.ncclparse import parse_nccl_tests
from agentd.ncclbench.results import n_ranks_of
from tests.support.bench_data import data

# file -> (op when the file does not name it, ranks when it prints no rank lines)
FILES = {
    "dgx2-v100x12-legacy-5ops.txt": (None, None),
    "azureml-k80x4-info-lines.txt": ("all_reduce", None),
    "a3mega-h100x16-allreduce.txt": ("all_reduce", None),
    "cscs-gh200x2-nccl-tests-2.18.2.txt": (None, None),
    "a100x8-sendrecv-na.txt": (None, 8),  # -g 8 on the command line
    "coreweave-gb200x72-rank-tail.txt": ("all_reduce", None),
    "coreweave-h100x64-elided.txt": ("all_reduce", None),  # n inferred below
}


def test_factors_from_performance_md():
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_reduce", 2) == pytest.approx(1.0)
    for op in ("all_gather", "reduce_scatter", "alltoall"):
        assert bus_factor(op, 8) == pytest.approx(0.875)
    for op in ("broadcast", "reduce", "sendrecv"):
        assert bus_factor(op, 8) == 1.0
    assert bus_factor("all_reduce", 1) == 0.0
    with pytest.raises(ValueError):
        bus_factor("allreduce", 8)
    with pytest.raises(ValueError):
        bus_factor("all_reduce", 0)


def test_algbw_units_are_decimal_gigabytes():
    assert algbw_gbps(1_000_000_000, 1_000_000) == pytest.approx(1.0)
    assert algbw_gbps(8, 0) == 0.0
    alg, bus = bandwidths("all_reduce", 8589934592, 47535, 16)
    assert alg == pytest.approx(180.71, abs=0.005) and bus == pytest.approx(338.82, abs=0.01)


def _tol(value: float, time_us: float) -> float:
    # printed with 2 decimals; the printed time is rounded too
    return 0.0051 + value * time_resolution_us(time_us) / time_us


@pytest.mark.parametrize("name", sorted(FILES))
def test_recompute_bandwidths_of_real_outputs(name):
    op_hint, n_hint = FILES[name]
    parsed = parse_nccl_tests(data(name), op=op_hint)
    n = n_hint or n_ranks_of(parsed)
    assert n, name
    checked = 0
    for s in parsed.sections:
        legacy_gather = s.error_column == "error" and s.op in ("all_gather", "reduce_scatter")
        for r in s.rows:
            for m in (r.out_of_place, r.in_place):
                if m is None:
                    continue
                alg = algbw_gbps(r.size_bytes, m.time_us)
                bus = busbw_gbps(s.op, alg, n)
                # busbw from size, time and n: the same in every version
                assert bus == pytest.approx(m.busbw_gbps, abs=_tol(bus, m.time_us)), (name, r.line)
                if legacy_gather:
                    # 2019 nccl-tests printed algbw = busbw for these (count*(n-1)/t, factor 1)
                    assert m.algbw_gbps == m.busbw_gbps
                else:
                    assert alg == pytest.approx(m.algbw_gbps, abs=_tol(alg, m.time_us)), (name, r.line)
                    # busbw from the printed algbw (both rounded to 2 decimals)
                    assert busbw_gbps(s.op, m.algbw_gbps, n) == pytest.approx(m.busbw_gbps, abs=0.0051 * (1 + bus_factor(s.op, n)))
                checked += 1
    assert checked >= 8


def test_rank_count_inferred_when_rank_lines_are_elided():
    parsed = parse_nccl_tests(data("coreweave-h100x64-elided.txt"), op="all_reduce")
    # 356.01 / 179.88 = 1.979 = 2 (n-1)/n  ->  96 ranks (12 nodes of 8), not the 64 of the file name
    assert n_ranks_of(parsed) == 96
    assert infer_n_ranks("all_reduce", 180.71, 338.82) == 16
    assert infer_n_ranks("all_gather", 39.46, 19.73) == 2
    assert infer_n_ranks("broadcast", 10.0, 10.0) is None
    assert infer_n_ranks("all_reduce", 0.0, 0.0) is None
    assert infer_n_ranks("all_gather", 73.75, 73.75) is None  # legacy printing: algbw == busbw
