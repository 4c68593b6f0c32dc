"""Multi-draft verification: SpecTr's K-SEQ and the optimal k-draft acceptance (statement K).

With ``k`` i.i.d. drafts ``x_1..x_k ~ q`` (``q`` a proposal over the target vocabulary) and a
parameter ``rho >= 1``, K-SEQ [6] scans the drafts and accepts ``x_i`` with probability
``min(1, p(x_i) / (rho q(x_i)))``; if none is accepted it draws from a residual. Each draft is
accepted with probability

    beta(rho) = sum_x min(q(x), p(x) / rho),

so the acceptance is ``1 - (1 - beta)^k`` and the law of a token emitted by acceptance is

    a(x) = min(q(x), p(x) / rho) (1 - (1 - beta)^k) / beta.

The step is lossless iff ``a <= p`` (the residual ``(p - a) / (1 - beta)^k`` is then a law).
``1 - (1 - beta)^k <= rho beta`` is sufficient, and necessary as soon as some ``x`` has
``rho q(x) >= p(x) > 0``; the left side decreases and the right side increases in ``rho``, so the
valid ``rho`` form an interval ``[rho*, inf)`` with ``rho* <= k``, and ``rho*`` (found by bisection)
gives the best acceptance. The optimal acceptance of *any* valid k-draft rule is an optimal
transport LP between ``q^k`` (draft tuples) and ``p`` (outputs), solved by
:func:`optimal_acceptance_lp`; K-SEQ at ``rho*`` reaches at least ``1 - 1/e`` of it [6].

All functions take 1-D ``p`` and ``q`` (float64 arrays, or object arrays of ``Fraction`` for exact
checks, with ``rho`` a ``Fraction``); they are small-vocabulary reference maths, not a sampler.
A torch tensor, on any device, is checked there and copied to the host as float64 numpy.
"""
from __future__ import annotations

import itertools
import numbers
from fractions import Fraction

import numpy as np

from .validation import InputError, as_count, host_prob_array


def _pq(target_probs, draft_probs):
    p = host_prob_array(target_probs, "target_probs")
    q = host_prob_array(draft_probs, "draft_probs", allow_sub_stochastic=True)
    if p.ndim != 1 or p.shape != q.shape:
        raise InputError(f"target_probs and draft_probs must be 1-D of one length, got {p.shape}, {q.shape}")
    return p, q


def _drafts(k) -> int:
    """``k``, the number of drafts, as an int >= 1 (InputError otherwise)."""
    return as_count(k, "k (number of drafts)", 1)


def check_rho(rho, lo: int = 1):
    """``rho`` as given when it is exact (an int or a Fraction), else as a float; a real number
    ``>= lo`` (``> 0`` for ``lo = 0``; ``inf`` allowed: no draft is ever accepted), or
    InputError (None, a bool, a string, a complex number or an array included; a 0-d array is
    its number)."""
    if isinstance(rho, np.ndarray) and rho.ndim == 0:
        rho = rho.item()
    if isinstance(rho, numbers.Real) and not isinstance(rho, (bool, np.bool_)):
        value = rho if isinstance(rho, numbers.Rational) else float(rho)
        if (value >= lo) if lo else (value > 0):
            return value
    raise InputError(f"rho must be a real number {'>= 1' if lo else '> 0'}, got {rho!r}")


def _exact_rho(rho, p):
    """``rho`` as a Fraction when it is an int and ``p`` is exact: ``int / int`` is a float,
    which would take the exact tier's ``beta`` out of it (and its validity check with it)."""
    if isinstance(rho, numbers.Integral) and p.dtype == object:
        return Fraction(int(rho))
    return rho


def _check_k_rho(k, rho):
    _drafts(k)
    return check_rho(rho)


def beta(target_probs, draft_probs, rho):
    """``beta(rho) = sum_x min(q(x), p(x) / rho)``: the acceptance probability of one draft."""
    p, q = _pq(target_probs, draft_probs)
    return np.minimum(q, p / _exact_rho(check_rho(rho, 0), p)).sum()


#: Relative slack on the float64 validity condition: at ``k = 1`` (or ``p == q``) the condition
#: holds with equality, and round-off must not flip it. Relative, so that a tiny ``beta`` (whose
#: whole condition is below any absolute slack) is still judged. Exact inputs use no slack.
VALIDITY_RTOL = 1e-12


