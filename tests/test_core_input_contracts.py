"""The public helpers around the step refuse what they cannot use, in one InputError line:
draft ids, weights, generators, counts, token lists and half-precision probabilities."""
from fractions import Fraction

import numpy as np
import pytest

import rdk_theory as rt
from rdk_theory import string_level as sl
from rdk_theory.validation import as_count, as_prob_array
from tests.stats import assert_matches_law
from tests.tolerances import FLOAT64_ATOL, assert_close


def test_verify_draft_of_an_absent_token_is_a_rejection_and_keeps_the_law():
    """Monte Carlo: n = 40,000 steps with a sub-stochastic r (r(T) = 0.7): the draft is -1 (a
    drafter token the target lacks) with probability 0.3 and is then always rejected; the
    emitted law is p (chi-square at the suite's per-test false-alarm rate, tests/stats.py)."""
    rng = np.random.default_rng(11)
    p = np.array([0.1, 0.0, 0.6, 0.3])
    r = np.array([0.4, 0.2, 0.0, 0.1])
    counts = np.zeros(4, dtype=np.int64)
    for _ in range(40_000):
        x = rt.draw(r, rng) if rng.random() < r.sum() else -1
        tok, ok = rt.verify_draft(p, r, x, rng)
        assert not (x == -1 and ok)
        counts[tok] += 1
    assert_matches_law(counts, p, "verify_draft with absent drafts")
    # -1 is never accepted, whatever the generator draws
    assert not any(rt.verify_draft(p, r, -1, np.random.default_rng(s))[1] for s in range(50))


class _FixedUniform(np.random.Generator):
    """A numpy Generator whose scalar ``random()`` returns ``u`` (the acceptance uniform of
    verify_draft); sized draws (the residual's) come from a real stream."""

    def __init__(self, u):
        super().__init__(np.random.PCG64(0))
        self.u = u

    def random(self, size=None, *args, **kwargs):
        return self.u if size is None else super().random(size, *args, **kwargs)


def test_verify_draft_accepts_exactly_below_p_over_r():
    """Deterministic, at the boundary: with the acceptance uniform u just under min(1, p/r)
    the draft is accepted, just over it rejected and a residual token emitted (one where
    p > r). A Monte Carlo law test has little power against an acceptance mis-scaled by a
    percent (the end-to-end generation check caught 0 of 20 at 1.7 %); this fails at 1e-8."""
    rng = np.random.default_rng(21)
    cases = 0
    for n in (2, 5, 40):
        for _ in range(30):
            p = rng.dirichlet(np.ones(n) * 0.5)
            r = rng.dirichlet(np.ones(n) * 0.5) * rng.choice([1.0, 0.8])  # and sub-stochastic
            for x in np.flatnonzero(r > 0):
                ratio = p[x] / r[x]
                if ratio >= 1:
                    assert rt.verify_draft(p, r, x, _FixedUniform(np.nextafter(1, 0))) \
                        == (x, True)
                    continue
                assert rt.verify_draft(p, r, x, _FixedUniform(ratio * (1 - 1e-8))) == (x, True)
                token, ok = rt.verify_draft(p, r, x, _FixedUniform(ratio * (1 + 1e-8)))
                assert not ok and p[token] > r[token]
                cases += 1
    assert cases > 500


class _Scripted(np.random.Generator):
    """A numpy Generator whose sized ``random(k)`` calls return the given arrays in turn (then
    a real stream)."""

    def __init__(self, *arrays):
        super().__init__(np.random.PCG64(0))
        self.arrays = list(arrays)

    def random(self, size=None, *args, **kwargs):
        if size is not None and self.arrays:
            return np.asarray(self.arrays.pop(0), dtype=np.float64)
        return super().random(size, *args, **kwargs)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_sample_steps_accepts_exactly_below_p_over_r(monkeypatch, backend):
    """The batched sampler's acceptance rule at its boundary, as verify_draft's above: every
    step drafted, each token of positive r drafted (the uniform at the middle of its CDF
    step), the acceptance uniform just under, then just over, min(1, p/r). The uniforms are
    scripted: a numpy Generator's sized draws, or torch.rand on the torch path."""
    rng = np.random.default_rng(22)
    if backend == "torch":
        torch = pytest.importorskip("torch")
        script = []
        real = torch.rand
        monkeypatch.setattr(torch, "rand", lambda k, **kw: torch.as_tensor(
            script.pop(0), dtype=kw.get("dtype")) if script else real(k, **kw))
    for n in (2, 7, 60):
        p = rng.dirichlet(np.ones(n) * 0.5)
        r = rng.dirichlet(np.ones(n) * 0.5)
        xs = np.flatnonzero(r > 0)
        mid = (np.cumsum(r) - r / 2)[xs] / r.sum()  # the uniform that draws each x
        ratio = p[xs] / r[xs]
        for side, ok_where in ((1 - 1e-8, np.ones(xs.size, bool)), (1 + 1e-8, ratio >= 1)):
            u = np.where(ratio >= 1, np.nextafter(1, 0), ratio * side)
            uniforms = [np.zeros(xs.size), mid, u]  # drafted, which token, accept
            if backend == "numpy":
                tokens, accepted = rt.sample_steps(p, r, xs.size, _Scripted(*uniforms))
            else:
                script[:] = uniforms
                tokens, accepted = (t.numpy() for t in rt.sample_steps(
                    torch.tensor(p), torch.tensor(r), xs.size, torch.Generator()))
            assert np.array_equal(accepted, ok_where)
            assert np.array_equal(tokens[accepted], xs[accepted])
            assert np.all(p[tokens[~accepted]] > r[tokens[~accepted]])


@pytest.mark.parametrize("draft, match", [
    (4, "draft = 4 is out of range"), (-2, "draft must be an integer >= -1"),
    (1.5, "draft must be an integer"), ("1", "draft must be an integer"),
])
def test_verify_draft_refuses_ids_outside_the_target(draft, match):
    p = np.array([0.25] * 4)
    with pytest.raises(rt.InputError, match=match):
        rt.verify_draft(p, p, draft, np.random.default_rng(0))


def test_verify_draft_validates_the_laws_and_the_generator():
    p = np.array([0.25] * 4)
    with pytest.raises(rt.InputError, match="target_probs must sum to 1"):
        rt.verify_draft([0.9, 0.9, 0.25, 0.25], p, 0, np.random.default_rng(0))
    with pytest.raises(rt.InputError, match="proposal"):
        rt.verify_draft(p, [0.5, np.nan, 0, 0], 0, np.random.default_rng(0))
    with pytest.raises(rt.InputError, match="one context"):
        rt.verify_draft(p, p[:3] / p[:3].sum(), 0, np.random.default_rng(0))
    with pytest.raises(rt.InputError, match="numpy.random.Generator"):
        rt.verify_draft(p, p, 0, None)
    assert rt.verify_draft(p, p, np.int64(2), np.random.default_rng(0)) == (2, True)


