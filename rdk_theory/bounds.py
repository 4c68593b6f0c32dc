"""Bound calculators: how high can the acceptance of a given sampler or of any RDK kernel go?

* :func:`oov_cap` — ``p(I)``, the ceiling of vanilla and TLI (statement O2);
* :func:`tv_upper_bound` — ``1 - TV(p, M^T q')`` with ``M^T q'`` normalised, equal to ``alpha``
  for a normalised proposal (statement A), and ``alpha <= 1 - TV`` in general; also the bound
  ``|alpha(p, a) - alpha(p, b)| <= TV(a, b)`` used for approximate kernels (statement E);
* :func:`best_mixing_lambda` — for a rank-one kernel ``M = (1 - lam) Id + lam 1 w^T``, the ``lam``
  maximising the mean acceptance over a calibration set: the mean of concave piecewise-linear
  functions of ``lam`` (statement O5), maximised exactly by scanning its breakpoints;
* :func:`expected_tokens_per_call` — block efficiency ``1 + sum_k prod_{t<=k} alpha_t``
  (statement B);
* :func:`best_static_kernel_lp` — the best row-stochastic ``M`` over ``T`` for a set of contexts,
  a linear program (statement O5: ``alpha`` is concave in ``M``): an upper bound on what *any*
  static RDK kernel can reach on that data. Dense LP with ``N_T^2 + C N_T`` variables: small
  vocabularies only (``N_T <= MAX_LP_VOCAB``).

Inputs are float64 numpy arrays: ``p`` (C, N_T), ``q'`` (C, N_T) the TLI proposals
(:func:`oov_cap`, :func:`tv_upper_bound` and :func:`expected_tokens_per_call` stay exact on
Fractions; the mixing search and the LP read them as float64). Apart from
:func:`oov_cap` (the core calculator, which stays on a tensor's device), these are host-side
reference maths: a torch tensor, on any device, is copied to the host as numpy (floating
point as float64, :func:`rdk_theory.validation.host`) and the results are numpy.
"""
from __future__ import annotations

import numpy as np

from .acceptance import acceptance_rate, total_variation
from .acceptance import oov_cap as _oov_cap
from .validation import (InputError, as_real_array, common_tier, host, host_prob_array,
                         rational_array)

#: Largest target vocabulary the dense LP of :func:`best_static_kernel_lp` accepts.
MAX_LP_VOCAB = 64


def oov_cap(target_probs, vocab_map):
    """``p(I)`` per context, (...,): no vanilla or TLI proposal can be accepted more often."""
    return _oov_cap(target_probs, vocab_map)


def tv_upper_bound(target_probs, proposal):
    """``1 - TV(p, r / r(T))`` per context: the acceptance of the normalised proposal.

    For a normalised ``r`` this *equals* ``alpha(p, r)`` (statement A); for a sub-stochastic
    ``r``, ``alpha(p, r) <= 1 - TV(p, r / r(T))`` is an upper bound. ``r = 0`` gives 0. Exact on
    ``Fraction`` inputs (``1 - TV`` in Fractions; Fractions mixed with floats give float64).
    """
    p = host_prob_array(target_probs, "target_probs")
    r = host_prob_array(proposal, "proposal", allow_sub_stochastic=True)
    if p.shape != r.shape:
        raise InputError(f"target_probs and proposal must have one shape, got {p.shape}, {r.shape}")
    p, r = common_tier(p, r)
    mass = r.sum(axis=-1, keepdims=True)
    has = mass > 0
    rn = r / np.where(has, mass, 1)  # r = 0 where its mass is 0: stays 0 (exact for Fractions)
    out = 1 - total_variation(p, rn, check=False)  # 1, not 1.0: a Fraction TV stays exact
    return np.where(has[..., 0], out, 0 * out)[()]


def _host_pair(target_probs, tli_proposals):
    """``p`` and ``q'`` as (C, N_T) float64 host arrays with C >= 1, checked (Fractions are
    checked exactly, then read as float64: these are float reference maths)."""
    p = host_prob_array(target_probs, "target_probs")
    qp = host_prob_array(tli_proposals, "tli_proposals", allow_sub_stochastic=True)
    out = []
    for x, name in ((p, "target_probs"), (qp, "tli_proposals")):
        x = np.atleast_2d(x).astype(np.float64, copy=False)
        if x.ndim != 2 or x.shape[0] == 0:
            raise InputError(f"{name} must be (C, N_T) with at least one context, got shape "
                             f"{x.shape}")
        out.append(x)
    return out


#: :func:`best_mixing_lambda`: values of ``A`` within this many ulps of its maximum are ties.
TIE_ULPS = 64