def kseq_is_valid(target_probs, draft_probs, rho, k: int, *, strict: bool = False) -> bool:
    """The validity condition ``1 - (1 - beta(rho))^k <= rho beta(rho)`` (sufficient for losslessness).

    Exact (``==``-level) on ``Fraction`` inputs. On float64 inputs both sides are computed
    without cancellation (``-expm1(k log1p(-beta))`` and ``sum_x min(rho q(x), p(x))`` over the
    support of ``q``, which is also right at ``rho = inf``) and compared with a relative slack of
    ``VALIDITY_RTOL``. ``strict=True`` demands that margin instead of granting it: a float
    ``rho`` that passes then satisfies the condition in exact arithmetic too (for the float
    ``p`` and ``q`` as given), which is what :func:`kseq_best_rho` searches with.
    """
    k, rho = _drafts(k), _check_k_rho(k, rho)
    p, q = _pq(target_probs, draft_probs)
    rho = _exact_rho(rho, p)
    b = beta(p, q, rho)
    with np.errstate(invalid="ignore"):  # inf * 0 off the support of q, dropped by the where
        rhs = np.where(q > 0, np.minimum(rho * q, p), 0 * p).sum()
    if isinstance(b, Fraction) and isinstance(rhs, Fraction):
        return bool(1 - (1 - b) ** k <= rhs)
    lhs = -np.expm1(k * np.log1p(-float(b))) if b < 1 else 1.0
    rhs = float(rhs)
    return bool(lhs <= rhs + (-1 if strict else 1) * VALIDITY_RTOL * max(lhs, rhs))


def kseq_acceptance(target_probs, draft_probs, rho, k: int):
    """``1 - (1 - beta(rho))^k``: the probability that one of the ``k`` drafts is accepted."""
    rho = _check_k_rho(k, rho)
    return 1 - (1 - beta(target_probs, draft_probs, rho)) ** int(k)


def kseq_accept_law(target_probs, draft_probs, rho, k: int):
    """``a(x) = min(q(x), p(x)/rho) (1 - (1 - beta)^k) / beta``: law of tokens emitted by acceptance.

    Sub-stochastic, total mass ``1 - (1 - beta)^k``; all zeros when ``beta = 0``.
    """
    rho = _check_k_rho(k, rho)
    p, q = _pq(target_probs, draft_probs)
    m = np.minimum(q, p / _exact_rho(rho, p))
    b = m.sum()
    if b == 0:
        return m * 0
    return m * ((1 - (1 - b) ** int(k)) / b)


def kseq_output_law(target_probs, draft_probs, rho, k: int):
    """Exact law of the K-SEQ output: ``a + (1 - beta)^k res``, ``res = (p - a)^+ / sum (p - a)^+``.

    Built from the step's ingredients (accepted part plus residual), so comparing it with ``p``
    tests losslessness: it equals ``p`` exactly when ``a <= p``, and differs when ``a(x) > p(x)``
    for some ``x`` (the residual cannot take mass back). That happens only for an invalid
    ``rho``, and for every invalid ``rho`` as soon as some ``x`` has ``rho q(x) >= p(x) > 0``.
    """
    p, _ = _pq(target_probs, draft_probs)
    a = kseq_accept_law(target_probs, draft_probs, rho, k)
    rest = 1 - a.sum()
    excess = np.array([v if v > 0 else 0 * v for v in (p - a)], dtype=p.dtype)
    total = excess.sum()
    if total == 0:
        return a
    return a + rest * excess / total


def kseq_best_rho(target_probs, draft_probs, k: int, *, tol: float = 1e-12) -> float:
    """Smallest valid ``rho`` in ``[1, k]`` by bisection (acceptance decreases in ``rho``).

    The condition ``g(rho) = rho beta(rho) - 1 + (1 - beta(rho))^k >= 0`` is monotone
    non-decreasing in ``rho`` and holds at ``rho = k`` (since ``1 - (1 - b)^k <= k b``). The
    bisection (float64; ``tol`` finite and > 0) searches with ``kseq_is_valid(...,
    strict=True)``, so the ``rho`` it returns is valid in exact arithmetic too, not only within
    float round-off: it is within ``tol`` of the smallest ``rho`` that passes the strict check,
    which lies above the exact ``rho*`` by the margin ``VALIDITY_RTOL`` over the slope of ``g``
    (1e-12 to 1e-8 in practice). ``rho = 1`` is returned when ``k = 1`` or ``p == q`` (the
    condition then holds with equality) or when it passes the strict check. It stops early
    when the interval holds no float between its ends (below ``tol`` once ``rho*`` is large).
    """
    p, q = _pq(target_probs, draft_probs)
    p, q = p.astype(np.float64), q.astype(np.float64)
    k = _drafts(k)
    if not (isinstance(tol, numbers.Real) and not isinstance(tol, bool) and 0 < tol < np.inf):
        raise InputError(f"tol must be a finite real number > 0, got {tol!r}")
    if k == 1 or np.array_equal(p, q) or kseq_is_valid(p, q, 1.0, k, strict=True):
        return 1.0
    lo, hi = 1.0, float(k)
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:  # adjacent floats: nothing left to halve
            break
        if kseq_is_valid(p, q, mid, k, strict=True):
            hi = mid
        else:
            lo = mid
    return hi


#: :func:`optimal_acceptance_lp`: a draft law missing at most this much mass is normalised.
LP_MASS_ROUNDOFF = 1e-12


