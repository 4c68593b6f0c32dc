"""Regressions found in review: round-off at the boundary, overflow, aliasing, CLI edge cases."""
import json
import os
import warnings

import numpy as np
import pytest

import rdk_theory as rt
import rdk_theory.case as case_mod
from rdk_theory.cli import main
from tests.stats import assert_matches_law
from tests.tolerances import assert_close, assert_leq


def test_sampler_survives_float_sums_within_tolerance_and_keeps_the_law():
    """Monte Carlo: n = 100,000 steps with r = p summing to 1 - 5e-5; chi-square vs p/sum(p)."""
    p = np.array([0.5, 0.49995, 0.0])
    tokens, accepted = rt.sample_steps(p, p.copy(), 100_000, np.random.default_rng(0))
    assert_matches_law(rt.emitted_counts(tokens, 3), p / p.sum(), "r = p, sum 1 - 5e-5")
    # a proposal summing to 1 + 5e-5 is rescaled once and used for draw, ratio and residual
    q = np.array([0.30005, 0.7, 0.0])
    target = np.array([0.2, 0.3, 0.5])
    tokens, _ = rt.sample_steps(target, q, 100_000, np.random.default_rng(1))
    assert_matches_law(rt.emitted_counts(tokens, 3), target, "sum r = 1 + 5e-5")


def test_subnormal_intersection_mass_does_not_overflow():
    vm = rt.VocabMap(3, np.array([0, 1, -1]))
    r = rt.tli_proposal(np.array([3e-309, 0.0, 1 - 3e-309]), vm)
    assert np.all(np.isfinite(r)) and r[0] == 1.0


def test_first_order_sums_to_one_for_calibration_rows_off_by_tolerance():
    rng = np.random.default_rng(2)
    cal = rng.dirichlet(np.ones(4), size=3) * (1 + 9.9e-5 * np.array([[1], [-1], [1]]))
    fo = rt.FirstOrderCovarianceKernel(cal, 0.1 * rt.case.default_tau(cal))
    r = fo.transport(np.eye(4)[:3])
    assert_leq(r.sum(-1), 1.0)
    assert_close(r.sum(-1), 1.0)
    with pytest.raises(rt.InputError, match="does not sum to 0"):
        rt.FirstOrderCovarianceKernel.from_factor(rng.random((3, 6)), 1.0)


def test_kernel_size_mismatch_is_reported():
    vm = rt.VocabMap(4, [0, 1, 2])
    q = np.array([0.2, 0.3, 0.5])
    with pytest.raises(rt.InputError, match="kernel is over 5 tokens"):
        rt.build_proposals(q, vm, kernel=rt.DenseKernel(np.eye(5)))
    with pytest.raises(rt.InputError, match="kernel is over 1 tokens"):
        rt.build_proposals(q, vm, kernel=rt.MarginalKernel(np.array([1.0]), 0.5))


def test_marginal_kernel_keeps_a_private_copy_of_w():
    w = np.array([0.5, 0.5])
    mk = rt.MarginalKernel(w, 1.0)
    w[:] = 5
    assert_close(mk.transport(np.array([1.0, 0.0])), [0.5, 0.5])


def test_vocab_map_rejects_wrapping_and_fractional_sizes():
    with pytest.raises(rt.InputError, match="out of range"):
        rt.VocabMap(4, np.array([0, 1, 2**64 - 1], dtype=np.uint64))
    with pytest.raises(rt.InputError, match="integer"):
        rt.VocabMap(4.9, [0, 1, 2, 3])


def test_overflowing_tau_is_an_input_error():
    cal = np.random.default_rng(0).dirichlet(np.ones(5), size=4)
    with pytest.raises(rt.InputError, match="overflows"):
        rt.covariance_softmax_kernel(cal, 1e-320)


def _case(path, n_t=12, c=2):
    rng = np.random.default_rng(0)
    np.savez(path, target_probs=rng.dirichlet(np.ones(n_t), size=c),
             draft_probs=rng.dirichlet(np.ones(n_t), size=c), draft_to_target=np.arange(n_t),
             calibration_probs=rng.dirichlet(np.ones(n_t), size=10))


def test_kernels_for_names_a_tau_or_lam_that_is_not_a_number(tmp_path):
    """Strings, bools and arrays were raw TypeErrors (or, for lam=True, taken as 1)."""
    from fractions import Fraction

    _case(tmp_path / "c.npz")
    case = case_mod.load_case(tmp_path / "c.npz")
    for tau in ("1", True, np.array([0.1, 0.2]), float("inf"), 0.0):
        with pytest.raises(rt.InputError, match="--tau must be a finite real number > 0"):
            case_mod.kernels_for(case, "covariance", tau=tau)
    for lam in ("0.5", True, 1.5):
        with pytest.raises(rt.InputError, match=r"--lam must be in \[0, 1\]"):
            case_mod.kernels_for(case, "marginal", lam=lam)
    pruned = case_mod.case_from_arrays(
        target_probs=case.target_probs, draft_probs=case.draft_probs[:, :6] / case.draft_probs[:, :6].sum(-1, keepdims=True),
        draft_to_target=np.arange(6), calibration_probs=case.calibration_probs)
    a, _ = case_mod.kernels_for(pruned, "marginal", lam=Fraction(1, 4))
    b, _ = case_mod.kernels_for(pruned, "marginal", lam=0.25)
    assert a.lam == b.lam == 0.25 and np.array_equal(a.w, b.w)
    _, fo = case_mod.kernels_for(case, "identity", tau=np.float32(0.5), need_first_order=True)
    assert fo.tau == 0.5


def test_cli_exact_covariance_kernel_is_never_formed_and_gives_the_dense_numbers(tmp_path, capsys):
    """The CLI applies the exact covariance kernel a block of rows at a time (no N x N matrix,
    whatever N_T): every key of the contract is there, with the dense kernel's numbers."""
    _case(tmp_path / "c.npz")
    case = case_mod.load_case(tmp_path / "c.npz")
    kernel, _ = case_mod.kernels_for(case, "covariance")
    assert isinstance(kernel, rt.CovarianceSoftmaxKernel)
    assert main(["acceptance", str(tmp_path / "c.npz"), "--kernel", "covariance", "--json"]) == 0
    out, err = capsys.readouterr()
    got = json.loads(out)
    assert set(got) == {"vanilla", "tli", "rdk_exact", "rdk_first_order"} and err == ""
    tau = case_mod.default_tau(case.calibration_probs)
    dense = rt.covariance_softmax_kernel(case.calibration_probs, tau)
    want = rt.acceptance_rate(case.target_probs,
                              rt.rdk_proposal(case.draft_probs, case.vocab_map, dense))
    assert_close(got["rdk_exact"]["per_context"], want, err_msg="blockwise vs dense")
    assert main(["sample", str(tmp_path / "c.npz"), "--sampler", "rdk_exact", "--kernel",
                 "covariance", "--context", "0", "--n", "10", "--seed", "0", "--json"]) == 0


@pytest.mark.parametrize("block_bytes", [8 * 7, 8 * 7 * 3, 2**20])
def test_blockwise_covariance_kernel_equals_the_dense_one(block_bytes):
    """M^T q' from row blocks (1, 3 or all 7 rows at a time) equals the dense kernel's, for a
    batch whose supports differ (column 2 is zero everywhere: its row is never formed)."""
    rng = np.random.default_rng(3)
    cal = rng.dirichlet(np.full(7, 0.3), size=12)
    tau = 0.01
    q = rng.dirichlet(np.ones(7), size=(2, 3))
    q[..., 2] = 0.0
    q[0, 0, 4] = 0.0
    q /= q.sum(-1, keepdims=True)
    dense = rt.covariance_softmax_kernel(cal, tau)
    blocked = rt.CovarianceSoftmaxKernel(cal, tau, block_bytes=block_bytes)
    assert_close(blocked.transport(q), dense.transport(q), err_msg="blockwise vs dense")
    assert_close(blocked.rows(np.arange(7)), dense.matrix, err_msg="rows")
    assert_close(blocked.row_sums(), 1.0, err_msg="row sums")
    with pytest.raises(rt.InputError, match="overflows"):
        rt.CovarianceSoftmaxKernel(cal, 1e-320)