def best_mixing_lambda(target_probs, tli_proposals, w):
    """Best ``lam`` in [0, 1] for ``M = (1 - lam) Id + lam 1 w^T`` on a calibration set.

    ``A(lam) = mean_c sum_x min(p_c(x), q'_c(x) + lam d_c(x))`` with
    ``d_c = q'_c(T) w - q'_c`` is concave and piecewise linear in ``lam`` (statement O5), so its
    maximum is at ``lam = 0``, ``lam = 1`` or a breakpoint ``lam = (p - q') / d`` in (0, 1).
    Each term ``min(p, q' + lam d)`` has at most one breakpoint, where its slope falls by
    ``|d|``; one sort of the breakpoints and a running sum of the slope find where the slope of
    ``A`` turns negative, and ``A`` itself is then evaluated directly (not accumulated) at that
    breakpoint and its neighbours. Cost O(C N log(C N)), memory O(C N).

    Parameters:
      target_probs: ``p_c``, (C, N_T).
      tli_proposals: ``q'_c``, (C, N_T) (rows summing to 1, or 0 when ``q(I) = 0``).
      w: (N_T,) the rank-one kernel's target law.

    Returns:
      ``(lam, mean_alpha)``: the maximiser (smallest one if several; values within
      ``TIE_ULPS`` ulps of the maximum count as ties, the round-off of evaluating ``A``) and
      the maximum.
    """
    p, qp = _host_pair(target_probs, tli_proposals)
    w = host_prob_array(w, "w").astype(np.float64, copy=False)
    if p.shape != qp.shape or w.shape != p.shape[-1:]:
        raise InputError(f"shapes differ: target_probs {p.shape}, tli_proposals {qp.shape}, w {w.shape}")
    k_qp = qp.sum(axis=-1, keepdims=True) * w
    d = k_qp - qp
    n_ctx = p.shape[0]
    # slope of each term just right of lam = 0: d where q' + lam d is the smaller side there
    live = ((d > 0) & (qp < p)) | ((d < 0) & (qp <= p))
    slope0 = float(d[live].sum()) / n_ctx
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # subnormal d: inf, dropped
        kinks = (p - qp) / d
    inner = np.isfinite(kinks) & (kinks > 0) & (kinks < 1)
    # the distinct breakpoints, sorted, and the total slope drop at each
    cand, which = np.unique(kinks[inner], return_inverse=True)
    drops = np.bincount(which, weights=np.abs(d[inner]), minlength=cand.size) / n_ctx
    # slopes[j]: the slope of A on (points[j], points[j + 1])
    points = np.concatenate([[0.0], cand, [1.0]])
    slopes = slope0 - np.concatenate([[0.0], np.cumsum(drops)])
    down = np.flatnonzero(slopes <= 0)
    j = int(down[0]) if down.size else points.size - 1
    # A is concave: its maximum is at points[j]; evaluated directly there and at two
    # neighbours on each side, so a slope within round-off of 0 cannot misplace it
    window = points[max(0, j - 2): j + 3]
    vals = np.array([np.minimum(p, qp + lam * d).sum(axis=-1).mean() for lam in window])
    # on a plateau the direct evaluations differ by round-off: the smallest point within
    # TIE_ULPS of the largest value is the smallest maximiser (argmax took the largest value)
    top = float(vals.max())
    i = int(np.flatnonzero(vals >= top - TIE_ULPS * np.finfo(np.float64).eps * max(1.0, top))[0])
    return float(window[i]), top


def _as_mask(mask) -> np.ndarray:
    """A support mask as a bool array: bools, or numbers that are each 0 or 1; anything else
    (0.5, NaN, a ragged list) is an InputError rather than read as True."""
    try:
        raw = np.asarray(host(mask, "mask"))
    except (ValueError, TypeError):
        raise InputError("mask must be an (N_T, N_T) array of bools, got a ragged sequence") from None
    if raw.dtype == bool:
        return raw
    if raw.dtype.kind not in "iuf":
        raise InputError(f"mask must hold bools (or 0 and 1 only), got {raw.dtype}")
    if not np.isin(raw, (0, 1)).all():  # NaN is neither
        raise InputError(f"mask must hold bools (or 0 and 1 only), got {raw.dtype} entries "
                         "outside {0, 1}")
    return raw.astype(bool)


#: HiGHS' default feasibility tolerances (1e-7) let it set a needed kernel entry of 4.8e-8 to 0
#: and report 0.99999998 where a kernel reaches 1; at 1e-10 the optimum is resolved to ~1e-10.
_LP_OPTIONS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


