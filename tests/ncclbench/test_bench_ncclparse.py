"""The nccl-tests parser on real captured outputs of several versions (tests/ncclbench/data)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.ncclbench.ncclparse import op_from_binary, parse_nccl_tests
from tests.support.bench_data import DATA, data


def test_every_real_file_parses_without_errors():
    files = sorted(DATA.glob("*.txt"))
    assert len(files) >= 6
    for f in files:
        p = parse_nccl_tests(f.read_text())
        assert p.errors == (), f.name
        assert p.rows, f.name


def test_legacy_2019_five_collectives_dgx2():
    p = parse_nccl_tests(data("dgx2-v100x12-legacy-5ops.txt"))
    assert [s.op for s in p.sections] == ["all_gather", "all_reduce", "broadcast", "reduce", "reduce_scatter"]
    cols = {s.op: s.columns for s in p.sections}
    assert cols == {
        "all_gather": ("size", "count", "type"),
        "all_reduce": ("size", "count", "type", "redop"),
        "broadcast": ("size", "count", "type", "root"),
        "reduce": ("size", "count", "type", "redop", "root"),
        "reduce_scatter": ("size", "count", "type", "redop"),
    }
    assert all(s.error_column == "error" and len(s.rows) == 31 and s.n_ranks == 12 for s in p.sections)
    ag, ar, bc, rd, rs = p.sections
    assert (ag.n_threads, ag.n_gpus, ag.min_bytes, ag.max_bytes) == (1, 12, 8, 10737418240)
    assert ag.ranks[0].pid == 87569 and ag.ranks[0].group is None and ag.ranks[11].bus_id == "0xe7"
    assert ag.ranks[5].name == "Tesla V100-SXM3-32GB" and ag.ranks[5].host == "seville"
    # all_gather: size-0 rows, failed data check
    assert ag.rows[0].size_bytes == 0 and ag.rows[0].count == 0 and ag.rows[0].redop is None and ag.rows[0].root is None
    last = ag.rows[-1]
    assert (last.size_bytes, last.count, last.type) == (8589934560, 178956970, "float")
    assert (last.out_of_place.time_us, last.out_of_place.algbw_gbps, last.out_of_place.busbw_gbps) == (106773.0, 73.75, 73.75)
    assert last.out_of_place.wrong == 1.0 and last.out_of_place.wrong_text == "1e+00"
    assert (last.in_place.time_us, last.in_place.busbw_gbps) == (70089.0, 112.34)
    assert (ag.out_of_bounds, ag.out_of_bounds_ok, ag.avg_busbw_gbps) == (4, False, 30.2993)
    # all_reduce
    r = ar.rows[-1]
    assert (r.size_bytes, r.count, r.redop, r.root) == (8589934592, 2147483648, "sum", None)
    assert (r.out_of_place.time_us, r.out_of_place.algbw_gbps, r.out_of_place.busbw_gbps, r.out_of_place.wrong) == (127453.0, 67.40, 123.56, 2e-07)
    assert (ar.out_of_bounds_ok, ar.avg_busbw_gbps) == (True, 42.5578)
    # broadcast has a root and no redop; reduce has both
    assert bc.rows[3].root == 0 and bc.rows[3].redop is None and bc.rows[-1].in_place.busbw_gbps == 122.07
    assert rd.rows[0].redop == "sum" and rd.rows[0].root == 0 and rd.avg_busbw_gbps == 41.3386
    # reduce_scatter
    assert rs.rows[-1].out_of_place.busbw_gbps == 64.16 and rs.avg_busbw_gbps == 20.3609
    assert p.ignored_lines == 5  # the five "Running: ..." wrapper lines


def test_2021_layout_with_nccl_info_line_between_header_and_rows():
    p = parse_nccl_tests(data("azureml-k80x4-info-lines.txt"), op="all_reduce")
    (s,) = p.sections
    assert s.op == "all_reduce" and s.n_ranks == 4 and s.columns == ("size", "count", "type", "redop")
    assert s.ranks[3].pid == 197 and s.ranks[3].name == "Tesla K80"
    assert [r.size_bytes for r in s.rows] == [33554432 * 2**i for i in range(7)]
    r = s.rows[-1]
    assert (r.out_of_place.time_us, r.out_of_place.algbw_gbps, r.out_of_place.busbw_gbps) == (1258554.0, 1.71, 2.56)
    assert s.avg_busbw_gbps == 2.54225 and p.ignored_lines == 1


def test_current_layout_16_ranks_two_nodes():
    p = parse_nccl_tests(data("a3mega-h100x16-allreduce.txt"), op="all_reduce")
    (s,) = p.sections
    assert s.n_ranks == 16 and s.error_column == "#wrong"
    assert s.ranks[8].host == "ztan-mig-gq73" and s.ranks[8].group == 0 and s.ranks[8].bus_id == "0000:04:00"
    assert s.ranks[0].name == "NVIDIA H100 80GB HBM3"
    assert len(s.rows) == 31 and s.rows[0].size_bytes == 8 and s.rows[0].root == -1 and s.rows[0].redop == "sum"
    r = s.rows[-1]
    assert (r.out_of_place.time_us, r.out_of_place.algbw_gbps, r.out_of_place.busbw_gbps, r.out_of_place.wrong) == (47535.0, 180.71, 338.82, 0.0)
    assert (r.in_place.time_us, r.in_place.algbw_gbps, r.in_place.busbw_gbps) == (47743.0, 179.92, 337.35)
    assert s.avg_busbw_gbps == 70.742 and s.nccl_tests_version is None


def test_newest_layout_with_version_and_collective_lines():
    p = parse_nccl_tests(data("cscs-gh200x2-nccl-tests-2.18.2.txt"))
    (s,) = p.sections
    assert s.op == "all_reduce" and s.nccl_tests_version == "2.18.2" and s.concluded
    assert s.n_ranks == 2 and s.ranks[1].bus_id == "0009:01:00" and s.ranks[1].name == "NVIDIA GH200 120GB"
    assert [r.size_bytes for r in s.rows] == [1048576 * 2**i for i in range(8)]
    assert s.rows[5].out_of_place.time_us == 1537.62 and s.rows[5].in_place.time_us == 1538.74
    assert s.rows[-1].in_place.busbw_gbps == 22.88 and s.avg_busbw_gbps == 14.9966


def test_in_place_na_wrong_and_op_from_command_line():
    p = parse_nccl_tests(data("a100x8-sendrecv-na.txt"))
    (s,) = p.sections
    assert s.op == "sendrecv" and s.n_ranks is None
    r = s.rows[0]
    assert r.in_place.wrong is None and r.in_place.wrong_text == "N/A" and r.out_of_place.wrong == 0.0
    assert (r.size_bytes, r.out_of_place.busbw_gbps, r.in_place.busbw_gbps) == (134217728, 110.81, 110.76)


def test_elided_rank_lines_and_rank_tail():
    p = parse_nccl_tests(data("coreweave-h100x64-elided.txt"), op="all_reduce")
    (s,) = p.sections
    assert s.n_ranks is None and len(s.rows) == 5 and s.avg_busbw_gbps == 373.187
    assert s.rows[-1].out_of_place.busbw_gbps == 386.56 and p.ignored_lines == 1  # the "..." line
    q = parse_nccl_tests(data("coreweave-gb200x72-rank-tail.txt"), op="all_reduce")
    assert q.sections[0].n_ranks == 72 and q.sections[0].rows[3].out_of_place.busbw_gbps == 839.16


def test_rows_without_header_are_inferred_from_field_count():
    text = "\n".join(
        [
            "   536870912     134217728     float     sum      -1   2984.6  179.88  356.01      0   2979.7  180.18  356.60      0",
            "           8             2   float     sum    61.03    0.00    0.00  2e-07    61.04    0.00    0.00  1e-07",
            "           0             0   float    57.30    0.00    0.00  0e+00    57.09    0.00    0.00  0e+00",
            "           8             2   float       0    59.75    0.00    0.00  0e+00    59.96    0.00    0.00  0e+00",
            "           8             2   float     sum      -1    59.75    0.00    0.00  0",
        ]
    )
    rows = parse_nccl_tests(text, op="x").rows
    assert [(r.redop, r.root) for r in rows] == [("sum", -1), ("sum", None), (None, None), (None, 0), ("sum", -1)]
    assert rows[-1].in_place is None and rows[0].in_place.busbw_gbps == 356.60


def test_prefixed_lines_from_launchers_are_read():
    text = "\n".join(
        [
            "[1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
            "[1,0]<stdout>:        1024           256     float     sum      -1    75.18    0.01    0.03      0    78.30    0.01    0.02      0",
            " 0:      8388608        131072     float    none      -1    309.5   27.11   25.41    N/A    306.9   27.33   25.63    N/A",
            "2026-08-06T16:30:31.128034512+05:30       65536         16384     float     sum      -1    58.16    1.13    2.18       0    58.12    1.13    2.18       0",
        ]
    )
    p = parse_nccl_tests(text, op="all_reduce")
    assert p.errors == ()
    assert [r.size_bytes for r in p.rows] == [1024, 8388608, 65536]
    assert p.rows[1].redop == "none" and p.rows[2].out_of_place.busbw_gbps == 2.18


def test_bad_rows_become_errors_and_failures_are_collected():
    text = "\n".join(
        [
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
            "        1024           256     float     sum      -1    75.18    0.01",
            "        1024           256     float     sum      -1    abc    0.01    0.03      0    78.30    0.01    0.02      0",
            "        1024           256     12float     sum      -1    75.18    0.01    0.03      0    78.30    0.01    0.02      0",
            "node1: Test NCCL failure common.cu:1005 'unhandled cuda error (run with NCCL_DEBUG=INFO for details)'",
        ]
    )
    p = parse_nccl_tests(text)
    assert p.rows == ()
    assert [e.line for e in p.errors] == [2, 3, 4]
    assert "expected 9 or 13 fields" in p.errors[0].reason
    assert p.failures and "Test NCCL failure" in p.failures[0]


def test_op_from_binary_names():
    assert op_from_binary("/opt/nccl-tests/build/all_reduce_perf") == "all_reduce"
    assert op_from_binary("reduce_scatter_perf_mpi") == "reduce_scatter"
    assert op_from_binary("reduce_perf") == "reduce"
    assert op_from_binary("alltoall_perf -b 8") == "alltoall"
    assert op_from_binary("python train.py") is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_garbage_never_raises(text):
    p = parse_nccl_tests(text)
    assert isinstance(p.errors, tuple)


_row_token = st.one_of(
    st.integers(-10, 10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["float", "sum", "none", "N/A", "-1", "#wrong", "time", "size", "count", "nan", "inf", "1e+309", "", "#"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_row_token, min_size=0, max_size=15).map(lambda t: "   ".join(t)), max_size=30))
def test_row_like_garbage_never_raises(lines):
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
    p = parse_nccl_tests("\n".join([header, *lines]))
    body = [ln.split() for ln in lines]
    for r in p.rows:
        # a row is kept only as the typed form of a line that really had those numbers
        assert type(r.size_bytes) is int and type(r.count) is int
        assert [str(r.size_bytes), str(r.count)] in [t[:2] for t in body]
