"""Synthetic distribution families for experiments and tests.

All functions take an explicit ``numpy.random.Generator``; none seeds anything globally.

* :func:`dirichlet` — Dirichlet draws (concentration ``a``: small ``a`` gives peaky laws).
* :func:`zipf` — ``p(rank k) ∝ k^{-s}``, optionally on a random permutation of the ids.
* :func:`sparse_topk` — random laws with exactly ``k`` non-zero entries (exact zeros).
* :func:`adversarial_pairs` — named ``(p, q)`` edge cases: ``p == q``, disjoint supports,
  point masses, a point mass against uniform.
* :func:`zipfian_lm` — a toy "language model": contexts mixing latent topics over a Zipfian
  unigram law, with an imperfect drafter; the default data of ``rdk-theory report``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ._backend import softmax
from .validation import InputError, as_count, check_numpy_rng, real_number


def _check_n(n):
    return as_count(n, "vocabulary size", 1)


def _as_float(x, name: str) -> float:
    value = real_number(x)
    if value is None:  # a string, a bool, an array, None: not one real number
        raise InputError(f"{name} must be a number, got {x!r}")
    return value


def _check_finite(x, name: str) -> float:
    """``x`` as a finite float, or InputError naming it."""
    value = _as_float(x, name)
    if not np.isfinite(value):
        raise InputError(f"{name} must be finite, got {x}")
    return value


def _check_positive(x, name: str, *, zero_ok: bool = False) -> float:
    """``x`` as a finite float > 0 (>= 0 with ``zero_ok``), or InputError naming it."""
    value = _as_float(x, name)
    if not (np.isfinite(value) and (value >= 0 if zero_ok else value > 0)):
        raise InputError(f"{name} must be finite and {'>= 0' if zero_ok else '> 0'}, got {x}")
    return value


#: Largest logit scale of :func:`zipfian_lm` (noise sd, topic boost). A boost of 1e6 already
#: sends the other tokens' probabilities to exactly 0; from about 1e13 float64 round-off
#: swallows the Zipf and noise terms (at 1e17 every row came out uniform).
MAX_LOGIT_SCALE = 1e6


def _logit_scale(value: float, name: str) -> float:
    if abs(value) > MAX_LOGIT_SCALE:
        raise InputError(f"{name} must be at most {MAX_LOGIT_SCALE:g} in absolute value (a logit "
                         f"scale; beyond it float64 round-off swallows the Zipf law), got {value:g}")
    return value


def _check_rng(rng) -> None:
    check_numpy_rng(rng, "synthetic draws need")


def _check_size(size) -> tuple:
    """``size`` (an int, or a tuple, list or 1-D array of them, each >= 0) as a shape tuple,
    or InputError."""
    if isinstance(size, (tuple, list)) or (isinstance(size, np.ndarray) and size.ndim == 1):
        return tuple(as_count(s, "size", 0) for s in size)
    return (as_count(size, "size", 0),)


def dirichlet(rng, n: int, concentration: float = 1.0, size: int | tuple = ()) -> np.ndarray:
    """Draws from ``Dirichlet(concentration * 1_n)``, shape ``size + (n,)``.

    Exact zeros have the law's frequency: where a gamma draw could underflow (concentrations
    below about 0.05), rows are drawn in log space, so an entry is 0 only where its proportion
    is below float64's range."""
    _check_rng(rng)
    n = _check_n(n)
    concentration = _check_positive(concentration, "concentration")
    size = _check_size(size)
    if _gammas_may_underflow(concentration, n * math.prod(size)):
        return _dirichlet_in_log_space(rng, n, concentration, size + (n,))
    g = rng.gamma(concentration, size=size + (n,))
    with np.errstate(over="ignore"):  # huge concentrations: draws near 1e306 overflow the sum;
        s = g.sum(axis=-1, keepdims=True)  # such rows are scaled by their maximum first
    if not np.all(np.isfinite(s)):
        g = np.where(np.isfinite(s), g, g / g.max(axis=-1, keepdims=True))
        s = g.sum(axis=-1, keepdims=True)
    out = g / np.where(s > 0, s, 1.0)
    # Where no draw is expected to underflow (_gammas_may_underflow), one still might: to 0,
    # or to subnormals of a few bits, whose ratios come out as coarse fractions (3e-323 /
    # 4e-323). Rows whose sum is below n * tiny (so their largest draw may be subnormal) are
    # drawn again in log space: the same law, every id alike. A Dirichlet row's proportions
    # are independent of its gamma sum (Lukacs), so choosing rows by their sum leaves the law
    # unchanged. Other rows keep their draws. n * tiny: n at most 2^63, so it is finite.
    under = s[..., 0] < n * np.finfo(np.float64).tiny
    if np.any(under):
        out[under] = _dirichlet_in_log_space(rng, n, concentration, (int(under.sum()), n))
    return out