def test_verify_draft_validates_the_inputs_as_given_like_sample_steps():
    """It converted to float64 first: a bfloat16 softmax lost its dtype's tolerance (refused as
    summing to 1.00064), strings were parsed, a ragged list raised numpy's ValueError."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(5000, generator=g) * 3, -1).to(torch.bfloat16)
    assert abs(float(p.double().sum()) - 1) > 1e-4  # beyond the float64 tolerance
    assert rt.verify_draft(p, p, 0, np.random.default_rng(0)) == (0, True)
    rng = np.random.default_rng(0)
    with pytest.raises(rt.InputError, match="target_probs must hold real numbers"):
        rt.verify_draft(["0.5", "0.5"], ["0.5", "0.5"], 0, rng)
    with pytest.raises(rt.InputError, match="target_probs is not a numeric array"):
        rt.verify_draft([0.5, [0.5]], [0.5, 0.5], 0, rng)


@pytest.mark.parametrize("weights, match", [
    (np.zeros(3), "positive sum"), ([0.5, -0.4, 0.5], "non-negative"),
    ([0.5, np.nan, 0.5], "finite"), ([0.5, np.inf], "finite"),
    (np.ones((2, 2)), "1-D"), ([], "non-empty"),
    ("abc", "real numbers"), ([[0.5, 0.5], [1.0]], "not a numeric array"),  # were numpy's
    ({"a": 1}, "real numbers"),                                              # own errors
])
def test_draw_refuses_weights_it_cannot_draw_from(weights, match):
    with pytest.raises(rt.InputError, match=match):
        rt.draw(weights, np.random.default_rng(0))


def test_draw_and_sample_steps_need_a_numpy_generator_for_numpy_input():
    torch = pytest.importorskip("torch")
    p = np.array([0.5, 0.5])
    for rng in (None, torch.Generator(), np.random.RandomState(0)):
        with pytest.raises(rt.InputError, match="numpy.random.Generator"):
            rt.sample_steps(p, p, 3, rng)
        with pytest.raises(rt.InputError, match="numpy.random.Generator"):
            rt.draw(p, rng)


def test_step_counts_must_be_whole_numbers():
    p = np.array([0.5, 0.5])
    rng = np.random.default_rng(0)
    assert rt.sample_steps(p, p, 3.0, rng)[0].shape == (3,)
    assert rt.sample_steps(p, p, np.int32(2), rng)[0].shape == (2,)
    for bad in (2.7, float("nan"), "3", True):
        with pytest.raises(rt.InputError, match="n must be an integer >= 0"):
            rt.sample_steps(p, p, bad, rng)
        with pytest.raises(rt.InputError, match="n must be an integer >= 0"):
            rt.sample_counts(p, p, bad, rng)


def test_as_count_takes_integers_and_whole_floats_only():
    assert [as_count(v, "x") for v in (3, np.int64(3), 3.0, np.float32(3))] == [3] * 4
    assert as_count(-1, "x", lo=-1) == -1
    for bad in (2.5, float("inf"), float("nan"), "3", True, np.bool_(False), None, -1):
        with pytest.raises(rt.InputError, match="x must be an integer >= 0"):
            as_count(bad, "x")
    assert as_count(2**63 - 1, "x") == 2**63 - 1  # int64's largest: numpy sizes and counts in it
    for bad in (2**63, 2**70, 1e19):
        with pytest.raises(rt.InputError, match=r"x must be an integer <= 2\^63 - 1"):
            as_count(bad, "x")


def test_counts_beyond_int64_are_input_errors_not_numpy_errors_or_endless_loops():
    """2**70 steps was numpy's ValueError in sample_steps, a loop that never ended in
    sample_counts (nor could its int64 counts hold the result), and an OverflowError as
    emitted_counts' n_target; a ragged token list was numpy's ValueError."""
    p, rng = np.array([0.5, 0.5]), np.random.default_rng(0)
    for call in (lambda: rt.sample_steps(p, p, 2**70, rng),
                 lambda: rt.sample_counts(p, p, 2**70, rng, progress=False),
                 lambda: rt.emitted_counts([0, 1], 2**70)):
        with pytest.raises(rt.InputError, match=r"<= 2\^63 - 1"):
            call()
    with pytest.raises(rt.InputError, match="ragged"):
        rt.emitted_counts([[0], [1, 2]], 3)


def test_pruned_draft_probs_takes_probabilities_not_logits():
    """Negative (logits), NaN or infinite entries are refused, also outside the kept ids; a row
    missing 1 by float32 round-off over a large vocabulary (1e-4) is renormalised as it is."""
    torch = pytest.importorskip("torch")
    vm = rt.VocabMap.from_kept_ids([0, 2], 4)
    for bad in ([2.0, -3.0, 1.0, 0.0], torch.tensor([2.0, -3.0, 1.0, 0.0]), [0.5, 0.6, -0.1, 0.0],
                [0.5, np.nan, 0.5, 0.0], torch.tensor([0.5, float("inf"), 0.5, 0.0])):
        with pytest.raises(rt.InputError, match="draft_probs_full"):
            rt.pruned_draft_probs(bad, vm)
    for full in ([0.2, 0.3, 0.1, 0.4], torch.tensor([0.2, 0.3, 0.1, 0.4], dtype=torch.float64),
                 [0.2, 0.3, 0.1, 0.4002]):
        assert np.asarray(rt.pruned_draft_probs(full, vm)).tolist() == pytest.approx([2 / 3, 1 / 3])


def test_vocabulary_builders_refuse_non_integer_ids_and_sizes():
    with pytest.raises(rt.InputError, match="kept_ids must hold integer ids"):
        rt.VocabMap.from_kept_ids(["1", "2"], 5)
    with pytest.raises(rt.InputError, match="k must be an integer >= 1"):
        rt.keep_most_frequent([3, 2, 1], 2.5)
    assert rt.keep_most_frequent([3, 2, 1], 2.0).tolist() == [0, 1]
    with pytest.raises(rt.InputError, match="vocabulary size must be an integer >= 1"):
        rt.synthetic.dirichlet(np.random.default_rng(0), 4.5)


def test_marginal_kernel_takes_an_integer_point_mass_and_refuses_a_non_number_lam():
    torch = pytest.importorskip("torch")
    q = np.array([0.2, 0.5, 0.3])
    from_int = rt.MarginalKernel(torch.tensor([0, 1, 0]), 0.5).transport(q)
    assert from_int.tolist() == rt.MarginalKernel(np.array([0.0, 1.0, 0.0]), 0.5).transport(q).tolist()
    for lam in (None, "0.5", 1.5, torch.tensor([0.5, 0.5]), True):  # the tensor: torch's error
        with pytest.raises(rt.InputError, match="lam must be a number in"):
            rt.MarginalKernel(np.array([0.0, 1.0, 0.0]), lam)
    # one number in any form is that number; an int or Fraction stays exact
    for lam in (np.float32(0.5), torch.tensor(0.5), np.array(0.5)):
        assert rt.MarginalKernel(np.array([0.0, 1.0, 0.0]), lam).lam == 0.5
    assert type(rt.MarginalKernel(np.array([0.0, 1.0, 0.0]), Fraction(1, 2)).lam) is Fraction


def test_a_missing_vocab_map_or_a_vector_of_embeddings_is_an_input_error():
    """Each was an AttributeError or numpy's AxisError: the kernel was checked against
    vocab_map.n_target before vocab_map itself, and the embeddings' norm ran over axis 1."""
    q, cal = np.full((1, 4), 0.25), np.random.default_rng(0).dirichlet(np.ones(6), 5)
    with pytest.raises(rt.InputError, match="vocab_map must be a rdk_theory.VocabMap"):
        rt.rdk_proposal(q, None, rt.DenseKernel(np.eye(6)))
    with pytest.raises(rt.InputError, match="vocab_map must be a rdk_theory.VocabMap"):
        rt.MarginalKernel.from_calibration(cal, None, 0.5)
    for e in (np.ones(3), 1.0):
        with pytest.raises(rt.InputError, match=r"embeddings must be \(N, d\)"):
            rt.cosine_affinity(e)


def test_segmentations_count_a_repeated_drafter_token_once():
    """psi("a") for a unigram drafter over {a: 1/4, ab: 1/2, b: 1/4}: tokens starting with "a"
    carry 3/4; listing "a" twice must not count its segmentation twice (5/4 before the fix)."""
    probs = {"a": Fraction(1, 4), "ab": Fraction(1, 2), "b": Fraction(1, 4)}
    drafter = sl.unigram_drafter(probs)
    got = sl.psi_by_segmentations(["a"], drafter, ["a", "ab", "b", "a"])
    assert got.tolist() == [Fraction(3, 4)] == sl.psi(["a"], drafter).tolist()
    for fn in (lambda: sl.psi([""], drafter), lambda: sl.psi_by_segmentations([""], drafter, ["a"])):
        with pytest.raises(rt.InputError, match="non-empty strings"):
            fn()


def test_half_precision_softmax_rows_pass_within_their_rounding():
    """A bf16 / fp16 softmax row misses 1 by its rounding (up to a few 1e-4 over a 49,152-token
    vocabulary, above the float tolerance 1e-4): accepted within the dtype's eps, and a row
    that misses by more is still refused."""
    torch = pytest.importorskip("torch")
    logits = torch.randn(8, 49_152, generator=torch.Generator().manual_seed(0)) * 3
    for dtype in (torch.bfloat16, torch.float16):
        rows = torch.softmax(logits, -1).to(dtype)
        miss = float((rows.sum(-1, dtype=torch.float64) - 1).abs().max())
        assert miss < torch.finfo(dtype).eps
        assert as_prob_array(rows, "p") is rows
        with pytest.raises(rt.InputError, match="must sum to 1"):
            as_prob_array(rows * 1.05, "p")
    with pytest.raises(rt.InputError, match=r"tolerance 0\.0001"):
        as_prob_array(torch.softmax(logits, -1).double() * (1 + 2e-4), "p")


