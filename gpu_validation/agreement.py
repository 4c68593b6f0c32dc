"""Predicted vs measured acceptance, with a stated false-alarm rate.

For one sampler, position ``i`` has predicted acceptance ``a_i = alpha(p_i, r_i)`` and ``n``
independent verification steps run with the real ``p_i`` and ``r_i``, of which ``k_i`` accepted.
If the calculators are right, ``k_i ~ Binomial(n, a_i)`` independently. Three checks:

* **aggregate**: ``sum k_i`` is a sum of independent binomials; its two-sided p-value is exact
  (:func:`binomial_sum_p_value`, by FFT of the count's characteristic function), so it holds
  for small ``n`` and acceptances near 0 or 1, where the normal tail of
  ``z = (sum k_i - n sum a_i) / sqrt(n sum a_i (1 - a_i))`` (still reported, with the
  interval it gives) is too light;
* **dispersion**: ``T = sum (k_i - n a_i)^2 / (n a_i (1 - a_i))`` over the ``dof`` positions
  with ``n a_i (1 - a_i) >= 5``, upper tail. It never rejects more often than its level: every
  rejection rests on a rigorous upper bound of the exact p-value (:func:`dispersion_p_value`).
  Where that bound is cheap (under a second: ``dof`` up to about 200-250, fewer for a larger
  ``T``) it is the p-value (``dispersion_method`` ``exact-bound``). Beyond, the chi-square
  tail with ``dof`` degrees of freedom is read first: above the level it is the p-value
  (``chi-square``; a pass cannot be a false alarm), and at or below it a second rigorous bound
  decides (``hoeffding-bound``: nearest rounding and Hoeffding's inequality, about
  ``sqrt(dof)`` times tighter on the same grid; under a second for a gross deviation, seconds
  near the level, and only after a chi-square rejection). ``dispersion_slack_sd`` is the most
  a bound's rounding may add to ``T``, in standard deviations of ``T``: what it may cost in
  power (0.1 or less up front; after a rejection 0.1 where :data:`DISPERSION_CONFIRM_BUDGET`
  allows, up to about 1,700 positions at the harness's level, more beyond). The chi-square
  tail alone rejected 1.04-1.08x too often with the committed CPU run's acceptances, about 2x
  with positions just above the ``>= 5`` threshold, and 4.1x at one position, 50 steps and
  ``a = 0.2``. With no eligible position the check is not run (``dof`` 0, ``p_dispersion``
  and ``dispersion_slack_sd`` None);
* **degenerate**: where ``a_i`` is 0 or 1 the count must be exactly 0 or ``n``.

The run-wide false-alarm budget ``FALSE_ALARM`` is split evenly (Bonferroni) over all the
p-values of a run, so a correct implementation fails the whole run with probability at most
``FALSE_ALARM``. The confidence interval reported with a measured mean uses the same critical
value on the normal approximation, so "agrees within the interval" and "passes the aggregate
check" are the same statement wherever that approximation holds (the check itself is exact).

End-to-end generation uses the martingale form of the aggregate check: at each drafted position
that verification reaches, acceptance is Bernoulli(``alpha_t``) given everything before it,
so ``sum (accepted_t - alpha_t)`` is a martingale. Which positions are reached, and so which
``alpha_t`` are recorded, depends on earlier acceptances (a rejection ends a round and changes
the context), so the count is *not* Poisson-binomial with the recorded ``alpha_t``: a test
that treats it so rejected 21 % of records at the level 0.05 (4x) under a null whose
``alpha_t`` followed the running score (``tests/test_gpu_validation_data.py``, 2,000 records). The p-value is instead that of a test martingale
(:func:`betting_p_value`): the average over a grid of bets ``lam`` of
``prod_t (1 + lam (accepted_t - alpha_t))``, which has expectation 1 under the null however
the ``alpha_t`` were chosen, so by Markov's inequality at the (bounded) stopping time it
reaches ``1 / level`` with probability at most ``level``. The Poisson-binomial p-value, exact
were the ``alpha_t`` fixed in advance, is reported beside it (``p_value_fixed_alphas``) and
decides nothing.
"""
from __future__ import annotations

import numpy as np
from scipy import stats

