"""SpecTr K-SEQ runs: exact output law by enumeration, Monte Carlo, and the LP comparison."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from rdk_theory.multidraft import kseq_accept_law, kseq_acceptance, kseq_is_valid, one_minus_inv_e
from simulators.spectr import compare_with_lp, kseq_law_by_enumeration, kseq_sample, rational_best_rho
from tests.stats import assert_matches_law, assert_pvalue, binomial_pvalue
from tests.tolerances import LP_ATOL, assert_leq


def _pair(seed, n=4):
    rng = np.random.default_rng(seed)

    def law():
        w = rng.integers(0, 6, size=n)
        while (w > 0).sum() < 2:
            w = rng.integers(0, 6, size=n)
        return np.array([Fraction(int(x), int(w.sum())) for x in w], dtype=object)

    return law(), law()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [1, 2, 3])
def test_kseq_is_lossless_exactly_at_best_rho(seed, k):
    p, q = _pair(seed)
    rho = rational_best_rho(p, q, k)
    law, accept = kseq_law_by_enumeration(p, q, rho, k)
    assert list(law) == list(p)
    assert list(accept) == list(kseq_accept_law(p, q, rho, k))
    assert sum(accept) == kseq_acceptance(p, q, rho, k)


def test_sub_stochastic_drafts_are_never_accepted_and_still_lossless():
    p = np.array([Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)], dtype=object)
    q = np.array([Fraction(1, 4), Fraction(1, 4), Fraction(0)], dtype=object)  # half the mass off-vocabulary
    rho = rational_best_rho(p, q, 2)
    law, _ = kseq_law_by_enumeration(p, q, rho, 2)
    assert list(law) == list(p)


def test_invalid_rho_is_refuted():
    """Negative control: rho below rho* breaks losslessness, and the enumeration sees it."""
    p = np.array([Fraction(1, 2), Fraction(1, 4), Fraction(1, 8), Fraction(1, 8)], dtype=object)
    q = np.array([Fraction(1, 8), Fraction(1, 8), Fraction(1, 4), Fraction(1, 2)], dtype=object)
    rho = rational_best_rho(p, q, 3) * Fraction(9, 10)
    assert not kseq_is_valid(p, q, rho, 3)
    law, _ = kseq_law_by_enumeration(p, q, rho, 3)
    assert list(law) != list(p)


@pytest.mark.parametrize("seed", range(6))
def test_kseq_between_one_minus_inv_e_and_one_of_the_lp_optimum(seed):
    p, q = _pair(seed + 10, n=5)
    for row in compare_with_lp(p.astype(float), q.astype(float), ks=(1, 2, 3)):
        assert_leq(row["kseq"], row["lp_optimum"], slack=LP_ATOL)
        assert_leq(one_minus_inv_e() * row["lp_optimum"], row["kseq"], slack=LP_ATOL)


@pytest.mark.mc
def test_kseq_sampler_matches_exact_law_and_acceptance():
    """n = 100000 K-SEQ steps, k = 3: chi-square of emitted tokens against p and an exact binomial
    test of the acceptance count against 1 - (1 - beta)^k, each at the per-test false-alarm rate."""
    p, q = _pair(3)
    pf, qf = p.astype(float), q.astype(float)
    rho = float(rational_best_rho(p, q, 3))
    toks, ok = kseq_sample(pf, qf, rho, 3, 100_000, np.random.default_rng(4))
    assert_matches_law(np.bincount(toks, minlength=4), pf, "K-SEQ output vs p")
    assert_pvalue(binomial_pvalue(int(ok.sum()), ok.size, float(kseq_acceptance(pf, qf, rho, 3))),
                  "K-SEQ acceptance")


@pytest.mark.mc
def test_kseq_sampler_with_sub_stochastic_drafts():
    """q with a third of its mass off-vocabulary (a draft the target lacks, never accepted):
    n = 50000 steps, k = 2. No emitted token is -1 (deterministic: it would be a bug on every
    run), chi-square of the tokens against p and the binomial acceptance test, each at the
    per-test false-alarm rate."""
    p = np.array([Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)], dtype=object)
    q = np.array([Fraction(1, 3), Fraction(1, 3), Fraction(0)], dtype=object)
    pf, qf = p.astype(float), q.astype(float)
    rho = float(rational_best_rho(p, q, 2))
    toks, ok = kseq_sample(pf, qf, rho, 2, 50_000, np.random.default_rng(5))
    assert toks.min() >= 0
    assert_matches_law(np.bincount(toks, minlength=3), pf, "K-SEQ output vs p, sub-stochastic q")
    assert_pvalue(binomial_pvalue(int(ok.sum()), ok.size, float(kseq_acceptance(pf, qf, rho, 2))),
                  "K-SEQ acceptance, sub-stochastic q")


def test_lp_ratio_is_kseq_over_the_optimum():
    """The reported ratio is K-SEQ / LP (at most 1); k = 1 alone would not tell it from its
    inverse (both are 1 there)."""
    p = np.array([0.5, 0.25, 0.125, 0.125])
    rows = compare_with_lp(p, p[::-1].copy(), ks=(1, 2, 3))
    for row in rows:
        assert row["ratio"] == row["kseq"] / row["lp_optimum"]
        assert_leq(row["ratio"], 1.0, slack=LP_ATOL)
    assert min(row["ratio"] for row in rows) < 1 - 1e-3  # some k where K-SEQ is not optimal


def test_edge_arguments_are_input_errors_across_the_simulators():
    """Each was a raw ZeroDivisionError, numpy ValueError or IndexError, or (dsi_best with
    k_max = 0, kseq_law_by_enumeration with rho < 1) a silent answer outside the contract."""
    from fractions import Fraction as F

    from rdk_theory.validation import InputError
    from simulators import block, dsi, strings

    rng = np.random.default_rng(0)
    half = np.array([0.5, 0.5])
    for call, message in [
        (lambda: dsi.servers_needed(0.0, 1), r"drafter cost c must be a number in \(0, 1\]"),
        (lambda: dsi.si_best(0.1, 0.5, k_max=0), "k_max must be an integer >= 1"),
        (lambda: dsi.dsi_best(0.1, 0.5, 2, k_max=0), "k_max must be an integer >= 1"),
        (lambda: kseq_sample(half, half, 1.0, 0, 5, rng), "k must be an integer >= 1"),
        (lambda: kseq_sample(half, half, 0.5, 1, 5, rng), "rho must be a real number >= 1"),
        (lambda: kseq_law_by_enumeration(
            np.array([F(1, 2), F(1, 2)], dtype=object), np.array([F(3, 4), F(1, 4)], dtype=object),
            F(1, 2), 1), "rho must be a real number >= 1"),
        (lambda: block.optimal_gamma([0.5, 0.6], 0.1, 5), "takes one acceptance rate"),
        (lambda: block.mean_ci([]), "at least one sample"),
        (lambda: strings.draft_target_token(lambda prefix: {}, rng), "no next token"),
    ]:
        with pytest.raises(InputError, match=message):
            call()


def test_rational_best_rho_is_the_bisection_optimum_not_a_coarse_valid_rho():
    """The repair loop makes any coarse rho valid by raising it, so the tests' "valid, and 0.9
    rho invalid" passed a rational rho rounded to sixteenths (8/5 for 1.59307 at k = 2): K-SEQ
    then ran above rho* and accepted less. The rational rho lies within 1e-9 above rho*."""
    from rdk_theory.multidraft import kseq_best_rho

    F = Fraction
    p = np.array([F(1, 2), F(1, 4), F(1, 8), F(1, 8)], dtype=object)
    q = np.array([F(1, 8), F(1, 8), F(1, 4), F(1, 2)], dtype=object)
    for k in (2, 3):
        rho = rational_best_rho(p, q, k)
        assert kseq_is_valid(p, q, rho, k)
        assert 0 <= float(rho) - kseq_best_rho(p.astype(float), q.astype(float), k) <= 1e-9


def test_the_enumeration_refuses_laws_it_cannot_walk():
    """kseq_law_by_enumeration checked only k and rho: a target (3/2, -1/2, 0) gave a law
    with -1/3, a short p a law summing to 2/3, a q summing to 3 was accepted, a short q was a
    raw IndexError and k = 20 walked 3^20 tuples with no end in sight."""
    from rdk_theory.validation import InputError

    F = Fraction
    p = np.array([F(1, 2), F(1, 3), F(1, 6)], dtype=object)
    q = np.array([F(1, 3)] * 3, dtype=object)
    bad = [((np.array([F(3, 2), F(-1, 2), F(0)], dtype=object), q, 1), "negative entry"),
           ((p[:2], q, 1), "must sum to 1 exactly"),
           ((p, np.array([F(1)] * 3, dtype=object), 1), "must sum to at most 1"),
           ((p, q[:2], 1), "must be 1-D of one length"),
           ((p, q, 20), r"3\^20 draft tuples to walk \(at most 100,000\)")]
    for (pp, qq, k), message in bad:
        with pytest.raises(InputError, match=message):
            kseq_law_by_enumeration(pp, qq, F(3, 2), k)


def test_spectr_helpers_and_exhaustive_grids_name_bad_input():
    """Raw errors before: numpy's ValueError for string laws, a TypeError for an int ks or a
    scalar p, a RecursionError for 0 parts and a ZeroDivisionError for a grid of 0."""
    from proofs import exhaustive
    from rdk_theory.validation import InputError

    rng = np.random.default_rng(0)
    half = np.array([0.5, 0.5])
    bad = [(lambda: kseq_sample(["a", "b"], half, 1.5, 2, 5, rng), "must hold real numbers"),
           (lambda: rational_best_rho(0.5, half, 2), "non-empty last axis"),
           (lambda: list(exhaustive.compositions(3, 0)), "parts >= 1"),
           (lambda: list(exhaustive.distributions(2, 0)), "a grid d >= 1")]
    for call, message in bad:
        with pytest.raises(InputError, match=message):
            call()
    assert len(compare_with_lp(half, half, 2)) == 1  # one k (an int was a raw TypeError)
    with pytest.raises(InputError, match="a grid d >= 1"):
        list(exhaustive.sub_distributions(2, 0))
    F = Fraction  # a list of Fractions stays exact (it became float64 through the checks)
    p, q = [F(1, 2), F(1, 3), F(1, 6)], [F(1, 6), F(1, 3), F(1, 2)]
    law, _ = kseq_law_by_enumeration(p, q, rational_best_rho(p, q, 2), 2)
    assert list(law) == p