def test_rejected_steps_draw_from_the_residual_even_when_it_is_tiny():
    """p = (0.5, 0.3, 0.2), r = (0.5005, 0.3, 0.1995): the residual max(p - r, 0) is 5e-4 on
    token 2 alone, so every rejected step must emit token 2 (a certainty, not a statistic).
    n = 400,000 steps give about 200 rejections; a step that fell back to p for a small
    residual would emit tokens 0 and 1 on most of them. numpy and torch."""
    torch = pytest.importorskip("torch")
    p = np.array([0.5, 0.3, 0.2])
    r = np.array([0.5005, 0.3, 0.1995])
    for pp, rr, rng in ((p, r, np.random.default_rng(5)),
                        (torch.tensor(p), torch.tensor(r), torch.Generator().manual_seed(5))):
        tokens, accepted = rt.sample_steps(pp, rr, 400_000, rng)
        tokens, accepted = np.asarray(tokens), np.asarray(accepted)
        assert (~accepted).sum() > 50  # the case does reject
        assert set(tokens[~accepted].tolist()) == {2}


def test_a_proposal_summing_just_above_one_is_rescaled_before_the_ratio():
    """r = p (1 + 5e-5) passes validation (tolerance 1e-4) and is rescaled to p itself: then
    every draft is accepted (p / r = 1). Used unrescaled, the ratio p / r = 1 / (1 + 5e-5)
    would reject about 10 of these n = 200,000 steps. numpy and torch."""
    torch = pytest.importorskip("torch")
    p = np.array([0.5, 0.25, 0.125, 0.125])
    r = p * (1 + 5e-5)
    for pp, rr, rng in ((p, r, np.random.default_rng(6)),
                        (torch.tensor(p), torch.tensor(r), torch.Generator().manual_seed(6))):
        _, accepted = rt.sample_steps(pp, rr, 200_000, rng)
        assert bool(np.asarray(accepted).all())


def test_round_off_negatives_are_zero_and_counts_take_exact_and_0d_numbers():
    """Entries in [-1e-12, 0) are round-off everywhere (as in acceptance_rate); k and n accept a
    whole Fraction and 0-d arrays/tensors; multidraft refuses k = 2.5 instead of using 2."""
    torch = pytest.importorskip("torch")
    assert rt.draw([0.5, 0.5, -1e-17], np.random.default_rng(0)) in (0, 1)
    with pytest.raises(rt.InputError, match="non-negative"):
        rt.InverseCdf([0.5, -0.1, 0.6])
    vm = rt.VocabMap.from_kept_ids([0, 2], 4)
    for full in ([0.5, 0.2, 0.3 - 1e-17, -1e-17], torch.tensor([0.5, 0.2, 0.3, -1e-17],
                                                                   dtype=torch.float64)):
        assert np.asarray(rt.pruned_draft_probs(full, vm)).tolist() == pytest.approx([5 / 8, 3 / 8])
    assert [as_count(v, "k", 1) for v in (Fraction(2), np.array(3), np.array(3.0),
                                          torch.tensor(4))] == [2, 3, 3, 4]
    from rdk_theory import multidraft as md

    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    for fn in (md.kseq_best_rho, md.optimal_acceptance_lp, md.optimal_acceptance_cut):
        with pytest.raises(rt.InputError, match="k \\(number of drafts\\) must be an integer"):
            fn(p, q, 2.5)


def test_a_special_hole_matches_nothing():
    vm = rt.VocabMap.from_token_strings(["a", ""], ["", "a"], draft_special_ids=[1],
                                        target_special_ids=[0])
    assert vm.draft_to_target.tolist() == [1, -1]


def test_kernel_builders_refuse_what_they_cannot_use_in_one_input_error():
    """Each of these was a raw TypeError, AttributeError or numpy ValueError."""
    cal = np.random.default_rng(0).dirichlet(np.ones(8), size=5)
    vm = rt.VocabMap(8, [0, 1, 2])
    cases = [
        (lambda: rt.sparse_topk_kernel(cal.T @ cal, 2.5), "k must be an integer >= 1"),
        (lambda: rt.sparse_topk_kernel(cal.T @ cal, "2"), "k must be an integer >= 1"),
        (lambda: rt.FirstOrderCovarianceKernel(cal, 1.0, rank="2"), "rank must be an integer"),
        (lambda: rt.FirstOrderCovarianceKernel(cal, 1.0, rank=6), r"rank must be in \[1, 5\]"),
        (lambda: rt.MarginalKernel(np.full(3, 1 / 3), np.array([0.5, 0.5])), "lam must be"),
        (lambda: rt.rdk_proposal(np.full(3, 1 / 3), vm, np.eye(8)), "as_kernel"),
        (lambda: rt.rdk_proposal(np.full(3, 1 / 3), vm, None), "kernel must be a kernel"),
        (lambda: rt.build_proposals(np.full(3, 1 / 3), vm, first_order=np.eye(8)),
         "first_order must be a kernel"),
    ]
    for build, match in cases:
        with pytest.raises(rt.InputError, match=match):
            build()
    # a whole float is its integer, as for every other count
    assert rt.sparse_topk_kernel(cal.T @ cal, 2.0).matrix.nnz == 16
    assert rt.FirstOrderCovarianceKernel(cal, 1.0, rank=2.0).factor.shape == (2, 8)


def test_exact_covariance_kernel_takes_fraction_calibration_rows_as_the_others_do():
    """as_calibration returns Fraction rows as given; the first-order and marginal kernels took
    them, the exact covariance kernel failed in np.exp on an object array."""
    rows = [[Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)],
            [Fraction(1, 4), Fraction(1, 2), Fraction(1, 4)]]
    exact, floats = np.array(rows, dtype=object), np.array(rows, dtype=float)
    q = np.array([0.2, 0.3, 0.5])
    for tau in (1.0, 0.01):
        assert np.array_equal(rt.CovarianceSoftmaxKernel(exact, tau).transport(q),
                              rt.CovarianceSoftmaxKernel(floats, tau).transport(q))
        assert np.array_equal(rt.covariance_softmax_kernel(exact, tau).matrix,
                              rt.covariance_softmax_kernel(floats, tau).matrix)


@pytest.mark.parametrize("tokens, match", [
    ([0, 3], "tokens holds 3, outside the 3 target ids"),  # lengthened the counts to 4
    ([-1, 0], "tokens holds -1, outside"),  # numpy's ValueError
    ([[0, 1]], "1-D list of integer target ids"),
    ([0.0, 1.0], "1-D list of integer target ids"),
    (("tensor", [0, 3]), "tokens holds 3"),  # a torch tensor, built when the case runs
    (("tensor", [0.0]), "1-D list of integer target ids"),
])
def test_emitted_counts_refuses_ids_outside_the_target(tokens, match):
    if isinstance(tokens, tuple):  # the tensor cases alone need torch
        torch = pytest.importorskip("torch")
        tokens = torch.tensor(tokens[1])
        assert rt.emitted_counts(torch.tensor([2, 2, 0]), 3).tolist() == [1, 0, 2]
    with pytest.raises(rt.InputError, match=match):
        rt.emitted_counts(tokens, 3)
    assert rt.emitted_counts([], 3).tolist() == [0, 0, 0]


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64", "int32"])
def test_emitted_counts_takes_unsigned_tensors(dtype):
    # torch has no min/max/bincount for uint16/32/64: this was torch's NotImplementedError
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, dtype)
    assert rt.emitted_counts(torch.tensor([2, 2, 0], dtype=dtype), 3).tolist() == [1, 0, 2]
    with pytest.raises(rt.InputError, match="tokens holds 3, outside"):
        rt.emitted_counts(torch.tensor([0, 3], dtype=dtype), 3)
    if dtype == torch.uint64:  # ids from 2^63 wrap in the cast; the message names the id given
        with pytest.raises(rt.InputError, match=f"tokens holds {2**64 - 1}, outside"):
            rt.emitted_counts(torch.tensor([1, 2**64 - 1], dtype=dtype), 3)


def test_verify_draft_says_its_generator_is_numpy_even_for_tensors():
    torch = pytest.importorskip("torch")
    p = torch.tensor([0.5, 0.5], dtype=torch.float64)
    with pytest.raises(rt.InputError, match="verify_draft draws on the host .* numpy.random.Generator"):
        rt.verify_draft(p, p, 0, torch.Generator())
    assert rt.verify_draft(p, p, 0, np.random.default_rng(0)) == (0, True)