#: Probability that a run whose calculators and sampler are correct reports a failure.
FALSE_ALARM = 1e-3
MIN_EXPECTED_VARIANCE = 5.0
#: Round-off of a predicted acceptance (a float64 sum over N_T entries) outside [0, 1] that is
#: clipped; more is an error.
ACCEPTANCE_ROUNDOFF = 1e-9
#: Grid cells times positions that :func:`dispersion_p_value` may convolve (under a second).
DISPERSION_BUDGET = 2 ** 23
#: The same, per grid, for the bound that must confirm a chi-square rejection beyond
#: :data:`DISPERSION_BUDGET` (seconds; it runs only where the chi-square tail would reject).
DISPERSION_CONFIRM_BUDGET = 2 ** 26
#: Largest shift, in standard deviations of ``T`` (``sqrt(2 dof)``), that the grid's rounding
#: may add to ``T``: the exact bound is used only where it is this tight.
DISPERSION_SLACK_SD = 0.1


def acceptances(x) -> np.ndarray:
    """Predicted acceptances as float64 in [0, 1]: ``sum min(p, r)`` of equal laws can be
    ``1 + 2.2e-16``, which made ``n a (1 - a)`` negative and the binomial law NaN (a correct
    run with drafter = target failed its aggregate test, or raised). Values beyond
    :data:`ACCEPTANCE_ROUNDOFF` outside [0, 1] are a bug upstream: ValueError."""
    a = np.asarray(x, dtype=np.float64)
    if a.size and not (a.min() >= -ACCEPTANCE_ROUNDOFF and a.max() <= 1 + ACCEPTANCE_ROUNDOFF):
        raise ValueError(f"predicted acceptances must lie in [0, 1], got {a.min()} .. {a.max()}")
    return np.clip(a, 0.0, 1.0)


def _steps(n) -> int:
    """``n``, a number of steps, as an int >= 0 (ValueError otherwise: 2.9 was read as 2 by
    one p-value and as 2.9 by the z and the means beside it)."""
    if isinstance(n, (bool, np.bool_)) or not float(n).is_integer() or n < 0:
        raise ValueError(f"the number of steps must be a whole number >= 0, got {n!r}")
    return int(n)


def _observed(observed) -> int:
    """An observed count as an int: a whole number, of any sign (ValueError otherwise: 5.0
    indexed the law, a raw IndexError); one outside the law's support has p-value 0."""
    if not float(observed).is_integer():
        raise ValueError(f"observed must be a whole number, got {observed!r}")
    return int(observed)


def _counts(accepted, a: np.ndarray, n: int) -> np.ndarray:
    """``accepted`` as float64 counts, one per acceptance of ``a`` (same shape), each a whole
    number in ``[0, n]`` (ValueError otherwise): a short list was stretched to fit, and -5,
    15 out of 10 or 4.5 passed the aggregate test."""
    k = np.asarray(accepted, dtype=np.float64)
    if k.shape != a.shape:
        raise ValueError(f"one count per position: {a.size} positions, counts of shape "
                         f"{k.shape}")
    if not np.all((k >= 0) & (k <= n) & (k == np.floor(k))):  # NaN fails too
        raise ValueError(f"counts must be whole numbers in [0, {n}] (the steps run)")
    return k


def critical_z(n_tests: int, false_alarm: float | None = None) -> float:
    """Two-sided normal critical value for one of ``n_tests`` Bonferroni-split tests of the
    run-wide rate ``false_alarm`` (default :data:`FALSE_ALARM`, read at the call, as the
    checks read it: a default bound at import kept the confidence intervals at 1e-3 when a
    run set another rate)."""
    rate = FALSE_ALARM if false_alarm is None else false_alarm
    return float(stats.norm.isf(rate / (2 * max(n_tests, 1))))


