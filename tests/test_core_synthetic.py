import numpy as np
import pytest

import rdk_theory as rt
from rdk_theory import synthetic
from tests.stats import FALSE_ALARM_PER_TEST, assert_pvalue
from tests.tolerances import FLOAT64_ATOL, assert_close


def test_families_are_distributions_with_the_promised_shape():
    rng = np.random.default_rng(0)
    d = synthetic.dirichlet(rng, 50, 0.1, size=(3, 4))
    assert d.shape == (3, 4, 50)
    assert_close(d.sum(-1), 1.0)
    z = synthetic.zipf(100, 1.2)
    assert_close(z.sum(), 1.0)
    assert np.all(np.diff(z) < 0)
    assert_close(z[0] / z[1], 2**1.2)
    s = synthetic.sparse_topk(rng, 30, 4, size=5)
    assert np.all((s > 0).sum(-1) == 4)
    assert_close(s.sum(-1), 1.0)
    tiny = synthetic.dirichlet(rng, 10, 1e-6, size=20)  # gamma draws underflow: point masses
    assert np.all(np.isfinite(tiny)) and np.allclose(tiny.sum(-1), 1.0)
    # a numpy integer size (e.g. from an array's shape arithmetic) is a size like an int
    assert synthetic.dirichlet(rng, 5, 1.0, np.int64(3)).shape == (3, 5)
    assert synthetic.sparse_topk(rng, 5, 2, size=np.int32(2)).shape == (2, 5)


def test_adversarial_pairs_have_their_named_acceptance():
    pairs = synthetic.adversarial_pairs(6)
    alpha = {k: float(rt.acceptance_rate(p, q)) for k, (p, q) in pairs.items()}
    assert alpha["equal"] == pytest.approx(1.0)
    assert alpha["disjoint_supports"] == 0.0
    assert alpha["point_masses_equal"] == 1.0
    assert alpha["point_masses_distinct"] == 0.0
    assert alpha["point_vs_uniform"] == pytest.approx(1 / 6)


def test_zipfian_lm_is_seeded_and_pruning_loses_mass():
    a = synthetic.zipfian_lm(np.random.default_rng(5), 256, contexts=8, calibration=16)
    b = synthetic.zipfian_lm(np.random.default_rng(5), 256, contexts=8, calibration=16)
    np.testing.assert_array_equal(a.target_probs, b.target_probs)
    for arr in (a.target_probs, a.draft_probs, a.calibration_probs):
        assert_close(arr.sum(-1), 1.0)
    kept = rt.keep_most_frequent(a.calibration_probs.mean(0), 26)
    cap = rt.oov_cap(a.target_probs, rt.VocabMap.from_kept_ids(kept, 256))
    assert np.all(cap < 1) and cap.mean() > 0.3


@pytest.mark.mc
@pytest.mark.parametrize("concentration", [0.1, 10.0])
def test_dirichlet_marginals_follow_the_beta_law_of_the_concentration(concentration):
    """Monte Carlo: n = 5,000 draws of Dirichlet(c 1_5); the first coordinate against its
    Beta(c, 4c) marginal by Kolmogorov-Smirnov, p-value > FALSE_ALARM_PER_TEST = 4e-6 (the
    suite's per-test rate).
    The other concentration's Beta law is refuted (the test has power)."""
    from scipy import stats as sstats

    x = synthetic.dirichlet(np.random.default_rng(11), 5, concentration, size=5000)[:, 0]
    assert_pvalue(sstats.kstest(x, sstats.beta(concentration, 4 * concentration).cdf).pvalue,
                  f"Dirichlet({concentration}) first marginal vs Beta, n = 5000")
    other = 10.0 if concentration == 0.1 else 0.1
    assert sstats.kstest(x, sstats.beta(other, 4 * other).cdf).pvalue < FALSE_ALARM_PER_TEST


def test_zipf_with_rng_permutes_the_ids_of_the_same_law():
    z = synthetic.zipf(50, 1.3)
    zr = synthetic.zipf(50, 1.3, rng=np.random.default_rng(4))
    assert np.array_equal(np.sort(zr)[::-1], z)  # the same probabilities, exactly
    assert not np.array_equal(zr, z)  # at other ids
    assert np.array_equal(zr, synthetic.zipf(50, 1.3, rng=np.random.default_rng(4)))  # seeded


