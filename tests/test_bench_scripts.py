"""The study scripts under benchmarks/ (not timed): their numbers obey the laws they report."""
import importlib.util
import pathlib

import pytest

from rdk_theory import _fused
from tests.tolerances import FLOAT32_ATOL, FLOAT64_ATOL, assert_close, assert_leq

_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, _ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rank_accuracy_full_rank_is_the_full_factor_and_truncation_costs_tv():
    ra = _load("rank_accuracy")
    res = ra.study(n=64, contexts=4, calibration=8, keep=(0.5,), taus=[1e-3], ranks=(1, 8, 9))
    (row,) = res["rows"]
    assert list(row["ranks"]) == [1, 8]  # ranks above min(S, N) are dropped
    full = row["ranks"][8]  # rank S = 8: the SVD reconstructs the factor exactly
    assert_leq(full["tv_to_full"], 0.0, slack=FLOAT64_ATOL)
    assert_close(full["alpha"], row["first_order_full"])
    assert row["ranks"][1]["tv_to_full"] > 1e-6  # a real truncation moves the proposal
    for d in [row["tli"], row["rdk_exact"], row["first_order_full"], row["ranks"][1]["alpha"]]:
        assert 0.0 <= d <= 1.0
    table = ra.markdown(res)
    assert table.count("\n") == 2 and "(TV " in table
    if _fused.available():  # float32 products: the same kernel up to float32 round-off
        assert_leq(row["full_f32"]["tv_to_full"], 0.0, slack=FLOAT32_ATOL)
        assert_close(row["full_f32"]["alpha"], row["first_order_full"], rtol=0, atol=FLOAT32_ATOL)
        assert "float32 products" in table and table.count("(TV ") == 3


def test_rank_accuracy_cli_refuses_bad_input(capsys):
    ra = _load("rank_accuracy")
    with pytest.raises(SystemExit) as e:
        ra.main(["--keep", "1.5"])
    assert e.value.code == 2 and "--keep" in capsys.readouterr().err


@pytest.mark.skipif(not _fused.available(), reason="numba not installed (extra 'fast')")
def test_bench_proposals_times_what_it_names_and_tables_round_honestly():
    """One tiny cell (N = 4096, hot, one repeat: the ratios are not checked, only what is timed
    and reported): every first-order row computes the proposal of ``tli_proposal`` followed by
    the kernel, fused or not, and the worst-ratio table keeps two decimals, so a 2.96x and a
    3.04x cannot both print as a bold or plain "3.0x"."""
    import numpy as np

    import rdk_theory as rt
    import rdk_theory.case  # noqa: F401  (default_tau)

    bp = _load("bench_proposals")
    rng = np.random.default_rng(0)
    n = 4096
    p, q, cal = bp._inputs(rng, n, 2, 8)
    vm = rt.VocabMap.identity(n)
    tau = rt.case.default_tau(cal)
    fns = bp.cell_methods(p, q, cal, 8, (1, 2), True)
    assert_close(fns["tli"](), rt.acceptance_rate(p, rt.tli_proposal(q, vm)))
    first_order = [k for k in fns if k.startswith("first_order_")]
    assert {"first_order_r1_unfused", "first_order_r1_fused", "first_order_S8_blas_f32",
            "first_order_r2_fused_f32", "first_order_r2_numpy"} <= set(first_order)
    for name in first_order:
        got, alpha = fns[name]()
        label = name.split("_")[2]  # r1, r2 or S8
        factor = bp._centred(cal)
        if label != "S8":  # truncated ranks from the factor's SVD, as the script builds them
            _, sv, vt = np.linalg.svd(factor, full_matrices=False)
            r = int(label[1:])
            factor = sv[:r, None] * vt[:r]
        ref = rt.FirstOrderCovarianceKernel.from_factor(
            factor, tau, engine="numpy", factor_dtype="float32" if "f32" in name else "float64")
        want = ref.transport(rt.tli_proposal(q, vm))  # the definition, from q
        tol = FLOAT32_ATOL if name.endswith("blas_f32") else FLOAT64_ATOL
        assert_close(got, want, rtol=0, atol=tol, err_msg=name)
        assert_close(alpha, rt.acceptance_rate(p, want), rtol=0, atol=tol, err_msg=name)
    rows = bp.bench_floor_ratios([n], [1], 8, (1, 2), 1, rng, True, regimes=("hot",))
    assert {"first_order_r1_unfused_ratio", "first_order_r1_fused_ratio",
            "first_order_S8_blas_f32_ratio"} <= set(rows[0])
    summary = {"tli": {"batch1_hot": {"worst_ratio": 2.96, "within_target": True}},
               "first_order_r1_unfused": {"batch1_hot": {"worst_ratio": 3.04,
                                                         "within_target": False}}}
    fake = [{"N": n, "batch": 1, "regime": "hot", "floor_ms": 1.0, "tli_ratio": 2.96,
             "first_order_r1_unfused_ratio": 3.04}]
    table = bp.markdown({"floor_ratios": fake, "summary": summary})
    assert "| TLI | **2.96x** |" in table and "| r1 unfused | 3.04x |" in table


