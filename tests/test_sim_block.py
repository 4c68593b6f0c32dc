"""Block efficiency (statement B), Leviathan speedup, best gamma, and their Monte Carlo versions."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from rdk_theory.validation import InputError
from simulators.block import (
    bernstein_pvalue,
    expected_tokens,
    expected_tokens_iid,
    law_sd,
    mc_tokens_iid,
    mean_ci,
    optimal_gamma,
    speedup,
    tokens_sd_iid,
    z_pvalue,
)
from tests.stats import assert_pvalue
from tests.tolerances import assert_close


def test_iid_closed_form_equals_the_product_sum_exactly():
    for a in (Fraction(0), Fraction(1, 3), Fraction(9, 10), Fraction(1)):
        for g in range(6):
            direct = expected_tokens([a] * g)
            closed = (1 - a ** (g + 1)) / (1 - a) if a != 1 else g + 1
            assert direct == closed
            assert_close(expected_tokens_iid(float(a), g), float(closed))


def test_per_position_formula_known_values():
    assert expected_tokens([]) == 1
    assert expected_tokens([Fraction(1, 2), Fraction(1, 3)]) == 1 + Fraction(1, 2) + Fraction(1, 6)
    assert expected_tokens([0, 1, 1]) == 1


def test_speedup_and_optimal_gamma():
    assert_close(speedup(0.8, 4, 0.05), (1 - 0.8 ** 5) / (0.2 * 1.2))
    assert optimal_gamma(0.0, 0.05) == (0, 1.0)          # never speculate with alpha = 0
    assert optimal_gamma(0.9, 0.0, gamma_max=20)[0] == 20  # free drafts: the longest draft wins
    gs = [optimal_gamma(a, 0.05)[0] for a in (0.5, 0.7, 0.8, 0.9, 0.95)]
    assert gs == sorted(gs)                               # better drafters draft longer
    gs_c = [optimal_gamma(0.8, c)[0] for c in (0.01, 0.05, 0.2, 0.5)]
    assert gs_c == sorted(gs_c, reverse=True)             # dearer drafters draft shorter
    # the closed form (1 - alpha^(g+1)) / ((1 - alpha)(g c + 1)), written out independently of
    # speedup(), peaks at g = 8 for alpha = 0.8, c = 0.05 (3.0921 over g = 0..64)
    gam = np.arange(65)
    closed = (1 - 0.8 ** (gam + 1)) / (0.2 * (gam * 0.05 + 1))
    g, s = optimal_gamma(0.8, 0.05)
    assert g == int(np.argmax(closed)) == 8
    assert_close(s, closed.max())


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_bad_alpha_is_rejected(bad):
    with pytest.raises(InputError):
        expected_tokens_iid(bad, 3)


@pytest.mark.parametrize("call, match", [
    (lambda: expected_tokens_iid(0.5, float("nan")), "gamma must be an integer >= 0, got nan"),
    (lambda: expected_tokens_iid(0.5, "3"), "gamma must be an integer"),
    (lambda: expected_tokens_iid("x", 3), "acceptance rates must hold real numbers"),
    (lambda: speedup(0.5, 3, None), "cost ratio c must be a finite real number >= 0, got None"),
    (lambda: speedup(0.5, 3, np.array([0.1, 0.2])), "cost ratio c"),
])
def test_block_helpers_name_what_they_refuse(call, match):
    """numpy's ValueError (NaN gamma, a string alpha) or a TypeError (c = None) before."""
    with pytest.raises(InputError, match=match):
        call()


@pytest.mark.mc
def test_monte_carlo_tokens_per_call_agree_with_closed_form():
    """n = 200000 iterations, per-position acceptances (0.9, 0.8, 0.7, 0.6): z-test of the mean
    against 1 + sum_k prod alpha_t at the suite's per-test false-alarm rate; the 99.9% CI is
    reported by the CLI the same way."""
    alphas = [0.9, 0.8, 0.7, 0.6]
    x = mc_tokens_iid(alphas, 200_000, np.random.default_rng(0))
    assert x.min() >= 1 and x.max() <= 5
    assert_pvalue(z_pvalue(x, expected_tokens(alphas)), "MC tokens per call")
    m, lo, hi = mean_ci(x, 0.999)
    assert lo < m < hi and hi - lo < 0.02


