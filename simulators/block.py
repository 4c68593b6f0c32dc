"""Block efficiency (tokens per target call), wall-time speedup and the best draft length.

* Statement B (MATH.md): with per-position acceptances ``alpha_1..alpha_gamma`` the expected
  number of tokens per target call is ``1 + sum_{k=1}^{gamma} prod_{t<=k} alpha_t``; i.i.d.
  positions give ``(1 - alpha^(gamma+1)) / (1 - alpha)`` (``gamma + 1`` at ``alpha = 1``).
* Leviathan et al. [3]: with the drafter's forward costing ``c`` target forwards, one iteration
  costs ``gamma c + 1`` and the expected wall-time speedup over the target alone is
  ``(1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))``. :func:`optimal_gamma` maximises it.
* Monte Carlo: :func:`mc_tokens_iid` draws i.i.d. Bernoulli acceptances;
  :func:`simulate_blocks` runs the real verification steps (:func:`rdk_theory.sampling.sample_steps`)
  on toy LMs, so its block lengths and blocks can be tested against :func:`simulators.sequence.block_law`.
  :func:`mean_ci` gives a confidence interval for a mean (Bernstein's, which holds at every
  n, given the law's sd and range) and :func:`bernstein_pvalue` the test dual to it.
"""
from __future__ import annotations

import math

import numpy as np

from rdk_theory.bounds import expected_tokens_per_call
from rdk_theory.sampling import sample_steps
from rdk_theory.validation import (PROB_ATOL, InputError, as_count, as_real_array, check_numpy_rng,
                                   real_number)

from .sequence import checked_float_laws, checked_target_law


def _check_alpha(alpha):
    a = as_real_array(alpha, "acceptance rates")
    if np.any(~np.isfinite(a)) or np.any(a < 0) or np.any(a > 1):
        raise InputError(f"acceptance rates must lie in [0, 1], got {alpha}")
    return a


def _check_gamma(gamma):
    return as_count(gamma, "gamma")


def _check_cost(c):
    value = real_number(c)
    if value is None or not 0 <= value < np.inf:
        raise InputError(f"cost ratio c must be a finite real number >= 0, got {c!r}")
    return value


def expected_tokens(alphas):
    """``1 + sum_k prod_{t<=k} alpha_t`` for per-position acceptances (exact on Fractions).

    Delegates to the core's :func:`rdk_theory.bounds.expected_tokens_per_call` (statement B);
    an empty list (``gamma = 0``: the target alone) gives 1.
    """
    if np.ndim(alphas) != 1 and not (isinstance(alphas, (list, tuple)) and not alphas):
        raise InputError("expected_tokens takes a sequence of per-position acceptances (one "
                         f"alpha: expected_tokens_iid(alpha, gamma)), got {alphas!r}")
    if hasattr(alphas, "detach"):  # a torch tensor: the core reads it (a list of 0-d tensors
        return expected_tokens_per_call(alphas)  # was refused as Python objects)
    alphas = list(alphas)
    if not alphas:
        return 1
    exact = any(not isinstance(a, (float, np.floating)) for a in alphas)
    arr = np.array(alphas, dtype=object) if exact else np.array(alphas, dtype=np.float64)
    out = expected_tokens_per_call(arr)
    return out.item() if hasattr(out, "item") and not exact else out


def expected_tokens_iid(alpha, gamma: int):
    """``(1 - alpha^(gamma+1)) / (1 - alpha)``; ``gamma + 1`` at ``alpha = 1``. Broadcasts over alpha.

    ``1 - alpha^(gamma+1)`` is computed as ``-expm1((gamma + 1) log alpha)``: subtracted from 1
    it lost digits near alpha = 1 (6.0 at alpha = 1 - 1e-10, gamma 5, for 5.9999999985)."""
    gamma = _check_gamma(gamma)
    a = _check_alpha(alpha)
    with np.errstate(divide="ignore", invalid="ignore"):  # log 0 = -inf: expm1 gives -1
        num = -np.expm1((gamma + 1) * np.log(a))
        out = np.where(a < 1, num / np.where(a < 1, 1 - a, 1), gamma + 1.0)
    return out[()] if out.ndim == 0 else out