def binomial_agreement(predicted, accepted, n: int, n_tests: int = 2) -> dict:
    """Agreement of per-position counts ``accepted`` (ints) of ``n`` steps with ``predicted``.

    ``n_tests``: the number of p-values of the whole run that share :data:`FALSE_ALARM`. One
    call makes two (aggregate and dispersion), so a call on its own is the default 2 (with 1,
    a correct count failed with probability up to 1.4e-3)."""
    a = acceptances(predicted)
    n_given, n = n, _steps(n)
    if a.size == 0 or n < 1 or np.shape(accepted) != a.shape:  # means over nothing: NaN
        raise ValueError(f"binomial_agreement needs at least one position, n >= 1 steps and one "
                         f"count per position, got {a.size} positions, n = {n_given}, counts of "
                         f"shape {np.shape(accepted)}")
    k = _counts(accepted, a, n)
    var = n * a * (1 - a)
    z = float((k.sum() - n * a.sum()) / np.sqrt(var.sum())) if var.sum() > 0 else 0.0
    sel = var >= MIN_EXPECTED_VARIANCE
    chi2 = float(np.sum((k[sel] - n * a[sel]) ** 2 / var[sel]))
    dof = int(sel.sum())
    level = FALSE_ALARM / max(n_tests, 1)
    p_disp, method, slack = (_dispersion(a[sel], k[sel], n, level=level) if dof
                             else (None, None, None))  # not run
    p_agg = binomial_sum_p_value(a, n, int(round(k.sum())))
    degenerate_ok = bool(np.all(k[a == 0] == 0) and np.all(k[a == 1] == n))
    zc = critical_z(n_tests)
    half = zc * np.sqrt(var.sum()) / (n * a.size)
    return {
        "predicted_mean": float(a.mean()), "measured_mean": float(k.sum() / (n * a.size)),
        "ci_half_width": float(half), "z": z, "p_aggregate": p_agg,
        "chi2": chi2, "dof": dof, "p_dispersion": p_disp,
        "dispersion_method": method, "dispersion_slack_sd": slack,
        "degenerate_ok": degenerate_ok,
        "test_level": level,
        "pass": bool(p_agg > level and (p_disp is None or p_disp > level) and degenerate_ok),
    }


#: Bets of :func:`betting_p_value`: ``+-2^(-k/4)``, k = 0..19 (1 down to 0.037), 40 in all.
#: The best bet for a deviation of z standard deviations is about ``z / sqrt(V)``, ``V = sum
#: alpha_t (1 - alpha_t)``: the grid covers z = 4 up to V = 11,600 (some 50,000 positions; the
#: harness records hundreds to a few thousand). A bet off the best by at most ``2^(1/8)`` keeps
#: 99 % of its log-wealth; averaging costs ``ln 40`` = 3.7 of it. The price of validity: at
#: z = 4 (200 positions, alpha 0.7) the p-value is 1.6e-3 where the Poisson-binomial one of
#: fixed alphas is 3.8e-5 (80 bets down to 0.001: 3.2e-3); at z = 5, 1.3e-5 against 1.7e-7.
BETS = np.concatenate([s * 2.0 ** (-np.arange(20) / 4) for s in (1.0, -1.0)])


def betting_p_value(alphas, accepted) -> float:
    """p-value of "each ``accepted_t`` is Bernoulli(``alphas[t]``) given the past", valid when
    each ``alphas[t]`` was chosen from earlier outcomes and the record stopped at a stopping
    time: ``min(1, 1 / W)`` with ``W`` the mean over :data:`BETS` of
    ``prod_t (1 + lam (accepted_t - alphas[t]))``. Each product is a nonnegative martingale of
    mean 1 under the null (``|lam| <= 1`` keeps every factor >= 0), so is their mean, and
    ``P(W >= 1 / level) <= level`` (Markov's inequality; Ville's for the whole path).

    An outcome the null forbids (a rejection where alpha is 1, an acceptance where it is 0)
    gives 0: the bets, at most 1 in size, would count it as one bounded deviation (twenty
    rejections of sure acceptances in 200 passed at the harness's level). ``accepted`` must
    hold one 0/1 outcome per alpha (ValueError otherwise, as :func:`acceptances` raises)."""
    a = acceptances(alphas).reshape(-1)
    x = np.asarray(accepted, dtype=np.float64).reshape(-1)
    if x.shape != a.shape or not np.all((x == 0) | (x == 1)):
        raise ValueError(f"accepted must hold one 0/1 outcome per alpha ({a.size}), got "
                         f"{x.size} values" + ("" if x.shape != a.shape else
                                               " not all 0 or 1"))
    if np.any((x == 0) & (a == 1)) or np.any((x == 1) & (a == 0)):
        return 0.0
    if x.size == 0:
        return 1.0
    with np.errstate(divide="ignore"):  # a factor of 0: lam = +-1 against a likely outcome
        log_w = np.log1p(np.outer(BETS, x - a)).sum(axis=1)
    top = log_w.max()
    log_mean = top + np.log(np.exp(log_w - top).sum()) - np.log(BETS.size)
    return float(min(1.0, np.exp(-log_mean)))


