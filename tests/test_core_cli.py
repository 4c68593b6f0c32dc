"""The CLI contract of ``rdk-theory acceptance | sample | report`` (other tools depend on it)."""
import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

import rdk_theory as rt
import rdk_theory.cli as cli
from rdk_theory.cli import main
from tests.stats import assert_matches_law, assert_pvalue, binomial_pvalue
from tests.tolerances import FLOAT64_ATOL, assert_close


def _write_case(path, **overrides):
    rng = np.random.default_rng(0)
    n_t, n_d, c, s = 12, 6, 3, 20
    arrays = {
        "target_probs": rng.dirichlet(np.full(n_t, 0.5), size=c),
        "draft_probs": rng.dirichlet(np.full(n_d, 0.5), size=c),
        "draft_to_target": np.array([0, 3, 5, -1, 7, 2]),
        "calibration_probs": rng.dirichlet(np.full(n_t, 0.5), size=s),
        "kernel": rng.dirichlet(np.ones(n_t), size=n_t),
    }
    arrays.update(overrides)
    arrays = {k: v for k, v in arrays.items() if v is not None}
    np.savez(path, **arrays)
    return arrays


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("kernel", ["identity", "marginal", "covariance", "dense"])
def test_acceptance_json_contract(tmp_path, capsys, kernel):
    arrays = _write_case(tmp_path / "case.npz")
    code, out, err = _run(capsys, "acceptance", str(tmp_path / "case.npz"), "--kernel", kernel,
                          "--json", "--tau", "0.01")
    assert code == 0, err
    res = json.loads(out)
    expected_keys = {"vanilla", "tli", "rdk_exact"} | ({"rdk_first_order"} if kernel == "covariance" else set())
    assert set(res) == expected_keys
    vm = rt.VocabMap(12, arrays["draft_to_target"])
    ker = {"identity": rt.IdentityKernel(),
           "marginal": rt.MarginalKernel.from_calibration(arrays["calibration_probs"], vm),
           "covariance": rt.covariance_softmax_kernel(arrays["calibration_probs"], 0.01),
           "dense": rt.DenseKernel(arrays["kernel"])}[kernel]
    p, q = arrays["target_probs"], arrays["draft_probs"]
    want = {"vanilla": rt.vanilla_proposal(q, vm), "tli": rt.tli_proposal(q, vm),
            "rdk_exact": rt.rdk_proposal(q, vm, ker)}
    if kernel == "covariance":
        want["rdk_first_order"] = rt.rdk_proposal(
            q, vm, rt.FirstOrderCovarianceKernel(arrays["calibration_probs"], 0.01))
    for name, r in want.items():  # every value of the contract, against the library
        alpha = rt.acceptance_rate(p, r)
        assert len(res[name]["per_context"]) == 3
        assert_close(res[name]["per_context"], alpha, err_msg=name)
        assert_close(res[name]["mean"], alpha.mean(), err_msg=name)
    if kernel == "identity":
        assert res["rdk_exact"] == res["tli"]


def test_acceptance_table_is_readable(tmp_path, capsys):
    """The table shows each sampler's mean, min and max alpha (4 decimals) and the OOV cap."""
    arrays = _write_case(tmp_path / "case.npz")
    code, out, _ = _run(capsys, "acceptance", str(tmp_path / "case.npz"))
    assert code == 0
    vm = rt.VocabMap(12, arrays["draft_to_target"])
    p = arrays["target_probs"]
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:]}
    alpha = rt.acceptance_rate(p, rt.tli_proposal(arrays["draft_probs"], vm))
    assert rows["tli"] == [f"{alpha.mean():.6f}", f"{alpha.min():.4f}", f"{alpha.max():.4f}"]
    assert rows["OOV"][2] == f"{rt.oov_cap(p, vm).mean():.6f}"