#: Expected number of gamma draws below float64's smallest normal number above which
#: :func:`dirichlet` draws every row in log space: below it, the draws are normalised as they
#: are (about 1e-3 per draw at a concentration of 0.01, 1e-31 at 0.1).
UNDERFLOW_DRAWS = 1e-12


def _gammas_may_underflow(concentration: float, draws: int) -> bool:
    """Whether ``draws`` Gamma(concentration) draws are expected to put more than
    :data:`UNDERFLOW_DRAWS` of them below the smallest normal float64 (there they lose bits, or
    become 0 where the row's proportion is still representable: at a = 1e-3, n = 3, 40% of
    first coordinates came out exactly 0 where the Dirichlet law gives 32%). A rule on the
    parameters, not on the draws: choosing rows by their draws would bias the law."""
    from scipy.special import gammainc

    return draws * float(gammainc(concentration, np.finfo(np.float64).tiny)) > UNDERFLOW_DRAWS


def _dirichlet_in_log_space(rng, n: int, concentration: float, shape: tuple) -> np.ndarray:
    """Dirichlet(concentration 1_n) rows of ``shape`` (last axis n) drawn in log space:
    ``G_a = G_(a+1) U^(1/a)`` with U uniform, normalised by a softmax, so no draw underflows
    before the normalisation (a proportion below float64's range is an exact 0). ``log U / a``
    is shifted by its row maximum first (softmax ignores a row constant): unshifted, a whole
    row could overflow to -inf and come out NaN."""
    log_g1 = np.log(rng.gamma(concentration + 1, size=shape))  # the gammas first, then the
    log_u = np.log(rng.random(shape))  # uniforms: seeded results depend on the order
    with np.errstate(over="ignore"):  # -inf below a row's maximum: exp gives an exact 0
        log_g = log_g1 + (log_u - log_u.max(axis=-1, keepdims=True)) / concentration
    return softmax(log_g)


def zipf(n: int, exponent: float = 1.1, *, rng=None) -> np.ndarray:
    """``p(k-th most likely) ∝ k^{-exponent}``; ids permuted at random when ``rng`` is given."""
    n = _check_n(n)
    exponent = _check_positive(exponent, "exponent", zero_ok=True)
    if rng is not None:
        _check_rng(rng)
    w = np.arange(1, n + 1, dtype=np.float64) ** (-exponent)
    w /= w.sum()
    return w[rng.permutation(n)] if rng is not None else w


def sparse_topk(rng, n: int, k: int, size: int | tuple = (), concentration: float = 1.0) -> np.ndarray:
    """Laws with exactly ``k`` non-zero entries at random positions (the others exactly 0)."""
    n = _check_n(n)
    k = as_count(k, "k", 1)
    if k > n:
        raise InputError(f"k must be in [1, {n}], got {k}")
    size = _check_size(size)
    out = np.zeros(size + (n,))
    vals = dirichlet(rng, k, concentration, size)
    vals = np.maximum(vals, 1e-12)
    vals /= vals.sum(axis=-1, keepdims=True)
    for idx in np.ndindex(*size):
        out[idx + (rng.choice(n, size=k, replace=False),)] = vals[idx]
    return out