def test_mean_ci_and_z_pvalue_known_values():
    """x = (0, 1) x 50: mean 1/2, sample sd s = sqrt(25/99), so the 99.9% half-width is
    t_99^-1(0.9995) s / sqrt(100) = 0.17043 (Student's t: the sd is the sample's; the normal
    quantile gave 0.16536); at mean + t_99^-1(0.975) se the two-sided p-value is 0.05."""
    from scipy import stats

    x = np.array([0.0, 1.0] * 50)
    s = np.sqrt(25 / 99)
    m, lo, hi = mean_ci(x, 0.999)
    assert m == 0.5
    assert_close(hi - m, stats.t.ppf(0.9995, 99) * s / 10)
    assert_close(m - lo, hi - m)
    assert round(hi - m, 5) == 0.17043  # the figure quoted above
    assert z_pvalue(x, 0.5) == 1.0
    assert_close(z_pvalue(x, 0.5 + stats.t.ppf(0.975, 99) * s / 10), 0.05)
    assert_close(z_pvalue(x, 0.5 - stats.t.ppf(0.975, 99) * s / 10), 0.05)
    # a known law's sd (Bernoulli(1/2): 1/2) replaces the sample's: two equal draws gave an
    # interval of width 0 and a p-value of 0 against the true mean
    m, lo, hi = mean_ci([1.0, 1.0], 0.999, sd=0.5)
    assert m == 1.0 and lo < 0.5 < hi
    assert_close(hi - m, stats.norm.ppf(0.9995) * 0.5 / np.sqrt(2))
    assert_close(z_pvalue([1.0, 1.0], 0.5, sd=0.5), 2 * stats.norm.sf(np.sqrt(2)))
    assert z_pvalue([3.0, 3.0], 3.0, sd=0.0) == 1.0 and z_pvalue([3.0, 3.0], 2.0, sd=0.0) == 0.0
    with pytest.raises(ValueError, match="at least one sample"):
        mean_ci([])