def test_sampling_a_tensor_that_requires_grad_draws_no_autograd_warning():
    import warnings

    torch = pytest.importorskip("torch")
    p = torch.tensor([0.5, 0.5], dtype=torch.float64, requires_grad=True)
    r = torch.tensor([0.3, 0.7], dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tokens, _ = rt.sample_steps(p, r, 100, torch.Generator().manual_seed(0))
    assert not tokens.requires_grad


def _kernels_over_8():
    cal = np.random.default_rng(0).dirichlet(np.ones(8), size=5)
    return {"covariance": rt.CovarianceSoftmaxKernel(cal, 0.1),
            "sparse": rt.sparse_topk_kernel(rt.covariance_affinity(cal), 3, n=8),
            "first_order": rt.FirstOrderCovarianceKernel(cal, 1.0),
            "dense": rt.DenseKernel(np.eye(8)), "marginal": rt.MarginalKernel(np.ones(8) / 8, 0.5)}


@pytest.mark.parametrize("name", ["covariance", "sparse", "first_order", "dense", "marginal"])
def test_every_kernel_refuses_rows_of_the_wrong_width(name):
    """A (6, 4) q' against a kernel over 8 ids: the covariance and sparse kernels reshaped it
    into three rows of 8 and returned a (6, 4) array of meaningless numbers; the dense and
    first-order kernels raised numpy's ValueError."""
    torch = pytest.importorskip("torch")
    kernel = _kernels_over_8()[name]
    q = np.random.default_rng(1).dirichlet(np.ones(4), size=6)
    for bad, got in ((q, "got 4 on its last axis"), (torch.tensor(q), "got 4 on its last axis"),
                     (np.array(1.0), "got a scalar")):
        with pytest.raises(rt.InputError, match=f"kernel's 8 target ids on its last axis, {got}"):
            kernel.transport(bad)
    assert kernel.transport(np.full((2, 8), 1 / 8)).shape == (2, 8)
    assert_close(kernel.transport([1 / 8] * 8), kernel.transport(np.full(8, 1 / 8)))  # a list


def test_first_order_with_acceptance_names_a_target_that_does_not_fit():
    fo = _kernels_over_8()["first_order"]
    with pytest.raises(rt.InputError, match="target_probs must hold the kernel's 8 target ids"):
        fo.transport_with_acceptance(np.full(8, 1 / 8), np.full(4, 1 / 4))
    with pytest.raises(rt.InputError, match=r"target_probs has leading shape \(3,\), q_prime \(2,\)"):
        fo.transport_with_acceptance(np.full((2, 8), 1 / 8), np.full((3, 8), 1 / 8))


def test_fractions_mixed_with_floats_give_float64_not_an_object_array_of_floats():
    """An object array is the exact tier; a float operand (q', the kernel or lam) made one of
    Python floats, which acceptance_rate then refused ('a non-Fraction'). All exact stays exact."""
    F = Fraction
    vm = rt.VocabMap.identity(3)
    q, q_exact = np.array([0.2, 0.3, 0.5]), np.array([F(1, 5), F(3, 10), F(1, 2)], dtype=object)
    w = np.array([F(1, 4), F(1, 4), F(1, 2)], dtype=object)
    r, a = rt.rdk_proposal_with_acceptance(q, q, vm, rt.MarginalKernel(w.astype(float), F(1, 2)))
    assert r.dtype == np.float64 and a == pytest.approx(0.975) == rt.acceptance_rate(q, r)
    assert rt.MarginalKernel(w, 0.5).transport(q_exact).dtype == np.float64
    assert rt.DenseKernel(np.diag([F(1)] * 3)).transport(q).dtype == np.float64
    exact = rt.MarginalKernel(w, F(1, 2)).transport(q_exact)
    assert exact.tolist() == [F(9, 40), F(11, 40), F(1, 2)]
    fo = rt.FirstOrderCovarianceKernel(np.array([q, q[::-1]]), 1.0)
    assert np.array_equal(fo.transport(q_exact), fo.transport(q))  # its numbers are floats


def test_exact_kernels_transport_tensors_and_build_from_fraction_rows():
    """Fraction kernels met a tensor with torch's TypeError (an object array, a Fraction lam);
    the truncated first-order kernel of Fraction rows hit numpy's SVD with object dtype."""
    torch = pytest.importorskip("torch")
    F = Fraction
    half = torch.tensor([0.5, 0.5], dtype=torch.float64)
    dense = rt.DenseKernel(np.array([[F(1), F(0)], [F(1, 2), F(1, 2)]], dtype=object))
    assert dense.transport(half).tolist() == [0.75, 0.25]
    marginal = rt.MarginalKernel(np.array([F(1), F(0)], dtype=object), F(1, 2))
    assert marginal.transport(half).tolist() == [0.75, 0.25]
    rows = [[F(1, 2), F(1, 4), F(1, 4)], [F(1, 4), F(1, 2), F(1, 4)], [F(1, 8), F(1, 8), F(3, 4)]]
    q = np.array([0.2, 0.3, 0.5])
    assert np.array_equal(
        rt.FirstOrderCovarianceKernel(np.array(rows, dtype=object), 1.0, rank=1).transport(q),
        rt.FirstOrderCovarianceKernel(np.array(rows, dtype=float), 1.0, rank=1).transport(q))


def test_tau_takes_any_real_number_and_refuses_arrays_and_bools_by_name():
    """tau = Fraction(1, 10) was refused as 'not finite' (np.isfinite raised on it); an array
    tau was numpy's 'truth value is ambiguous'; True passed as tau = 1."""
    cal = np.random.default_rng(0).dirichlet(np.ones(6), size=4)
    q = np.full(6, 1 / 6)
    for build in (rt.CovarianceSoftmaxKernel, rt.FirstOrderCovarianceKernel):
        assert np.array_equal(build(cal, Fraction(1, 10)).transport(q), build(cal, 0.1).transport(q))
        assert build(cal, np.array(0.5)).tau == build(cal, np.float32(0.5)).tau == 0.5
        for bad in (np.array([1.0, 2.0]), True, np.True_, "0.1", 1j, -Fraction(1, 2)):
            with pytest.raises(rt.InputError, match="tau must be a finite real number > 0"):
                build(cal, bad)


def test_object_arrays_are_exact_when_every_entry_is_and_floats_otherwise():
    """numpy ints in an object array are exact like Python ints (they were refused as
    'non-Fraction'); an object array mixing Fractions and floats is read as floats, as the
    same list is (it was refused)."""
    exact = as_prob_array(np.array([np.int64(1), Fraction(0)], dtype=object), "p")
    assert exact.dtype == object and rt.acceptance_rate(
        exact, np.array([Fraction(1, 2), Fraction(1, 2)], dtype=object)) == Fraction(1, 2)
    mixed = as_prob_array(np.array([Fraction(1, 2), 0.5], dtype=object), "p")
    assert mixed.dtype == np.float64 and np.array_equal(mixed, as_prob_array([Fraction(1, 2), 0.5], "p"))
    with pytest.raises(rt.InputError, match="negative entry"):
        as_prob_array(np.array([Fraction(3, 2), Fraction(-1, 2)], dtype=object), "p")
    with pytest.raises(rt.InputError, match="must hold real numbers"):
        as_prob_array(np.array([Fraction(1, 2), "1/2"], dtype=object), "p")


def test_integer_and_bool_tensors_are_read_as_float64_like_numpy_arrays():
    """A point mass given as an int or bool tensor gives float64 results, as the same numpy
    array does (an int64 acceptance tensor, a bool proposal, before)."""
    torch = pytest.importorskip("torch")
    vm = rt.VocabMap(3, [0, 2])
    got = rt.acceptance_rate(torch.tensor([1, 0]), torch.tensor([1, 0]))
    assert got.dtype == torch.float64 and float(got) == 1.0
    r = rt.vanilla_proposal(torch.tensor([True, False]), vm)
    assert r.dtype == torch.float64 and r.tolist() == [1.0, 0.0, 0.0]
    assert np.array_equal(rt.vanilla_proposal(np.array([True, False]), vm), r.numpy())


def test_acceptance_refuses_a_proposal_of_another_width_even_when_it_broadcasts():
    """A proposal of width 1 broadcast against every target token without the width check
    (alpha([0.5, 0.5], [1.0]) came out 1.0); wider mismatches were numpy's ValueError,
    which no test told apart."""
    from rdk_theory.acceptance import acceptance_rate, residual
    from rdk_theory.validation import InputError

    for f in (acceptance_rate, residual):
        with pytest.raises(InputError, match="must share the last axis"):
            f(np.array([0.5, 0.5]), np.array([1.0]))


def test_acceptance_refuses_a_target_that_does_not_sum_to_one():
    """The target is a law: a target summing to 0.6 must be refused (the proposal alone may
    be sub-stochastic)."""
    from rdk_theory.acceptance import acceptance_rate, step_output_law
    from rdk_theory.validation import InputError

    for f in (acceptance_rate, step_output_law):
        with pytest.raises(InputError, match="target_probs must sum to 1"):
            f(np.array([0.3, 0.3, 0.0]), np.array([0.2, 0.3, 0.5]))
        with pytest.raises(InputError, match="target_probs must sum to 1"):
            f(np.array([Fraction(1, 3), Fraction(1, 3), Fraction(0)], dtype=object),
              np.array([Fraction(1, 2)] * 2 + [Fraction(0)], dtype=object))


def test_sub_stochastic_rows_may_not_exceed_one():
    """A sub-stochastic row may sum to less than 1, never more: beyond PROB_ATOL for floats,
    at all for Fractions."""
    from rdk_theory.validation import InputError, PROB_ATOL

    with pytest.raises(InputError, match="must sum to at most 1"):
        as_prob_array(np.array([0.5, 0.5 + 2 * PROB_ATOL]), "r", allow_sub_stochastic=True)
    with pytest.raises(InputError, match="must sum to at most 1 along"):
        as_prob_array(np.array([Fraction(2, 3), Fraction(2, 3)], dtype=object), "r",
                      allow_sub_stochastic=True)


def test_verify_draft_refuses_an_absent_draft_when_r_has_no_mass_for_it():
    """draft = -1 (a drafter token the target lacks) has probability 1 - r(T) = 0 when r sums
    to 1: it was not drawn from r, and taking it always drew the residual (output law (0, 1)
    for p = (1/2, 1/2))."""
    with pytest.raises(rt.InputError, match="draft = -1 .* probability 0"):
        rt.verify_draft([0.5, 0.5], [0.9, 0.1], -1, np.random.default_rng(0))
    # a sub-stochastic r leaves it its mass: still taken (and rejected)
    assert rt.verify_draft([0.5, 0.5], [0.6, 0.1], -1, np.random.default_rng(0))[1] is False


def test_emitted_counts_casts_unsigned_numpy_ids(monkeypatch):
    """numpy 1.26 (the lowest the project allows) refuses uint64 in bincount ('Cannot cast
    array data from dtype uint64 to int64 according to the rule safe'); simulated here."""
    real = np.bincount

    def bincount_126(x, *args, **kwargs):
        if np.asarray(x).dtype == np.uint64:
            raise TypeError("Cannot cast array data from dtype('uint64') to dtype('int64')")
        return real(x, *args, **kwargs)

    monkeypatch.setattr(np, "bincount", bincount_126)
    ids = np.array([0, 1, 1], dtype=np.uint64)
    assert rt.emitted_counts(ids, 3).tolist() == [1, 2, 0]


@pytest.mark.parametrize("layout", ["sparse", "meta"])
def test_emitted_counts_and_counts_refuse_sparse_and_meta_tensors(layout):
    """These were raw torch errors (no min on a sparse tensor, no .item() on a meta one)."""
    torch = pytest.importorskip("torch")
    convert = (lambda t: t.to_sparse()) if layout == "sparse" else (lambda t: t.to("meta"))
    want = "must be a dense tensor" if layout == "sparse" else "meta device"
    with pytest.raises(rt.InputError, match=f"tokens .*{want}"):
        rt.emitted_counts(convert(torch.tensor([0, 1, 2])), 3)
    if layout == "meta":  # a 0-d tensor has no sparse form
        with pytest.raises(rt.InputError, match=f"n .*{want}"):
            rt.sample_steps([1.0], [1.0], convert(torch.tensor(3)), np.random.default_rng(0))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_sample_steps_refuses_n_it_cannot_hold_and_names_sample_counts(backend):
    """n = 2^62 passed as_count and was numpy's 'array is too big' ValueError or torch's
    'Storage size calculation overflowed' RuntimeError."""
    if backend == "torch":
        torch = pytest.importorskip("torch")
    p = [1.0] if backend == "numpy" else torch.tensor([1.0], dtype=torch.float64)
    rng = np.random.default_rng(0) if backend == "numpy" else None
    with pytest.raises(rt.InputError, match="use sample_counts"):
        rt.sample_steps(p, p, 2**62, rng)
    assert rt.sample_steps(p, p, 3, rng)[0].tolist() == [0, 0, 0]


def test_the_progress_bar_is_off_when_there_is_no_stderr(monkeypatch):
    """pythonw and some embedded hosts set sys.stderr to None: sample_counts failed on the
    bar's isatty() check."""
    import sys

    monkeypatch.setattr(sys, "stderr", None)
    counts, accepted = rt.sample_counts([0.5, 0.5], [0.9, 0.1], 10, np.random.default_rng(0))
    assert counts.sum() == 10 and 0 <= accepted <= 10


def test_acceptance_of_fractions_with_floats_is_float64_not_an_object_array():
    """A Fraction target with a float proposal gave a Python float (one row) or an object array
    of Python floats (several), which numpy's ufuncs and torch refuse;
    rdk_proposal_with_acceptance returned such an alpha too (also on the first-order kernel's
    path). Now float64, as Fractions mixed with floats are everywhere else; all exact stays
    exact."""
    F = Fraction
    p = np.array([[F(1, 3), F(2, 3), F(0)], [F(1, 2), F(1, 2), F(0)]], dtype=object)
    r = np.array([[0.5, 0.25, 0.25], [0.2, 0.3, 0.5]])
    for f in (rt.acceptance_rate, rt.residual, rt.step_output_law, rt.total_variation):
        for a, b in ((p, r), (r, p), (p[0], r[0])):
            got = f(a, b)
            assert np.asarray(got).dtype == np.float64, f.__name__
            assert_close(got, f(np.asarray(a, dtype=float), np.asarray(b, dtype=float)))
    assert np.isfinite(rt.acceptance_rate(p, r)).all()
    assert rt.acceptance_rate(p, p[::-1]).tolist() == [F(5, 6)] * 2  # exact with exact
    vm = rt.VocabMap(3, np.array([0, 2]))
    q, q_exact = np.array([[0.5, 0.5], [0.2, 0.8]]), np.array([[F(1, 2)] * 2] * 2, dtype=object)
    cal = np.random.default_rng(0).dirichlet(np.ones(3), 4)
    for kernel in (rt.IdentityKernel(), rt.FirstOrderCovarianceKernel(cal, 1.0)):
        for target, draft in ((p, q), (r, q_exact)):
            alpha = rt.rdk_proposal_with_acceptance(target, draft, vm, kernel)[1]
            assert alpha.dtype == np.float64, type(kernel).__name__
    for engine in ("numpy", "auto"):  # the first-order kernel called directly, too
        kernel = rt.FirstOrderCovarianceKernel(cal, 1.0, engine=engine)
        assert np.asarray(kernel.transport_with_acceptance(r, p)[1]).dtype == np.float64
    _, alpha = rt.rdk_proposal_with_acceptance(p, q_exact, vm, rt.IdentityKernel())
    assert alpha.tolist() == [F(1, 3), F(1, 2)]


def test_marginal_kernel_of_fraction_calibration_rows_is_exact():
    """from_calibration built w as float64 and lam as a float from Fraction rows, so exact RDK
    with the marginal kernel silently became float64. Now w, lam and dense() are exact (int
    rows too, whose numpy mean was a float); a float q', target or lam gives float64."""
    torch = pytest.importorskip("torch")
    F = Fraction
    cal = np.array([[F(1, 2), F(1, 4), F(1, 4)], [F(1, 4), F(1, 4), F(1, 2)]], dtype=object)
    vm = rt.VocabMap(3, np.array([0, 1]))
    k = rt.MarginalKernel.from_calibration(cal, vm)
    assert k.w.dtype == object and k.w.tolist() == [0, 0, 1]
    assert type(k.lam) is F and k.lam == F(3, 8)
    assert rt.MarginalKernel.calibration_oov_mass(cal, vm)[1] == F(3, 8)
    q_exact = np.array([F(1, 3), F(2, 3)], dtype=object)
    r = rt.rdk_proposal(q_exact, vm, k)
    assert r.tolist() == [F(5, 24), F(5, 12), F(3, 8)]
    assert k.dense().dtype == object and np.array_equal(rt.tli_proposal(q_exact, vm) @ k.dense(), r)
    assert k.row_sums().tolist() == [1]
    p_exact = np.array([F(1, 2), F(1, 4), F(1, 4)], dtype=object)
    assert rt.rdk_proposal_with_acceptance(p_exact, q_exact, vm, k)[1] == F(17, 24)
    # a float anywhere: float64, the numbers of the float kernel
    floats = rt.MarginalKernel.from_calibration(cal.astype(float), vm)
    q, q2 = np.array([0.2, 0.3, 0.5]), np.array([0.4, 0.6])
    assert k.transport(q).dtype == np.float64
    assert np.array_equal(k.transport(q), floats.transport(q))
    assert rt.rdk_proposal(q2, vm, k).dtype == np.float64
    assert k.transport(torch.tensor(q)).tolist() == floats.transport(q).tolist()
    alpha = rt.rdk_proposal_with_acceptance(p_exact.astype(float), q_exact, vm, k)[1]
    assert alpha.dtype == np.float64 and alpha == pytest.approx(17 / 24)
    half = rt.MarginalKernel.from_calibration(cal, vm, lam=0.5)
    assert half.transport(rt.tli_proposal(q_exact, vm)).dtype == np.float64
    assert half.dense().dtype == np.float64
    points = np.array([[1, 0, 0], [0, 0, 1]], dtype=object)  # exact rows of ints
    assert type(rt.MarginalKernel.from_calibration(points, vm).lam) is F
    ident = rt.MarginalKernel.from_calibration(cal, rt.VocabMap.identity(3))  # no OOV
    assert ident.lam == 0 and ident.w.tolist() == [F(1, 3)] * 3
    third = np.array([F(1, 3), F(2, 3), F(0)], dtype=object)
    assert ident.transport(third).tolist() == third.tolist()
    assert ident.transport(third).dtype == object


def test_a_huge_fraction_count_is_an_input_error_not_an_overflow():
    """as_count read a Fraction through float(), which overflows beyond 1e308: Fraction(10**400)
    as n was an OverflowError traceback. Now a whole Fraction is its integer (too large: the
    int64 bound's message) and any other one not an integer."""
    p, rng = np.array([0.5, 0.5]), np.random.default_rng(0)
    with pytest.raises(rt.InputError, match=r"n must be an integer <= 2\^63 - 1"):
        rt.sample_counts(p, p, Fraction(10**400), rng)
    with pytest.raises(rt.InputError, match="n must be an integer >= 0"):
        rt.sample_counts(p, p, Fraction(10**400, 3), rng)
    for bad in (Fraction(-10**400), Fraction(5, 2)):
        with pytest.raises(rt.InputError, match="x must be an integer >= 0"):
            as_count(bad, "x")
    assert as_count(Fraction(6, 3), "x") == 2


def test_the_ignored_arrays_warning_is_one_line_for_a_file_name_with_a_line_break(tmp_path,
                                                                                    capsys):
    """The warning printed the file name as given: 'ex\\ntra.npz' split it over two lines of
    stderr, where errors escape line breaks (cli._one_line). Now one 'warning: ...' line."""
    from rdk_theory.cli import main

    rng = np.random.default_rng(0)
    path = tmp_path / "ex\ntra.npz"
    np.savez(path, target_probs=rng.dirichlet(np.ones(4), 2),
             draft_probs=rng.dirichlet(np.ones(3), 2), draft_to_target=np.array([0, 1, -1]),
             ids=np.arange(3))
    assert main(["acceptance", str(path), "--json"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == [err.rstrip("\n")] and err.startswith("warning: ")
    assert "ex\\ntra.npz: ignoring arrays ['ids']" in err


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_float8_laws_are_refused_and_float8_transport_inputs_read_as_float32(dtype):
    """torch has no isfinite, comparison, minimum or sum for float8 tensors: acceptance_rate
    and the samplers raised torch's NotImplementedError. Read within their eps (0.125, 0.25)
    they gave acceptance_rate(p, p) = 1.25 for p = (0.625, 0.625): a float8 row is hardly a
    law, so as a law it is an InputError saying how to upcast it; a kernel's transport (a
    linear map, no law check) reads a float8 q' as float32; and the float formats torch
    cannot read as numbers are InputErrors naming the dtype."""
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, dtype)
    p, q = torch.tensor([0.25, 0.75]).to(dtype), torch.tensor([0.5, 0.5]).to(dtype)
    for call in (lambda: rt.acceptance_rate(p, q), lambda: rt.residual(p, q),
                 lambda: rt.sample_counts(p, p, 100, torch.Generator().manual_seed(0)),
                 lambda: rt.tli_proposal(q, rt.VocabMap(3, [0, 2]))):
        with pytest.raises(rt.InputError, match=rf"has dtype {dtype}, .*upcast and renormalise"):
            call()
    kernel = rt.DenseKernel(np.eye(3))
    got = kernel.transport(torch.tensor([0.5, 0.0, 0.5]).to(dtype))
    assert got.dtype == torch.float32 and got.tolist() == [0.5, 0.0, 0.5]
    for name, what in (("float8_e8m0fnu", "a scale format"), ("float4_e2m1fn_x2", "packed")):
        if hasattr(torch, name):  # powers of two alone; two numbers a byte
            odd = torch.tensor([0, 1], dtype=torch.uint8).view(getattr(torch, name))
            with pytest.raises(rt.InputError, match=f"has dtype torch.{name}, .*{what}"):
                rt.acceptance_rate(odd, odd)


def test_sample_counts_names_its_own_chunk_when_a_chunk_is_too_large():
    """A chunk above MAX_STEPS reached sample_steps, whose message told the caller (already in
    sample_counts) to 'use sample_counts'. Now the message names chunk; a large chunk with a
    small n still runs."""
    p, rng = np.array([0.5, 0.5]), np.random.default_rng(0)
    with pytest.raises(rt.InputError, match="chunk = 2199023255552") as info:
        rt.sample_counts(p, p, 2**41, rng, chunk=2**41)
    assert "use sample_counts" not in str(info.value)
    assert rt.sample_counts(p, p, 10, rng, chunk=2**41)[0].sum() == 10


@pytest.mark.parametrize("fn", [sl.slem_acceptance, sl.slrs_acceptance])
def test_string_level_acceptance_refuses_a_psi_narrower_than_the_target(fn):
    """psi of one entry against a target law of two tokens is refused, not broadcast over the
    tokens (sum_t p(t) psi would read psi(t) = 1 for every t: alpha 1). Only a psi wider
    than the target was tried."""
    with pytest.raises(rt.InputError, match=r"target_probs and psi must cover the same target "
                                            r"tokens \(last axis\), got shapes \(2,\) and \(1,\)"):
        fn([0.5, 0.5], [1.0])


def _toy_calibration(n=8, s=5, seed=0):
    return np.random.default_rng(seed).dirichlet(np.ones(n), size=s)


def test_a_temperature_or_weight_given_as_a_tensor_that_requires_grad_is_its_value():
    """torch.nn.Parameter(1e-3) as tau (lam) raised torch's "Can't call numpy() on Tensor
    that requires grad" in every kernel that takes one, where the same tensor detached was
    taken: it is read as its value, and the kernel is the float's."""
    torch = pytest.importorskip("torch")
    cal = _toy_calibration()
    q = np.random.default_rng(1).dirichlet(np.ones(8))
    tau = torch.nn.Parameter(torch.tensor(1e-2, dtype=torch.float64))
    assert_close(rt.FirstOrderCovarianceKernel(cal, tau).transport(q),
                 rt.FirstOrderCovarianceKernel(cal, 1e-2).transport(q))
    assert_close(rt.CovarianceSoftmaxKernel(cal, tau).transport(q),
                 rt.covariance_softmax_kernel(cal, 1e-2).transport(q))
    lam = torch.nn.Parameter(torch.tensor(0.25))
    assert rt.MarginalKernel(np.full(8, 1 / 8), lam).lam == 0.25


@pytest.mark.parametrize("call", [
    lambda q, vm: rt.rdk_proposal(q, vm, rt.IdentityKernel),
    lambda q, vm: rt.build_proposals(q, vm, first_order=rt.FirstOrderCovarianceKernel),
    lambda q, vm: rt.as_kernel(rt.DenseKernel)])
def test_a_kernel_class_for_a_kernel_is_refused_by_name(call):
    """rdk_proposal(q, vm, IdentityKernel) was a raw TypeError (transport() missing an
    argument) and as_kernel returned the class itself."""
    vm = rt.VocabMap.identity(4)
    with pytest.raises(rt.InputError, match=r"is the class \w+Kernel, not a kernel: make one"):
        call(np.full((1, 4), 0.25), vm)


def test_marginal_from_calibration_checks_lam_when_the_kernel_is_the_identity():
    """With no OOV tokens (or no calibration mass on them) the kernel is the identity, and lam
    was ignored unchecked: lam=5, 'x' or NaN made an identity kernel with no word. A lam in
    [0, 1] still gives the identity there, as documented."""
    cal = _toy_calibration()
    vm = rt.VocabMap.identity(8)
    for lam in (5, "x", float("nan"), -1):
        with pytest.raises(rt.InputError, match="lam must be a number in"):
            rt.MarginalKernel.from_calibration(cal, vm, lam=lam)
    assert rt.MarginalKernel.from_calibration(cal, vm, lam=0.5).lam == 0.0


@pytest.mark.parametrize("u", [-0.5, float("nan"), 7.0, 1.0])
def test_inverse_cdf_refuses_uniforms_outside_zero_one(u):
    """A u below 0 returned index 0 however small its weight (0 here), which the docstring
    says never happens; 7 and NaN were clamped to the last positive weight."""
    draw = rt.InverseCdf([0.0, 1.0, 0.0])
    assert draw(np.array([0.0, 0.5, np.nextafter(1.0, 0)])).tolist() == [1, 1, 1]
    with pytest.raises(rt.InputError, match=r"uniforms must be in \[0, 1\)"):
        draw(np.array([0.5, u]))


@pytest.mark.parametrize("block_bytes", ["x", None, -5, 0, 2.5])
def test_covariance_kernel_block_bytes_is_a_positive_count(block_bytes):
    """block_bytes='x' and None were raw ValueError and TypeError; -5 and 0 were read as one
    row per block."""
    with pytest.raises(rt.InputError, match="block_bytes"):
        rt.CovarianceSoftmaxKernel(_toy_calibration(), 0.1, block_bytes=block_bytes)


def test_sparse_topk_with_an_affinity_over_fewer_ids_than_n_is_an_input_error():
    """covariance_affinity over 8 ids with n = 12 was numpy's IndexError from inside the
    callable; n = 8 builds the kernel."""
    aff = rt.covariance_affinity(_toy_calibration())
    with pytest.raises(rt.InputError, match=r"index error: does the affinity cover n = 12 ids"):
        rt.sparse_topk_kernel(aff, 2, 0.1, n=12)
    assert rt.sparse_topk_kernel(aff, 2, 0.1, n=8).matrix.shape == (8, 8)


def test_psi_refuses_a_drafter_that_is_not_a_callable_returning_a_mapping():
    """psi(tokens, {'a': 1.0}) was "'dict' object is not callable"; a drafter returning a
    list an AttributeError. unigram_drafter wraps the dict."""
    with pytest.raises(rt.InputError, match="wrap it with unigram_drafter"):
        sl.psi(["a"], {"a": 1.0})
    with pytest.raises(rt.InputError, match="must return a mapping token -> probability, got list"):
        sl.psi(["a"], lambda ctx: [("a", 1.0)])
    with pytest.raises(rt.InputError, match="wrap it with unigram_drafter"):
        sl.psi_by_segmentations(["a"], {"a": 1.0}, ["a"])
    assert sl.psi(["a", "b"], sl.unigram_drafter({"a": Fraction(1, 4), "b": Fraction(3, 4)})).tolist() \
        == [Fraction(1, 4), Fraction(3, 4)]


# ----------------------------------------------------------- a fuzzing pass over the public API
@pytest.mark.parametrize("u, what", [("0.3", "strings"), (None, "Python objects"),
                                     (0.9 + 0.5j, "complex numbers")])
def test_inverse_cdf_refuses_uniforms_that_are_not_real_numbers(u, what):
    """A string reached numpy's ufunc error, None a TypeError, and a complex u lost its
    imaginary part and drew token 1."""
    draw = rt.InverseCdf([0.5, 0.5])
    with pytest.raises(rt.InputError, match=f"u must hold real numbers, got {what}"):
        draw(u)
    assert draw(0.7) == 1 and list(draw(np.array([0.1, 0.6], dtype=np.float32))) == [0, 1]


def test_user_kernels_refuse_an_empty_matrix():
    """A 0 x 0 matrix made a kernel of N_T = 0, refused only later against a map."""
    import scipy.sparse as sp

    with pytest.raises(rt.InputError, match="N_T >= 1, got shape \\(0, 0\\)"):
        rt.DenseKernel(np.zeros((0, 0)))
    with pytest.raises(rt.InputError, match="N_T >= 1, got shape \\(0, 0\\)"):
        rt.SparseKernel(sp.csr_matrix((0, 0)))


def test_calibration_covariance_of_python_ints_is_exact():
    """An object array of Python ints is exact rows, as everywhere else; the centring took a
    numpy mean of ints (a float), so Omega came back as floats 0.22222222222222224."""
    omega = rt.calibration_covariance(np.array([[1, 0], [0, 1], [0, 1]], dtype=object))
    assert omega.tolist() == [[Fraction(2, 9), Fraction(-2, 9)], [Fraction(-2, 9), Fraction(2, 9)]]
    assert all(type(v) is Fraction for v in omega.flat)


@pytest.mark.parametrize("block, what", [(lambda rows: np.full((len(rows), 3), "a"), "strings"),
                                         (lambda rows: np.eye(3)[rows] * (1 + 1j), "complex numbers")])
def test_sparse_topk_refuses_an_affinity_that_returns_no_real_numbers(block, what):
    """Strings were a bare ValueError; complex blocks lost their imaginary part (a
    ComplexWarning) and made a kernel."""
    with pytest.raises(rt.InputError, match=f"affinity\\(rows\\) must hold real numbers, got {what}"):
        rt.sparse_topk_kernel(block, 1, n=3)


def test_sparse_topk_reads_a_read_only_affinity_block_and_leaves_it_as_it_was():
    """The loop writes into each block (it masks the diagonal): a block returned as the
    caller's own array (a memmap slice, a broadcast view) failed with numpy's read-only error
    once the block stopped being copied, and a writeable one was overwritten."""
    a = np.random.default_rng(2).random((6, 6))
    ro = a.copy()
    ro.flags.writeable = False
    mine = a.copy()
    want = rt.sparse_topk_kernel(lambda rows: a[rows], 2, n=6).matrix.toarray()
    for block in (lambda rows: ro[rows[0]:rows[-1] + 1], lambda rows: mine[rows[0]:rows[-1] + 1]):
        assert np.array_equal(rt.sparse_topk_kernel(block, 2, n=6, block=3).matrix.toarray(), want)
    assert np.array_equal(mine, a)


@pytest.mark.parametrize("x", [np.float64(0.5), Fraction(1, 2), 0.5])
def test_the_identity_kernel_refuses_a_scalar_as_every_kernel_does(x):
    with pytest.raises(rt.InputError, match="got a scalar"):
        rt.IdentityKernel().transport(x)
    with pytest.raises(rt.InputError, match="got a scalar"):
        rt.DenseKernel(np.eye(2)).transport(x)


def test_on_device_names_a_bad_index_name_and_a_bad_device():
    pytest.importorskip("torch")
    vm = rt.VocabMap(3, [0, 2])
    with pytest.raises(rt.InputError, match="name must be one of keep, dst, intersection, source, got 'foo'"):
        vm.on_device("foo", "cpu")
    with pytest.raises(rt.InputError, match="'nodevice' is not a torch device"):
        vm.on_device("keep", "nodevice")
    assert vm.on_device("source", "cpu").tolist() == [0, -1, 1]
    assert vm.on_device("keep", None).device.type == "cpu"  # None: torch's default device


@pytest.mark.parametrize("device, message", [
    (1.5, "device must be a torch device, a name or an index, got 1.5"),  # a raw TypeError
    (True, "device must be a torch device, a name or an index, got True"),
    (99, "99 is not a torch device here"),  # torch's raw RuntimeError (no accelerator 99)
    (np.int64(99), r"np.int64\(99\) is not a torch device here"),  # an index, as torch reads it
])
def test_on_device_refuses_what_is_no_device_here_by_name(device, message):
    pytest.importorskip("torch")
    with pytest.raises(rt.InputError, match=f"^on_device: {message}"):
        rt.VocabMap(3, [0, 2]).on_device("keep", device)


def test_device_copies_made_in_inference_mode_leave_later_calls_differentiable():
    """The index and kernel caches keep the first call's tensors: made under
    torch.inference_mode they were inference tensors, and every later call that autograd
    records raised 'Inference tensors cannot be saved for backward'."""
    import scipy.sparse as sp

    torch = pytest.importorskip("torch")
    vm = rt.VocabMap(3, [0, 2])
    cal = np.array([[0.5, 0.3, 0.2], [0.2, 0.2, 0.6]])
    kernels = [rt.DenseKernel(np.full((3, 3), 1 / 3)), rt.MarginalKernel(cal[0], 0.5),
               rt.FirstOrderCovarianceKernel(cal, 0.5), rt.SparseKernel(sp.eye(3).tocsr())]
    with torch.inference_mode():  # the dtype of the later calls: their cache entries
        rt.vanilla_proposal(torch.tensor([0.5, 0.5], dtype=torch.float64), vm)
        for k in kernels:
            k.transport(torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64))
    q = torch.tensor([0.25, 0.75], dtype=torch.float64, requires_grad=True)
    rt.vanilla_proposal(q, vm)[2].backward()
    assert q.grad.tolist() == [0.0, 1.0]
    for k in kernels:
        x = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64, requires_grad=True)
        k.transport(x).sum().backward()
        assert_close(x.grad.numpy(), np.ones(3))  # row-stochastic: mass kept