def optimal_acceptance_lp(target_probs, draft_probs, k: int) -> float:
    """Best acceptance of any lossless k-draft rule, as a linear program (small supports).

    A lossless rule is a coupling of the draft tuple ``S ~ q^k`` with the output ``y ~ p``; it
    accepts when ``y in S``. Only the *set* ``U`` of distinct drafts matters, with probability
    ``Q(U) = P({x_1..x_k} = U)`` (enumerated over all ``|supp q|^k`` tuples; a sub-stochastic
    ``q`` adds the atom "no draft", of mass ``1 - q(T)``, which reaches no output). The LP is the
    max-flow form: maximise ``sum_{U, y in U} pi(U, y)`` subject to ``sum_y pi(U, y) <= Q(U)``,
    ``sum_U pi(U, y) <= p(y)``, ``pi >= 0`` (any flow extends to a full coupling, the rest of the
    mass being rejected). Solved by ``scipy.optimize.linprog`` (HiGHS), imported lazily.
    """
    from scipy.optimize import linprog

    p, q = _pq(target_probs, draft_probs)
    p, q = p.astype(np.float64), q.astype(np.float64)
    k = _drafts(k)
    # a sub-stochastic q (vanilla's) drafts "nothing" (-1) with the missing mass q0: such a
    # draft reaches no output, as in optimal_acceptance_cut. A q0 of round-off (a normalised
    # q summing to 1 - 2e-16) is no atom: it would change the optimum by at most k q0 and
    # multiply the tuples by ((n + 1) / n)^k
    q0 = 1.0 - float(q.sum())
    drafts = [(int(i), float(q[i])) for i in np.flatnonzero(q > 0)]
    drafts += [(-1, q0)] if q0 > LP_MASS_ROUNDOFF else []
    if len(drafts) ** k > 100_000:
        raise InputError(f"LP too large: {len(drafts)}^{k} draft tuples")
    mass: dict[frozenset, float] = {}
    for tup in itertools.product(drafts, repeat=k):
        u = frozenset(i for i, _ in tup if i >= 0)
        mass[u] = mass.get(u, 0.0) + float(np.prod([m for _, m in tup]))
    sets = list(mass)
    cols = [(s, y) for s, u in enumerate(sets) for y in sorted(u)]
    if not cols:  # q = 0: no draft ever reaches an output
        return 0.0
    a_ub = np.zeros((len(sets) + p.size, len(cols)))
    for j, (s, y) in enumerate(cols):
        a_ub[s, j] = 1.0
        a_ub[len(sets) + y, j] = 1.0
    b_ub = np.concatenate([[mass[u] for u in sets], p])
    res = linprog(-np.ones(len(cols)), A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    if res.status != 0:  # pragma: no cover - pi = 0 is always feasible and the LP is bounded
        raise RuntimeError(f"linprog failed: {res.message}")
    return max(0.0, float(-res.fun))  # an optimum of 0 (disjoint supports) is 0.0, not -0.0


def optimal_acceptance_cut(target_probs, draft_probs, k: int):
    """Closed form of the LP optimum by max-flow/min-cut: ``min_B p(B) + 1 - (q(B) + q0)^k``.

    Flow network: source -> draft tuple ``S`` (capacity ``q^k(S)``) -> each ``y in S`` -> sink
    (capacity ``p(y)``). A cut keeping the outputs ``B`` on the source side pays ``p(B)`` plus the
    tuples with a draft outside ``B``, ``1 - (q(B) + q0)^k``, where ``q0 = 1 - q(T)`` is the mass
    of "no draft" (a sub-stochastic ``q``, e.g. vanilla's: such a draft reaches no output, so it
    never needs cutting; ``q0 = 0`` for a normalised ``q``). ``B`` ranges over all 2^N subsets:
    small N only. Exact on ``Fraction`` inputs.
    """
    p, q = _pq(target_probs, draft_probs)
    n = p.size
    if n > 20:
        raise InputError(f"optimal_acceptance_cut enumerates 2^N subsets; N = {n} is too large")
    k = _drafts(k)
    q0 = 1 - q.sum()  # exact for Fractions
    best = None
    for mask in range(1 << n):
        idx = [i for i in range(n) if mask >> i & 1]
        pb = p[idx].sum() if idx else 0 * p[0]
        qb = q[idx].sum() if idx else 0 * q[0]
        val = pb + 1 - (qb + q0) ** k
        best = val if best is None or val < best else best
    return best


def one_minus_inv_e() -> float:
    """``1 - 1/e``: SpecTr's guaranteed fraction of the optimal acceptance for K-SEQ at rho*."""
    return float(1 - np.exp(-1.0))


__all__ = [
    "LP_MASS_ROUNDOFF", "VALIDITY_RTOL", "beta", "check_rho", "kseq_accept_law", "kseq_acceptance",
    "kseq_best_rho", "kseq_is_valid", "kseq_output_law", "one_minus_inv_e",
    "optimal_acceptance_cut", "optimal_acceptance_lp",
]