def test_block_cli_interval_uses_the_exact_law_and_covers_the_mean_with_two_draws(capsys):
    """--mc 2: the interval's width comes from the exact law of L, so two equal draws no
    longer give [1.0000, 1.0000] and a p-value of 0 against an exact mean of 1.77 (and, with
    L's spread gamma, it is Bernstein's, which holds at n = 2), cut to L's range [1, 2] (it
    printed [-1.62, 4.62] for tokens per call in [1, 2]). The p-value is Bernstein's too; at
    n = 2 it is at least 2 exp(-3) whatever the draws, so it is compared with its formula,
    not with a level it can never reach."""
    import json

    from rdk_theory.cli import main

    assert main(["simulate", "block", "--gamma", "1", "--pair", "pruned", "--sampler",
                 "rdk_first_order", "--mc", "2", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["results"][0]
    law = {int(k): v for k, v in row["length_law"].items()}
    sd = np.sqrt(sum(v * (k - row["expected_tokens"]) ** 2 for k, v in law.items()))
    assert_close(row["mc"]["law_sd"], sd)
    lo, hi = row["mc"]["ci999"]
    half, m = bernstein_half_width(sd, 1, 2, 0.999), row["mc"]["mean"]  # spread gamma = 1
    assert half > 0.5  # wider than the range at n = 2: both ends are cut
    assert (lo, hi) == (max(m - half, 1.0), min(m + half, 2.0)) == (1.0, 2.0)
    assert_close(row["mc"]["bernstein_pvalue"],
                 bernstein_pvalue([row["mc"]["mean"]] * 2, row["expected_tokens"], sd=sd, spread=1))


def bernstein_half_width(sd, spread, n, level):
    """The t of 2 exp(-n t^2 / (2 sd^2 + 2 spread t / 3)) = 1 - level, written out here."""
    log_term = np.log(2 / (1 - level))
    b = spread * log_term / (3 * n)
    return b + np.sqrt(b * b + 2 * sd ** 2 * log_term / n)


@pytest.mark.parametrize("bad", [float("nan"), None, "3", 2.5, -1])
def test_simulators_name_a_gamma_or_k_that_is_not_a_count(bad):
    """disco, sequence and spectr checked int(gamma) != gamma: NaN was numpy's ValueError,
    None a TypeError, '3' an InputError saying 'got 3'."""
    from simulators.disco import trace_time_static
    from simulators.sequence import block_law
    from simulators.spectr import kseq_law_by_enumeration

    half = np.array([Fraction(1, 2)] * 2, dtype=object)
    for call, match in ((lambda: trace_time_static([0.5, 0.5], bad, 0.1), "gamma must be an integer >= 0"),
                        (lambda: block_law(None, None, bad), "gamma must be an integer >= 0"),
                        (lambda: kseq_law_by_enumeration(half, half, Fraction(1), bad),
                         "k must be an integer >= 1")):
        with pytest.raises(InputError, match=match):
            call()


def test_tokens_sd_iid_is_the_exact_laws():
    """alpha = 1/2, gamma = 3: P(L) = 1/2, 1/4, 1/8, 1/8 for L = 1..4, mean 15/8, variance
    71/64; alpha = 1 and 0 are point masses."""
    from simulators.block import tokens_sd_iid

    assert_close(tokens_sd_iid(0.5, 3), np.sqrt(71) / 8)
    assert tokens_sd_iid(1.0, 5) == 0.0 and tokens_sd_iid(0.0, 5) == 0.0
    assert tokens_sd_iid(0.7, 0) == 0.0


def test_a_free_drafter_drafts_as_far_as_allowed():
    """c = 0: the speedup grows with every gamma; in floats it stops changing once alpha^gamma
    is below round-off, and argmax took the first of those ties (gamma 53 of 512 at 0.5)."""
    assert optimal_gamma(0.5, 0.0, 512)[0] == 512
    assert optimal_gamma(0.0, 0.0, 8) == (0, 1.0)  # nothing is ever accepted: no speculation
    assert optimal_gamma(0.5, 0.1, 512)[0] == 2  # a cost keeps its finite optimum (1.75 / 1.2)


def test_optimal_gamma_is_the_exact_argmax_even_with_a_tiny_cost():
    """A tiny cost c > 0: the float speedups tie from gamma 53 on (alpha 0.5, c = 1e-20),
    and argmax took 53 where the exact optimum is 65; at c = 1e-300 the optimum (about 997)
    lies beyond the cap of 512 and 53 was printed without the >= flag. Now each step is
    decided without cancellation: the argmax (first of ties) equals the one computed in
    Fractions on 63 cases, tiny and large costs, alpha up to 1 - 1e-11 and alpha = 1."""
    from simulators.block import speedup_grows

    def exact(a, c, gamma_max):
        a, c = Fraction(a), Fraction(c)
        s = [(g + 1 if a == 1 else (1 - a ** (g + 1)) / (1 - a)) / (g * c + 1)
             for g in range(gamma_max + 1)]
        return s.index(max(s))

    assert optimal_gamma(0.5, 1e-20, 512)[0] == 65 == exact(0.5, 1e-20, 512)
    assert optimal_gamma(0.5, 1e-300, 512)[0] == 512 and speedup_grows(0.5, 512, 1e-300)
    assert speedup_grows(1 - 2.201008281883443e-09, 2, 0.9999999865792141)  # margin 7e-11
    rng = np.random.default_rng(3)
    cases = [(1.0, 0.5, 20), (1.0, 1.0, 20), (1.0, 2.0, 20), (0.0, 0.3, 10), (0.999, 1e-6, 300),
             # alpha within 1e-9 of 1: 1 - alpha^(g+1) from exp() kept a few digits (31 for 44)
             (1 - 1e-10, 1 - 1e-7, 64), (1 - 1e-9, 1 - 1e-7, 64), (1 - 1e-11, 1 - 1e-8, 64)]
    for _ in range(55):
        a = float(rng.choice([rng.random(), 1 - 10 ** -rng.uniform(1, 8)]))
        cases.append((a, float(10 ** rng.uniform(-12, 0.5)), int(rng.choice([8, 64, 200]))))
    for a, c, gamma_max in cases:
        assert optimal_gamma(a, c, gamma_max)[0] == exact(a, c, gamma_max), (a, c, gamma_max)


def test_optimal_gamma_with_a_cost_whose_product_with_gamma_overflows():
    """gamma c overflowed past 1.8e308 (c = 1e306, gamma 512; c = 1.7e308, gamma 16), the
    growth test read an infinite left side as "grows", and 512 drafts at speedup 0 were
    called best (a fuzzing pass). No draft pays at such a cost; the answer is gamma 0."""
    from simulators.block import speedup_grows

    assert optimal_gamma(0.6, 1e306, 512) == (0, 1.0)
    assert optimal_gamma(0.6, 1.7e308, 16) == (0, 1.0)
    assert not speedup_grows(0.6, 511, 1e306) and not speedup_grows(1 - 1e-12, 10, 1e300)


@pytest.mark.parametrize("call", [
    lambda: mean_ci([1.0, 2.0, 3.0], 95),
    lambda: mean_ci([1.0, 2.0, 3.0], -0.5),
    lambda: mean_ci([1.0, 2.0, 3.0], 0.95, sd=-1),
    lambda: z_pvalue([1.0, 2.0], 1.5, sd=float("nan")),
])
def test_interval_and_test_arguments_are_checked(call):
    """A level of 95 gave (2.0, nan, nan), a negative level or sd an interval with lo > hi."""
    with pytest.raises(InputError, match="level must be in|sd must be"):
        call()


def test_samples_that_vary_cannot_come_from_a_law_with_one_value():
    """sd = 0 with samples 1, 2, 3 around the expected 2 gave p = 1.0."""
    assert z_pvalue([1.0, 2.0, 3.0], 2.0, sd=0.0) == 0.0
    assert z_pvalue([2.0, 2.0], 2.0, sd=0.0) == 1.0


def test_the_bernstein_interval_covers_at_its_level_where_the_normal_one_did_not():
    """Tokens per call at alpha = 0.999 with 64 drafts is a skewed law (nearly all its mass
    at 65, a long tail below): with n = 10 the normal-approximation "99.9%" interval missed
    the exact mean in about 1% of 2,000 replicates (0.9% of 20,000), the CLI's
    speedup --mc reported it. Bernstein's interval (sd and spread known) holds at every n:
    its misses over 2,000 replicates are tested against the rate 1e-3, one-sided binomial, at
    the suite's per-test false-alarm rate."""
    from scipy import stats

    from simulators.block import expected_tokens_iid, mc_tokens_iid, tokens_sd_iid

    a, g, reps = 0.999, 64, 2000
    sd, mu = tokens_sd_iid(a, g), expected_tokens_iid(a, g)
    rng = np.random.default_rng(0)
    misses = 0
    for _ in range(reps):
        _, lo, hi = mean_ci(mc_tokens_iid([a] * g, 10, rng), 0.999, sd=sd, spread=g)
        misses += not lo <= mu <= hi
    assert_pvalue(float(stats.binom.sf(misses - 1, reps, 1e-3)), "Bernstein CI coverage")
    with pytest.raises(InputError, match="spread must be a finite number >= sd >= 0, with sd"):
        mean_ci([1.0, 2.0], 0.999, spread=1.0)


def test_the_bernstein_pvalue_is_the_test_dual_to_the_bernstein_interval():
    """At the interval's edge (mean - expected = its half-width) the p-value is 1 - level;
    inside it is larger, outside smaller; it is 1 at the mean and capped at 1; a law with one
    value gives 1 or 0. And it is conservative: for Bernoulli(1/2), n = 20, the exact
    two-sided tail P(|mean - 1/2| >= t) never exceeds it."""
    from math import comb

    x = [0.0, 1.0] * 10
    for level in (0.9, 0.999):
        m, lo, hi = mean_ci(x, level, sd=0.5, spread=0.5)
        assert_close(bernstein_pvalue(x, m - (hi - m), sd=0.5, spread=0.5), 1 - level)
        assert bernstein_pvalue(x, m - 0.9 * (hi - m), sd=0.5, spread=0.5) > 1 - level
        assert bernstein_pvalue(x, m - 1.1 * (hi - m), sd=0.5, spread=0.5) < 1 - level
    assert bernstein_pvalue(x, 0.5, sd=0.5, spread=0.5) == 1.0
    assert bernstein_pvalue([2.0, 2.0], 2.0, sd=0.0, spread=0.0) == 1.0
    assert bernstein_pvalue([2.0, 2.0], 3.0, sd=0.0, spread=0.0) == 0.0
    for k in range(21):
        t = abs(k / 20 - 0.5)
        exact = sum(comb(20, j) for j in range(21) if abs(j / 20 - 0.5) >= t - 1e-12) / 2**20
        assert bernstein_pvalue([1.0] * k + [0.0] * (20 - k), 0.5, sd=0.5, spread=0.5) >= exact
    with pytest.raises(InputError, match="spread must be"):
        bernstein_pvalue(x, 0.5, sd=0.5, spread=float("nan"))


def test_law_sd_is_the_standard_deviation_of_the_law():
    """{1: 1/4, 3: 3/4}: mean 5/2, variance (9/4 / 4 + 1/4 * 3/4) = 3/4; tokens_sd_iid at
    alpha = 1/2, gamma = 1 is the sd of {1: 1/2, 2: 1/2}, 1/2."""
    assert_close(law_sd({1: 0.25, 3: 0.75}), np.sqrt(0.75))
    assert law_sd({4: 1.0}) == 0.0
    assert_close(tokens_sd_iid(0.5, 1), 0.5)
    # a float block law's round-off negatives (r = p, a row summing to 1 + 2^-52): read as 0
    assert_close(law_sd({1: -2.2e-16, 2: -2.2e-16, 3: 1.0 + 4.4e-16}), 0.0)


@pytest.mark.parametrize("call", [
    lambda: bernstein_pvalue([float("inf"), 1.0], 1.0, sd=0.5, spread=1),  # was p = 1
    lambda: bernstein_pvalue([float("nan"), 1.0], 1.0, sd=0.5, spread=1),
    lambda: bernstein_pvalue([1.0, 1.0], float("nan"), sd=0.5, spread=1),
    lambda: bernstein_pvalue([1e308, 1e308], 0.0, sd=0.5, spread=1),  # the mean overflows
    lambda: z_pvalue([1.0, float("inf")], 1.0),
    lambda: mean_ci([1.0, float("nan")]),
    lambda: mean_ci([1.0, 2.0], sd=0.5, spread=0.0),  # |X - E X| <= 0 with sd 0.5: no law
    lambda: law_sd({1: 0.5, 2: 0.7}),  # was 0.642
    lambda: law_sd({1: -1.0, 2: 2.0}),  # was 0
])
def test_statistics_refuse_non_finite_samples_and_impossible_laws(call):
    """min(1, nan) is 1: a NaN or infinite sample gave bernstein_pvalue's "no evidence";
    an sd above the spread narrowed the Bernstein interval; law_sd took any dict."""
    with pytest.raises(InputError):
        call()


def test_simulate_blocks_returns_one_block_per_iteration_with_its_bonus_token():
    """r = p: every draft is accepted, so each of the n iterations emits gamma drafts plus the
    target's bonus token. Without the bonus step only a Monte Carlo test elsewhere noticed
    (mean L 1.25 against the exact 2.5); this is a certainty, not a statistic."""
    from simulators.block import simulate_blocks
    from simulators.toy_lm import MarkovLM

    p = np.array([0.6, 0.1, 0.2, 0.1])
    blocks = simulate_blocks(MarkovLM(4, 0, {(): p}), lambda ctx: p.copy(), 2, 500,
                             np.random.default_rng(0))
    assert len(blocks) == 500 and all(len(b) == 3 for b in blocks)



def _n_taker(name):
    """``(call with n, what its message says)`` for one of the simulators' Monte Carlo sizes."""
    from simulators.block import mc_tokens_iid, simulate_blocks
    from simulators.disco import regime_trace, toy_trace
    from simulators.dsi import dsi_monte_carlo
    from simulators.toy_lm import MarkovLM

    p = np.array([0.5, 0.5])
    lm = MarkovLM(2, 0, {(): p})
    rng = np.random.default_rng(0)
    return {"dsi_monte_carlo": (lambda n: dsi_monte_carlo(0.1, 0.5, 2, 2, n, rng),
                                "n_cycles must be an integer >= 0"),
            "mc_tokens_iid": (lambda n: mc_tokens_iid([0.5], n, rng), "n must be an integer >= 0"),
            "simulate_blocks": (lambda n: simulate_blocks(lm, lambda ctx: p, 1, n, rng),
                                "n must be an integer >= 0"),
            "regime_trace": (lambda n: regime_trace(rng, n), "n must be an integer >= 1"),
            "toy_trace": (lambda n: toy_trace(lm, lambda ctx: p, n, rng),
                          "n must be an integer >= 0")}[name]


N_TAKERS = ("dsi_monte_carlo", "mc_tokens_iid", "simulate_blocks", "regime_trace", "toy_trace")


@pytest.mark.parametrize("name", N_TAKERS)
@pytest.mark.parametrize("bad", [2.5, -1, float("nan"), None, "3", True])
def test_simulators_name_an_n_that_is_not_a_count(name, bad):
    """dsi_monte_carlo(..., 2.5, rng) ran 2 cycles, mc_tokens_iid([.5], 2.5, rng) returned 2
    rows and simulate_blocks(..., n=2.5, ...) 2 blocks, silently; -1 was numpy's raw
    ValueError (regime_trace and toy_trace: 2.5 was numpy's TypeError). Each is an InputError
    naming the parameter."""
    call, match = _n_taker(name)
    with pytest.raises(InputError, match=match):
        call(bad)


@pytest.mark.parametrize("name", N_TAKERS)
def test_simulators_take_a_whole_n_of_any_integer_kind(name):
    """A whole float (3.0) or a numpy integer is that many draws (regime_trace and toy_trace
    refused 3.0 with numpy's TypeError)."""
    call, _ = _n_taker(name)
    for n in (3, 3.0, np.int64(3)):
        out = call(n)
        assert len(out[0] if isinstance(out, tuple) else out) == 3


def test_block_helpers_name_bad_input():
    """Raw TypeErrors, AttributeErrors and broadcast errors before, each now one InputError
    naming the input (a scalar where a list is taken, a list where one rate is, ...)."""
    from simulators import block

    rng = np.random.default_rng(0)
    bad = [(lambda: block.expected_tokens(0.5), "takes a sequence of per-position acceptances"),
           (lambda: block.speedup_grows(np.array([0.5, 0.6]), 2, 0.1), "takes one acceptance"),
           (lambda: block.tokens_sd_iid([0.5, 0.6], 3), "takes one acceptance rate"),
           (lambda: block.mc_tokens_iid([[0.5], [0.5]], 3, rng), r"got shape \(2, 1\)"),
           (lambda: block.law_sd([1, 2]), r"needs a law \{value: probability\} \(a dict\)"),
           (lambda: block.law_sd({"a": 1}), "needs real values and probabilities")]
    for call, message in bad:
        with pytest.raises(InputError, match=message):
            call()


def test_expected_tokens_iid_keeps_its_digits_near_alpha_one():
    """1 - alpha^(gamma+1) lost digits by cancellation: 6.0 at alpha = 1 - 1e-10, gamma 5,
    where the per-position sum (and the exact value, 6 - 15e-10 + ...) gives 5.9999999985."""
    from simulators.block import expected_tokens, expected_tokens_iid

    a = 1 - 1e-10
    assert_close(expected_tokens_iid(a, 5), expected_tokens([a] * 5), rtol=1e-15, atol=0)
    assert expected_tokens_iid(a, 5) != 6.0
    exact = expected_tokens([Fraction(1, 3)] * 4)  # and the exact tier still agrees
    assert_close(expected_tokens_iid(1 / 3, 4), float(exact), rtol=1e-15, atol=0)
    assert expected_tokens_iid(0.0, 3) == 1.0 and expected_tokens_iid(1.0, 3) == 4.0


def test_optimal_gamma_bisects_to_the_stepwise_answer_at_any_cap():
    """Stepping up one gamma at a time took minutes at gamma_max = 10^7 and never ended at
    2^40; bisection on the same monotone condition gives the same answer (checked against the
    stepwise loop on 600 random cases) at once."""
    from simulators import block

    rng = np.random.default_rng(3)
    for _ in range(600):
        a = float(rng.choice([rng.random(), 1 - 10 ** -rng.uniform(1, 12), 0.0, 1.0]))
        c = float(rng.choice([rng.random(), 10 ** -rng.uniform(0, 25), 0.0]))
        cap = int(rng.integers(0, 200))
        g = 0
        while g < cap and block.speedup_grows(a, g, c):
            g += 1
        assert block.optimal_gamma(a, c, cap)[0] == g, (a, c, cap)
    assert block.optimal_gamma(0.5, 0.0, 10**7)[0] == 10**7  # a free drafter: the cap
    assert block.optimal_gamma(0.5, 1e-20, 2**40)[0] == 65  # the exact optimum


def test_interval_sizes_and_lookahead_caps_are_named():
    """A string level or spread was a raw TypeError, sd = 1e160 overflowed its square, and
    si_best built a list of 10^9 costs."""
    from simulators import block, dsi

    for call, message in ((lambda: block.mean_ci([1.0, 2.0], "0.9"), "level must be in"),
                          (lambda: block.mean_ci([1.0, 2.0], sd=1e160, spread=1e160),
                           r"sd must be a finite number in \[0, 1e\+150\]"),
                          (lambda: block.tokens_per_call_ci([1.0, 2.0], 0.5, "3"),
                           "spread must be a finite number"),
                          (lambda: dsi.si_best(0.5, 0.5, 10**9), "k_max must be at most"),
                          (lambda: dsi.dsi_best(0.5, 0.5, 2, 10**9), "k_max must be at most")):
        with pytest.raises(InputError, match=message):
            call()