def test_sample_json_contract_and_law(tmp_path, capsys):
    """Monte Carlo: n = 60,000 steps of context 1; chi-square vs p, and the accepted count
    against Binomial(n, alpha) (exact binomial test), both at the suite's rate."""
    arrays = _write_case(tmp_path / "case.npz")
    code, out, err = _run(capsys, "sample", str(tmp_path / "case.npz"), "--sampler", "rdk_first_order",
                          "--kernel", "covariance", "--tau", "0.01", "--context", "1",
                          "--n", "60000", "--seed", "3", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert set(res) == {"counts", "accepted", "n"}
    assert res["n"] == 60000 and sum(res["counts"]) == 60000 and len(res["counts"]) == 12
    assert_matches_law(np.array(res["counts"]), arrays["target_probs"][1], "CLI sample")
    vm = rt.VocabMap(12, arrays["draft_to_target"])
    r = rt.rdk_proposal(arrays["draft_probs"][1], vm,
                        rt.FirstOrderCovarianceKernel(arrays["calibration_probs"], 0.01))
    alpha = float(rt.acceptance_rate(arrays["target_probs"][1], r))
    assert_pvalue(binomial_pvalue(res["accepted"], 60000, alpha), "CLI accepted count")


def test_acceptance_marginal_kernel_takes_lam(tmp_path, capsys):
    """--lam replaces the default weight mu(OOV) of the marginal kernel (exact per-context
    values against the library; the default weight gives different numbers here)."""
    arrays = _write_case(tmp_path / "case.npz")
    vm = rt.VocabMap(12, arrays["draft_to_target"])
    p, q, cal = arrays["target_probs"], arrays["draft_probs"], arrays["calibration_probs"]
    got = {}
    for lam in (None, 0.3):
        extra = () if lam is None else ("--lam", str(lam))
        code, out, err = _run(capsys, "acceptance", str(tmp_path / "case.npz"), "--kernel",
                              "marginal", *extra, "--json")
        assert code == 0, err
        want = rt.acceptance_rate(p, rt.rdk_proposal(q, vm, rt.MarginalKernel.from_calibration(
            cal, vm, lam)))
        got[lam] = json.loads(out)["rdk_exact"]["per_context"]
        assert_close(got[lam], want, err_msg=f"lam = {lam}")
    assert np.abs(np.subtract(got[None], got[0.3])).max() > 1e-3  # the option changes the kernel


@pytest.mark.parametrize("kernel", ["dense", "marginal"])
def test_sample_rdk_exact_uses_the_chosen_kernel(tmp_path, capsys, kernel):
    """Monte Carlo, per kernel: n = 60,000 steps of rdk_exact for context 2 with --kernel; the
    accepted count against Binomial(n, alpha) with that kernel's proposal (alpha differs from
    TLI's by more than 5 standard deviations here, so a sampler that ignored --kernel fails),
    and chi-square vs p; both at the suite's rate FALSE_ALARM_PER_TEST = 4e-6."""
    arrays = _write_case(tmp_path / "case.npz")
    code, out, err = _run(capsys, "sample", str(tmp_path / "case.npz"), "--sampler", "rdk_exact",
                          "--kernel", kernel, "--lam", "0.5", "--context", "2", "--n", "60000",
                          "--seed", "5", "--json")
    assert code == 0, err
    res = json.loads(out)
    p = arrays["target_probs"][2]
    vm = rt.VocabMap(12, arrays["draft_to_target"])
    ker = (rt.DenseKernel(arrays["kernel"]) if kernel == "dense" else
           rt.MarginalKernel.from_calibration(arrays["calibration_probs"], vm, 0.5))
    q = arrays["draft_probs"][2]
    alpha = float(rt.acceptance_rate(p, rt.rdk_proposal(q, vm, ker)))
    alpha_tli = float(rt.acceptance_rate(p, rt.tli_proposal(q, vm)))
    assert abs(alpha - alpha_tli) > 5 * np.sqrt(alpha * (1 - alpha) / 60000)
    assert_matches_law(np.array(res["counts"]), p, f"CLI rdk_exact --kernel {kernel}")
    assert_pvalue(binomial_pvalue(res["accepted"], 60000, alpha),
                  f"CLI rdk_exact --kernel {kernel}: accepted count")


def test_sample_tli_ignores_kernel_options(tmp_path, capsys):
    """vanilla and tli use no kernel: --kernel is ignored, even one whose arrays the case lacks
    (the same output, byte for byte, as without it)."""
    _write_case(tmp_path / "case.npz", calibration_probs=None, kernel=None)
    outs = []
    for extra in ((), ("--kernel", "marginal"), ("--kernel", "dense")):
        code, out, err = _run(capsys, "sample", str(tmp_path / "case.npz"), "--sampler", "tli",
                              *extra, "--context", "0", "--n", "500", "--seed", "1", "--json")
        assert code == 0, err
        outs.append(out)
    assert outs[0] == outs[1] == outs[2]


@pytest.mark.parametrize("argv, ignored", [
    (("acceptance", "--kernel", "identity", "--tau", "0.5", "--lam", "0.5"), ["--tau", "--lam"]),
    (("acceptance", "--kernel", "marginal", "--tau", "0.5", "--lam", "0.5"), ["--tau"]),
    (("acceptance", "--kernel", "covariance", "--tau", "0.5", "--lam", "0.5"), ["--lam"]),
    (("acceptance", "--kernel", "dense", "--tau", "0.5"), ["--tau"]),
    (("sample", "--sampler", "tli", "--kernel", "marginal", "--tau", "0.5"), ["--kernel", "--tau"]),
    (("sample", "--sampler", "tli", "--kernel", "marginal", "--lam", "0.5"), ["--kernel", "--lam"]),
    (("sample", "--sampler", "rdk_exact", "--kernel", "marginal", "--tau", "0.5", "--lam", "0.5"),
     ["--tau"]),
    (("sample", "--sampler", "rdk_first_order", "--tau", "0.5", "--lam", "0.5"), ["--lam"]),
    (("bounds", "--kernel", "identity", "--lam", "0.5"), ["--lam"]),
    (("bounds", "--kernel", "marginal", "--tau", "0.5", "--lam", "0.5"), ["--tau"]),
    (("acceptance", "--lam", "0"), ["--lam"]),  # a zero is given too: was not named
    (("bounds", "--kernel", "identity", "--lam", "0"), ["--lam"]),
    (("acceptance", "--kernel", "covariance", "--tau", "0.5"), []),
    (("sample", "--sampler", "rdk_exact", "--kernel", "marginal", "--lam", "0.5"), []),
])
def test_kernel_options_a_run_does_not_use_are_named_on_stderr(tmp_path, capsys, argv, ignored):
    """A --kernel, --tau or --lam that the run does not use draws one 'warning:' line each on
    stderr, and leaves stdout exactly as without it; options the run uses draw none."""
    _write_case(tmp_path / "case.npz")
    cmd, *rest = argv
    extra = ("--context", "0", "--n", "200", "--seed", "3") if cmd == "sample" else ()
    code, out, err = _run(capsys, cmd, str(tmp_path / "case.npz"), *rest, *extra, "--json")
    assert code == 0, err
    lines = err.strip().splitlines()
    assert [ln.split()[1] for ln in lines] == ignored, err
    assert all(ln.startswith("warning: ") and "is ignored with" in ln for ln in lines)
    kept = []  # the same run without the ignored options prints the same JSON
    it = iter(rest)
    for a in it:
        if a in ignored:
            next(it)
        else:
            kept.append(a)
    code, out_without, err_without = _run(capsys, cmd, str(tmp_path / "case.npz"), *kept, *extra,
                                          "--json")
    assert code == 0 and out_without == out and err_without == ""


def test_an_ignored_but_invalid_kernel_option_is_still_one_error_line(tmp_path, capsys):
    _write_case(tmp_path / "case.npz")
    code, out, err = _run(capsys, "acceptance", str(tmp_path / "case.npz"), "--tau", "-1")
    assert code == 2 and out == "" and err.strip().splitlines() == ["error: --tau must be a finite real number > 0, got -1.0"]


def _nan_target():
    p = np.random.default_rng(0).dirichlet(np.ones(12), size=3)
    p[1, 4] = np.nan
    return p


BAD = [
    ({"target_probs": "NAN"}, "non-finite"),
    ({"target_probs": np.full((3, 12), 1 / 12) * np.r_[-1, np.ones(11) * 13 / 11][None]}, "negative"),
    ({"draft_probs": np.full((3, 6), 0.2)}, "sum to 1"),
    ({"draft_probs": np.full((4, 6), 1 / 6)}, "context-count mismatch"),
    ({"draft_probs": np.full((3, 5), 0.2)}, "draft_to_target has 6 entries"),
    ({"draft_to_target": np.array([0, 3, 5, -1, 7, 12])}, "out of range"),
    ({"kernel": np.full((12, 12), 0.5)}, "not row-stochastic"),
    ({"target_probs": None}, "missing required array 'target_probs'"),
    # the value as given, not int64's wrap of it (and no numpy cast warning on stderr)
    ({"draft_to_target": np.array([0., 3., 5., -1., 7., 2e30])}, "draft_to_target[5] = 2e+30 is out"),
    # finite entries whose sum overflows: one error line, no numpy overflow warning
    ({"target_probs": np.array([[1e308, 1e308] + [0] * 10] * 3)}, "sums to inf"),
    ({"kernel": np.full((12, 12), 1e308)}, "row 0 sums to inf"),
    # widths before sums: a transposed calibration matrix, a draft_probs cut short
    ({"calibration_probs": np.full((20, 12), 1 / 12).T}, "calibration_probs must be (S, 12)"),
    ({"draft_probs": np.full((3, 4), 0.2)}, "draft_to_target has 6 entries but draft_probs has 4"),
    # float16 rows get float16's rounding (9.8e-4) as tolerance, not more: these miss by 1.2e-3
    ({"target_probs": (np.full((3, 12), 1 / 12) * 1.0012).astype(np.float16)}, "sum to 1"),
    # ids print whole, all digits (not 1e+06)
    ({"draft_to_target": np.array([0., 3., 5., -1., 7., 1000001.])}, "draft_to_target[5] = 1000001 is"),
]


@pytest.mark.parametrize("override, message", BAD)
def test_bad_input_exits_2_with_one_line_error(tmp_path, override, message):
    if override.get("target_probs") is not None and isinstance(override["target_probs"], str):
        override = {"target_probs": _nan_target()}
    _write_case(tmp_path / "case.npz", **override)
    proc = subprocess.run([sys.executable, "-m", "rdk_theory", "acceptance", str(tmp_path / "case.npz"),
                           "--kernel", "dense"], capture_output=True, text=True)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_file_context_range_and_missing_calibration(tmp_path, capsys):
    code, _, err = _run(capsys, "acceptance", str(tmp_path / "nope.npz"))
    assert code == 2 and "not found" in err
    _write_case(tmp_path / "c.npz", calibration_probs=None)
    code, _, err = _run(capsys, "acceptance", str(tmp_path / "c.npz"), "--kernel", "marginal")
    assert code == 2 and "calibration_probs" in err
    _write_case(tmp_path / "d.npz")
    code, _, err = _run(capsys, "sample", str(tmp_path / "d.npz"), "--sampler", "tli",
                        "--context", "3", "--n", "10", "--seed", "0")
    assert code == 2 and "--context 3 is out of range" in err


def test_report_synthetic_writes_json_and_figure_with_sane_order(tmp_path, capsys):
    code, out, err = _run(capsys, "report", "--source", "synthetic", "--quick",
                          "--keep", "1,0.25,0.05", "--out", str(tmp_path))
    assert code == 0, err
    rep = json.loads((tmp_path / "report.json").read_text())
    figure = tmp_path / "acceptance_vs_kept.png"
    if importlib.util.find_spec("matplotlib") is None:  # the figure needs the extra 'plot'
        assert not figure.exists() and "figure skipped: matplotlib is not installed" in err, err
    else:
        assert figure.stat().st_size > 10_000
    assert [r["keep_fraction"] for r in rep["rows"]] == [1.0, 0.25, 0.05]
    for r in rep["rows"]:
        assert r["tli"] >= r["vanilla"] - 1e-12  # O1
        assert r["tli"] <= r["oov_cap"] + 1e-12  # O2
        # E per context, so for the means: |alpha_exact - alpha_first_order| <= TV(exact, FO)
        assert 0 <= r["tv_exact_first_order"]
        assert abs(r["rdk_exact"] - r["rdk_first_order"]) <= r["tv_exact_first_order"] + 1e-12
    full = rep["rows"][0]
    assert full["oov_cap"] == pytest.approx(1.0) and full["marginal"] == pytest.approx(full["tli"])
    # pruning hurts TLI, and the rank-one kernel recovers part of the loss at 5 %
    assert rep["rows"][-1]["tli"] < full["tli"]
    assert rep["rows"][-1]["marginal"] > rep["rows"][-1]["tli"]
    assert "OOV cap" in out


def test_help_teaches(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["acceptance", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "example" in out and "draft_to_target" in out


@pytest.mark.parametrize("extra", [{"meta": np.array([1])}, {"source": np.array(["run 7"])},
                                   {"provenance": {"run": 7}}])  # pickled: never read
def test_arrays_outside_a_case_are_ignored_with_a_warning(tmp_path, capsys, extra):
    """A case file may carry other arrays (ids, provenance): every command reads the case as
    without them and names them in one stderr warning. 'source' was a traceback (it clashed
    with a keyword argument of the loader); a pickled one is skipped, never unpickled."""
    arrays = _write_case(tmp_path / "plain.npz")
    np.savez(tmp_path / "extra.npz", **arrays, **extra)
    for argv in (["acceptance", "--kernel", "covariance", "--json"],
                 ["sample", "--sampler", "rdk_first_order", "--context", "1", "--n", "500",
                  "--seed", "3", "--json"],
                 ["bounds", "--json"]):
        outs = []
        for name in ("plain.npz", "extra.npz"):
            code, out, err = _run(capsys, argv[0], str(tmp_path / name), *argv[1:])
            assert code == 0, err
            outs.append(out)
            if name == "extra.npz":
                assert err.splitlines() == [
                    f"warning: {tmp_path / name}: ignoring arrays {sorted(extra)} (a case holds "
                    "target_probs, draft_probs, draft_to_target, calibration_probs, kernel)"]
            else:
                assert err == ""
        assert outs[0] == outs[1]


@pytest.mark.parametrize("argv, problem", [
    (["acceptance", "--kernel", "dense"], "kernel"),
    (["sample", "--sampler", "tli", "--context", "5", "--n", "1", "--seed", "0"], "--context"),
    (["sample", "--sampler", "rdk_exact", "--kernel", "marginal", "--lam", "2", "--context", "0",
      "--n", "1", "--seed", "0"], "--lam"),
    (["bounds", "--kernel", "covariance", "--tau", "-1"], "--tau")])
def test_bad_input_in_a_file_with_extra_arrays_is_one_error_line(tmp_path, capsys, argv,
                                                                 problem):
    """The warning naming a file's extra arrays waits until the command line has been checked:
    bad input is still exactly one line on stderr, the error (the warning came first)."""
    arrays = _write_case(tmp_path / "plain.npz", kernel=None)
    np.savez(tmp_path / "extra.npz", **arrays, provenance=np.arange(3))
    code, out, err = _run(capsys, argv[0], str(tmp_path / "extra.npz"), *argv[1:])
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and problem in err, err


def test_float16_rows_within_their_rounding_are_read(tmp_path, capsys):
    """float16 rows of a real vocabulary miss 1 by their rounding (up to ~1e-3): the file's
    numpy path allows float16's machine epsilon, as the torch path does, and reads the rows
    renormalised (the same acceptance as the float64 rows they round)."""
    # seed 1's rows miss 1 by 2.1e-4 once rounded to float16
    half = np.random.default_rng(1).dirichlet(np.full(12, 0.5), size=3).astype(np.float16)
    assert np.abs(half.astype(np.float64).sum(-1) - 1).max() > rt.validation.PROB_ATOL
    _write_case(tmp_path / "c16.npz", target_probs=half)
    _write_case(tmp_path / "c16_64.npz", target_probs=half.astype(np.float64) /
                half.astype(np.float64).sum(-1, keepdims=True))
    code, out16, err = _run(capsys, "acceptance", str(tmp_path / "c16.npz"), "--json")
    assert code == 0, err
    code, out64, _ = _run(capsys, "acceptance", str(tmp_path / "c16_64.npz"), "--json")
    assert json.loads(out16) == json.loads(out64)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_a_kernel_within_its_tolerance_is_read_renormalised(tmp_path, capsys, dtype):
    """A case's kernel whose rows miss 1 within the stated tolerance (8e-7 in float64; 3.7e-4
    in float16, its rounding) gives exactly the numbers of the kernel renormalised: exact RDK's
    acceptance is not off by the rows' excess mass."""
    rng = np.random.default_rng(4)
    m = rng.dirichlet(np.ones(12), size=12)
    m = (m * (1 + rng.uniform(-8e-7, 8e-7, size=(12, 1))) if dtype == np.float64
         else (np.full((12, 12), 1 / 12) * 1.0004).astype(np.float16))
    stored = m.astype(np.float64)
    _write_case(tmp_path / "off.npz", kernel=m)
    _write_case(tmp_path / "fixed.npz", kernel=stored / stored.sum(axis=1, keepdims=True))
    code, off, err = _run(capsys, "acceptance", str(tmp_path / "off.npz"), "--kernel", "dense",
                          "--json")
    assert code == 0, err
    code, fixed, _ = _run(capsys, "acceptance", str(tmp_path / "fixed.npz"), "--kernel",
                          "dense", "--json")
    got, want = json.loads(off)["rdk_exact"], json.loads(fixed)["rdk_exact"]
    assert_close(np.array(got["per_context"]), np.array(want["per_context"]))


@pytest.mark.parametrize("dtype, excess", [(np.float64, 1.2e-6), (np.float16, 3e-3)])
def test_a_case_kernel_just_outside_its_tolerance_is_refused(tmp_path, capsys, dtype, excess):
    """The other side of the test above: rows off by just more than the tolerance (1e-6 in
    float64, float16's rounding 9.8e-4) are an error naming the kernel. A mutation pass
    loosened the case file's kernel tolerance 1000-fold and no test failed."""
    m = (np.eye(12) * (1 + excess)).astype(dtype)
    _write_case(tmp_path / "off.npz", kernel=m)
    code, out, err = _run(capsys, "acceptance", str(tmp_path / "off.npz"), "--kernel", "dense")
    assert code == 2 and out == "" and err.startswith("error: kernel ") and "row" in err, err


def test_a_case_file_that_cannot_be_read_is_named_as_such(tmp_path, capsys, monkeypatch):
    """A file without read permission is an OS error naming it, not 'not an .npz archive'
    (the zip test swallowed the error). Simulated: the tests may run as root, who reads all."""
    import builtins

    import rdk_theory.case as case_mod

    _write_case(tmp_path / "c.npz")

    def no_permission(path, *a, **k):
        if str(path).endswith("c.npz"):
            raise PermissionError(13, "Permission denied", str(path))
        return builtins.open(path, *a, **k)

    monkeypatch.setattr(case_mod, "open", no_permission, raising=False)
    code, out, err = _run(capsys, "acceptance", str(tmp_path / "c.npz"))
    assert code == 2 and out == ""
    assert err == f"error: cannot read {tmp_path / 'c.npz'}: Permission denied\n"


def test_report_refuses_a_bad_out_or_input_and_leaves_no_folder_behind(tmp_path, capsys):
    """--out is made before the sweep (a folder that cannot be made is an error then, not
    after the work), but a run refused afterwards removed nothing: bad --vocab or --keep left
    an empty --out; a path under a file said only 'Not a directory'."""
    (tmp_path / "afile").write_text("")
    for argv, match in (
            (["--vocab", "10", "--out", str(tmp_path / "o1" / "sub")], "--vocab must be"),
            (["--keep", "2", "--out", str(tmp_path / "o2")], "--keep"),
            (["--keep", "0,1", "--out", str(tmp_path / "o3")], "--keep"),  # a 0 was a table row
            # an empty item was skipped (validate's --kept refuses one)
            (["--keep", "0.5,,0.25", "--out", str(tmp_path / "o4")], "--keep has an empty item"),
            (["--keep", "0.5,", "--out", str(tmp_path / "o5")], "--keep has an empty item"),
            (["--out", str(tmp_path / "afile")], "exists and is not a directory"),
            (["--out", str(tmp_path / "afile" / "sub")], "lies under a file")):
        code, out, err = _run(capsys, "report", "--source", "synthetic", "--quick", *argv)
        assert code == 2 and err.startswith("error: --") and match in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_report_keeps_a_repeated_fraction_once(tmp_path, capsys):
    """--keep 0.5,0.25,0.5 printed the 0.5 row twice (validate's --kept keeps a repeat once)."""
    code, out, err = _run(capsys, "report", "--source", "synthetic", "--quick", "--vocab", "24",
                          "--keep", "0.5,0.25,0.5", "--out", str(tmp_path))
    assert code == 0, err
    rows = json.loads((tmp_path / "report.json").read_text())["rows"]
    assert [r["keep_fraction"] for r in rows] == [0.5, 0.25]


def test_report_keeps_one_row_per_kept_size_and_says_what_quick_caps(tmp_path, capsys):
    """At --vocab 24, 0.04 and 0.05 both keep 1 id and gave two equal rows; --quick with
    --vocab 5000 ran at N = 1024 without a word (a fuzzing pass). Each is now one warning."""
    code, out, err = _run(capsys, "report", "--source", "synthetic", "--quick", "--vocab", "24",
                          "--keep", "0.04,0.5,0.05", "--out", str(tmp_path))
    assert code == 0, err
    rows = json.loads((tmp_path / "report.json").read_text())["rows"]
    assert [(r["keep_fraction"], r["kept"]) for r in rows] == [(0.04, 1), (0.5, 12)]
    assert err == ("warning: --keep: 0.05 keeps 1 of 24 ids, as 0.04 does: one row for each "
                   "size\n")
    code, out, err = _run(capsys, "report", "--source", "synthetic", "--quick", "--vocab",
                          "1500", "--keep", "1", "--out", str(tmp_path / "q"))
    assert code == 0, err
    assert err == ("warning: --quick caps the synthetic vocabulary at 1024: --vocab 1500 is "
                   "not used\n")
    assert json.loads((tmp_path / "q" / "report.json").read_text())["rows"][0]["kept"] == 1024


def test_report_removes_the_folders_it_made_when_the_run_fails(tmp_path, capsys, monkeypatch):
    import rdk_theory.report as report

    def fail(*args, **kwargs):
        raise rt.InputError("the sweep failed")

    monkeypatch.setattr(report, "synthetic_report", fail)
    (tmp_path / "kept").mkdir()
    code, _, err = _run(capsys, "report", "--source", "synthetic", "--quick",
                        "--out", str(tmp_path / "kept" / "a" / "b"))
    assert code == 2 and "the sweep failed" in err
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and not any((tmp_path / "kept").iterdir())


def test_every_option_of_every_command_states_its_default():
    """``--help`` teaches: every option that takes a value says its default, in every command
    and sub-command (the simulators' and validate's help left out about a dozen)."""
    import argparse

    from rdk_theory.cli import build_parser

    def undocumented(parser, path):
        for act in parser._actions:
            if isinstance(act, argparse._SubParsersAction):
                for name, sub in act.choices.items():
                    yield from undocumented(sub, f"{path} {name}")
            elif (act.option_strings and act.nargs != 0
                  and act.default not in (None, argparse.SUPPRESS)
                  and "default" not in (act.help or "").lower()):
                yield f"{path} {'/'.join(act.option_strings)}"

    assert list(undocumented(build_parser(), "rdk-theory")) == []


def test_lam_says_when_the_marginal_kernel_is_the_identity_whatever_its_weight(tmp_path, capsys):
    """No calibration mass outside I: the marginal kernel is the identity and --lam changes
    nothing; each command that builds it says so once (it was silent), and the numbers are
    those without --lam."""
    cal = np.random.default_rng(1).dirichlet(np.ones(12), size=20)
    oov = [1, 4, 6, 8, 9, 10, 11]  # the target ids draft_to_target never reaches
    cal[:, oov] = 0
    cal /= cal.sum(-1, keepdims=True)
    _write_case(tmp_path / "case.npz", calibration_probs=cal)
    case = str(tmp_path / "case.npz")
    want = "warning: --lam 0.5 has no effect: the marginal kernel is the identity on this case"
    for argv in (["acceptance", case, "--kernel", "marginal"],
                 ["bounds", case, "--kernel", "marginal"],
                 ["sample", case, "--sampler", "rdk_exact", "--kernel", "marginal", "--context",
                  "0", "--n", "50", "--seed", "0"]):
        code, out, err = _run(capsys, *argv, "--lam", "0.5", "--json")
        assert code == 0 and err.strip().splitlines() == [want + " (no calibration mass outside "
                                                          "I), so exact RDK equals TLI"], err
        assert (code, out, "") == _run(capsys, *argv, "--json")
    code, _, err = _run(capsys, "acceptance", case, "--kernel", "marginal", "--lam", "0", "--json")
    assert code == 0 and err == ""  # lam = 0 asks for the identity: nothing to say
    # no target id outside I at all: said so, not "no calibration mass" (a separate case)
    _write_case(tmp_path / "full.npz", draft_probs=np.full((3, 12), 1 / 12),
                draft_to_target=np.arange(12))
    code, _, err = _run(capsys, "acceptance", str(tmp_path / "full.npz"), "--kernel",
                        "marginal", "--lam", "0.5", "--json")
    assert code == 0 and err.strip().splitlines() == [want + " (the drafter reaches every "
                                                      "target id), so exact RDK equals TLI"], err
    _write_case(tmp_path / "mass.npz")
    code, _, err = _run(capsys, "acceptance", str(tmp_path / "mass.npz"), "--kernel", "marginal",
                        "--lam", "0.5", "--json")
    assert code == 0 and err == ""


@pytest.mark.parametrize("option, value, want", [
    ("--tau", "-1e-3", "error: --tau must be a finite real number > 0, got -0.001"),
    ("--tau", "-.5", "error: --tau must be a finite real number > 0, got -0.5"),
    ("--lam", "-inf", "error: --lam must be in [0, 1], got -inf"),
    ("--lam", "-1E-300", "error: --lam must be in [0, 1], got -1e-300"),
])
def test_negative_numbers_in_float_notation_are_values(tmp_path, capsys, option, value, want):
    """argparse's own pattern reads only -1 and -0.5 as numbers: these were 'argument --tau:
    expected one argument'."""
    _write_case(tmp_path / "case.npz")
    code, out, err = _run(capsys, "acceptance", str(tmp_path / "case.npz"), "--kernel",
                          "marginal" if option == "--lam" else "covariance", option, value)
    assert (code, out, err.strip().splitlines()) == (2, "", [want])


def test_default_tau_is_the_largest_token_variance_across_contexts():
    """The default tau is max_i Omega_ii, a token's variance across the calibration rows
    (axis 0), not a row's variance."""
    from rdk_theory.case import default_tau

    cal = np.array([[0.5, 0.5, 0.0], [0.5, 0.0, 0.5]])
    assert default_tau(cal) == 0.0625  # exact in binary: tokens 1 and 2: variance 1/16


def test_a_subnormal_variance_gives_a_default_tau_both_covariance_kernels_take(tmp_path, capsys):
    """A calibration entry of 1e-155 gives max_i Omega_ii = 2.5e-311, a subnormal whose
    reciprocal overflows: the first-order kernel refused the default tau ('choose a larger
    tau') on a valid case where the user passed none. The default is now at least float64's
    smallest normal number, which keeps |B_ij| <= 1."""
    from rdk_theory.case import MIN_DEFAULT_TAU, default_tau

    cal = np.array([[0.5, 0.5, 1e-155], [0.5, 0.5, 0.0]])
    assert 0 < (cal[0, 2] / 2) ** 2 < MIN_DEFAULT_TAU == default_tau(cal)
    _write_case(tmp_path / "case.npz", target_probs=np.array([[0.5, 0.5, 0.0]]),
                draft_probs=np.array([[0.6, 0.4]]), draft_to_target=np.array([0, 1]),
                calibration_probs=cal, kernel=None)
    code, out, err = _run(capsys, "acceptance", str(tmp_path / "case.npz"), "--kernel",
                          "covariance", "--json")
    assert code == 0, err
    res = json.loads(out)
    # Omega / tau is 0 but for token 2's 0.0011: every softmax row is nearly uniform, so both
    # RDK proposals are nearly uniform and accept about 2/3 (p puts nothing on token 2)
    assert_close(res["tli"]["mean"], 0.9, rtol=0)
    for sampler in ("rdk_exact", "rdk_first_order"):
        assert res[sampler]["mean"] == pytest.approx(2 / 3, abs=1e-3)


def test_equal_calibration_rows_give_the_uniform_kernel_of_zero_covariance(tmp_path, capsys):
    """Three copies of one row: Omega = 0, so the default tau is 1 and both covariance kernels
    are uniform (every affinity equal), and a uniform target accepts every uniform proposal.
    Centred as ``P_c - mean(P_c)`` the ulps of the mean made Omega 1.9e-34 and tau that
    round-off: exact RDK came out 0.77 and first-order RDK 0.87 from a proposal summing to
    1.37, which ``sample`` then refused."""
    from rdk_theory.case import default_tau

    cal = np.tile([0.1, 0.9], (3, 1))
    assert not np.any(rt.calibration_covariance(cal)) and default_tau(cal) == 1.0
    _write_case(tmp_path / "case.npz", target_probs=np.full((1, 2), 0.5),
                draft_probs=np.ones((1, 1)), draft_to_target=np.array([0]),
                calibration_probs=cal, kernel=None)
    code, out, err = _run(capsys, "acceptance", str(tmp_path / "case.npz"), "--kernel",
                          "covariance", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert (res["tli"]["mean"], res["rdk_exact"]["mean"], res["rdk_first_order"]["mean"]) == (
        0.5, 1.0, 1.0)
    code, out, err = _run(capsys, "sample", str(tmp_path / "case.npz"), "--sampler",
                          "rdk_first_order", "--context", "0", "--n", "10", "--seed", "0",
                          "--json")
    assert code == 0 and json.loads(out)["accepted"] == 10, err


def test_synthetic_report_tunes_on_held_out_rows_and_evaluates_on_the_others():
    """The report's numbers recomputed from their definitions: K = round(f N), tau picked by
    the best mean acceptance on the tuning rows, TLI, first-order RDK (at that tau) and the
    OOV cap evaluated on the other rows. Tuning and evaluating on the same rows, the worst
    tau, first-order RDK at another tau and K = floor(f N) all went unseen. A mutation pass
    found that with seed 5 the tuning and evaluation rows pick the same tau, so tuning on the
    evaluation rows passed too: seed 10 separates them, and the test checks that it does."""
    from rdk_theory.acceptance import acceptance_rate, oov_cap
    from rdk_theory.case import default_tau
    from rdk_theory.first_order import FirstOrderCovarianceKernel
    from rdk_theory.kernels import covariance_softmax_kernel
    from rdk_theory.proposals import build_proposals
    from rdk_theory.report import TAU_MULTIPLIERS, capped_mean, synthetic_report
    from rdk_theory.synthetic import zipfian_lm
    from rdk_theory.vocab import VocabMap, keep_most_frequent, pruned_draft_probs

    n, ctx, cal_n, frac, seed = 48, 6, 24, 0.31, 10  # K = round(14.88) = 15, not floor 14
    rep = synthetic_report(n=n, contexts=ctx, calibration=cal_n, keep=[frac], seed=seed,
                           show_progress=False)
    (row,) = rep["rows"]
    lm = zipfian_lm(np.random.default_rng(seed), n, contexts=2 * ctx, calibration=cal_n)
    cal, p = lm.calibration_probs, lm.target_probs
    vm = VocabMap.from_kept_ids(keep_most_frequent(cal.mean(axis=0), 15), n)
    tli = build_proposals(pruned_draft_probs(lm.draft_probs, vm), vm, check=False)["tli"]
    taus = [default_tau(cal) * m for m in TAU_MULTIPLIERS]

    def best_tau(rows):
        return taus[int(np.argmax([acceptance_rate(
            p[rows], covariance_softmax_kernel(cal, t).transport(tli[rows]), check=False).mean()
            for t in taus]))]

    tune, evaluate = slice(0, ctx), slice(ctx, 2 * ctx)
    best = best_tau(tune)
    assert best != best_tau(evaluate)  # the seed separates tuning from evaluating
    assert row["kept"] == 15 and row["tau"] == best
    assert_close(row["tli"], acceptance_rate(p[evaluate], tli[evaluate], check=False).mean())
    fo = FirstOrderCovarianceKernel(cal, best).transport(tli[evaluate])
    assert_close(row["rdk_first_order"], acceptance_rate(p[evaluate], fo, check=False).mean())
    cap = capped_mean(oov_cap(p[evaluate], vm))
    assert_close(row["oov_cap"], cap)
    assert abs(cap - capped_mean(oov_cap(p, vm))) > FLOAT64_ATOL  # all rows: another cap


def test_format_table_puts_each_number_under_its_own_header():
    """Mutation pass: the table's column order (TLI printed under 'OOV cap') was caught only
    by the README's copy of the table."""
    from rdk_theory.report import format_table

    rep = {"rows": [{"kept": 7, "keep_fraction": 0.5, "oov_cap": 0.9, "vanilla": 0.1,
                     "tli": 0.2, "rdk_exact": 0.3, "rdk_first_order": 0.4, "marginal": 0.5}]}
    lines = format_table(rep).splitlines()
    got = dict(zip(lines[0].replace("OOV cap", "OOV_cap").split(), lines[2].split()))
    assert got == {"kept": "7", "fraction": "0.500", "OOV_cap": "0.9000", "vanilla": "0.1000",
                   "tli": "0.2000", "rdk_exact": "0.3000", "rdk_first_order": "0.4000",
                   "marginal": "0.5000"}


def test_capped_mean_never_exceeds_one():
    """A keep-all drafter's mean OOV cap is 1 + round-off; the report caps it at 1."""
    from rdk_theory.report import capped_mean

    assert capped_mean([1 + 6e-15, 1.0]) == 1.0 and capped_mean([0.5, 0.75]) == 0.625


@pytest.mark.parametrize("option, value, want", [
    ("--tau", "-1e+3", "error: --tau must be a finite real number > 0, got -1000.0"),
    ("--tau", "-2E+0", "error: --tau must be a finite real number > 0, got -2.0"),
    ("--lam", "-Infinity", "error: --lam must be in [0, 1], got -inf"),
    ("--lam", "-infinity", "error: --lam must be in [0, 1], got -inf"),
])
def test_negative_numbers_with_explicit_exponent_sign_or_spelled_infinity_are_values(
        tmp_path, capsys, option, value, want):
    """The pattern takes e+N exponents and the spelling 'infinity' that float() reads; they were
    'argument --tau: expected one argument' otherwise."""
    _write_case(tmp_path / "case.npz")
    code, out, err = _run(capsys, "acceptance", str(tmp_path / "case.npz"), "--kernel",
                          "marginal" if option == "--lam" else "covariance", option, value)
    assert (code, out, err.strip().splitlines()) == (2, "", [want])


def _usage_error(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_a_usage_error_is_one_line_naming_the_help_of_its_command(tmp_path, capsys):
    code, out, err = _usage_error(capsys, ["acceptance", str(tmp_path / "c.npz"), "--kernel",
                                           "nope"])
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("error: rdk-theory acceptance: argument --kernel: invalid choice: "
                          "'nope'")
    assert err.endswith(" (see 'rdk-theory acceptance --help')\n")


@pytest.mark.parametrize("argv", [
    ["acceptance", "CASE", "--ker", "dense"],
    ["sample", "CASE", "--sampler", "tli", "--context", "0", "--n", "5", "--seed", "0",
     "--js", "x"],
    ["simulate", "speedup", "--alp", "0.6"],
])
def test_an_abbreviated_option_is_a_usage_error(tmp_path, capsys, argv):
    """argparse took --ker for --kernel: other tools depending on this CLI would break, or
    silently change meaning, the day an option sharing the prefix is added (a fuzzing pass)."""
    argv = [str(tmp_path / "c.npz") if a == "CASE" else a for a in argv]
    code, out, err = _usage_error(capsys, argv)
    assert code == 2 and out == "" and "unrecognized arguments: " + argv[-2] in err


def test_the_parser_keeps_argparses_own_parsing_of_unknown_arguments():
    """Sub-commands name their own unknown arguments through their action, not by changing
    parse_known_args: a second reading found that an override of it broke argparse's
    parse_intermixed_args (positionals came back as 'unrecognized')."""
    from rdk_theory.cli import _Parser

    p = _Parser(prog="x")
    p.add_argument("files", nargs="*")
    p.add_argument("--flag", action="store_true")
    assert vars(p.parse_intermixed_args(["a", "--flag", "b"])) == {"files": ["a", "b"],
                                                                   "flag": True}
    assert p.parse_known_args(["a", "--other"])[1] == ["--other"]


@pytest.mark.parametrize("extra, shown", [("extra\narg", "extra\\narg"),
                                          ("extra\rarg", "extra\\rarg")])
def test_a_usage_error_quoting_a_line_break_stays_one_line(tmp_path, capsys, extra, shown):
    """argparse quotes unrecognized arguments as given: a line break in one is written as
    '\\n' (or '\\r'), so that stderr is still the one line of the contract. The sub-command
    that did not know the argument is named, with its --help (the top-level parser named
    'rdk-theory' and its own --help)."""
    code, out, err = _usage_error(capsys, ["acceptance", str(tmp_path / "c.npz"), extra])
    assert (code, out) == (2, "")
    assert err == (f"error: rdk-theory acceptance: unrecognized arguments: {shown} (see "
                   "'rdk-theory acceptance --help')\n")


def test_a_carriage_return_in_a_file_name_is_written_escaped(tmp_path, capsys):
    code, out, err = _run(capsys, "acceptance", str(tmp_path / "no\rsuch.npz"))
    assert (code, out) == (2, "")
    assert err == f"error: case file not found: {tmp_path}/no\\rsuch.npz\n"


def test_no_command_names_every_command_in_help_order(capsys):
    """The core's commands in their own order, then the plugins' by entry-point name."""
    assert _run(capsys) == (2, "", "error: rdk-theory: a COMMAND is required, one of: "
                                   "acceptance, sample, report, bounds, models, prove, simulate, "
                                   "validate (see 'rdk-theory --help')\n")


class _BrokenEntryPoint:
    def __init__(self, name):
        self.name = name

    def load(self):  # an ImportError that is not a ModuleNotFoundError
        raise ImportError("cannot import name 'gone' from 'somewhere'")


@pytest.mark.parametrize("name", ["aaa", "zzz"])  # loaded first, or last (by name)
def test_a_plugin_command_that_cannot_be_imported_is_a_warning_and_the_rest_work(
        tmp_path, capsys, monkeypatch, name):
    """A plugin whose optional dependencies are missing: one warning line naming it, and every
    other command (the core's and the other plugins') still there and working."""
    real = cli.entry_points
    monkeypatch.setattr(cli, "entry_points",
                        lambda group: [*real(group=group), _BrokenEntryPoint(name)])
    _write_case(tmp_path / "case.npz")
    want = [f"warning: command '{name}' unavailable: cannot import name 'gone' from 'somewhere'"]
    for argv in (["acceptance", str(tmp_path / "case.npz"), "--json"],
                 ["bounds", str(tmp_path / "case.npz"), "--json"]):
        code, out, err = _run(capsys, *argv)
        assert code == 0 and out.startswith("{") and err.splitlines() == want, err


def test_an_unavailable_real_report_source_is_one_warning_line(monkeypatch, capsys):
    """A real source whose import fails is a source that raises SourceUnavailable with the
    import's error (its message may span lines: report prints it as one line, a warning under
    auto and the error under real; tests/test_optional_extras.py runs both)."""
    import rdk_theory.report as report_mod

    class BrokenSource:
        name = "real"

        def load(self):
            raise ImportError("no module named 'torch'\nsecond line")

    monkeypatch.setattr(report_mod, "entry_points", lambda group: [BrokenSource()])
    with pytest.raises(report_mod.SourceUnavailable) as err:
        report_mod._real_source()(None)
    assert str(err.value) == ("the 'real' report source could not be loaded: "
                              "ImportError: no module named 'torch'\nsecond line")
    assert capsys.readouterr().err == ""  # report prints it as one line (auto: warning, real: error)


def test_sample_table_shows_the_runs_counts_and_the_exact_alpha_of_the_sampler(tmp_path, capsys):
    """The text form of ``sample`` (only --json was run): a header, 'accepted A / n' with the
    exact alpha of the chosen sampler, then token / count / freq / p rows, most drawn first,
    with the very numbers the --json form of the same seed gives. The case: p = (1/4, 3/4), the
    drafter's two tokens are target 1 and an OOV one, so TLI's r = (0, 1) (alpha 3/4; vanilla's
    would be 1/2): every accepted draft is token 1 and every rejection emits token 0."""
    np.savez(tmp_path / "c.npz", target_probs=np.array([[0.25, 0.75]]),
             draft_probs=np.array([[0.5, 0.5]]), draft_to_target=np.array([1, -1]))
    argv = ("sample", str(tmp_path / "c.npz"), "--sampler", "tli", "--context", "0",
            "--n", "1000", "--seed", "0")
    code, out, err = _run(capsys, *argv, "--json")
    assert code == 0, err
    res = json.loads(out)
    c0, c1 = res["counts"]
    assert res["accepted"] == c1 and c0 + c1 == 1000 and c1 > c0  # so token 1 is listed first
    code, out, err = _run(capsys, *argv)
    assert code == 0 and err == ""
    assert out.splitlines() == [
        "sampler tli, context 0, 1000 steps, seed 0",
        f"accepted {c1} / 1000 = {c1 / 1000:.4f} (exact alpha 0.7500)",
        f"{'token':>8}{'count':>10}{'freq':>10}{'p':>10}",
        f"{1:>8}{c1:>10}{c1 / 1000:>10.4f}{0.75:>10.4f}",
        f"{0:>8}{c0:>10}{c0 / 1000:>10.4f}{0.25:>10.4f}",
    ]


@pytest.mark.parametrize("kernel", [np.eye(3), np.full((12, 13), 1 / 13)])
@pytest.mark.parametrize("extra", [(), ("--kernel", "dense")])
def test_a_case_kernel_of_the_wrong_shape_is_named_with_both_shapes(tmp_path, capsys, kernel,
                                                                      extra):
    """A case's kernel must be (N_T, N_T): one of another shape (even a row-stochastic one)
    is one error line naming the shape wanted and the shape given, whether or not the run
    uses the kernel, and before any table is printed."""
    _write_case(tmp_path / "case.npz", kernel=kernel)
    code, out, err = _run(capsys, "acceptance", str(tmp_path / "case.npz"), *extra)
    assert code == 2 and out == ""
    assert err == f"error: kernel must be (12, 12), got {kernel.shape}\n"


def test_synthetic_report_tv_is_between_the_exact_and_first_order_proposals():
    """tv_exact_first_order is the mean TV between the exact covariance kernel's and the
    first-order kernel's proposals, both at the picked tau, on the evaluation rows (the TV
    to TLI in its place went unseen: no test read the column)."""
    from rdk_theory.acceptance import total_variation
    from rdk_theory.first_order import FirstOrderCovarianceKernel
    from rdk_theory.kernels import covariance_softmax_kernel
    from rdk_theory.proposals import build_proposals
    from rdk_theory.report import synthetic_report
    from rdk_theory.synthetic import zipfian_lm
    from rdk_theory.vocab import VocabMap, keep_most_frequent, pruned_draft_probs

    n, ctx, cal_n = 48, 6, 24
    (row,) = synthetic_report(n=n, contexts=ctx, calibration=cal_n, keep=[0.5], seed=5,
                              show_progress=False)["rows"]
    lm = zipfian_lm(np.random.default_rng(5), n, contexts=2 * ctx, calibration=cal_n)
    cal = lm.calibration_probs
    vm = VocabMap.from_kept_ids(keep_most_frequent(cal.mean(axis=0), 24), n)
    tli = build_proposals(pruned_draft_probs(lm.draft_probs, vm), vm, check=False)["tli"][ctx:]
    exact = covariance_softmax_kernel(cal, row["tau"]).transport(tli)
    approx = FirstOrderCovarianceKernel(cal, row["tau"]).transport(tli)
    want = np.mean(total_variation(exact, approx, check=False))
    assert_close(row["tv_exact_first_order"], want)
    assert abs(want - np.mean(total_variation(exact, tli, check=False))) > 1e-6


def test_synthetic_report_keeps_the_first_tau_among_equal_scores(monkeypatch):
    """Equal tuning acceptances (here every tau's kernel is the identity) keep the first
    multiplier's tau, as the study's pick_tau does (with ``>=`` the last tied tau won)."""
    import rdk_theory.report as report
    from rdk_theory import IdentityKernel
    from rdk_theory.case import default_tau
    from rdk_theory.synthetic import zipfian_lm

    monkeypatch.setattr(report, "covariance_softmax_kernel", lambda cal, t: IdentityKernel())
    (row,) = report.synthetic_report(n=48, contexts=4, calibration=16, keep=[0.5], seed=5,
                                     show_progress=False)["rows"]
    cal = zipfian_lm(np.random.default_rng(5), 48, contexts=8, calibration=16).calibration_probs
    assert row["tau"] == default_tau(cal) * report.TAU_MULTIPLIERS[0]


def test_report_refuses_a_vocab_whose_two_dense_kernels_exceed_the_limit():
    """The synthetic report holds two N x N float64 matrices at once, so --vocab is refused
    once 2 * 8 N^2 bytes exceed DENSE_KERNEL_MAX_BYTES (4 GiB: N = 16384 is the largest);
    a bound on one matrix let N up to 23170 through, to run out of memory later."""
    import argparse

    from rdk_theory.report import _synthetic_vocab
    from rdk_theory.validation import InputError

    ok = argparse.Namespace(vocab=16384, quick=False)
    assert _synthetic_vocab(ok) == 16384
    with pytest.raises(InputError, match=r"--vocab 16385 is too large for the exact dense "
                                         r"covariance kernel \(two N x N float64 matrices "
                                         r"must fit in 4 GiB\)"):
        _synthetic_vocab(argparse.Namespace(vocab=16385, quick=False))
    assert _synthetic_vocab(argparse.Namespace(vocab=20000, quick=True)) == 1024


def test_a_target_with_more_contexts_than_the_drafter_is_a_mismatch(tmp_path, capsys):
    """More target rows than draft rows is the same context-count error as fewer (only a
    drafter with the extra rows was tried)."""
    _write_case(tmp_path / "case.npz",
                target_probs=np.random.default_rng(1).dirichlet(np.ones(12), size=4))
    code, out, err = _run(capsys, "acceptance", str(tmp_path / "case.npz"))
    assert (code, out, err) == (2, "", "error: context-count mismatch: target_probs has 4 "
                                       "rows, draft_probs has 3\n")


def test_sample_rdk_exact_with_the_covariance_kernel_reads_tau(tmp_path, capsys):
    """``sample --sampler rdk_exact --kernel covariance`` builds the covariance kernel at
    --tau: no 'ignored' warning for it (one was printed while tau was in use)."""
    _write_case(tmp_path / "case.npz")
    base = ("sample", str(tmp_path / "case.npz"), "--sampler", "rdk_exact", "--kernel",
            "covariance", "--context", "0", "--n", "10", "--seed", "0", "--json")
    code, out, err = _run(capsys, *base, "--tau", "0.5")
    assert code == 0 and err == "", err
    from rdk_theory.case import kernel_options_used

    assert kernel_options_used("covariance", need_exact=True, need_first_order=False) == {
        "--kernel": True, "--tau": True, "--lam": False}


def test_marginal_is_identity_is_false_without_calibration_rows(tmp_path):
    """Without calibration rows there is no marginal kernel to be the identity: False, as
    documented (True would claim --lam has no effect on a case that cannot build it)."""
    from rdk_theory.case import case_from_arrays, marginal_is_identity

    arrays = _write_case(tmp_path / "case.npz", calibration_probs=None)
    assert "calibration_probs" not in arrays
    assert marginal_is_identity(case_from_arrays(**arrays)) is False


def test_sample_json_is_the_samplers_draws_from_the_seed_given(tmp_path, capsys):
    """``sample --seed s --json`` is sample_counts of the context's p and proposal with
    default_rng(s) itself, so a run can be reproduced from its seed (another stream, e.g.
    seed + 1, went unseen: the tests checked the counts' law, not the draws)."""
    from rdk_theory.case import load_case
    from rdk_theory.proposals import build_proposals
    from rdk_theory.sampling import sample_counts

    _write_case(tmp_path / "case.npz")
    code, out, err = _run(capsys, "sample", str(tmp_path / "case.npz"), "--sampler", "tli",
                          "--context", "1", "--n", "200", "--seed", "7", "--json")
    assert code == 0, err
    case = load_case(str(tmp_path / "case.npz"))
    r = build_proposals(case.draft_probs[1:2], case.vocab_map, check=False)["tli"][0]
    counts, accepted = sample_counts(case.target_probs[1], r, 200, np.random.default_rng(7))
    assert json.loads(out) == {"counts": [int(c) for c in counts], "accepted": accepted,
                               "n": 200}