@pytest.mark.parametrize("argv, message", [
    (["sample", "{case}", "--sampler", "tli", "--context", "0", "--n", "5", "--seed", "-1"], "--seed"),
    (["sample", "{case}", "--sampler", "tli", "--context", "x", "--n", "5", "--seed", "1"], "--context"),
    # counts are checked by the parser, before the case is read (here: a file that is missing)
    (["sample", "{missing}", "--sampler", "tli", "--context", "0", "--n", "0", "--seed", "1"],
     "argument --n: expected an integer >= 1, got 0"),
    (["sample", "{missing}", "--sampler", "tli", "--context", "-1", "--n", "5", "--seed", "1"],
     "argument --context: expected an integer >= 0, got -1"),
    (["sample", "{missing}", "--sampler", "tli", "--context", "0", "--n", "5", "--seed", "-1"],
     "argument --seed: expected an integer >= 0, got -1"),
    (["report", "--source", "synthetic", "--out", "{case}"], "not a directory"),
    # counts beyond int64 (the counts' type): --n 1e26 ran for ever
    (["sample", "{missing}", "--sampler", "tli", "--context", "0", "--n", str(2**63),
      "--seed", "1"], "argument --n: expected an integer <= 2^63 - 1 (int64), got 9223372036854775808"),
    # an empty path named no option (report) or nothing at all (acceptance)
    (["report", "--source", "synthetic", "--out", ""], "--out must name a folder, got an empty string"),
    (["acceptance", ""], "the case file's path is empty"),
])
def test_cli_edge_cases_exit_2_with_one_line(tmp_path, capsys, argv, message):
    _case(tmp_path / "c.npz")
    argv = [a.replace("{case}", str(tmp_path / "c.npz")).replace("{missing}", str(tmp_path / "no.npz"))
            for a in argv]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors exit from inside the parser
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_case_without_contexts_is_rejected(tmp_path, capsys):
    np.savez(tmp_path / "e.npz", target_probs=np.zeros((0, 4)), draft_probs=np.zeros((0, 4)),
             draft_to_target=np.arange(4))
    assert main(["acceptance", str(tmp_path / "e.npz")]) == 2
    assert "no contexts" in capsys.readouterr().err


def test_verify_draft_matches_the_step_law():
    """Monte Carlo: n = 60,000 drafts x ~ r then verify_draft; chi-square vs p."""
    rng = np.random.default_rng(4)
    p = np.array([0.1, 0.0, 0.6, 0.3])
    r = np.array([0.4, 0.2, 0.3, 0.1])
    counts = np.zeros(4, dtype=np.int64)
    for _ in range(60_000):
        counts[rt.verify_draft(p, r, rt.draw(r, rng), rng)[0]] += 1
    assert_matches_law(counts, p, "verify_draft")
    # the same r = p edge case as sample_steps: never an empty residual
    assert rt.verify_draft(p, p, 2, rng) == (2, True)


def test_verify_draft_accepts_iff_u_r_below_p_and_else_draws_the_residual_of_that_r():
    """The rule itself, with no sampling noise: the step's first uniform u accepts draft x iff
    u r(x) < p(x); a rejection then draws from (p - r)+ with the generator's next numbers.
    (A 5% looser accept, or 2% of p mixed into the residual, passed the chi-square above.)"""
    p = np.array([0.1, 0.0, 0.6, 0.3])
    r = np.array([0.4, 0.2, 0.3, 0.1])
    for seed in range(2000):
        ref = np.random.default_rng(seed)
        u = ref.random()
        got = rt.verify_draft(p, r, 0, np.random.default_rng(seed))
        assert got == ((0, True) if u * r[0] < p[0] else (rt.draw(np.maximum(p - r, 0), ref),
                                                           False)), seed


class _FixedUniforms(np.random.Generator):
    """Every uniform is ``u``: 0.0 or the largest float below 1, the two ends of what numpy's
    random() can return."""

    def __init__(self, u):
        super().__init__(np.random.PCG64(0))
        self.u = u

    def random(self, size=None, dtype=np.float64, out=None):
        return self.u if size is None else np.full(size, self.u)


def test_a_uniform_of_exactly_zero_never_accepts_a_token_with_p_zero():
    """u r(x) < p(x) is strict: at u = 0 a draft with p(x) = 0 is still rejected (<= would
    emit a zero-probability token, with chance 2^-53 per step)."""
    p, r = np.array([0.0, 1.0]), np.array([1.0, 0.0])
    tokens, accepted = rt.sample_steps(p, r, 5, _FixedUniforms(0.0))
    assert not accepted.any() and (tokens == 1).all()
    assert rt.verify_draft(p, r, 0, _FixedUniforms(0.0)) == (1, False)


def test_an_empty_residual_falls_back_to_p():
    """Mutation pass: r = p / sum p sums to 1 - 2^-53 here, so at u = 1 - 2^-53 nothing is
    drafted and the residual (p - r)^+ is empty: the step draws from p (token 2, p's inverse
    CDF at the top). Drawing from the empty residual emitted token -1."""
    p = np.array([9.0, 18.0, 1.0]) / 28
    r = p / p.sum()
    assert r.sum() == np.nextafter(1.0, 0.0)
    tokens, accepted = rt.sample_steps(p, r, 3, _FixedUniforms(np.nextafter(1.0, 0.0)))
    assert not accepted.any() and tokens.tolist() == [2, 2, 2]


def test_a_proposal_without_mass_drafts_nothing_and_every_step_draws_from_p():
    """r = 0 (a drafter whose tokens the target all lacks): no step drafts, none is accepted,
    and each emits p's inverse CDF at its uniform (the residual (p - r)+ is p): at u = 0 the
    first token with mass, at the top the last one; a seeded run emits only tokens of p's
    support, both of them."""
    p, r = np.array([0.0, 0.3, 0.7, 0.0]), np.zeros(4)
    for u, token in ((0.0, 1), (np.nextafter(1.0, 0.0), 2)):
        tokens, accepted = rt.sample_steps(p, r, 4, _FixedUniforms(u))
        assert not accepted.any() and tokens.tolist() == [token] * 4
    tokens, accepted = rt.sample_steps(p, r, 200, np.random.default_rng(0))
    assert not accepted.any() and set(tokens.tolist()) == {1, 2}


def test_verify_step_is_one_step_as_python_scalars():
    """verify_step (never called) is one step of sample_steps, as a Python (int, bool): a
    draft with p = r = 1 is accepted; one with p = 0 is rejected and the residual emitted."""
    for p, r, want in (([0.0, 1.0], [0.0, 1.0], (1, True)), ([1.0, 0.0], [0.0, 1.0], (0, False))):
        got = rt.verify_step(p, r, np.random.default_rng(0))
        assert got == want and type(got[0]) is int and type(got[1]) is bool


