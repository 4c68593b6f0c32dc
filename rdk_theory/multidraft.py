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
import math
import numbers
from fractions import Fraction

import numpy as np

from .validation import InputError, _is_torch, as_count, common_tier, host_prob_array


def _pq(target_probs, draft_probs):
    p = host_prob_array(target_probs, "target_probs")
    q = host_prob_array(draft_probs, "draft_probs", allow_sub_stochastic=True)
    if p.ndim != 1 or p.shape != q.shape:
        raise InputError(f"target_probs and draft_probs must be 1-D of one length, got {p.shape}, {q.shape}")
    return common_tier(p, q)  # an exact p with a float q: float64 both, as bounds does (object
    # arrays of floats came back, or one Fraction where every min picked the exact side)


def _drafts(k) -> int:
    """``k``, the number of drafts, as an int >= 1 (InputError otherwise)."""
    return as_count(k, "k (number of drafts)", 1)


def check_rho(rho, lo: int = 1):
    """``rho`` as given when it is exact (an int or a Fraction), else as a float; a real number
    ``>= lo`` (``> 0`` for ``lo = 0``; ``inf`` allowed: no draft is ever accepted), or
    InputError (None, a bool, a string, a complex number or an array included; a 0-d array is
    its number, as is a 0-d tensor's)."""
    if isinstance(rho, np.ndarray) and rho.ndim == 0:
        rho = rho.item()
    elif _is_torch(rho) and rho.ndim == 0 and not rho.is_complex():
        rho = rho.item()  # a 0-d tensor was refused where a tensor k, or a 0-d array, passed
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
    if p.dtype != object and isinstance(rho, numbers.Rational):  # float p: rho as a float,
        try:  # where 10^400 (an int or a Fraction) was a raw OverflowError in p / rho
            return float(rho)
        except OverflowError:
            return math.inf  # rho > 0 beyond float64's range: p / rho is 0, as at inf
    return rho


def _check_k_rho(k, rho):
    _drafts(k)
    return check_rho(rho)


#: Largest exact power ``(1 - beta)^k`` (or ``(q(B) + q0)^k``) the Fraction tier computes, in
#: bits: one takes about a second (k = 76,000 for a ~55-bit Fraction, 10^6 for sixths); an
#: astronomically large ``k`` would run for hours (an InputError instead: use float64 laws).
MAX_EXACT_POWER_BITS = 1 << 22


def _power_bits(x, k: int) -> int:
    """About how many bits the exact power ``x ** k`` of a Fraction takes: 0 for 0, 1 and -1,
    which are free at any ``k``."""
    bits = max(abs(x.numerator).bit_length(), x.denominator.bit_length())
    return k * bits if bits > 1 else 0


def _power(base, k: int, what: str):
    """``base ** k``; for an exact ``base`` (a Fraction) an InputError when the result would
    exceed ``MAX_EXACT_POWER_BITS`` bits (0, 1 and -1 are free at any ``k``)."""
    if isinstance(base, numbers.Rational) and _power_bits(base, k) > MAX_EXACT_POWER_BITS:
        raise InputError(f"k = {k} is too large for exact arithmetic: {what}^k would need "
                         f"~{_power_bits(base, k)} bits (limit {MAX_EXACT_POWER_BITS}); pass "
                         "float64 laws")
    return base ** k