def martingale_agreement(alphas, accepted, n_tests: int = 1) -> dict:
    """End-to-end check: ``accepted`` (0/1) at reached positions vs their ``alphas``, by
    :func:`betting_p_value` (valid though the reached positions depend on earlier outcomes).
    ``p_value_fixed_alphas`` is the Poisson-binomial p-value, exact only were the ``alphas``
    fixed in advance; it is reported, and decides nothing."""
    a = acceptances(alphas)
    x = np.asarray(accepted, dtype=np.float64)
    var = float(np.sum(a * (1 - a)))
    z = float((x.sum() - a.sum()) / np.sqrt(var)) if var > 0 else 0.0
    level = FALSE_ALARM / max(n_tests, 1)
    p = betting_p_value(a, x)
    zc = critical_z(n_tests)
    return {"positions": int(a.size), "predicted_accepts": float(a.sum()),
            "measured_accepts": int(x.sum()),
            "predicted_rate": float(a.mean()) if a.size else 0.0,
            "measured_rate": float(x.mean()) if a.size else 0.0,
            "ci_half_width": float(zc * np.sqrt(var) / max(a.size, 1)),
            "z": z, "p_value": p, "method": "betting-martingale",
            "p_value_fixed_alphas": poisson_binomial_p_value(a, int(x.sum())),
            "test_level": level, "pass": bool(p > level)}


def dispersion_p_value(predicted, accepted, n: int, budget: int = DISPERSION_BUDGET,
                       slack_sd: float = DISPERSION_SLACK_SD, level: float | None = None,
                       confirm_budget: int = DISPERSION_CONFIRM_BUDGET) -> tuple[float, str]:
    """Upper-tail p-value of ``T = sum_i T_i``, ``T_i = (k_i - n a_i)^2 / (n a_i (1 - a_i))``,
    with ``k_i ~ Binomial(n, a_i)`` independent (every ``a_i`` strictly inside (0, 1)).
    Returns ``(p, method)``: ``"exact-bound"``, ``"chi-square"`` or ``"hoeffding-bound"``.

    **exact-bound.** The exact law of ``T`` is not on a lattice, so each ``T_i`` is rounded
    *up* to a grid of ``m`` cells on ``[0, t]`` (``t`` the observed value): the rounded sum is
    at least ``T``, so ``P(rounded sum >= t) >= P(T >= t)`` and the p-value is never too small
    (a correct run fails no more often than the level). Terms are nonnegative, so mass past
    ``t`` is final and the law is kept on ``[0, t)`` only, convolved in one position at a time
    (FFT, round-off ~1e-13). The rounding adds less than ``dof t / m`` to ``T``; ``m`` makes
    that at most ``slack_sd`` standard deviations (``sqrt(2 dof)``), and at least 2048 cells.

    **chi-square.** Where ``dof * m`` would pass ``budget``: the chi-square tail with ``dof``
    degrees of freedom, returned as is when no test ``level`` is given or the tail is above it
    (a pass cannot be a false alarm).

    **hoeffding-bound.** Where that tail is at or below ``level``, a rigorous bound decides
    instead (:func:`_hoeffding_bound`): the terms rounded to the *nearest* cell, whose errors
    have an exactly computed mean and, being independent and each within half a cell, a sum
    that Hoeffding's inequality keeps within ``delta`` of that mean except with probability
    ``eta = level / 64``, added to the p-value. Its slack is ``delta``, about
    ``h sqrt(dof ln(1 / eta) / 2)`` for a cell of width ``h``, where rounding up costs
    ``dof h``: the same grid is about ``sqrt(dof)`` times tighter. The grid starts at ``budget
    / dof`` cells (a gross deviation is decided there in under a second) and is made four times
    finer while the bound stays above the level, until its slack is ``slack_sd`` or the grid
    reaches ``confirm_budget / dof`` cells (seconds). A coarser grid costs power near the
    level, never validity: no rejection rests on the approximation.
    """
    return _dispersion(predicted, accepted, n, budget, slack_sd, level, confirm_budget)[:2]