def test_a_target_within_tolerance_is_divided_by_its_sum_before_the_ratio():
    """Mutation pass: p summing to 1 - 9e-5 passes validation (tolerance 1e-4); r = p / sum p
    is then the step's own target and every draft must be accepted (n = 200,000; without the
    division about 1 draft in 10^4 was rejected, 23 here)."""
    p = np.array([0.2, 0.3, 0.5]) * (1 - 9e-5)
    _, accepted = rt.sample_steps(p, p / p.sum(), 200_000, np.random.default_rng(0))
    assert accepted.all()


def test_inverse_cdf_never_returns_a_zero_weight_even_at_the_top_end():
    w = np.array([0.1, 0.0, 0.7, 0.2, 0.0, 0.0])
    draw = rt.InverseCdf(w)
    u = np.array([0.0, 0.1, np.nextafter(0.1, 0), 0.8, np.nextafter(1.0, 0)])
    got = draw(u)
    assert list(got) == [0, 2, 0, 3, 3]
    assert np.all(w[got] > 0)
    assert rt.InverseCdf(np.zeros(3)).last == -1
    with pytest.raises(rt.InputError, match="all zero"):  # it returned -1: the last token
        rt.InverseCdf(np.zeros(3))(np.array([0.2, 0.9]))


#: Uniforms over [0, 1), both ends included, and weight vectors (zeros among them) whose law
#: must not depend on their scale: shared with the torch twin in test_core_device.
SCALE_TEST_UNIFORMS = np.concatenate([np.linspace(0, 1, 4001)[:-1], [np.nextafter(1.0, 0)]])
SCALE_TEST_WEIGHTS = ([1.0, 1.0], [1.0, 2.0], [0.0, 1.0, 0.0, 3.0, 0.0], [5.0, 1.0, 1.0, 1.0])


@pytest.mark.parametrize("scale", [2.0 ** -1074, 2.0 ** -1060, 2.0 ** -1000, 2.0 ** 1021])
def test_inverse_cdf_draws_the_same_indices_whatever_the_scale_of_the_weights(scale):
    """Weights times a subnormal or huge factor give the same law: the search used to round
    u * total to multiples of 2^-1074 (weights (5e-324, 5e-324) drew 1/4 : 3/4) and to
    refuse finite weights whose sum overflowed (and numpy warned about the overflow)."""
    u = SCALE_TEST_UNIFORMS
    for w in SCALE_TEST_WEIGHTS:
        w = np.array(w)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no overflow warning reaches the caller
            scaled = rt.InverseCdf(w * scale)
        with np.errstate(over="ignore"):
            total = w.sum() * scale  # exact for a power of two, inf where it overflows
        assert np.array_equal(scaled(u), rt.InverseCdf(w)(u)), (w, scale)
        # total stays the weights' sum: the simulators read it as a drafting mass
        assert scaled.total == total, (w, scale)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rt.draw(np.array([1e308, 1e308, 0.0]), np.random.default_rng(0)) in (0, 1)


def test_k_seq_with_a_subnormal_drafting_mass_keeps_the_target_law():
    """Second reading: with InverseCdf's total the scaled sum (0.67, not 1e-300), K-SEQ
    drafted 67% of the time from q = (1e-300, 0, 0) and emitted (0.70, 0.07, 0.23) for
    p = (0.1, 0.2, 0.7). Monte Carlo, n = 100,000, chi-square against p."""
    from simulators.spectr import kseq_sample

    p = np.array([0.1, 0.2, 0.7])
    tokens, accepted = kseq_sample(p, np.array([1e-300, 0.0, 0.0]), 1.0, 1, 100_000,
                                   np.random.default_rng(0))
    assert not accepted.any()  # a drafting mass of 1e-300 drafts nothing in 1e5 steps
    assert_matches_law(rt.emitted_counts(tokens, 3), p, "K-SEQ, drafting mass 1e-300")


def test_k_seq_with_an_empty_excess_emits_a_target_token():
    """q = p summing to 1 - 2^-53, every uniform at the top end: every draft is rejected and
    the excess (p - a)^+ is empty; the empty InverseCdf returned -1 for every step (numpy then
    reads it as the last token). Like the one-draft step, it now draws from p."""
    from simulators.spectr import kseq_sample

    q = np.array([9.0, 18.0, 1.0]) / 28
    q = q / q.sum()
    assert q.sum() < 1
    tokens, accepted = kseq_sample(q, q, 1.0, 1, 3, _FixedUniforms(np.nextafter(1.0, 0)))
    assert not accepted.any() and tokens.tolist() == [2, 2, 2]  # p's own draw at u ~ 1


def test_verify_draft_refuses_a_draft_its_proposal_cannot_draw():
    """r(x) = 0: x was not drawn from r, so the step's law would not be p (the draft accepted
    with probability 1: law (3/4, 1/4) here instead of (1/2, 1/2))."""
    p, r = np.array([0.5, 0.5]), np.array([0.0, 1.0])
    with pytest.raises(rt.InputError, match="probability 0 under the proposal"):
        rt.verify_draft(p, r, 0, np.random.default_rng(0))
    assert rt.verify_draft(p, r, 1, np.random.default_rng(0))[0] in (0, 1)


def _good_arrays(n_t=6, c=3, s=4):
    rng = np.random.default_rng(5)
    return dict(target_probs=rng.dirichlet(np.ones(n_t), size=c),
                draft_probs=rng.dirichlet(np.ones(n_t - 2), size=c),
                draft_to_target=np.array([0, 1, 2, 3]),
                calibration_probs=rng.dirichlet(np.ones(n_t), size=s),
                kernel=np.full((n_t, n_t), 1.0 / n_t))


def _bad(name, value):
    def make(arrays):
        arrays[name] = value(arrays[name]) if callable(value) else value
        return arrays
    return make