def adversarial_pairs(n: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Named ``(p, q)`` pairs over ``n >= 2`` tokens that stress the samplers."""
    n = _check_n(n)
    if n < 2:
        raise InputError("adversarial pairs need n >= 2")
    u = np.full(n, 1.0 / n)
    e0, e1 = np.zeros(n), np.zeros(n)  # not np.eye(n)'s rows: n^2 memory, 488 GiB at 256K
    e0[0] = e1[1] = 1.0
    half = n // 2
    left = np.r_[np.full(half, 1.0 / half), np.zeros(n - half)]
    right = np.r_[np.zeros(half), np.full(n - half, 1.0 / (n - half))]
    return {
        "equal": (u.copy(), u.copy()),
        "disjoint_supports": (left, right),
        "point_masses_equal": (e0.copy(), e0.copy()),  # each pair its own arrays
        "point_masses_distinct": (e0.copy(), e1),
        "point_vs_uniform": (e0.copy(), u.copy()),
    }


@dataclass
class SyntheticLM:
    """Target/drafter next-token laws of a toy Zipfian LM.

    Attributes:
      target_probs: (C, N) evaluation contexts ``p``.
      draft_probs: (C, N) full-vocabulary drafter ``q`` (prune it with a VocabMap).
      calibration_probs: (S, N) further target laws, for kernels and frequency counts.
      unigram: (N,) the global Zipfian law the contexts fluctuate around.
    """

    target_probs: np.ndarray
    draft_probs: np.ndarray
    calibration_probs: np.ndarray
    unigram: np.ndarray


def zipfian_lm(rng, n: int = 2048, *, contexts: int = 64, calibration: int = 256,
               exponent: float = 1.1, topics: int = 16, topic_size: int = 24,
               topic_strength: float = 4.0, context_noise: float = 1.0,
               drafter_noise: float = 0.7) -> SyntheticLM:
    """Contexts ``p_c = softmax(log zipf + strength * 1[topic(c)] + noise)``; drafter adds noise.

    Each topic boosts a random set of ``topic_size`` tokens (frequent and rare alike), so tokens
    of one topic co-vary across contexts: the structure a covariance kernel can exploit. The
    drafter is ``softmax(log p_c + drafter_noise * N(0, 1))`` (an imperfect small model).
    """
    _check_rng(rng)
    n = _check_n(n)
    contexts, calibration = as_count(contexts, "contexts", 1), as_count(calibration, "calibration", 1)
    topics, topic_size = as_count(topics, "topics", 1), as_count(topic_size, "topic_size", 1)
    if topic_size > n:
        raise InputError(f"need 1 <= topic_size <= n = {n}, got {topic_size}")
    # logit scales: N(0, 1) noise, and the topic's boost
    context_noise = _logit_scale(_check_positive(context_noise, "context_noise", zero_ok=True),
                                 "context_noise")
    drafter_noise = _logit_scale(_check_positive(drafter_noise, "drafter_noise", zero_ok=True),
                                 "drafter_noise")
    topic_strength = _logit_scale(_check_finite(topic_strength, "topic_strength"),
                                  "topic_strength")
    with np.errstate(divide="ignore"):  # a steep exponent underflows the rarest ranks to 0
        base = np.log(zipf(n, exponent))
    members = np.stack([rng.choice(n, size=topic_size, replace=False) for _ in range(topics)])

    def draw(count):
        logits = np.tile(base, (count, 1)) + context_noise * rng.standard_normal((count, n))
        which = rng.integers(topics, size=count)
        rows = np.repeat(np.arange(count), topic_size)
        logits[rows, members[which].ravel()] += topic_strength
        return softmax(logits)

    target = draw(contexts)
    cal = draw(calibration)
    with np.errstate(divide="ignore"):  # a rank that underflowed has log 0 = -inf: it stays 0
        draft = softmax(np.log(target) + drafter_noise * rng.standard_normal(target.shape))
    return SyntheticLM(target, draft, cal, np.exp(base))