@pytest.mark.parametrize("make", [
    lambda t: t.tensor(0.5 + 0.7j), lambda t: t.tensor(0.5 + 0j), lambda t: np.complex128(0.5),
])
def test_a_complex_tau_or_lam_is_refused_in_every_form(make):
    """A 0-d complex tensor was a raw RuntimeError (or, with no imaginary part, read as its
    real part), a numpy complex scalar lost its imaginary part with only a warning: a Python
    complex and a complex array were already InputErrors."""
    torch = pytest.importorskip("torch")
    cal = np.array([[0.5, 0.5], [0.2, 0.8]])
    with pytest.raises(rt.InputError, match="^tau must be a finite real number > 0, got"):
        rt.FirstOrderCovarianceKernel(cal, make(torch))
    with pytest.raises(rt.InputError, match=r"^lam must be a number in \[0, 1\], got"):
        rt.MarginalKernel(cal[0], make(torch))


def test_a_count_tensor_must_be_0_d_as_a_count_array_must():
    """operator.index reads any one-element integer tensor: tensor([2]) ran 2 steps where
    np.array([2]) was refused."""
    torch = pytest.importorskip("torch")
    p = torch.tensor([0.5, 0.5], dtype=torch.float64)
    with pytest.raises(rt.InputError, match=r"^n must be an integer >= 0, got a tensor of "
                                            r"shape \(1,\)$"):
        rt.sample_steps(p, p, torch.tensor([2]), None)
    with pytest.raises(rt.InputError, match=r"got a tensor of shape \(1, 1\)$"):
        rt.VocabMap.identity(torch.tensor([[3]]))
    assert as_count(torch.tensor(2), "n") == 2


