"""Goodness-of-fit helpers and the suite-wide false-alarm budget (the Monte Carlo tier).

Convention (after numpyro's goodness-of-fit tests): a Monte Carlo test computes a p-value and
asserts ``p_value > FALSE_ALARM_PER_TEST``; it never compares frequencies with an ad hoc ``rtol``.

The budget is stated once, here: the whole default suite may hold at most ``MAX_MC_ASSERTIONS``
Monte Carlo assertions, and by Bonferroni the probability that *any* of them fails on a correct
implementation is at most ``SUITE_FALSE_ALARM_BUDGET``. Seeds are fixed, so a given checkout is
deterministic; the budget bounds the chance that a seed choice hides or fakes a failure.
``tests/conftest.py`` counts the assertions made through this module and fails the session if the
count exceeds ``MAX_MC_ASSERTIONS``. A test that asserts a whole set of checks of the code under
test pass (a gpu_validation study's agreement checks, say) runs them at
``FALSE_ALARM_PER_TEST`` split over the set and asserts their union-bound p-value
(:func:`bonferroni_pvalue`): one counted assertion.

Every Monte Carlo test must also state its sample size and assert that no zero-probability token
was emitted (:func:`assert_no_zero_probability_emitted`): a chi-square test pools sparse bins and
would not see one stray impossible token.
"""
from __future__ import annotations

import numpy as np

#: Probability that at least one Monte Carlo assertion of the default suite fails on a correct
#: implementation (union bound over all assertions).
SUITE_FALSE_ALARM_BUDGET = 1e-3
#: The most Monte Carlo assertions (p-value checks) the default suite may make.
MAX_MC_ASSERTIONS = 100
#: Smallest expected count per (pooled) chi-square bin. Cochran's rule of thumb, 5, is far too
#: small for a tail of 1e-5: a bin with 5 expected is Poisson-like, and P(Poisson(5) >= 15) =
#: 2.3e-4 where the chi-square tail says 1e-5 (22x; found by exact enumeration in a review).
#: With two bins, the smaller expecting 100 to 1,000, the true rate is at most 2.36x the
#: nominal (exact, n = 2e4 to 1e6; 1.49x at exactly 100 and the nominal 1e-5, the one point
#: an earlier test checked). With more bins, at the nominal 4e-6, m small bins each
#: expecting exactly 100 and one large bin (df m; computed exactly by convolving the small
#: bins' Poisson terms, the large bin's term tending to 0): 1.66x for df 1, 1.93x for df 2,
#: 1.85x for 3, 1.72x for 5, 1.52x for 10, 1.36x for 20, 1.22x for 50; at 200 expected,
#: 1.45x for df 2, 1.42x for 3, 1.25x for 10. All within CHI2_TAIL_FACTOR below.
MIN_EXPECTED = 100.0
#: How much a chi-square assertion's true false-alarm rate may exceed its nominal tail level
#: (``tests/test_stats.py`` computes the two-bin case exactly over a grid of expected counts).
CHI2_TAIL_FACTOR = 2.5
#: Per-assertion level: ``SUITE_FALSE_ALARM_BUDGET / MAX_MC_ASSERTIONS / CHI2_TAIL_FACTOR``
#: (4e-6), so that every assertion's true false-alarm rate is at most 1e-5 and the suite's
#: at most 1e-3 (exact binomial p-values need no factor; they get the same level).
FALSE_ALARM_PER_TEST = SUITE_FALSE_ALARM_BUDGET / MAX_MC_ASSERTIONS / CHI2_TAIL_FACTOR

#: Number of p-value assertions made so far in this process (read by conftest).
_ASSERTIONS_MADE = 0


class InsufficientSamplesError(ValueError):
    """The sample is too small for the chi-square approximation: draw more, do not test."""