@pytest.mark.parametrize("script, argv, message", [
    ("bench_proposals", ["--repeats", "0"], "--repeats: expected an integer >= 1"),  # was 21
    ("bench_proposals", ["--repeats", "-2"], "--repeats: expected an integer >= 1"),  # a traceback
    ("rank_accuracy", ["--ranks", "0"], "--ranks: expected an integer >= 1"),
    ("rank_accuracy", ["--tau", "nan"], "--tau a finite number > 0"),
    ("rank_accuracy", ["--tau", "inf"], "--tau a finite number > 0"),
    ("rank_accuracy", ["--n", "16"], "topic_size"),
    ("rank_accuracy", ["--seed", "-1"], "--seed: expected an integer >= 0"),
    # each was a traceback: --json after the whole run (103 s, the results lost), --table at once
    ("bench_proposals", ["--json", "no-such-folder/b.json"], "the folder 'no-such-folder' does not"),
    ("bench_proposals", ["--json", "."], "'.' names no file"),
    ("rank_accuracy", ["--json", "no-such-folder/x.json"], "the folder 'no-such-folder' does not"),
    ("bench_proposals", ["--table", "no-such-results.json"], "--table no-such-results.json: "),
    ("bench_thread_contention", ["--repeats", "0"], "--repeats: expected an integer >= 1"),
    # a rank above the factor's was left out of the table without a word
    ("rank_accuracy", ["--calibration", "4", "--ranks", "2", "8"],
     "--ranks 8 exceeds the factor's rank, at most min(--calibration, --n) = 4"),
])
def test_bench_scripts_refuse_bad_options_in_one_usage_error(script, argv, message, capsys):
    """--repeats 0 silently meant 21 and -2 failed with a ValueError after the kernels were
    built; rank_accuracy's --ranks 0, --tau nan / inf and a small --n were InputError
    tracebacks. Each is now argparse's usage error, exit 2, before any work."""
    with pytest.raises(SystemExit) as info:
        _load(script).main(argv)
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_the_benchmark_builds_its_kernels_at_a_small_calibration_size():
    """--calibration 8: the centred factor's last SVD direction is round-off, which from_factor
    refused (the benchmark stopped while building its kernels). Every kernel it times is
    built, and the rank-8 one (rank S) is the full factor's kernel."""
    import numpy as np

    bp = _load("bench_proposals")
    cal = np.random.default_rng(0).dirichlet(np.full(4096, 0.05), size=8)
    full = bp._centred(cal)
    kernels = bp._first_order_kernels(full, 1.0, 8, bp.RANKS, fused=False)
    q = np.random.default_rng(1).dirichlet(np.ones(4096), 2)
    assert_close(kernels["first_order_r8_numpy"].transport(q), kernels["first_order_S8_numpy"].transport(q))