@pytest.mark.parametrize("make, message", [
    (lambda t: [t.tensor(0.5, requires_grad=True), t.tensor(0.5)],
     "target_probs is not a numeric array: .*requires grad"),
    (lambda t: t.quantize_per_tensor(t.tensor([0., 1.]), 1.0, 0, t.quint8),
     r"target_probs is a quantized tensor \(torch.quint8\): call .dequantize\(\) first"),
    (lambda t: t.nested.nested_tensor([t.tensor([0., 1.]), t.tensor([1., 0.])]),
     "target_probs is a nested tensor"),
])
def test_exotic_tensor_inputs_are_input_errors(make, message):
    """Raw RuntimeErrors before: a list holding a tensor that requires grad, and the quantized
    and nested tensors, whose layout is strided like a dense tensor's."""
    import warnings

    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors are a prototype: torch warns
        p = make(torch)
    with pytest.raises(rt.InputError, match=f"^{message}"):
        rt.acceptance_rate(p, torch.tensor([0., 1.], dtype=torch.float64))


@pytest.mark.parametrize("drafter, message", [
    (lambda ctx: {"ab": -0.5, "b": 1.5}, "has a negative probability -0.5"),
    (lambda ctx: {"ab": 0.5, "b": 0.75}, "sum"),
    (lambda ctx: {"ab": "0.5"}, "must hold real numbers, got strings"),
    (lambda ctx: {1: 0.5}, "must be non-empty strings, got 1"),
    (rt.IdentityKernel, "got the class IdentityKernel"),
])
def test_string_level_checks_what_a_drafter_function_returns(drafter, message):
    """Only a mapping was required: negative or string probabilities came back as psi
    values (-0.5, '0.5'), an int token was an AttributeError, a class a TypeError."""
    for f in (lambda: sl.psi(["ab", "b"], drafter), lambda: sl.prefix_probability("ab", drafter),
              lambda: sl.psi_by_segmentations(["ab"], drafter, ["ab", "b"])):
        with pytest.raises(rt.InputError, match=message):
            f()