def _pool_bins(expected: np.ndarray, observed: np.ndarray, min_expected: float):
    """Merge the bins with expected count < ``min_expected`` (smallest first) into pooled bins.

    Returns pooled ``(expected, observed)`` arrays in which every bin has expected count
    >= ``min_expected``. The small bins are grouped greedily in ascending order of expected count;
    a remainder that stays below ``min_expected`` joins the last group (or, if there is no group,
    the smallest large bin).
    """
    big = expected >= min_expected
    exp_out = list(expected[big])
    obs_out = list(observed[big])
    small = np.flatnonzero(~big)
    small = small[np.argsort(expected[small], kind="stable")]
    groups_e, groups_o = [], []
    acc_e = acc_o = 0.0
    for i in small:
        acc_e += expected[i]
        acc_o += observed[i]
        if acc_e >= min_expected:
            groups_e.append(acc_e)
            groups_o.append(acc_o)
            acc_e = acc_o = 0.0
    if acc_e > 0 or acc_o > 0:
        if groups_e:
            groups_e[-1] += acc_e
            groups_o[-1] += acc_o
        elif exp_out:
            j = int(np.argmin(exp_out))
            exp_out[j] += acc_e
            obs_out[j] += acc_o
        else:
            groups_e.append(acc_e)
            groups_o.append(acc_o)
    return np.array(exp_out + groups_e, dtype=np.float64), np.array(obs_out + groups_o, dtype=np.float64)


def chi_square_gof(counts, probs, *, min_expected: float = MIN_EXPECTED) -> float:
    """p-value of Pearson's chi-square test that ``counts`` are multinomial(n, ``probs``).

    Bins with ``probs == 0`` are excluded from the statistic; if any of them holds a count the
    sample is impossible under ``probs`` and the p-value is exactly 0.0. Sparse bins (expected
    count below ``min_expected``) are pooled (:func:`_pool_bins`).

    Parameters:
      counts: (N,) non-negative integers, ``n = counts.sum()``.
      probs: (N,) probabilities summing to 1.
      min_expected: smallest expected count allowed per pooled bin.

    Returns:
      The p-value (float in [0, 1]).

    Raises:
      InsufficientSamplesError: when fewer than two pooled bins reach ``min_expected`` (the test
        would have no power or an invalid approximation); the caller must draw more samples.
      ValueError: on malformed input.
    """
    from scipy import stats

    counts = np.asarray(counts)
    probs = np.asarray(probs, dtype=np.float64)
    if counts.ndim != 1 or counts.shape != probs.shape:
        raise ValueError(f"counts and probs must be 1-D of one length, got {counts.shape}, {probs.shape}")
    if np.any(counts < 0) or np.any(counts != np.round(counts)):
        raise ValueError("counts must be non-negative integers")
    if np.any(probs < 0) or abs(probs.sum() - 1) > 1e-9:
        raise ValueError(f"probs must be a distribution, sums to {probs.sum()!r}")
    n = float(counts.sum())
    if n == 0:
        raise InsufficientSamplesError("no samples")
    support = probs > 0
    if np.any(counts[~support] > 0):
        return 0.0
    expected = n * probs[support]
    observed = counts[support].astype(np.float64)
    exp_p, obs_p = _pool_bins(expected, observed, min_expected)
    if exp_p.size < 2:
        if support.sum() == 1:
            return 1.0  # a point mass: all samples on it (checked above), nothing to test
        raise InsufficientSamplesError(
            f"only {exp_p.size} bin(s) reach an expected count of {min_expected} with n = {int(n)}; "
            f"draw more samples"
        )
    if np.any(exp_p < min_expected):
        raise InsufficientSamplesError(
            f"pooled bins still have expected counts below {min_expected} (smallest "
            f"{exp_p.min():.3g}) with n = {int(n)}; draw more samples"
        )
    stat = float(((obs_p - exp_p) ** 2 / exp_p).sum())
    return float(stats.chi2.sf(stat, df=exp_p.size - 1))


def binomial_pvalue(successes: int, n: int, prob: float) -> float:
    """Two-sided exact binomial p-value that ``successes ~ Binomial(n, prob)`` (e.g. acceptances)."""
    from scipy import stats

    return float(stats.binomtest(int(successes), int(n), float(prob)).pvalue)