def speedup(alpha, gamma: int, c: float):
    """Leviathan wall-time speedup ``E[tokens] / (gamma c + 1)`` over target-only decoding."""
    c = _check_cost(c)
    return expected_tokens_iid(alpha, gamma) / (_check_gamma(gamma) * c + 1)


def speedup_grows(alpha: float, gamma: int, c: float) -> bool:
    """Whether ``speedup(alpha, gamma + 1, c) > speedup(alpha, gamma, c)``, decided without
    cancellation. With ``A = alpha^(gamma+1)`` the difference has the sign of
    ``A (1 - alpha)(gamma c + 1) - c (1 - A)``, compared in logs (``log1p`` and ``expm1``
    keep each side to a few ulps). Subtracting two speedups in floats cannot: with a tiny
    cost (``c = 1e-20``, alpha 0.5) they tie from gamma 53 on, where the exact optimum is 65.
    At ``alpha = 1`` the sign is that of ``1 - c``; at ``c = 0`` it grows iff ``alpha > 0``."""
    if np.ndim(alpha) != 0:  # float() of an array was a raw TypeError
        raise InputError(f"speedup_grows takes one acceptance rate, got {alpha!r}")
    a, g, c = float(_check_alpha(alpha)), _check_gamma(gamma), _check_cost(c)
    if a == 0:
        return False  # A = 0: the speedup is 1 / (gamma c + 1), never growing
    if c == 0:
        return True
    if a == 1:
        return c < 1
    log_a = math.log(a)
    # log(gamma c + 1); gamma c itself overflows past 1.8e308 (c = 1e306, gamma 512), and an
    # infinite left side made "grows" true up to the cap: 512 drafts called best, speedup 0
    gc = g * c
    log_gc1 = math.log1p(gc) if gc <= 1e300 else math.log(g) + math.log(c)
    lhs = (g + 1) * log_a + math.log1p(-a) + log_gc1
    rhs = math.log(c) + math.log(-math.expm1((g + 1) * log_a))  # 1 - A, also for A near 1
    return lhs > rhs


def optimal_gamma(alpha: float, c: float, gamma_max: int = 64) -> tuple[int, float]:
    """``argmax_{0 <= gamma <= gamma_max} speedup(alpha, gamma, c)`` (the first, on ties) and
    the speedup there.

    ``gamma = 0`` (speedup 1) means speculation does not pay. The speedup is unimodal in
    gamma: :func:`speedup_grows`'s condition reads ``(1 - alpha)(gamma c + 1) >
    c (alpha^-(gamma+1) - 1)``, whose left side grows by ``(1 - alpha) c`` per step and right
    side by at least that, so once it fails it fails for every larger gamma. The optimum is
    the first gamma where it fails, decided by :func:`speedup_grows` rather than by comparing
    speedups in floats, which tie long before the optimum when ``c`` is tiny (53 instead of
    65 at ``c = 1e-20``, alpha 0.5). With a free drafter (``c = 0``) and ``alpha > 0`` the
    speedup grows with every gamma, so the answer is ``gamma_max``.
    """
    if np.ndim(alpha) != 0:
        raise InputError(f"optimal_gamma takes one acceptance rate, got {alpha!r}")
    gamma_max = _check_gamma(gamma_max)
    _check_alpha(alpha), _check_cost(c)
    # the first gamma where it fails, by bisection on that monotone condition: the same answer
    # as stepping up one at a time, which took minutes at gamma_max = 10^7 (and never ended
    # at 2^40)
    lo, hi = 0, gamma_max  # grows at every g < lo; the answer is at most hi
    while lo < hi:
        mid = (lo + hi) // 2
        if speedup_grows(alpha, mid, c):
            lo = mid + 1
        else:
            hi = mid
    return int(lo), float(speedup(alpha, lo, c))