def test_string_level_refuses_token_lists_that_are_not_lists():
    draft = sl.unigram_drafter({"a": 0.5})
    for f in (lambda: sl.psi(None, draft), lambda: sl.segmentations("ab", None),
              lambda: sl.psi_by_segmentations(7, draft, ["a"])):
        with pytest.raises(rt.InputError, match="must be a list of token strings, got"):
            f()


def test_a_drafter_table_is_checked_once_per_computation_not_per_step(monkeypatch):
    """Checking every table on every step of psi's recursion made it 15 times slower for a
    unigram drafter (one table); each table object is now checked once per computation, and a
    table built afresh on each call is still checked each time."""
    calls = []
    real = sl._probabilities

    def counting(values, name, **kw):
        calls.append(name)
        return real(values, name, **kw)

    monkeypatch.setattr(sl, "_probabilities", counting)
    draft = sl.unigram_drafter({"a": 0.3, "aa": 0.3, "aaa": 0.2, "b": 0.2})
    calls.clear()
    sl.psi(["a" * 12], draft)
    assert len(calls) == 1
    calls.clear()
    sl.psi(["a" * 4], lambda ctx: {"a": 0.5, "b": 0.5})  # a new dict per call
    assert len(calls) == 4  # contexts (), (a,), (a, a), (a, a, a)