def _power_bounds(x: Fraction, k: int, prec: int):
    """Lower and upper bounds ``(m, e)`` (meaning ``m 2^e``) of ``x^k`` for a Fraction
    ``0 < x <= 2``, with ``prec``-bit mantissas rounded down and up (directed, so the bounds
    always hold): relative width about ``k 2^(1 - prec)``, as each squaring doubles a relative
    error (repeated squaring; no number grows past ``2 prec`` bits, whatever ``k``)."""
    n, d = x.numerator, x.denominator
    shift = prec + d.bit_length() - n.bit_length()
    num, den = (n << shift, d) if shift >= 0 else (n, d << -shift)
    out = []
    for up in (False, True):
        base = (-(-num // den) if up else num // den, -shift)
        acc, left = (1, 0), k
        while left:
            if left & 1:
                acc = _round_product(acc, base, prec, up)
            left >>= 1
            if left:
                base = _round_product(base, base, prec, up)
        out.append(acc)
    return out


def _round_product(a, b, prec: int, up: bool):
    m, e = a[0] * b[0], a[1] + b[1]
    extra = m.bit_length() - prec
    if extra > 0:
        m = -(-m >> extra) if up else m >> extra
        e += extra
    return m, e


def _compare(me, c: Fraction) -> int:
    """The sign of ``m 2^e - c`` for ``m > 0`` and a Fraction ``c > 0``, exactly."""
    m, e = me
    a, b = c.numerator, c.denominator
    top = m.bit_length() + b.bit_length() + e  # m b 2^e lies in [2^(top - 2), 2^top)
    if top <= a.bit_length() - 1:
        return -1
    if top - 2 >= a.bit_length():
        return 1
    left, right = (m * b << e, a) if e >= 0 else (m * b, a << -e)
    return (left > right) - (left < right)


def _power_at_least(x: Fraction, k: int, c: Fraction):
    """Whether ``x^k >= c``, exactly, for Fractions with ``|x| <= 2`` and any ``k >= 1``: by
    interval bounds of growing precision, then (on a near-tie that ``MAX_EXACT_POWER_BITS``
    affords) by the exact power. None only for a tie closer than about ``k 2^-32767`` relative
    whose exact power is unaffordable."""
    negative = x < 0 and k % 2 == 1  # x^k = -|x|^k
    if x == 0 or (c <= 0 and not negative):
        return c <= 0
    if negative and c >= 0:
        return False
    target = -c if negative else c  # |x|^k <= target when negative, else |x|^k >= target
    for prec in (128, 1024, 8192, 32768):
        lo, hi = _power_bounds(abs(x), k, prec)
        if negative:
            if _compare(hi, target) <= 0:
                return True
            if _compare(lo, target) > 0:
                return False
        elif _compare(lo, target) >= 0:
            return True
        elif _compare(hi, target) < 0:
            return False
    if _power_bits(x, k) <= MAX_EXACT_POWER_BITS:
        return x ** k >= c
    return None  # pragma: no cover - a tie closer than k 2^-32767 relative


def beta(target_probs, draft_probs, rho):
    """``beta(rho) = sum_x min(q(x), p(x) / rho)``: the acceptance probability of one draft."""
    p, q = _pq(target_probs, draft_probs)
    return np.minimum(q, p / _exact_rho(check_rho(rho, 0), p)).sum()


#: Relative slack on the float64 validity condition: at ``k = 1`` (or ``p == q``) the condition
#: holds with equality, and round-off must not flip it. Relative, so that a tiny ``beta`` (whose
#: whole condition is below any absolute slack) is still judged. Exact inputs use no slack.
VALIDITY_RTOL = 1e-12


def _any_accepted(b: float, k: int) -> float:
    """``1 - (1 - b)^k`` in float64 without cancellation (``-expm1(k log1p(-b))``), 1 at b = 1."""
    return -math.expm1(k * math.log1p(-b)) if b < 1 else 1.0


def kseq_is_valid(target_probs, draft_probs, rho, k: int, *, strict: bool = False) -> bool:
    """The validity condition ``1 - (1 - beta(rho))^k <= rho beta(rho)`` (sufficient for losslessness).

    Exact (``==``-level) on ``Fraction`` inputs. On float64 inputs both sides are computed
    without cancellation (``-expm1(k log1p(-beta))`` and ``sum_x min(rho q(x), p(x))`` over the
    support of ``q``, which is also right at ``rho = inf``) and compared with a relative slack of
    ``VALIDITY_RTOL``. ``strict=True`` demands that margin instead of granting it: a float
    ``rho`` that passes then satisfies the condition in exact arithmetic too (for the float
    ``p`` and ``q`` as given). The exact check decides ``(1 - beta)^k`` against ``1 - rhs`` by
    interval bounds, so any ``k`` (up to 2^63 - 1) is cheap.
    """
    k, rho = _drafts(k), _check_k_rho(k, rho)
    p, q = _pq(target_probs, draft_probs)
    rho = _exact_rho(rho, p)
    b = beta(p, q, rho)
    with np.errstate(invalid="ignore"):  # inf * 0 off the support of q, dropped by the where
        rhs = np.where(q > 0, np.minimum(rho * q, p), 0 * p).sum()
    if isinstance(b, Fraction) and isinstance(rhs, Fraction):
        holds = _power_at_least(1 - b, k, 1 - rhs)  # 1 - (1 - b)^k <= rhs, at any k
        if holds is None:  # pragma: no cover - a tie closer than k 2^-32767
            raise InputError(f"k = {k} is too large to decide this rho's validity exactly")
        return holds
    lhs, rhs = _any_accepted(float(b), k), float(rhs)
    return bool(lhs <= rhs + (-1 if strict else 1) * VALIDITY_RTOL * max(lhs, rhs))


def kseq_acceptance(target_probs, draft_probs, rho, k: int):
    """``1 - (1 - beta(rho))^k``: the probability that one of the ``k`` drafts is accepted."""
    rho = _check_k_rho(k, rho)
    return 1 - _power(1 - beta(target_probs, draft_probs, rho), int(k), "(1 - beta)")


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
    return m * ((1 - _power(1 - b, int(k), "(1 - beta)")) / b)


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


#: :func:`kseq_best_rho`: a float law whose exact sum is within this of 1 is read as the law it
#: rounds (divided by its exact sum). Far tighter than a law computed in float32 (which misses
#: 1 by ~1e-8): such a law is read as given, and its rho* is that of the sub-stochastic law.
#: Without it, a float ``p`` summing to ``1 - 1e-16`` would need ``(1 - beta)^k >= 1e-16`` (the accepted mass may not exceed ``p``'s), pushing ``rho*``
#: from 1.02 to 1.16 at k = 16; within the float check's slack ``VALIDITY_RTOL``.
LAW_SUM_ROUNDOFF = 1e-12


#: :func:`kseq_best_rho`'s float screen: a step is decided in float64 when ``1 - (1 - beta)^k``
#: and ``sum min(rho q, p)`` differ by more than this (relative, plus ``8 N eps``) -- far above
#: their round-off and ``LAW_SUM_ROUNDOFF``'s rescaling -- and exactly otherwise.
SCREEN_RTOL = 1e-9


def _exact_validity(p: np.ndarray, q: np.ndarray, k: int):
    """``valid(rho)``: the validity condition at a float ``rho``, decided exactly (True, False,
    or None for an undecidable tie, see :func:`_power_at_least`) for the laws ``P``, ``Q`` that
    the float64 ``p`` and ``q`` are: each the rationals it holds, divided by their exact sum
    when that is within ``LAW_SUM_ROUNDOFF`` of 1.

    A float screen decides first where the two sides differ by more than ``SCREEN_RTOL``
    (relative) plus ``8 N eps``, which bounds their float64 error (sums of N non-negative
    terms, ``1 - (1 - b)^k`` no more sensitive to ``b`` than ``b`` itself) and the rescaling by
    the exact sums. Otherwise (near ``rho*``, or where ``(1 - beta)^k`` is below the screen's
    resolution) it is decided in integers: every float is an integer over a power of two, so
    ``p = ints_p / s_p`` and ``q = ints_q / s_q`` (Python ints) and ``rho = m / d``; then
    ``rho beta(rho) = T / (d s_p s_q)``, ``T = d s_q sum_A ints_p + m s_p sum_{not A} ints_q``
    over ``A = {p / rho < q}``, in exact integer sums (a float comparison orders all but the
    entries within round-off of ``p = rho q``, which are ordered in integers). Cost: O(N)
    numpy per screened step; O(N) Python ints once (numpy's object loop) and per exact step, plus
    :func:`_power_at_least` (independent of N, polylogarithmic in k)."""
    margin = SCREEN_RTOL + 8 * (p.size + 4) * np.finfo(np.float64).eps
    exact: dict = {}

    def integers():
        if not exact:
            v = np.concatenate([p, q])
            mant, ex = np.frexp(v)  # v = m53 / 2^den, m53 an int64 of at most 53 bits
            m53, den = np.ldexp(mant, 53).astype(np.int64), np.where(v > 0, 53 - ex, 0)
            e = int(den.max())  # the common denominator 2^e; the shifts are numpy's loop
            ints = m53.astype(object) << (e - den).astype(object)
            big_p, big_q = ints[:p.size], ints[p.size:]
            exact["p"], exact["q"] = big_p, big_q
            exact["s_p"], exact["s_q"] = (
                int(x.sum()) if abs(Fraction(int(x.sum()), 1 << e) - 1) <= LAW_SUM_ROUNDOFF
                else 1 << e for x in (big_p, big_q))
        return exact["p"], exact["q"], exact["s_p"], exact["s_q"]

    band, tiny = 4 * (LAW_SUM_ROUNDOFF + np.finfo(np.float64).eps), np.finfo(np.float64).tiny

    def valid(rho: float):
        prod = rho * q
        b = float(np.minimum(q, p / rho).sum())
        lhs = _any_accepted(b, k)
        rhs = float(np.where(q > 0, np.minimum(prod, p), 0.0).sum())
        slack = margin * max(lhs, rhs)
        if lhs < rhs - slack:
            return True
        if lhs > rhs + slack:
            return False
        big_p, big_q, s_p, s_q = integers()
        m, d = rho.as_integer_ratio()
        below = p < prod  # p / rho < q: min(q, p / rho) = p / rho
        for i in np.flatnonzero(np.abs(p - prod) <= band * prod + tiny):
            below[i] = big_p[i] * d * s_q < m * big_q[i] * s_p
        t = d * s_q * big_p[below].sum() + m * s_p * big_q[~below].sum()
        return _power_at_least(Fraction(m * s_p * s_q - t, m * s_p * s_q), k,
                               Fraction(d * s_p * s_q - t, d * s_p * s_q))
    return valid


def kseq_best_rho(target_probs, draft_probs, k: int, *, tol: float = 1e-12) -> float:
    """Smallest valid ``rho`` in ``[1, k]`` by bisection (acceptance decreases in ``rho``).

    The condition ``g(rho) = rho beta(rho) - 1 + (1 - beta(rho))^k >= 0`` is monotone
    non-decreasing in ``rho`` and holds at ``rho = k`` (since ``1 - (1 - b)^k <= k b``). The
    bisection (over float64 ``rho``; ``tol`` finite and > 0) decides each step *exactly*
    (:func:`_exact_validity`), for the laws ``P``, ``Q`` that the float64 ``p`` and ``q`` are:
    the rationals they hold, each divided by its exact sum when that is within
    ``LAW_SUM_ROUNDOFF`` of 1 (a float law rarely sums to 1 exactly). No slack, so the ``rho``
    returned is valid in exact arithmetic (``kseq_is_valid(P, Q, Fraction(rho), k)``) and
    lies above their exact ``rho*`` by less than ``max(tol, ulp(rho))``: it stops when the
    interval is ``tol`` wide or holds no float between its ends. (The float test with a
    relative slack of 1e-12 that it replaces cannot see ``g`` where ``(1 - beta)^k`` is below
    the slack, and overshot ``rho*`` by up to 10% at high acceptance.) Cost: O(N) integer work
    per step, about ``log2(k / tol)`` steps, any ``k``. ``rho = 1`` is returned when ``k = 1``
    or when it is valid (``p == q`` as laws; not a ``p == q`` summing to ``1 - 1e-4``, which
    the tolerance of a law admits: its exact ``rho*`` is above 1).
    """
    p, q = _pq(target_probs, draft_probs)
    p, q = p.astype(np.float64), q.astype(np.float64)
    k = _drafts(k)
    if not (isinstance(tol, numbers.Real) and not isinstance(tol, bool) and 0 < tol < np.inf):
        raise InputError(f"tol must be a finite real number > 0, got {tol!r}")
    if k == 1:  # 1 - (1 - beta) <= beta, with equality
        return 1.0
    if np.array_equal(p, q) and abs(math.fsum(p) - 1) <= LAW_SUM_ROUNDOFF / 2:
        return 1.0  # P == Q, each divided by its exact sum: beta(1) = 1, valid with equality
    valid = _exact_validity(p, q, k)
    if valid(1.0):
        return 1.0
    lo, hi = 1.0, float(k)
    if hi < k:  # k above 2^53 rounded down: the float above it
        hi = math.nextafter(hi, math.inf)
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:  # adjacent floats: nothing left to halve
            break
        if valid(mid):  # None (a tie closer than k 2^-32767) counts as invalid: hi stays valid
            hi = mid
        else:
            lo = mid
    return hi


#: :func:`optimal_acceptance_lp`: a draft law missing at most this much mass is normalised.
LP_MASS_ROUNDOFF = 1e-12
#: :func:`optimal_acceptance_lp`: most draft tuples it enumerates (and most drafts ``k``).
LP_MAX_TUPLES = 100_000


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
    n = len(drafts)
    if k > LP_MAX_TUPLES:  # even one draft: a k-tuple per product term
        raise InputError(f"LP too large: k = {k} drafts (at most {LP_MAX_TUPLES})")
    # k log n first: n ** k for k = 2^62 would never finish
    if n > 1 and (k * math.log(n) > math.log(LP_MAX_TUPLES) + 1 or n ** k > LP_MAX_TUPLES):
        raise InputError(f"LP too large: {n}^{k} draft tuples (at most {LP_MAX_TUPLES})")
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
        val = pb + 1 - _power(qb + q0, k, "(q(B) + q0)")
        best = val if best is None or val < best else best
    return best


def one_minus_inv_e() -> float:
    """``1 - 1/e``: SpecTr's guaranteed fraction of the optimal acceptance for K-SEQ at rho*."""
    return float(1 - np.exp(-1.0))


__all__ = [
    "LAW_SUM_ROUNDOFF", "LP_MASS_ROUNDOFF", "LP_MAX_TUPLES", "MAX_EXACT_POWER_BITS",
    "VALIDITY_RTOL", "beta", "check_rho", "kseq_accept_law", "kseq_acceptance", "kseq_best_rho",
    "kseq_is_valid", "kseq_output_law", "one_minus_inv_e", "optimal_acceptance_cut",
    "optimal_acceptance_lp",
]