@pytest.mark.parametrize("make, argv, message", [
    # an array present but unused is still checked (here: no --kernel dense)
    (_bad("kernel", lambda k: k * 1.1), [], "kernel is not row-stochastic"),
    (_bad("kernel", lambda k: np.where(np.eye(6) > 0, -0.1, k + 0.02)), [], "kernel has a negative"),
    (_bad("kernel", lambda k: np.where(np.eye(6) > 0, np.nan, k)), [], "kernel has a non-finite"),
    (_bad("calibration_probs", np.zeros((0, 6))), [], "S >= 1"),
    (_bad("target_probs", lambda p: p.astype(np.complex128)), [], "complex"),
    (_bad("draft_probs", lambda q: q.astype(str)), [], "strings"),
    (_bad("target_probs", lambda p: np.where(np.arange(6) == 0, -1e-9, p)), [],
     "negative probability"),
    # just past the tolerance: shown in full, not rounded to the tolerance itself (-1e-12)
    (_bad("target_probs", lambda p: np.where(np.arange(6) == 0, -1.0000001e-12, p)), [],
     "negative probability -1.0000001e-12 at index (0, 0) (tolerance 1e-12)"),
    (_bad("target_probs", lambda p: p * 1.001), [], "must sum to 1"),
    (_bad("target_probs", lambda p: p[:, :, None]), [], "must be 2-D (contexts, vocab)"),
    (lambda a: a, ["--kernel", "covariance", "--tau", "-1"], "--tau"),
])
def test_bad_case_arrays_exit_2_naming_the_problem(tmp_path, capsys, make, argv, message):
    np.savez(tmp_path / "bad.npz", **make(_good_arrays()))
    assert main(["acceptance", str(tmp_path / "bad.npz"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_round_off_negatives_are_read_as_zero_without_touching_the_callers_array():
    p = np.array([[0.5, 0.5 + 1e-13, -1e-13]])
    got = rt.validation.as_prob_array(p, "p")
    assert got[0, 2] == 0.0 and p[0, 2] == -1e-13
    with pytest.raises(rt.InputError, match="negative probability"):
        rt.validation.as_prob_array(np.array([0.5, 0.5 + 2e-12, -2e-12]), "p")


@pytest.mark.parametrize("build", [
    lambda cal: rt.FirstOrderCovarianceKernel(cal, 0.1),
    lambda cal: rt.CovarianceSoftmaxKernel(cal, 0.1),
    lambda cal: rt.covariance_softmax_kernel(cal, 0.1),
    lambda cal: rt.MarginalKernel.from_calibration(cal, rt.VocabMap(6, [0, 1, 2, -1])),
])
def test_every_kernel_refuses_an_empty_calibration_set(build):
    with pytest.raises(rt.InputError, match="S >= 1"):
        build(np.zeros((0, 6)))


def test_acceptance_json_is_a_probability_and_inputs_within_tolerance_are_renormalised(
        tmp_path, capsys):
    """p == q gives sum(p), which exceeds 1 by round-off on some rows: reported clipped to 1;
    a row summing to 1 + 9e-5 (inside the 1e-4 tolerance) is read renormalised, so alpha <= 1."""
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(50), size=200)
    read = p / p.sum(-1, keepdims=True)
    assert np.any(np.minimum(read, read).sum(-1) > 1)  # the round-off this test is about
    arrays = dict(target_probs=p, draft_probs=p.copy(), draft_to_target=np.arange(50))
    np.savez(tmp_path / "same.npz", **arrays)
    assert main(["acceptance", str(tmp_path / "same.npz"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert max(out["vanilla"]["per_context"]) == 1.0
    assert_close(out["vanilla"]["per_context"], 1.0, err_msg="p == q")
    # p stored 9e-5 too heavy, q a different law: read as stored, alpha would gain up to
    # 9e-5 * p(p < q); read renormalised it is alpha(p, q) to round-off
    q = rng.dirichlet(np.ones(50), size=200)
    arrays.update(target_probs=p * (1 + 9e-5), draft_probs=q)
    np.savez(tmp_path / "loose.npz", **arrays)
    assert main(["acceptance", str(tmp_path / "loose.npz"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = rt.acceptance_rate(read, q / q.sum(-1, keepdims=True))
    as_stored = np.minimum(p * (1 + 9e-5), q).sum(-1)
    assert np.abs(as_stored - want).max() > 1e-6  # the difference this test is about
    assert_close(out["tli"]["per_context"], want, err_msg="renormalised p")


@pytest.mark.parametrize("argv, message", [
    (["sample", "{case}", "--sampler", "rdk_first_order", "--kernel", "dense", "--context", "0",
      "--n", "5", "--seed", "1"], "does not apply"),
    (["report", "--source", "synthetic", "--seed", "-1", "--out", "{tmp}"],
     "argument --seed: expected an integer >= 0, got -1"),
    (["report", "--source", "synthetic", "--vocab", "23", "--out", "{tmp}"], "--vocab must be >= 24"),
    (["acceptance", "{tmp}"], "is a directory"),
    (["acceptance", "{text}"], "not an .npz archive"),
    (["acceptance", "{npy}"], "not an .npz archive"),
    (["acceptance", "{tmp}/no\nsuch.npz"], "no\\nsuch.npz"),  # a line break in the name
    # any line break str.splitlines sees (these were a second line of stderr)
    (["acceptance", "{tmp}/no\x0bsuch\u2028file\x85.npz"], "no\\x0bsuch\\u2028file\\x85.npz"),
    (["acceptance", "{fifo}"], "not a regular file"),  # it blocked for ever on open()
    # a zip whose target_probs.npy is not a .npy file: numpy gives its bytes, which read as
    # "must be 2-D, got ()"
    (["acceptance", "{badmember}"], "its member for target_probs is not a numpy array"),
])
@pytest.mark.timeout(120)  # a FIFO case blocked for ever
def test_more_cli_edge_cases_exit_2_with_one_line(tmp_path, capsys, argv, message):
    _case(tmp_path / "c.npz")
    (tmp_path / "t.txt").write_text("target_probs 0.5 0.5\n")
    np.save(tmp_path / "a.npy", np.ones(3))
    import zipfile
    with zipfile.ZipFile(tmp_path / "bad.npz", "w") as z:
        z.writestr("target_probs.npy", "not an array")
        z.writestr("draft_probs.npy", (tmp_path / "a.npy").read_bytes())
    subs = {"{case}": tmp_path / "c.npz", "{tmp}": tmp_path, "{text}": tmp_path / "t.txt",
            "{npy}": tmp_path / "a.npy", "{badmember}": tmp_path / "bad.npz",
            "{fifo}": tmp_path / "f.npz"}
    os.mkfifo(tmp_path / "f.npz")
    argv = [str(subs.get(a, a)).replace("{tmp}", str(tmp_path)) for a in argv]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors exit from inside the parser
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_report_runs_at_the_smallest_vocabulary_it_accepts(tmp_path, capsys):
    assert main(["report", "--source", "synthetic", "--quick", "--vocab", "24", "--keep", "1,0.5",
                 "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "report.json").read_text())["rows"]
    assert [r["kept"] for r in rows] == [24, 12]


@pytest.mark.parametrize("argv, message", [
    ([], "error: rdk-theory: a COMMAND is required"),
    (["simulate"], "error: rdk-theory simulate: a SIMULATOR is required"),
])
def test_no_command_is_a_usage_error_on_stderr(capsys, argv, message):
    """One line, like every other usage error, naming the choices."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith(message)
    assert "acceptance" in err or "speedup" in err


def test_report_quick_checks_the_vocabulary_it_uses(tmp_path):
    """--quick caps N at 1024, so a --vocab too large for the dense kernel is fine with it."""
    assert main(["report", "--source", "synthetic", "--quick", "--vocab", "30000", "--keep", "1",
                 "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "report.json").read_text())["rows"][0]["kept"] == 1024


def test_json_into_a_closed_pipe_is_not_a_traceback(tmp_path):
    """``acceptance --json | head -c 10``: the reader leaves after 10 bytes of a ~1 MB object."""
    import subprocess
    import sys

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "big.npz", target_probs=rng.dirichlet(np.ones(4), size=20_000),
             draft_probs=rng.dirichlet(np.ones(4), size=20_000), draft_to_target=np.arange(4))
    cmd = (f"{sys.executable} -m rdk_theory acceptance {tmp_path / 'big.npz'} --json "
           "| head -c 10 > /dev/null; echo ${PIPESTATUS[0]}")
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in res.stderr and res.stderr.strip() == "", res.stderr
    assert res.stdout.strip() == "0"


def test_a_closed_stdout_or_a_non_utf8_file_name_is_not_a_traceback(tmp_path):
    """``--json >&-`` was AttributeError on sys.stdout None (text mode printed nowhere, exit
    0: now both do); a file name that is not UTF-8 (bytes 0xff) was a UnicodeEncodeError in the
    text table under a UTF-8 locale (now printed escaped, as Python escapes it on stderr)."""
    import subprocess
    import sys

    bad = os.fsencode(tmp_path) + b"/bad\xff.npz"
    _case(os.fsdecode(bad))
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    for argv in (["--json"], []):
        res = subprocess.run([sys.executable, "-m", "rdk_theory", "acceptance", bad, *argv],
                             stderr=subprocess.PIPE, timeout=120, env=env,
                             preexec_fn=lambda: os.close(1))  # the child's stdout: closed
        assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr.decode()
    res = subprocess.run([sys.executable, "-m", "rdk_theory", "acceptance", bad],
                         capture_output=True, timeout=120, env=env)
    assert res.returncode == 0 and res.stderr == b"", res.stderr.decode()
    assert b"bad\\udcff.npz" in res.stdout


def test_a_closed_stderr_keeps_warnings_and_errors_out_of_stdout(tmp_path):
    """With stderr closed (``2>&-``) Python sets sys.stderr to None and print(file=None)
    writes to stdout: the warning about ignored arrays went into --json's stdout before the
    JSON, and an error line onto stdout (a fuzzing pass). Both now go nowhere."""
    import json
    import subprocess
    import sys

    _case(tmp_path / "c.npz")
    with np.load(tmp_path / "c.npz") as z:
        np.savez(tmp_path / "extra.npz", **z, foo=np.ones(2))
        np.savez(tmp_path / "nan.npz", **{**z, "target_probs": z["target_probs"] * np.nan})

    def run(*argv):
        return subprocess.run([sys.executable, "-m", *argv], timeout=120,
                              stdout=subprocess.PIPE, preexec_fn=lambda: os.close(2))

    res = run("rdk_theory", "acceptance", str(tmp_path / "extra.npz"), "--json")
    assert res.returncode == 0
    assert set(json.loads(res.stdout)) == {"vanilla", "tli", "rdk_exact"}
    for argv in (("rdk_theory", "acceptance", str(tmp_path / "nan.npz"), "--json"),
                 ("rdk_theory",), ("gpu_validation",)):
        res = run(*argv)
        assert res.returncode == 2 and res.stdout == b"", (argv, res.stdout)


def test_negative_step_count_is_an_input_error():
    p = np.array([0.5, 0.5])
    with pytest.raises(rt.InputError, match="n must be an integer >= 0"):
        rt.sample_steps(p, p, -1, np.random.default_rng(0))
    tokens, accepted = rt.sample_steps(p, p, 0, np.random.default_rng(0))
    assert tokens.size == 0 and accepted.size == 0


def test_sample_counts_is_sample_steps_chunk_by_chunk():
    """Bounded-memory counting draws exactly what sample_steps draws: one call when n fits in a
    chunk, and chunk-sized calls on the same generator otherwise (so --n 10**13 runs in flat
    memory instead of asking for 73 TiB)."""
    p = np.array([0.5, 0.0, 0.3, 0.2])
    r = np.array([0.1, 0.0, 0.6, 0.1])  # sub-stochastic: a drafter token the target lacks
    tokens, ok = rt.sample_steps(p, r, 1000, np.random.default_rng(3))
    counts, accepted = rt.sample_counts(p, r, 1000, np.random.default_rng(3))
    assert np.array_equal(counts, rt.emitted_counts(tokens, 4)) and accepted == int(ok.sum())
    rng = np.random.default_rng(4)
    parts = [rt.sample_steps(p, r, size, rng) for size in (300, 300, 300, 100)]
    counts, accepted = rt.sample_counts(p, r, 1000, np.random.default_rng(4), chunk=300)
    assert np.array_equal(counts, rt.emitted_counts(np.concatenate([t for t, _ in parts]), 4))
    assert accepted == sum(int(a.sum()) for _, a in parts) and counts.sum() == 1000
    assert counts[1] == 0
    counts, accepted = rt.sample_counts(p, r, 0, np.random.default_rng(0))
    assert counts.tolist() == [0, 0, 0, 0] and accepted == 0
    with pytest.raises(rt.InputError, match="n must be an integer >= 0"):
        rt.sample_counts(p, r, -1, np.random.default_rng(0))
    with pytest.raises(rt.InputError, match="chunk must be an integer >= 1"):
        rt.sample_counts(p, r, 5, np.random.default_rng(0), chunk=0)
    with pytest.raises(rt.InputError, match="target_probs"):
        rt.sample_counts([0.5, np.nan], [0.5, 0.5], 0, np.random.default_rng(0))


def test_sample_counts_draws_lazily_whatever_n(monkeypatch):
    """Memory does not grow with n / chunk: the chunk sizes are not listed up front (a list
    of 10**15 sizes would never finish). The second draw is stopped here on purpose."""
    import rdk_theory.sampling as sampling

    calls = []

    def one_draw(p, r, size, rng):
        calls.append(size)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return np.zeros(size, dtype=np.int64), np.zeros(size, dtype=bool)

    monkeypatch.setattr(sampling, "sample_steps", one_draw)
    with pytest.raises(KeyboardInterrupt):
        sampling.sample_counts([0.5, 0.5], [0.5, 0.5], 10**15, np.random.default_rng(0), chunk=1)
    assert calls == [1, 1]


@pytest.mark.parametrize("target, draft", [
    ([[[0.5], [0.5]]], [[0.5, 0.5]]),  # lists
    (np.array([[[0.5], [0.5]]]), [[0.5, 0.5]]),  # an array and a list
    (np.array([[0.5, 0.5]]), np.array([0.5, 0.5])),
])
def test_case_arrays_of_the_wrong_rank_are_named_before_their_sums(target, draft):
    from rdk_theory.case import case_from_arrays

    with pytest.raises(rt.InputError, match=r"must be 2-D \(contexts, vocab\), got \("):
        case_from_arrays(target_probs=target, draft_probs=draft, draft_to_target=[0, 1])


def test_a_file_error_inside_a_command_exits_2_with_one_line(tmp_path, capsys, monkeypatch):
    """main() maps FileNotFoundError from any command (e.g. a file that vanished between the
    check and the read) to the bad-input exit status, like InputError."""
    import rdk_theory.commands as commands

    _case(tmp_path / "c.npz")

    def gone(path):
        raise FileNotFoundError(2, "No such file or directory", str(path))

    monkeypatch.setattr(commands, "load_case", gone)
    assert main(["acceptance", str(tmp_path / "c.npz")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: file not found: {tmp_path / 'c.npz'}"]


def _failing_load_case(monkeypatch, exc):
    import rdk_theory.commands as commands

    def fail(path):
        raise exc

    monkeypatch.setattr(commands, "load_case", fail)


@pytest.mark.parametrize("exc, line", [
    (MemoryError("Unable to allocate 21.8 TiB"),
     "error: out of memory (Unable to allocate 21.8 TiB): choose smaller sizes"),
    (MemoryError(), "error: out of memory (no detail): choose smaller sizes"),
    (PermissionError(13, "Permission denied", "/no/write"), "error: Permission denied: /no/write"),
    (OSError("the disk went away"), "error: the disk went away"),  # no errno, no file name
    (OSError(5, "Input/output error"), "error: Input/output error"),  # errno, no file name
    (ValueError("Maximum allowed dimension exceeded"),
     "error: an array too large for numpy (Maximum allowed dimension exceeded): choose smaller "
     "sizes"),
])
def test_memory_and_os_errors_inside_a_command_exit_2_with_one_line(tmp_path, capsys,
                                                                     monkeypatch, exc, line):
    """Sizes the options allow but the machine cannot hold (simulate speedup --mc 10**12
    asks numpy for 21.8 TiB; numpy's refusal of a dimension it cannot index, while 'array is
    too big', its byte count, is covered by tests/test_sim_cli.py), or a folder the run cannot
    write: one line, no traceback. An OSError without errno or file name prints its own text,
    not 'None', and one without a file name names none."""
    _case(tmp_path / "c.npz")
    _failing_load_case(monkeypatch, exc)
    assert main(["acceptance", str(tmp_path / "c.npz")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines() == [line]


def test_report_out_under_a_file_exits_2_with_one_line(tmp_path, capsys, monkeypatch):
    """Refused before the sweep (which is stubbed to fail here): no work is done and lost."""
    import rdk_theory.report as report

    def swept(**kwargs):
        raise AssertionError("the sweep ran before --out was checked")

    monkeypatch.setattr(report, "synthetic_report", swept)
    (tmp_path / "f").write_text("")
    assert main(["report", "--source", "synthetic", "--quick", "--out",
                 str(tmp_path / "f" / "sub")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and str(tmp_path / "f") in err[0], err


def test_report_refuses_an_output_file_that_is_a_folder_before_the_sweep(tmp_path, capsys,
                                                                        monkeypatch):
    """acceptance_vs_kept.png as a folder failed only at the end, after report.json had
    already been replaced: now it is refused first, and the earlier report is untouched."""
    import rdk_theory.report as report

    def swept(**kwargs):
        raise AssertionError("the sweep ran before the output files were checked")

    monkeypatch.setattr(report, "synthetic_report", swept)
    (tmp_path / "acceptance_vs_kept.png").mkdir()
    (tmp_path / "report.json").write_text("EARLIER")
    assert main(["report", "--source", "synthetic", "--quick", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "acceptance_vs_kept.png is a folder" in err[0], err
    assert (tmp_path / "report.json").read_text() == "EARLIER"


def test_report_prints_its_table_and_keeps_the_earlier_files_when_a_write_fails(
        tmp_path, capsys, monkeypatch):
    """A figure that cannot be written at the end (a full disk here) is exit 2 with the table
    already printed, the earlier report.json as it was, and no partial files."""
    import rdk_theory.report as report

    def full_disk(rep, path):
        open(path, "w").write("partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report, "plot_report", full_disk)
    (tmp_path / "report.json").write_text("EARLIER")
    assert main(["report", "--source", "synthetic", "--quick", "--vocab", "24", "--keep", "1,0.5",
                 "--out", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert "No space left on device" in err and "oov_cap" not in err
    assert "TLI" in out or "tli" in out  # the table came out before the failed write
    assert (tmp_path / "report.json").read_text() == "EARLIER"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_replaced_output_files_get_the_mode_open_would_give(tmp_path):
    """mkstemp makes its file 0600, which os.replace kept: report.json was unreadable to the
    group and others (0644 under the usual umask 022, as a plain open gives)."""
    import os

    from rdk_theory._outdir import write_replacing

    old = os.umask(0o022)
    try:
        write_replacing(str(tmp_path / "a.json"), lambda tmp: open(tmp, "w").write("{}"))
        with open(tmp_path / "b.json", "w") as fh:
            fh.write("{}")
    finally:
        os.umask(old)
    assert (tmp_path / "a.json").read_text() == "{}"
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == (tmp_path / "b.json").stat().st_mode & 0o777 == 0o644


def test_report_figure_draws_the_kept_fractions_in_order(tmp_path, monkeypatch):
    """--keep in any order: every line of the figure runs left to right (an unsorted --keep
    drew loops on the log axis); the table keeps the order given."""
    plt = pytest.importorskip("matplotlib.pyplot")

    from rdk_theory.report import plot_report, synthetic_report

    rep = synthetic_report(n=64, contexts=8, calibration=32, keep=[0.05, 1.0, 0.25], seed=0)
    assert [r["keep_fraction"] for r in rep["rows"]] == [0.05, 1.0, 0.25]
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_report(rep, tmp_path / "f.png")
    lines = figures[0].axes[0].get_lines()
    assert len(lines) >= 3
    for line in lines:
        x = list(line.get_xdata())
        assert x == sorted(x), (line.get_label(), x)


def _off_rows(seed=3, n=30, s=6):
    """Calibration rows summing to 1 +- 9e-5 (inside the validation tolerance) and the same
    rows renormalised."""
    cal = np.random.default_rng(seed).dirichlet(np.ones(n), size=s)
    off = cal * (1 + 9e-5 * np.where(np.arange(s) % 2, 1.0, -1.0))[:, None]
    return off, off / off.sum(axis=1, keepdims=True)


def test_every_kernel_reads_calibration_rows_renormalised():
    """Rows within tolerance of 1 are renormalised once, on input: the exact kernel, the
    first-order one, the marginal weight and Omega all see the same rows (the first-order
    kernel used to renormalise alone, which made its gap to the exact kernel first order)."""
    off, norm = _off_rows()
    q = np.random.default_rng(4).dirichlet(np.ones(30), size=3)
    vm = rt.VocabMap.from_kept_ids(np.arange(15), 30)
    for tau in (0.01, 1.0):
        assert_close(rt.CovarianceSoftmaxKernel(off, tau).transport(q),
                     rt.CovarianceSoftmaxKernel(norm, tau).transport(q))
        assert_close(rt.FirstOrderCovarianceKernel(off, tau).transport(q),
                     rt.FirstOrderCovarianceKernel(norm, tau).transport(q))
    assert_close(rt.calibration_covariance(off), rt.calibration_covariance(norm))
    assert_close(rt.calibration_covariance(off).sum(axis=1), 0.0)
    assert_close(rt.MarginalKernel.from_calibration(off, vm).w,
                 rt.MarginalKernel.from_calibration(norm, vm).w)
    # Theorem E's second order survives: TV / max|B|^2 is the same at both temperatures
    ratio = []
    for tau in (1.0, 100.0):
        fo = rt.FirstOrderCovarianceKernel(off, tau)
        tv = rt.total_variation(rt.CovarianceSoftmaxKernel(off, tau).transport(q[0]),
                                fo.transport(q[0]))
        ratio.append(float(tv) / fo.max_offdiag_affinity() ** 2)
    assert abs(ratio[1] / ratio[0] - 1) < 0.05, ratio


@pytest.mark.parametrize("engine", ["numpy", "fused", "blas", "auto"])
def test_first_order_refuses_a_tau_that_overflows_on_every_engine(engine):
    """The exact kernel refuses tau = 1e-320 (Omega / tau overflows); so does first-order RDK,
    on every engine, instead of returning NaN on some of them."""
    if engine in ("fused", "blas") and not rt.first_order._fused.available():
        pytest.skip("needs numba")
    cal = np.random.default_rng(0).dirichlet(np.ones(8), size=4)
    for tau in (2e-309, 1e-320):
        with pytest.raises(rt.InputError, match="overflows"):
            rt.FirstOrderCovarianceKernel(cal, tau, engine=engine)
        with pytest.raises(rt.InputError, match="overflows"):
            rt.FirstOrderCovarianceKernel.from_factor(
                rt.kernels._centred_factor(cal), tau, engine=engine)
    for bad in (float("nan"), float("inf"), 0.0, "1"):
        with pytest.raises(rt.InputError, match="tau must be a finite real number > 0"):
            rt.FirstOrderCovarianceKernel.from_factor(rt.kernels._centred_factor(cal), bad)


def test_marginal_kernel_is_row_stochastic_for_w_within_tolerance():
    w = np.full(4, 0.25)
    w[0] += 9e-5  # accepted (tolerance 1e-4), then renormalised
    mk = rt.MarginalKernel(w, 1.0)
    assert_close(mk.row_sums(), 1.0)
    assert_close(mk.transport(np.eye(4)).sum(axis=-1), 1.0)


def test_pruned_drafter_without_mass_on_the_kept_ids_is_named():
    vm = rt.VocabMap.from_kept_ids([0, 1], 4)
    with pytest.raises(rt.InputError, match="draft_probs_full puts mass 0 on the kept ids"):
        rt.vocab.pruned_draft_probs(np.array([0.0, 0.0, 0.5, 0.5]), vm)
    rows = np.array([[1.0, 0, 0, 0], [0, 0, 0.5, 0.5]])
    with pytest.raises(rt.InputError, match="row 1 puts mass 0"):
        rt.vocab.pruned_draft_probs(rows, vm)
    torch = pytest.importorskip("torch")
    with pytest.raises(rt.InputError, match="row 1 puts mass 0"):
        rt.vocab.pruned_draft_probs(torch.tensor(rows), vm)
    assert_close(rt.vocab.pruned_draft_probs(rows[:1], vm), [[1.0, 0.0]])


def test_kernels_keep_their_own_copy_of_the_callers_arrays():
    """Editing an array after building a kernel from it must not bypass the kernel's checks
    (nor leave numpy and torch caches disagreeing)."""
    import scipy.sparse as sp

    torch = pytest.importorskip("torch")
    eye, eye_t = np.eye(3), torch.eye(3, dtype=torch.float64)  # numpy reads a CPU tensor in place
    dense, dense_t = rt.DenseKernel(eye), rt.DenseKernel(eye_t)
    sparse_in = sp.csr_matrix(np.eye(3))
    sparse = rt.SparseKernel(sparse_in)
    cal = np.random.default_rng(0).dirichlet(np.ones(3), size=4)
    factor = rt.kernels._centred_factor(cal)
    fo, fo_cal = (rt.FirstOrderCovarianceKernel.from_factor(factor, 1.0),
                  rt.FirstOrderCovarianceKernel(cal, 1.0))
    q = np.array([0.2, 0.3, 0.5])
    before = [k.transport(q) for k in (fo, fo_cal)]
    eye[0] = [2.0, -1.0, 0.0]
    eye_t[0] = torch.tensor([2.0, -1.0, 0.0])
    sparse_in.data[:] = 5.0
    factor *= 7.0
    cal[:] = 1 / 3
    assert_close(dense.transport(q), q)
    assert_close(dense_t.transport(q), q)
    assert_close(sparse.transport(q), q)
    for k, b in zip((fo, fo_cal), before):
        assert_close(k.transport(q), b)


@pytest.mark.parametrize("engine", ["numpy", "fused", "blas", "auto"])
def test_an_empty_batch_gives_an_empty_result_on_every_engine(engine):
    if engine in ("fused", "blas") and not rt.first_order._fused.available():
        pytest.skip("needs numba")
    cal = np.random.default_rng(0).dirichlet(np.ones(6), size=4)
    fo = rt.FirstOrderCovarianceKernel(cal, 0.1, engine=engine)
    empty = np.zeros((0, 6))
    assert fo.transport(empty).shape == (0, 6)
    r, alpha = fo.transport_with_acceptance(empty, empty)
    assert r.shape == (0, 6) and np.shape(alpha) == (0,)


def test_sparse_kernel_refuses_exact_input_by_name():
    import scipy.sparse as sp
    from fractions import Fraction

    q = np.array([Fraction(1, 2), Fraction(1, 2)], dtype=object)
    with pytest.raises(rt.InputError, match="cannot transport exact Fraction input"):
        rt.SparseKernel(sp.csr_matrix(np.eye(2))).transport(q)
    with pytest.raises(rt.InputError, match="real numbers"):
        rt.SparseKernel(sp.csr_matrix(np.eye(2, dtype=complex)))


@pytest.mark.parametrize("calc", [rt.acceptance_rate, rt.residual, rt.step_output_law,
                                  rt.total_variation])
def test_calculators_name_batch_shapes_that_do_not_broadcast(calc):
    p3, r2 = np.full((3, 4), 0.25), np.full((2, 4), 0.25)
    with pytest.raises(rt.InputError, match=r"leading shape \(3,\), \w+ \(2,\): they must broadcast"):
        calc(p3, r2)
    assert np.shape(calc(p3, r2[:1])) == np.shape(calc(p3, p3))  # (1, N) against (3, N) is fine


def test_report_without_matplotlib_writes_the_json_and_says_the_figure_was_skipped(
        tmp_path, capsys, monkeypatch):
    """matplotlib is the optional [plot] extra: the main job still prints and saves its numbers."""
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    assert main(["report", "--source", "synthetic", "--quick", "--vocab", "24", "--keep", "1,0.5",
                 "--out", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temporary file
    assert "wrote" in out and "acceptance_vs_kept.png" not in out
    assert "figure skipped: matplotlib is not installed" in err


def test_report_says_why_an_installed_matplotlib_failed_to_import(tmp_path, capsys, monkeypatch):
    """matplotlib present but broken (here: one of its own imports fails) is not "not
    installed": the message gives the import error, and the JSON is still written."""
    from rdk_theory import report

    def broken(*_):
        raise ImportError("numpy.core.multiarray failed to import")

    monkeypatch.setattr(report, "plot_report", broken)
    assert main(["report", "--source", "synthetic", "--quick", "--vocab", "24", "--keep", "1,0.5",
                 "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert (tmp_path / "report.json").exists()
    assert ("figure skipped: matplotlib could not be imported: numpy.core.multiarray failed to "
            "import") in err and "not installed" not in err


def test_import_failure_tells_absent_from_broken():
    from rdk_theory._optional import import_failure

    absent = ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")
    sub = ModuleNotFoundError("No module named 'matplotlib.pyplot'", name="matplotlib.pyplot")
    dep = ModuleNotFoundError("No module named 'kiwisolver'", name="kiwisolver")
    assert import_failure(absent) == "matplotlib is not installed (pip install 'rdk-theory[plot]')"
    assert import_failure(sub) == \
        "matplotlib could not be imported: No module named 'matplotlib.pyplot'"
    assert import_failure(dep) == "matplotlib could not be imported: No module named 'kiwisolver'"
    assert import_failure(ImportError("DLL load failed")) == \
        "matplotlib could not be imported: DLL load failed"


def test_report_vocab_sizes_the_synthetic_lm_only(tmp_path, capsys, monkeypatch):
    """--vocab applies to the synthetic source. With a real source that reports (stubbed here:
    a one-row report), an out-of-range --vocab is not an error but a warning that it was
    ignored; without --vocab there is no warning; when the real pair is not fetched (the
    source returns None or cannot run), auto falls back to the synthetic LM and --vocab is
    checked there, before the fallback is announced."""
    import rdk_theory.report as report_mod

    row = {"keep_fraction": 1.0, "kept": 10, "oov_cap": 1.0, "vanilla": 0.5, "tli": 0.5}
    real = {"source": "real (stub)", "keep_fractions": [1.0], "rows": [row]}
    monkeypatch.setattr(report_mod, "_real_source", lambda: (lambda args: real))
    for source in ("auto", "real"):
        assert main(["report", "--source", source, "--vocab", "23", "--out", str(tmp_path)]) == 0
        err = capsys.readouterr().err
        assert "warning: --vocab 23 ignored" in err and "error" not in err
        assert json.loads((tmp_path / "report.json").read_text())["source"] == "real (stub)"
        assert main(["report", "--source", source, "--out", str(tmp_path)]) == 0
        assert "--vocab" not in capsys.readouterr().err
    # a bad --vocab is then the one line on stderr: the fallback's warning came first, so a
    # refused run printed two lines; a good one still warns of the fallback
    def unavailable(args):
        raise report_mod.SourceUnavailable("transformers is not installed")

    for stub in ((lambda args: None), unavailable):
        monkeypatch.setattr(report_mod, "_real_source", lambda: stub)
        assert main(["report", "--vocab", "23", "--out", str(tmp_path)]) == 2
        assert capsys.readouterr().err == ("error: --vocab must be >= 24 (one topic of the "
                                           "synthetic LM), got 23\n")
    monkeypatch.setattr(report_mod, "synthetic_report", lambda **kw: real)
    assert main(["report", "--vocab", "24", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().err == ("warning: transformers is not installed: using the "
                                       "synthetic Zipfian LM\n")


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_pruned_draft_probs_refuses_logits_and_non_finite_rows(backend):
    """NaN, +-inf and negatives beyond the round-off tolerance (logits) are refused with the
    same message on both backends; a round-off negative is taken as 0; integer counts give a
    float64 law and complex input is refused, on both backends alike."""
    vm = rt.VocabMap.from_kept_ids([0, 2], 4)
    if backend == "torch":
        torch = pytest.importorskip("torch")
        as_input = lambda rows: torch.as_tensor(np.asarray(rows))  # noqa: E731  (numpy's dtype)
    else:
        as_input = np.array
    tol = rt.validation.NEG_ATOL
    for bad in (np.nan, np.inf, -np.inf, -10 * tol, -2.3):
        with pytest.raises(rt.InputError, match=r"finite and non-negative \(probabilities, not "):
            rt.vocab.pruned_draft_probs(as_input([[0.5, 0.25, bad, 0.25]]), vm)
    got = rt.vocab.pruned_draft_probs(as_input([[0.5, 0.5, -tol / 2, 0.0]]), vm)
    assert_close(np.asarray(got.tolist()), [[1.0, 0.0]])
    assert np.asarray(got.tolist())[0, 1] == 0.0
    counts = rt.vocab.pruned_draft_probs(as_input([[3, 9, 1, 0]]), vm)  # integer counts
    assert str(counts.dtype).endswith("float64") and counts.tolist() == [[0.75, 0.25]]
    with pytest.raises(rt.InputError, match="must hold real numbers"):
        rt.vocab.pruned_draft_probs(as_input(np.array([[0.5, 0.5, 0, 0]], dtype=complex)), vm)


def test_report_refuses_a_kernel_that_gives_a_non_finite_acceptance(monkeypatch):
    """Mutation pass: with NaN kernels (no max-shift before exp) the tau search skipped every
    NaN candidate (NaN > best is False) and the report looked normal. A NaN score is a
    kernel bug, never a poor tau."""
    from rdk_theory import report

    real = report.covariance_softmax_kernel

    def nan_at_one_tau(cal, tau):
        ker = real(cal, tau)
        if tau == min(report.TAU_MULTIPLIERS) * report.default_tau(cal):
            ker.transport = lambda r: np.full(np.shape(r), np.nan)
        return ker

    monkeypatch.setattr(report, "covariance_softmax_kernel", nan_at_one_tau)
    with pytest.raises(FloatingPointError, match="non-finite acceptance"):
        report.synthetic_report(n=64, contexts=8, calibration=32, keep=[1.0], seed=0)


def test_a_tau_search_refuses_every_non_finite_acceptance():
    """Mutation pass: an infinite acceptance (a kernel bug) passed a NaN-only check and would
    win a tau search at once; NaN, +inf and -inf are each a FloatingPointError, a finite score
    is returned as a float."""
    from rdk_theory.acceptance import finite_tau_score

    for score in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(FloatingPointError, match="non-finite acceptance"):
            finite_tau_score(score, 0.1)
    assert finite_tau_score(np.float64(0.25), 0.1) == 0.25


def test_an_interrupt_exits_130_with_one_line(tmp_path, capsys, monkeypatch):
    _case(tmp_path / "c.npz")
    _failing_load_case(monkeypatch, KeyboardInterrupt())
    try:
        code = main(["acceptance", str(tmp_path / "c.npz")])
    except KeyboardInterrupt:  # would stop the whole pytest session
        pytest.fail("the interrupt left main() instead of exit status 130")
    assert code == 130
    assert capsys.readouterr() == ("", "error: interrupted\n")


def test_a_bug_inside_a_command_keeps_its_traceback(tmp_path, capsys, monkeypatch):
    """Only numpy's size refusals are bad input: any other ValueError is a bug and propagates
    (with its traceback), as does a BrokenPipeError while stdout is not a closed pipe."""
    _case(tmp_path / "c.npz")
    for exc in (ValueError("operands could not be broadcast together"),
                BrokenPipeError(32, "Broken pipe")):
        _failing_load_case(monkeypatch, exc)
        with pytest.raises(type(exc)):
            main(["acceptance", str(tmp_path / "c.npz")])
    assert capsys.readouterr() == ("", "")


def test_an_out_folder_that_cannot_be_written_is_refused_and_removed(tmp_path, capsys,
                                                                   monkeypatch):
    """Simulated (the tests may run as root, who writes everywhere): write permission is
    checked (not read permission), before the sweep, and the folders made for it are removed."""
    import rdk_theory.report as report

    def swept(**kwargs):
        raise AssertionError("the sweep ran before --out was checked")

    real_access = os.access
    out = tmp_path / "kept" / "a" / "b"

    def access(path, mode, *a, **k):
        if os.path.abspath(path) == str(out) and mode & os.W_OK:
            return False
        return real_access(path, mode, *a, **k)

    monkeypatch.setattr(report, "synthetic_report", swept)
    monkeypatch.setattr(os, "access", access)
    (tmp_path / "kept").mkdir()
    assert main(["report", "--source", "synthetic", "--quick", "--out", str(out)]) == 2
    assert capsys.readouterr() == ("", f"error: --out {out} is not writable\n")
    assert [p.name for p in tmp_path.iterdir()] == ["kept"]
    assert not any((tmp_path / "kept").iterdir())


def test_an_interrupted_report_removes_the_folders_it_made(tmp_path, capsys, monkeypatch):
    import rdk_theory.report as report

    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "synthetic_report", interrupted)
    (tmp_path / "kept").mkdir()
    try:
        code = main(["report", "--source", "synthetic", "--quick", "--out",
                     str(tmp_path / "kept" / "a" / "b")])
    except KeyboardInterrupt:  # would stop the whole pytest session
        pytest.fail("the interrupt left main() instead of exit status 130")
    assert code == 130
    assert capsys.readouterr().err == "error: interrupted\n"
    assert [p.name for p in tmp_path.iterdir()] == ["kept"]
    assert not any((tmp_path / "kept").iterdir())


@pytest.mark.parametrize("umask, mode", [(0o077, 0o600), (0o002, 0o664), (0o022, 0o644)])
def test_replaced_output_files_follow_the_umask_and_leave_it_as_it_was(tmp_path, umask, mode):
    from rdk_theory._outdir import write_replacing

    old = os.umask(umask)
    try:
        write_replacing(str(tmp_path / "a.json"), lambda tmp: open(tmp, "w").write("{}"))
        after = os.umask(old)
    except BaseException:
        os.umask(old)
        raise
    assert after == umask  # the process umask is restored
    assert (tmp_path / "a.json").stat().st_mode & 0o777 == mode


def test_write_replacing_replaces_a_symbolic_link_instead_of_writing_through_it(tmp_path):
    from rdk_theory._outdir import write_replacing

    (tmp_path / "elsewhere.json").write_text("THEIRS")
    (tmp_path / "report.json").symlink_to(tmp_path / "elsewhere.json")
    write_replacing(str(tmp_path / "report.json"), lambda tmp: open(tmp, "w").write("{}"))
    assert not (tmp_path / "report.json").is_symlink()
    assert (tmp_path / "report.json").read_text() == "{}"
    assert (tmp_path / "elsewhere.json").read_text() == "THEIRS"


def test_an_interrupted_write_leaves_the_previous_file_and_no_temporary(tmp_path):
    from rdk_theory._outdir import write_replacing

    (tmp_path / "report.json").write_text("EARLIER")

    def interrupted(tmp):
        open(tmp, "w").write("partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_replacing(str(tmp_path / "report.json"), interrupted)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    assert (tmp_path / "report.json").read_text() == "EARLIER"