def test_a_drafter_refilling_one_table_has_each_refill_checked():
    """The once-per-computation check was keyed on the table's identity: a drafter that clears
    and refills one dict per call had its later tables, with a probability of -0.5, taken as
    checked, and psi came back as [0.75, -0.25] (a fuzzing pass)."""
    table: dict = {}

    def drafter(ctx):
        table.clear()
        table.update({"a": 0.5, "b": 0.5} if ctx == () else {"a": 1.5, "b": -0.5})
        return table

    for f in (lambda: sl.prefix_probability("aa", drafter), lambda: sl.psi(["aa", "ab"], drafter),
              lambda: sl.psi_by_segmentations(["aa", "ab"], drafter, ["a", "b"])):
        with pytest.raises(rt.InputError, match="negative probability -0.5"):
            f()


def test_psi_by_segmentations_needs_every_token_the_drafter_can_emit():
    """Segmentations are enumerated over ``drafter_tokens``: one left out silently left out its
    share, 0.125 for the 0.375 that psi and an enumeration give."""
    draft = sl.unigram_drafter({"a": 0.5, "ab": 0.25, "b": 0.25})
    assert sl.psi(["ab"], draft)[0] == pytest.approx(0.375, abs=FLOAT64_ATOL)
    assert sl.psi_by_segmentations(["ab"], draft, ["a", "ab", "b"])[0] == pytest.approx(
        0.375, abs=FLOAT64_ATOL)
    with pytest.raises(rt.InputError, match="token 'ab' probability 0.25 after context \\(\\), "
                                            "but drafter_tokens does not list it"):
        sl.psi_by_segmentations(["ab"], draft, ["a", "b"])
    # a generator of tokens is read once (the coverage check emptied it: psi 0.0, a second
    # reading)
    assert sl.psi_by_segmentations(["ab"], draft, (t for t in ["a", "ab", "b"]))[0] == \
        pytest.approx(0.375, abs=FLOAT64_ATOL)
    zero = sl.unigram_drafter({"a": 0.5, "b": 0.5, "c": 0.0})  # a zero may be left out
    assert sl.psi_by_segmentations(["ab"], zero, ["a", "b"])[0] == pytest.approx(
        0.25, abs=FLOAT64_ATOL)


@pytest.mark.parametrize("prefix, message", [
    (5, "prefix must be a list of token strings, got int"),
    ("xy", "prefix must be a list of token strings, got the string 'xy'"),
    (("x", ""), "prefix must be non-empty strings, got ''"),
])
def test_prefix_probability_checks_its_prefix(prefix, message):
    """A number was a raw TypeError; a bare string was read as a context of its characters."""
    draft = sl.unigram_drafter({"a": 0.5, "b": 0.5})
    with pytest.raises(rt.InputError, match=message):
        sl.prefix_probability("a", draft, prefix=prefix)
    assert sl.prefix_probability("ab", draft, prefix=("x", "y")) == pytest.approx(
        0.25, abs=FLOAT64_ATOL)