def _dispersion(predicted, accepted, n, budget=DISPERSION_BUDGET, slack_sd=DISPERSION_SLACK_SD,
                level=None, confirm_budget=DISPERSION_CONFIRM_BUDGET):
    """:func:`dispersion_p_value`'s ``(p, method, slack)``, ``slack`` the most the bound's
    rounding may add to ``T``, in standard deviations of ``T`` (None for the chi-square tail)."""
    a = acceptances(predicted).reshape(-1)
    n = _steps(n)
    k = _counts(np.reshape(accepted, -1) if np.ndim(accepted) else accepted, a, n)
    if np.any((a <= 0) | (a >= 1)):  # the statistic divides by n a (1 - a)
        raise ValueError("dispersion_p_value needs every acceptance strictly inside (0, 1)")
    var = n * a * (1 - a)
    t = float(np.sum((k - n * a) ** 2 / var))
    dof = a.size
    sd = float(np.sqrt(2 * dof))
    if t <= 0:
        return 1.0, "exact-bound", 0.0
    cells = max(2048, int(np.ceil(dof * t / (slack_sd * sd))))
    if dof * cells <= budget:
        return _dispersion_bound(a, var, n, t, cells), "exact-bound", dof * t / cells / sd
    tail = float(stats.chi2.sf(t, dof))
    if level is None or tail > level:
        return tail, "chi-square", None
    eta = level / 64
    # the slack is delta + h with delta = h sqrt(dof ln(1 / eta) / 2), h = t / cells
    wanted = int(np.ceil(t * (np.sqrt(dof * np.log(1 / eta) / 2) + 1) / (slack_sd * sd)))
    finest = max(2048, min(wanted, int(confirm_budget) // dof))
    grid = min(finest, max(2048, int(budget) // dof))
    while True:
        bound, slack = _hoeffding_bound(a, var, n, t, grid, eta)
        if bound <= level or grid >= finest:
            return bound, "hoeffding-bound", slack / sd
        grid = min(finest, 4 * grid)


def _rounded_sum_law(a, var, n: int, t: float, cells: int, nearest: bool):
    """``(below, mu)``: the law, on cells ``0 .. cells - 1`` of width ``h = t / cells``, of the
    sum of the terms ``T_i`` each rounded up (``nearest=False``) or to the nearest cell, and
    ``mu``, the rounding errors' summed mean (0 when rounding up, where it is not used). Mass
    reaching ``cells`` or more is dropped: final, as the terms are nonnegative. Convolved one
    position at a time by FFT (round-off ~1e-13)."""
    from scipy import fft

    size = fft.next_fast_len(2 * cells, real=True)
    support = np.arange(n + 1)
    below = np.zeros(cells)  # law of the rounded partial sum on cells 0 .. cells - 1
    below[0] = 1.0
    mu = 0.0
    for ai, vi in zip(a, var):
        pmf = stats.binom.pmf(support, n, ai)
        x = (support - n * ai) ** 2 / vi * (cells / t)  # T_i(k) in cells
        if nearest:
            cell = np.rint(x)
            mu += float(np.dot(pmf, cell - x)) * (t / cells)
        else:
            cell = np.ceil(x * (1 + 1e-12))  # up, never down
        term = np.bincount(np.minimum(cell, cells).astype(np.int64), weights=pmf,
                           minlength=cells + 1)
        below = fft.irfft(fft.rfft(below, size) * fft.rfft(term[:cells], size), size)[:cells]
        below = np.clip(below, 0.0, None)
    return below, mu


def _dispersion_bound(a, var, n: int, t: float, cells: int) -> float:
    """The exact-bound of :func:`dispersion_p_value` on a grid of ``cells`` cells on [0, t]."""
    below, _ = _rounded_sum_law(a, var, n, t, cells, nearest=False)
    return float(min(1.0, max(0.0, 1.0 - below.sum())))


def _hoeffding_bound(a, var, n: int, t: float, cells: int, eta: float) -> tuple[float, float]:
    """``(p, slack)``: ``P(T >= t) <= P(R >= t*) + eta``.

    Each term rounded to the nearest multiple of ``h = t / cells``: ``R = T + E`` with ``E``
    the sum of the independent rounding errors, each in ``[-h/2, h/2]`` (a range of ``h``,
    widened by 1e-9 for round-off), of exactly computed mean ``mu``. Hoeffding:
    ``P(E < mu - delta) <= exp(-2 delta^2 / (dof h^2)) = eta``. With ``t* = min(t, t + mu -
    delta)``, ``T >= t`` and ``R < t*`` need ``E < mu - delta``, so ``P(T >= t) <= P(R >= t*)
    + eta``; ``P(R >= t*)`` is the mass of the cells from ``floor(t* / h)`` on (one cell more
    than needed, never less). ``slack = t - floor(t* / h) h``, the most this may add to
    ``T``."""
    h = t / cells
    delta = h * (1 + 1e-9) * float(np.sqrt(a.size * np.log(1 / eta) / 2))
    below, mu = _rounded_sum_law(a, var, n, t, cells, nearest=True)
    t_star = min(t, t + mu - delta)
    first = min(cells, int(np.floor(t_star / h))) if t_star > 0 else 0
    p = 1.0 - below[:first].sum() + eta
    return float(min(1.0, max(0.0, p))), float(t - first * h)


def binomial_sum_p_value(probs, n: int, observed: int) -> float:
    """Two-sided p-value of ``observed`` = the sum ``S`` of independent ``Binomial(n, probs[i])``,
    as :func:`poisson_binomial_p_value` gives it for ``probs`` each repeated ``n`` times, but
    fast: the law of ``S`` is the product of the binomials' discrete Fourier transforms,
    transformed back. Only a window of ``W`` values around the mean is resolved (``S`` modulo
    ``W``): Bernstein's inequality puts less than 1e-30 of the mass beyond ``12 sigma + 50`` of
    the mean, so folding it in changes nothing a test could see, and a count beyond the window
    has a p-value below 1e-30, reported as 0. The transforms' round-off is absolute, and
    the p-value is given it upwards (:func:`_two_sided`), so it is never below the exact one
    and exceeds it by at most about ``(probs + 1) eps`` times the outcomes summed: 1.4e-10
    at 256 positions and ``n = 1000``, relative 1e-6 at the run's levels of about 2e-5.
    Milliseconds for real runs.
    """
    from scipy import fft

    a = acceptances(probs).reshape(-1)
    n, observed = _steps(n), _observed(observed)
    top = n * a.size
    if not 0 <= observed <= top:
        return 0.0
    mean, sd = n * a.sum(), float(np.sqrt(n * (a * (1 - a)).sum()))
    reach = 12 * sd + 50  # P(|S - mean| > reach) < 2 exp(-reach^2 / (2 (sd^2 + reach / 3))) < 1e-30
    if abs(observed - mean) > reach:
        return 0.0
    size = fft.next_fast_len(min(top + 1, 2 * int(np.ceil(reach)) + 3), real=True)
    phi = np.ones(size // 2 + 1, dtype=np.complex128)
    support = np.arange(n + 1)
    for ai in a:  # each binomial folded modulo size (exact when size > top)
        folded = np.bincount(support % size, weights=stats.binom.pmf(support, n, ai),
                             minlength=size)
        phi *= fft.rfft(folded, size)
    pmf = np.clip(fft.irfft(phi, size), 0.0, None)
    if size > top:
        pmf = pmf[:top + 1]
    # The transforms' round-off is absolute, not relative: measured at most 0.03 positions x
    # eps per entry against the exact recursion (a second reading: 0.0043), within the slack.
    # With only the relative slack, an outcome as likely as the observed one, across a
    # symmetric law's mean, fell out of the sum and the p-value halved below 1e-7 (0.0 for
    # 1.3e-29).
    return _two_sided(pmf, observed % size, rounding=(a.size + 1) * np.finfo(float).eps)


def _two_sided(pmf, index: int, rounding: float = 0.0) -> float:
    """The two-sided p-value of outcome ``index`` of a law ``pmf``: the mass of every outcome
    no more likely than it. ``pmf`` may be off by 1e-9 relative (the exact recursion) plus
    ``rounding`` absolute per entry (the Fourier transforms); both are given to the outcomes
    compared, and ``rounding`` once more to the sum of each outcome taken, so the p-value is not
    below the exact law's (beyond round-off in its last digits)."""
    taken = pmf <= pmf[index] * (1 + 1e-9) + 2 * rounding
    return float(min(1.0, pmf[taken].sum() + rounding * np.count_nonzero(taken)))


def poisson_binomial_p_value(probs, observed: int) -> float:
    """Two-sided p-value of ``observed`` successes of independent Bernoulli(``probs``); 0 for
    a count no outcome has (below 0 or above ``len(probs)``), as
    :func:`binomial_sum_p_value` gives (-1 read the last entry of the law and gave 1)."""
    probs = acceptances(probs).reshape(-1)  # a (1, 2) array counted 1 position
    observed = _observed(observed)
    if not 0 <= observed <= len(probs):
        return 0.0
    pmf = np.zeros(len(probs) + 1)
    pmf[0] = 1.0
    for i, a in enumerate(probs):
        pmf[1:i + 2] = pmf[1:i + 2] * (1 - a) + pmf[0:i + 1] * a
        pmf[0] *= 1 - a
    return _two_sided(pmf, observed)