def test_tiny_concentration_dirichlet_treats_every_id_alike():
    """As the concentration goes to 0, Dirichlet(a 1_n) tends to a point mass at a uniformly
    random id. At a = 1e-6 the gamma draws of 99% of rows all underflow, so every row is drawn
    in log space (an early fallback put the underflowed rows all on id 0). Chi-square of the
    argmax over n = 20000 rows against uniform on 10 ids, at the suite's per-test false-alarm
    rate. The rows drawn again by their sum alone are tested below, at a = 0.5."""
    from tests.stats import assert_matches_law

    d = synthetic.dirichlet(np.random.default_rng(0), 10, 1e-6, size=20000)
    assert np.allclose(d.sum(-1), 1.0) and np.all(d >= 0)
    assert_matches_law(np.bincount(d.argmax(-1), minlength=10), np.full(10, 0.1),
                       "argmax of Dirichlet(1e-6) rows")
    # the redraw has the Dirichlet law: force every row through it (the first gamma draw
    # underflows) at a = 0.5, where the first coordinate is Beta(0.5, 4.5): E[x^2] = var +
    # mean^2 = 0.09 / 6 + 0.01 (any exchangeable law has mean 0.1; the second moment tells
    # the concentration, e.g. 0.09 / 16 + 0.01 without the U^(1/a) factor). z-test of the
    # mean of x^2 over n = 20000 rows, with its sample standard deviation

    class FirstDrawUnderflows(np.random.Generator):  # default_rng(seed)'s stream otherwise
        def __init__(self, seed):
            super().__init__(np.random.PCG64(seed))
            self.calls = 0

        def gamma(self, shape, size=None):
            self.calls += 1
            return np.zeros(size) if self.calls == 1 else super().gamma(shape, size=size)

    a = 0.5
    x0 = synthetic.dirichlet(FirstDrawUnderflows(1), 10, a, size=20000)[:, 0]
    sq = x0 ** 2
    from scipy import stats as st
    z = (sq.mean() - (0.09 / (10 * a + 1) + 0.01)) / (sq.std(ddof=1) / np.sqrt(sq.size))
    assert_pvalue(2 * st.norm.sf(abs(z)), "second moment of the redrawn Dirichlet's first coordinate")


def test_rows_that_do_not_underflow_keep_their_seeded_draws():
    """Only underflowed rows are drawn again: elsewhere the result is the gammas normalised,
    as before (the README's synthetic tables depend on these draws)."""
    g = np.random.default_rng(4).gamma(0.3, size=(50, 20))
    d = synthetic.dirichlet(np.random.default_rng(4), 20, 0.3, size=50)
    assert np.array_equal(d, g / g.sum(-1, keepdims=True))


@pytest.mark.parametrize("call, message", [
    (lambda: synthetic.zipf(5, float("nan")), "exponent must be finite and >= 0"),
    (lambda: synthetic.zipf(5, -1.0), "exponent must be finite and >= 0"),
    (lambda: synthetic.zipf(5, "steep"), "exponent must be a number"),
    (lambda: synthetic.dirichlet(np.random.default_rng(0), 4, np.inf), "concentration must be finite"),
    (lambda: synthetic.dirichlet(np.random.default_rng(0), 4, 0.0), "concentration must be finite and > 0"),
    (lambda: synthetic.sparse_topk(np.random.default_rng(0), 5, 2.5), "k must be an integer"),
    (lambda: synthetic.dirichlet(0, 4), "synthetic draws need a numpy.random.Generator"),
    (lambda: synthetic.dirichlet(np.random.default_rng(0), 4, size=-1), "size must be an integer >= 0"),
    (lambda: synthetic.dirichlet(np.random.default_rng(0), 4, size=(2, 1.5)), "size must be an integer"),
    (lambda: synthetic.zipf(5, rng=3), "synthetic draws need a numpy.random.Generator"),
    *[(lambda kw=kw: synthetic.zipfian_lm(np.random.default_rng(0), 64, **kw), message)
      for kw, message in [({"context_noise": float("nan")}, "context_noise must be finite"),
                          ({"drafter_noise": -1.0}, "drafter_noise must be finite and >= 0"),
                          ({"topic_strength": np.inf}, "topic_strength must be finite"),
                          ({"contexts": 0}, "contexts must be an integer >= 1"),
                          ({"calibration": -1}, "calibration must be an integer >= 1"),
                          ({"topics": 2.5}, "topics must be an integer >= 1"),
                          ({"topic_size": 65}, "topic_size <= n = 64"),
                          ({"topic_strength": "4"}, "topic_strength must be a number"),
                          ({"context_noise": "1"}, "context_noise must be a number"),
                          ({"drafter_noise": True}, "drafter_noise must be a number"),
                          ({"context_noise": 1e308}, "context_noise must be at most 1e"),
                          ({"drafter_noise": 1e308}, "drafter_noise must be at most 1e"),
                          # 1e17 made every row exactly uniform: round-off swallowed the law
                          ({"topic_strength": -1e17}, "topic_strength must be at most 1e")]],
    (lambda: synthetic.dirichlet(np.random.default_rng(0), 3, "0.5"), "concentration must be a number"),
    (lambda: synthetic.dirichlet(np.random.default_rng(0), 3, True), "concentration must be a number"),
])
def test_bad_family_parameters_are_named(call, message):
    with pytest.raises(rt.InputError, match=message):
        call()