def law_sd(law) -> float:
    """Standard deviation of a law on numbers, given as ``{value: probability}`` (e.g. a block
    law's tokens per call, :attr:`simulators.sequence.BlockLaw.length_law`). The values must
    be finite and the probabilities a law within ``PROB_ATOL``: each >= -PROB_ATOL (a float
    block law of a row summing to 1 + 2^-52 holds -2.2e-16; read as 0), summing to 1 within
    it (InputError otherwise; ``{1: 0.5, 2: 0.7}`` had given 0.642 and ``{1: -1, 2: 2}`` 0)."""
    if not isinstance(law, dict):  # a list was a raw AttributeError
        raise InputError(f"law_sd needs a law {{value: probability}} (a dict), got "
                         f"{type(law).__name__}")
    try:
        values = np.array([float(k) for k in law], dtype=np.float64)
        probs = np.array([float(v) for v in law.values()], dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:  # 'a', 10**400
        raise InputError(f"law_sd needs real values and probabilities: {exc}") from None
    if not (np.all(np.isfinite(values)) and np.all(np.isfinite(probs))
            and np.all(probs >= -PROB_ATOL) and abs(probs.sum() - 1) <= PROB_ATOL):
        raise InputError(f"law_sd needs a law {{finite value: probability}} with probabilities "
                         f">= 0 summing to 1 (within {PROB_ATOL:g}), got {len(probs)} values "
                         f"summing to {probs.sum():.10g}, smallest {probs.min(initial=0):.10g}")
    probs = np.maximum(probs, 0.0)
    mean = float((values * probs).sum())
    return math.sqrt(max(0.0, float((probs * (values - mean) ** 2).sum())))


def tokens_sd_iid(alpha, gamma: int) -> float:
    """Standard deviation of the tokens per call ``L`` when each of ``gamma`` drafts is accepted
    with probability ``alpha`` independently: ``P(L = k) = alpha^(k-1) (1 - alpha)`` for
    ``k <= gamma`` and ``P(L = gamma + 1) = alpha^gamma``."""
    if np.ndim(alpha) != 0:  # float() of an array was a raw TypeError
        raise InputError(f"tokens_sd_iid takes one acceptance rate, got {alpha!r}")
    a, g = float(_check_alpha(alpha)), _check_gamma(gamma)
    k = np.arange(1, g + 2, dtype=np.float64)
    return law_sd(dict(zip(k, np.append(a ** (k[:-1] - 1) * (1 - a), a ** g))))


def _check_sd(sd) -> None:
    """A known standard deviation must be a finite number >= 0 (None: unknown), and small
    enough to square (1e160 overflowed ``sd ** 2`` in the Bernstein bound)."""
    value = real_number(sd)
    if sd is not None and (value is None or not 0 <= value <= MAX_SD):
        raise InputError(f"sd must be a finite number in [0, {MAX_SD:g}] (or None), got {sd!r}")


#: Largest standard deviation the intervals take: its square and the Bernstein terms stay
#: finite in float64.
MAX_SD = 1e150


def _standard_error(x, sd) -> float:
    """The mean's standard error: from the law's standard deviation ``sd`` when it is known,
    else from the sample's (infinite for fewer than two samples)."""
    if sd is not None:
        return float(sd) / math.sqrt(x.size)
    return float(x.std(ddof=1)) / math.sqrt(x.size) if x.size > 1 else math.inf


def _reference(x, sd):
    """The law of ``(mean - E X) / se``: the standard normal when ``sd`` is the law's own,
    Student's t with ``n - 1`` degrees of freedom when ``se`` comes from the sample's sd (the
    normal tail fired 1.35x as often as stated at n = 400 and a level of 4e-6)."""
    from scipy import stats

    return stats.norm if sd is not None or x.size < 2 else stats.t(x.size - 1)


def _bernstein_half_width(n: int, sd: float, spread: float, level: float) -> float:
    """The ``t`` at which Bernstein's bound ``2 exp(-n t^2 / (2 sd^2 + 2 spread t / 3))``
    equals ``1 - level`` (the positive root of its quadratic in ``t``)."""
    log_term = math.log(2 / (1 - level))  # t^2 = (2 sd^2 + 2 spread t / 3) log_term / n
    b = spread * log_term / (3 * n)
    return b + math.sqrt(b * b + 2 * float(sd) ** 2 * log_term / n)


def _check_spread(spread, sd) -> None:
    """``spread`` bounds ``|X - E X|``, so it is finite, given with ``sd``, and at least ``sd``
    (an sd above it is no law's: a smaller spread had narrowed the interval)."""
    v = real_number(spread)
    if sd is None or v is None or not 0 <= v <= MAX_SD or sd > v:  # NaN, '3' fail too
        raise InputError(f"spread must be a finite number >= sd >= 0, with sd given; got "
                         f"spread={spread!r}, sd={sd!r}")


def _samples(samples, expected=0.0, who: str = "mean_ci") -> np.ndarray:
    """The samples as float64, at least one, each finite and with a finite mean (an infinite
    or NaN sample had given bernstein_pvalue's p = 1: "no evidence"), and ``expected``
    finite."""
    x = np.asarray(samples, dtype=np.float64)
    if x.size == 0:
        raise InputError(f"{who} needs at least one sample")
    value = real_number(expected)
    if value is None or not math.isfinite(value):
        raise InputError(f"{who}: expected must be a finite number, got {expected!r}")
    with np.errstate(over="ignore"):
        if not (np.all(np.isfinite(x)) and math.isfinite(float(x.mean()))):
            raise InputError(f"{who}: the samples must be finite numbers with a finite mean")
    return x


def mean_ci(samples, level: float = 0.999, *, sd: float | None = None,
            spread: float | None = None) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: two-sided CI at ``level`` for the mean.

    ``sd``: the standard deviation of the samples' law when it is known (an exact block law):
    with the sample's own, two equal draws gave an interval of width 0 around a wrong mean.

    Without ``spread`` the interval is the normal approximation with ``sd``, Student's t with
    the sample's sd. With ``sd`` and ``spread`` (a bound on ``|X - E X|``, e.g. ``gamma`` for
    tokens per call in ``[1, gamma + 1]``) it is
    Bernstein's: ``P(|mean - E X| >= t) <= 2 exp(-n t^2 / (2 sd^2 + 2 spread t / 3))`` solved
    for ``t`` at ``1 - level``, which holds at every ``n`` for every law. The normal one misses
    more often than stated on a skewed law: at alpha = 0.999, 64 drafts, n = 10, 0.9% of its
    "99.9%" intervals (with the law's sd; 20,000 replicates) missed the exact mean, nine
    times the stated 0.1% (Student's t with the sample's sd: 54%).
    """
    x = _samples(samples)
    given, level = level, real_number(level)
    if level is None or not 0 < level < 1:  # NaN, '0.9' fail too
        raise InputError(f"level must be in (0, 1), e.g. 0.999, got {given!r}")
    _check_sd(sd)
    m = float(x.mean())
    if spread is not None:
        _check_spread(spread, sd)
        half = _bernstein_half_width(x.size, sd, spread, level)
        return m, m - half, m + half
    half = float(_reference(x, sd).ppf(0.5 + level / 2)) * _standard_error(x, sd)
    return m, m - half, m + half


def tokens_per_call_ci(samples, sd: float, gamma: int, level: float = 0.999):
    """:func:`mean_ci`'s Bernstein interval for tokens per call ``L`` in ``[1, gamma + 1]``
    (spread ``gamma``, the law's ``sd``), cut to that range: ``E L`` lies in it too, and at a
    small ``n`` the interval reached beyond it ([-1.62, 4.62] for L in [1, 2])."""
    m, lo, hi = mean_ci(samples, level, sd=sd, spread=gamma)
    return m, max(lo, 1.0), min(hi, gamma + 1.0)


def z_pvalue(samples, expected: float, *, sd: float | None = None) -> float:
    """Two-sided p-value that ``samples`` (i.i.d., finite variance) have mean ``expected`` (CLT),
    with the law's standard deviation ``sd`` when known (normal tail), else the sample's
    (Student's t tail, ``n - 1`` degrees of freedom). A standard error of 0 (a law with one
    value) gives 1 where every sample is ``expected`` and 0 elsewhere (samples that vary
    cannot come from a law with one value)."""
    x = _samples(samples, expected, "z_pvalue")
    _check_sd(sd)
    se = _standard_error(x, sd)
    if se == 0:
        return 1.0 if np.all(np.abs(x - expected) < 1e-12) else 0.0
    return float(2 * _reference(x, sd).sf(abs(x.mean() - expected) / se))


def bernstein_pvalue(samples, expected: float, *, sd: float, spread: float) -> float:
    """A p-value that ``samples`` (i.i.d.) have mean ``expected`` valid at every ``n`` for
    every law with standard deviation ``sd`` and ``|X - E X| <= spread``: Bernstein's bound
    ``min(1, 2 exp(-n t^2 / (2 sd^2 + 2 spread t / 3)))`` at ``t = |mean - expected|``, the
    test dual to :func:`mean_ci`'s interval with ``spread`` (conservative: never below the
    exact tail probability)."""
    x = _samples(samples, expected, "bernstein_pvalue")
    _check_sd(sd)
    _check_spread(spread, sd)
    t = abs(float(x.mean()) - float(expected))
    denominator = 2 * float(sd) ** 2 + 2 * float(spread) * t / 3
    if denominator == 0:  # a law with one value
        return 1.0 if t < 1e-12 else 0.0
    return min(1.0, 2 * math.exp(-x.size * t * t / denominator))


def mc_tokens_iid(alphas, n: int, rng) -> np.ndarray:
    """Tokens per target call of ``n`` iterations with Bernoulli(alpha_t) acceptance at position t.

    ``alphas``: (gamma,) per-position acceptances (a scalar alpha needs ``[alpha] * gamma``).
    """
    a = _check_alpha(np.atleast_1d(alphas))
    if a.ndim != 1:  # a (2, 1) array was a raw broadcast error
        raise InputError(f"mc_tokens_iid takes one acceptance per position, a 1-D list, got "
                         f"shape {a.shape}")
    n = as_count(n, "n")  # n = 2.5 gave 2 rows
    check_numpy_rng(rng, "mc_tokens_iid needs")
    out = np.empty(n, dtype=np.int64)
    # blocks of rows, about 8 MiB of uniforms each: memory stays flat (1e7 rows at gamma 16
    # took 2.2 GB at once), and row-major blocks draw the very same uniforms as one array
    rows = max(1, MC_BLOCK_ELEMENTS // max(a.size, 1))
    for r0 in range(0, n, rows):
        acc = rng.random((min(rows, n - r0), a.size)) < a
        out[r0:r0 + acc.shape[0]] = 1 + np.cumprod(acc, axis=1).sum(axis=1)
    return out


#: Uniforms per block of :func:`mc_tokens_iid`.
MC_BLOCK_ELEMENTS = 1 << 20


def simulate_blocks(target, proposal_fn, gamma: int, n: int, rng, prefix=()) -> list[tuple]:
    """Run ``n`` speculative iterations from ``prefix`` with the real verification step.

    Position by position, the runs still going are grouped by context and each group takes
    :func:`rdk_theory.sampling.sample_steps` draws (draft from ``r``, accept with
    ``min(1, p/r)``, residual on rejection). Float64 arithmetic. Returns the emitted blocks.
    """
    gamma = _check_gamma(gamma)
    check_numpy_rng(rng, "simulate_blocks needs")
    prefix = tuple(prefix)
    active = {(): as_count(n, "n")}  # block so far -> number of runs (n = 2.5 gave 2 blocks)
    done: dict = {}
    for t in range(gamma + 1):
        nxt: dict = {}
        for blk, cnt in active.items():
            ctx = prefix + blk
            if t == gamma:
                p = checked_target_law(target, ctx)
                ys = rng.choice(p.size, size=cnt, p=p)
                for y, k in zip(*np.unique(ys, return_counts=True)):
                    done[blk + (int(y),)] = done.get(blk + (int(y),), 0) + int(k)
                continue
            p, r = checked_float_laws(target, proposal_fn, ctx)
            tokens, accepted = sample_steps(p, r, cnt, rng, check=False)
            for y, ok in zip(tokens.tolist(), accepted.tolist()):
                key = blk + (y,)
                tgt = nxt if ok else done
                tgt[key] = tgt.get(key, 0) + 1
        active = nxt
    out = []
    for blk, k in done.items():
        out.extend([blk] * k)
    return out