def bonferroni_pvalue(p_values, n_tests: int | None = None) -> float:
    """p-value of "all these tests pass" by the union bound: ``min(1, n_tests * min(p_values))``.

    ``n_tests`` (default ``len(p_values)``, never fewer) is the number the level was split
    over, e.g. a gpu_validation run's ``n_tests``, which may exceed the p-values at hand. Its
    assertion through :func:`assert_pvalue` fails on a correct implementation with probability
    at most the rate, whatever the dependence between the tests, provided every p-value is
    valid (``P(p <= t) <= t``) at least at ``t = rate / n_tests``; it fails when some p-value
    is at or below ``rate / n_tests`` (up to round-off), the Bonferroni split of the rate. An
    upper bound above 1 (a p-value bound) counts as 1.
    """
    p = np.asarray([float(x) for x in p_values], dtype=np.float64)
    if p.size == 0 or not np.all(p >= 0):  # NaN fails too
        raise ValueError(f"need at least one p-value >= 0, got {p.tolist()}")
    n = p.size if n_tests is None else int(n_tests)
    if n < p.size:
        raise ValueError(f"n_tests = {n} is fewer than the {p.size} p-values")
    return float(min(1.0, n * p.min()))


def assert_run_checks_pass(report: dict, *, study_only: bool = False) -> None:
    """One Monte Carlo assertion (counted) that a gpu_validation run's agreement checks pass.

    ``report``: the run's report (``gpu_validation.harness.run``), made with
    ``gpu_validation.agreement.FALSE_ALARM`` set to :data:`FALSE_ALARM_PER_TEST` (checked:
    ``report["false_alarm"]``). Its checks then fail on a correct implementation with
    probability at most that in all (Bonferroni over the run's ``n_tests``; each p-value is
    exact or a rigorous bound at its level, the dispersion bound only at that level), and the
    run's own verdicts agree with this assertion, the union-bound p-value
    (:func:`bonferroni_pvalue`) of the study's p-values and, unless ``study_only``, the
    end-to-end checks'. At the harness's default 1e-3 that chance was not in the budget.
    The degenerate checks (counts where alpha is 0 or 1) are asserted too (not Monte Carlo).
    """
    if report["false_alarm"] != FALSE_ALARM_PER_TEST:
        raise AssertionError(f"the run's false-alarm rate is {report['false_alarm']:g}, not the "
                             f"suite's FALSE_ALARM_PER_TEST = {FALSE_ALARM_PER_TEST:g}")
    checks = [c for r in report["study"]["rows"] for c in r["checks"].values()]
    p_values = [c[key] for c in checks for key in ("p_aggregate", "p_dispersion")
                if c[key] is not None]
    if not study_only:
        p_values += [e["check"]["p_value"] for e in report["speculative"]]
    n_tests = report["study"]["n_tests"]
    assert_pvalue(bonferroni_pvalue(p_values, n_tests),
                  f"the run's checks ({len(p_values)} p-values of {n_tests} tests)")
    assert all(c["degenerate_ok"] for c in checks), "a degenerate check failed"


def assert_no_zero_probability_emitted(counts, probs) -> None:
    """Assert that no token with ``probs == 0`` (exactly) was ever emitted, naming the culprits."""
    counts = np.asarray(counts)
    probs = np.asarray(probs)
    bad = np.flatnonzero((probs == 0) & (counts > 0))
    if bad.size:
        shown = ", ".join(f"token {int(i)} x{int(counts[i])}" for i in bad[:10])
        raise AssertionError(f"emitted {bad.size} zero-probability token(s): {shown}")


def assert_pvalue(p_value: float, what: str = "", *, rate: float = FALSE_ALARM_PER_TEST) -> None:
    """Assert ``p_value > rate`` (one Monte Carlo assertion, counted against the suite budget)."""
    global _ASSERTIONS_MADE
    _ASSERTIONS_MADE += 1
    if not p_value > rate:
        raise AssertionError(f"{what} rejected: p-value {p_value:.3g} <= false-alarm rate {rate:g}")


def assert_matches_law(counts, probs, what: str = "", *, min_expected: float = MIN_EXPECTED,
                       rate: float = FALSE_ALARM_PER_TEST) -> float:
    """Both Monte Carlo checks in one call: no impossible token, then chi-square p-value > rate.

    Returns the p-value (for reports).
    """
    assert_no_zero_probability_emitted(counts, probs)
    p_value = chi_square_gof(counts, probs, min_expected=min_expected)
    assert_pvalue(p_value, what or f"chi-square with n = {int(np.sum(counts))}", rate=rate)
    return p_value


def assertions_made() -> int:
    """How many Monte Carlo assertions this process has made through :func:`assert_pvalue`."""
    return _ASSERTIONS_MADE