def test_zipfian_lm_reads_exact_scalars_and_steep_exponents_as_laws():
    """A Fraction noise scale is used as its float (it was a TypeError inside the draw), and
    an exponent steep enough to underflow the rarest ranks still gives laws, without warnings."""
    import warnings
    from fractions import Fraction

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = synthetic.zipfian_lm(np.random.default_rng(3), 40, contexts=2, calibration=3,
                                 context_noise=Fraction(1, 2), topic_strength=np.float32(2))
        b = synthetic.zipfian_lm(np.random.default_rng(3), 40, contexts=2, calibration=3,
                                 context_noise=0.5, topic_strength=2.0)
        steep = synthetic.zipfian_lm(np.random.default_rng(0), 300, contexts=2, calibration=2,
                                     exponent=400)
    assert np.array_equal(a.target_probs, b.target_probs)
    for rows in (steep.target_probs, steep.draft_probs, steep.calibration_probs):
        assert np.isfinite(rows).all() and (rows >= 0).all()
        assert_close(rows.sum(-1), 1.0)


def test_adversarial_pairs_of_a_large_vocabulary_need_linear_memory():
    """The point masses were rows of np.eye(n): 488 GiB at n = 256,000, a MemoryError. Now a
    few vectors of n: well under 100 MB at n = 10^6 (measured with tracemalloc)."""
    import tracemalloc

    tracemalloc.start()
    try:
        pairs = synthetic.adversarial_pairs(1_000_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100e6, peak
    p, q = pairs["point_masses_distinct"]
    assert p[0] == q[1] == 1.0 and p.sum() == q.sum() == 1.0


def test_adversarial_pairs_share_no_arrays():
    pairs = synthetic.adversarial_pairs(4)
    arrays = [a for pq in pairs.values() for a in pq]
    assert not any(np.shares_memory(x, y) for i, x in enumerate(arrays) for y in arrays[i + 1:])


@pytest.mark.parametrize("n, concentration", [(1, 2.3e-308), (2, 2.3e-308), (4, 1e-310), (6, 1e-320)])
def test_tiny_concentrations_never_give_nan_rows(n, concentration):
    """The underflow fallback divides log U by the concentration: a whole row of -inf came out
    NaN (20 rows in 100,000 at n = 2, a = 2.3e-308, and a third of rows at n = 1, where the
    only law is [1]). Each row is a law; at these concentrations, a point mass."""
    d = synthetic.dirichlet(np.random.default_rng(0), n, concentration, size=20_000)
    assert not np.isnan(d).any()
    assert_close(d.sum(-1), 1.0, rtol=0)
    assert (d.max(-1) == 1.0).all()
    s = synthetic.sparse_topk(np.random.default_rng(0), 6, 3, size=200, concentration=1e-310)
    assert not np.isnan(s).any() and ((s > 0).sum(-1) == 3).all()


def test_rows_with_subnormal_draws_are_not_coarse_fractions():
    """At concentration 1e-3, n = 2, about 1.7% of rows have gamma draws that are subnormal
    but not 0: with a few bits each, g / sum g came out as 1/2, 2/3, 7/16 (10 of the 9,211
    rows between 0.01 and 0.99 in 2e6 draws, where a continuous law gives such a value with
    probability 0). At this concentration every row is now drawn in log space: none of 2e6 is
    a fraction with a denominator up to 20."""
    from fractions import Fraction

    x = synthetic.dirichlet(np.random.default_rng(0), 2, 1e-3, size=2_000_000)[:, 0]
    mid = x[(x > 0.01) & (x < 0.99)]
    assert mid.size > 5_000
    assert not any(float(Fraction(v).limit_denominator(20)) == v for v in mid)


def test_huge_concentrations_give_laws_not_zero_rows():
    """Gamma draws near 1e306 overflowed the row sum to inf and every entry to 0; the law at
    such a concentration is uniform to within its draws' spread."""
    d = synthetic.dirichlet(np.random.default_rng(0), 1000, 1e306, size=3)
    assert_close(d.sum(-1), 1.0, rtol=0)
    assert np.allclose(d, 1e-3, rtol=1e-6, atol=0)


def test_where_draws_may_underflow_every_row_is_drawn_in_log_space_seeded():
    """At a = 1e-3 half the gamma draws fall below float64's smallest normal number: every row
    is drawn in log space (the gammas of shape a + 1 first, then the uniforms), whatever its
    draws; at a = 0.3 none is expected to, and the gammas are normalised as they are."""
    from rdk_theory._backend import softmax

    assert synthetic._gammas_may_underflow(1e-3, 2) and synthetic._gammas_may_underflow(0.03, 1e3)
    assert not synthetic._gammas_may_underflow(0.05, 1e3)
    a, n, size = 1e-3, 2, 400
    rng = np.random.default_rng(5)
    log_g1, log_u = np.log(rng.gamma(a + 1, size=(size, n))), np.log(rng.random((size, n)))
    want = softmax(log_g1 + (log_u - log_u.max(-1, keepdims=True)) / a)
    assert_close(synthetic.dirichlet(np.random.default_rng(5), n, a, size=size), want, rtol=0)


@pytest.mark.mc
def test_exact_zeros_of_a_tiny_concentration_dirichlet_have_the_laws_frequency():
    """Monte Carlo: n = 40,000 draws of Dirichlet(1e-3 1_3). The first coordinate is
    Beta(1e-3, 2e-3), so it rounds to an exact 0 (below half of 2^-1074, float64's smallest
    number) with probability beta.cdf(2^-1074) = 0.3167 to 4 digits; the count of zeros is tested by an exact binomial test at
    FALSE_ALARM_PER_TEST (4e-6). Rows normalised from gamma draws that had underflowed gave
    0.3965 (seed 1), refuted here at p < 1e-200: the test has power."""
    from scipy import stats as sstats

    from tests.stats import binomial_pvalue

    n_rows = 40_000
    p_zero = float(sstats.beta.cdf(2.0 ** -1074, 1e-3, 2e-3))
    x0 = synthetic.dirichlet(np.random.default_rng(1), 3, 1e-3, size=n_rows)[:, 0]
    assert_pvalue(binomial_pvalue(int((x0 == 0).sum()), n_rows, p_zero),
                  "exact zeros of Dirichlet(1e-3) first coordinates, n = 40000")
    assert binomial_pvalue(round(0.3965 * n_rows), n_rows, p_zero) < 1e-200


def test_a_row_summing_between_tiny_and_n_tiny_is_redrawn():
    """Where no draw is expected to underflow (a = 0.5), a row whose gamma draws still sum
    below n * tiny (its largest draw may be subnormal) is drawn again in log space, not only a
    row below tiny: row 1 of the draws below sums to 2.4 tiny."""
    from rdk_theory._backend import softmax

    a, n, tiny = 0.5, 4, np.finfo(np.float64).tiny
    g = np.random.default_rng(3).gamma(a, size=(3, n))
    g[1] = 0.6 * tiny  # subnormal draws, summing to 2.4 tiny
    g[2, :2] = 0.0  # two draws underflowed in a normal row: kept as they are

    class Scripted(np.random.Generator):  # default_rng(7)'s stream after the first gammas
        def __init__(self):
            super().__init__(np.random.PCG64(7))
            self.first = True

        def gamma(self, shape, size=None):
            if self.first:
                self.first = False
                return g.copy()
            return super().gamma(shape, size=size)

    rng = np.random.default_rng(7)
    log_g1, log_u = np.log(rng.gamma(a + 1, size=(1, n))), np.log(rng.random((1, n)))
    want = g / g.sum(-1, keepdims=True)
    want[1] = softmax(log_g1 + (log_u - log_u.max(-1, keepdims=True)) / a)[0]
    got = synthetic.dirichlet(Scripted(), n, a, size=3)
    assert_close(got, want, rtol=0)
    assert not np.allclose(got[1], 0.25)  # 0.6 tiny / 2.4 tiny each, had it been kept


def test_sparse_topk_allows_k_equal_to_n():
    """k = n is in [1, n]: a law with every entry non-zero (and k = n + 1 is refused)."""
    s = synthetic.sparse_topk(np.random.default_rng(3), 5, 5, size=2)
    assert np.all(s > 0) and s.shape == (2, 5)
    assert_close(s.sum(-1), 1.0)
    with pytest.raises(rt.InputError, match="k must be in"):
        synthetic.sparse_topk(np.random.default_rng(3), 5, 6)


def test_adversarial_pairs_are_laws_for_odd_n():
    """Every named pair is two distributions for odd n too (the halves have unequal sizes):
    each sums to 1, and the disjoint-support pair still has acceptance 0."""
    pairs = synthetic.adversarial_pairs(5)
    for name, (p, q) in pairs.items():
        assert_close([p.sum(), q.sum()], [1.0, 1.0], err_msg=name)
    p, q = pairs["disjoint_supports"]
    assert float(rt.acceptance_rate(p, q)) == 0.0


def test_zipfian_drafter_noise_is_drawn_afresh_for_every_context():
    """The drafter is softmax(log p_c + drafter_noise * N(0, 1)) with noise independent across
    tokens and contexts. A single (N,) noise vector shared by every context passed every test
    (it still had the right scale per row), while giving the report a drafter whose error is
    the same in every context. Seeded; C = 8 rows of N = 200: the rows' correlation has sd
    about 0.07 under independence (bound 0.5: 7 sd), the pooled sd of 1,600 values about 1 %
    relative error (bound 20 %: over 10 sd); with a shared vector both are exact (1.0, 0)."""
    lm = synthetic.zipfian_lm(np.random.default_rng(0), 200, contexts=8, drafter_noise=0.7)
    z = np.log(lm.draft_probs) - np.log(lm.target_probs)
    z -= z.mean(axis=1, keepdims=True)  # the softmax's shift per row
    assert abs(np.corrcoef(z[0], z[1])[0, 1]) < 0.5
    assert abs(z.std() / 0.7 - 1) < 0.2
    assert np.ptp(z, axis=0).max() > 0.1




@pytest.mark.parametrize("strength", [4.0, -1.5])
def test_zipfian_contexts_are_the_unigram_law_tilted_by_their_topic(strength):
    """Mutation pass: the topic boost's sign was checked only by the README's copy of the
    report. Without context noise, log p_c - log unigram is one constant per row plus
    ``topic_strength`` on exactly ``topic_size`` tokens (the row's topic), so a flipped or
    lost boost shows."""
    lm = synthetic.zipfian_lm(np.random.default_rng(3), 200, contexts=12, calibration=5,
                              topic_size=7, topic_strength=strength, context_noise=0.0)
    for rows in (lm.target_probs, lm.calibration_probs):
        tilt = np.log(rows) - np.log(lm.unigram)
        tilt -= tilt.min(axis=1, keepdims=True) if strength > 0 else tilt.max(axis=1, keepdims=True)
        boosted = np.abs(tilt - strength) < FLOAT64_ATOL
        assert (boosted.sum(axis=1) == 7).all()
        assert (np.abs(tilt[~boosted]) < FLOAT64_ATOL).all()