def best_static_kernel_lp(target_probs, tli_proposals, *, mask=None):
    """The best static kernel for a set of contexts, by linear programming (small ``N_T``).

    maximise ``(1/C) sum_c sum_x z_cx`` over row-stochastic ``M`` (N_T x N_T) and ``z``, subject to
    ``z_cx <= p_c(x)`` and ``z_cx <= (M^T q'_c)(x)``. ``alpha`` is concave in ``M`` (statement
    O5), and this LP is its exact maximisation: no RDK kernel reaches a higher mean acceptance on
    these contexts. ``mask`` (N_T, N_T) bool optionally restricts the support of ``M``.

    Returns:
      ``(M, mean_alpha)`` with ``M`` a float64 (N_T, N_T) row-stochastic matrix and
      ``mean_alpha`` the mean acceptance ``M`` itself reaches. HiGHS solves the LP to feasibility
      tolerances of 1e-10, so ``mean_alpha`` is the optimum to about 1e-9 (within 4.2e-10 of the
      LP's own objective over 400 random cases).
    """
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    p, qp = _host_pair(target_probs, tli_proposals)
    if p.shape != qp.shape:
        raise InputError(f"target_probs {p.shape} and tli_proposals {qp.shape} differ in shape")
    c_n, n = p.shape
    if n > MAX_LP_VOCAB:
        raise InputError(f"best_static_kernel_lp is a dense LP: N_T = {n} exceeds {MAX_LP_VOCAB}")
    allowed = np.ones((n, n), dtype=bool) if mask is None else _as_mask(mask)
    if allowed.shape != (n, n):
        raise InputError(f"mask must be ({n}, {n}), got {allowed.shape}")
    if not allowed.any(axis=1).all():
        raise InputError("mask leaves a row of the kernel without any allowed entry")
    mi, mj = np.nonzero(allowed)
    n_m = mi.size  # variables: M entries (mi, mj), then z (C, N)
    n_var = n_m + c_n * n
    cost = np.concatenate([np.zeros(n_m), -np.ones(c_n * n) / c_n])
    # z_cx - sum_i q'_c(i) M_ix <= 0
    rows, cols, vals = [], [], []
    for c in range(c_n):
        for e in range(n_m):
            i, x = mi[e], mj[e]
            if qp[c, i] != 0:
                rows.append(c * n + x)
                cols.append(e)
                vals.append(-qp[c, i])
    rows += list(range(c_n * n))
    cols += list(range(n_m, n_var))
    vals += [1.0] * (c_n * n)
    a_ub = coo_matrix((vals, (rows, cols)), shape=(c_n * n, n_var)).tocsr()
    b_ub = np.zeros(c_n * n)
    a_eq = coo_matrix((np.ones(n_m), (mi, np.arange(n_m))), shape=(n, n_var)).tocsr()
    b_eq = np.ones(n)
    bounds = [(0, None)] * n_m + [(0, float(v)) for v in p.reshape(-1)]
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=bounds, method="highs",
                  options=_LP_OPTIONS)
    if res.status != 0:  # pragma: no cover - M = I, z = min(p, q') is always feasible
        raise RuntimeError(f"linprog failed: {res.message}")
    m = np.zeros((n, n))
    m[mi, mj] = np.clip(res.x[:n_m], 0, None)
    m /= m.sum(axis=1, keepdims=True)
    return m, float(acceptance_rate(p, qp @ m, check=False).mean())


def expected_tokens_per_call(acceptances):
    """Block efficiency (statement B): ``1 + sum_k prod_{t<=k} alpha_t`` over the last axis.

    ``acceptances`` (..., gamma) are the per-position acceptance rates of one block of ``gamma``
    drafts; i.i.d. ``alpha`` gives ``(1 - alpha^(gamma+1)) / (1 - alpha)``. Exact on ``Fraction``
    object arrays. ``gamma = 0`` (an empty last axis: the target alone) gives 1.
    """
    a = rational_array(acceptances, "acceptances")  # Fractions (a list of them too) stay exact
    if a is None:  # anything else as float64: complex numbers, strings and objects are refused
        a = as_real_array(acceptances, "acceptances")
    if a.ndim == 0:
        raise InputError("acceptances must have a last axis (gamma), got a scalar")
    try:  # one check for floats and Fractions alike: NaN fails both comparisons
        in_range = bool(np.all((a >= 0) & (a <= 1)))
    except TypeError:  # an object array of non-numbers
        in_range = False
    if not in_range:
        raise InputError("acceptances must lie in [0, 1]")
    return 1 + np.cumprod(a, axis=-1).sum(axis=-1)


__all__ = ["MAX_LP_VOCAB", "expected_tokens_per_call", "best_mixing_lambda", "best_static_kernel_lp", "oov_cap", "tv_upper_bound"]
