r"""Statement O5 (first-order gain): for :math:`M = (1 - \lambda) I + \lambda K` the right
derivative of :math:`\alpha(\lambda) = \sum_x \min(p, q' + \lambda (K^\top q' - q'))` at 0 is

.. math::
    \alpha'(0^+) = \sum_{x: q' < p} (K^\top q' - q')(x) + \sum_{x: q' = p} \min(0, (K^\top q' - q')(x)),

and :math:`\alpha` is concave in :math:`\lambda` and in :math:`M`, so the best static kernel is a
linear program (:func:`rdk_theory.bounds.best_static_kernel_lp`).

Proof (symbolic): each term :math:`\min(p, c + \lambda d)` is the minimum of two affine functions;
for :math:`\lambda` below the term's first kink sympy evaluates the difference quotient
exactly in the three cases
:math:`c < p`, :math:`c > p`, :math:`c = p` (the last split on the sign of :math:`d`). Concavity:
:math:`\min` is concave because for :math:`t, u \ge 0` both affine pieces dominate
:math:`t \min(a_1, b_1) + u \min(a_2, b_2)` (sympy, every ordering), and :math:`q''` is linear in
:math:`\lambda` and in :math:`M`.

Cross-check: exact difference quotients with :math:`\lambda = 1/1000` (below every kink on the
grid) against the formula, over every :math:`p, q'` and every :math:`3 \times 3` row-stochastic
:math:`K` with entries in :math:`\{0, 1/2, 1\}`; midpoint concavity at exact :math:`\lambda` values.
The two optimisers that rest on the concavity are checked on the same grid, in float64 (within
``LP_ATOL``): :func:`rdk_theory.bounds.best_static_kernel_lp`, on every single context and on all of
them at once, returns a row-stochastic kernel that attains its reported mean acceptance, and no
enumerated :math:`K` beats it; :func:`rdk_theory.bounds.best_mixing_lambda`, for every rank-one
kernel :math:`1 w^\top` with :math:`w` on the grid, returns a :math:`\lambda \in [0, 1]` that
attains its reported maximum, which no :math:`\lambda` in steps of 1/24 beats.

Perturbed statement (must be refuted): the tie term without its min,
:math:`\sum_{x: q' \le p} (K^\top q' - q')(x)`.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import sympy as sp

from rdk_theory.acceptance import acceptance_rate
from rdk_theory.bounds import best_mixing_lambda, best_static_kernel_lp

from .exhaustive import distributions, row_stochastic
from .result import run_check
from .symbolic import Steps, holds_for_all_orderings

ID = "O5"
TITLE = "right derivative of alpha in lambda at 0, and concavity in lambda and M"
PERTURBED = "alpha'(0+) = sum over q' <= p of (K^T q' - q') (tie term without its min)"
GRID = dict(n=3, d=3, kernel_d=2)
LAM = Fraction(1, 1000)
#: float64 slack of the optimiser legs (an LP solver's feasibility tolerance is 1e-9 or so).
LP_ATOL = 1e-7
LAM_STEPS = 24


def _symbolic() -> Steps:
    lam, e, g, w = sp.symbols("lambda e g w", positive=True)  # g = |d|
    t = sp.Symbol("t", real=True)
    q = lambda p, c, y: (sp.Min(p, y) - sp.Min(p, c)) / lam  # noqa: E731  y = c + lambda d
    # name: (p, c, y = c + lambda d, wanted derivative) for lambda below the term's first kink
    cases = {
        "c < p, d > 0": (t + lam * g + w, t, t + lam * g, g),  # c + lambda d still < p
        "c < p, d < 0": (t + e, t, t - lam * g, -g),
        "c > p, d > 0": (t, t + e, t + e + lam * g, 0),
        "c > p, d < 0": (t, t + w + lam * g, t + w, 0),  # c + lambda d still > p
        "c = p, d > 0: min(0, d) = 0": (t, t, t + lam * g, 0),
        "c = p, d < 0: min(0, d) = d": (t, t, t - lam * g, -g),
        "c < p, d = 0": (t + e, t, t, 0),
        "c = p, d = 0": (t, t, t, 0),
        "c > p, d = 0": (t, t + e, t + e, 0),
    }
    steps = Steps()
    for name, (p, c, y, want) in cases.items():
        steps.require(f"difference quotient, {name}", sp.simplify(q(p, c, y) - want) == 0)
    # concavity of min: t min(a1,b1) + u min(a2,b2) <= both affine pieces, t, u >= 0.
    a1, b1, a2, b2 = sp.symbols("a1 b1 a2 b2", real=True)
    tt, uu = sp.symbols("t_1 u_1", nonnegative=True)
    z = tt * sp.Min(a1, b1) + uu * sp.Min(a2, b2)
    ok_a, _ = holds_for_all_orderings(tt * a1 + uu * a2 - z, [a1, b1, a2, b2], ">=")
    steps.require("concavity of min, first affine piece", ok_a)
    ok_b, _ = holds_for_all_orderings(tt * b1 + uu * b2 - z, [a1, b1, a2, b2], ">=")
    steps.require("concavity of min, second affine piece", ok_b)
    return steps


def alpha_of_lambda(p, q_prime, k_matrix, lam):
    """``alpha(p, (1 - lam) q' + lam K^T q')`` on exact or float inputs."""
    return acceptance_rate(p, (1 - lam) * q_prime + lam * (q_prime @ k_matrix), check=False)


def right_derivative(p, q_prime, k_matrix):
    """The O5 formula for ``alpha'(0+)``."""
    d = q_prime @ k_matrix - q_prime
    return sum(d[x] for x in range(len(p)) if q_prime[x] < p[x]) + \
        sum(min(0, d[x]) for x in range(len(p)) if q_prime[x] == p[x])


def _body(out):
    out.require_steps(_symbolic())
    out.methods.append("sympy: difference quotient of min(p, c + lambda d) for lambda below the term's first kink, in the "
                       "cases c < p, c > p, c = p split on the sign of d; concavity of min in every ordering")
    n, d, kd = GRID["n"], GRID["d"], GRID["kernel_d"]
    laws = list(distributions(n, d))
    kernels = list(row_stochastic(n, kd))
    for k in kernels:
        for qp in laws:
            dvec = qp @ k - qp
            for p in laws:
                out.cases += 1
                a0 = alpha_of_lambda(p, qp, k, 0)
                fd = (alpha_of_lambda(p, qp, k, LAM) - a0) / LAM
                if fd != right_derivative(p, qp, k):
                    out.fail({"p": p, "q_prime": qp, "K": k, "difference_quotient": fd,
                              "formula": right_derivative(p, qp, k)})
                wrong = sum(dvec[x] for x in range(n) if qp[x] <= p[x])
                if fd != wrong:
                    out.refute({"p": p, "q_prime": qp, "K": k, "difference_quotient": fd, "perturbed": wrong})
                a1, a_half = alpha_of_lambda(p, qp, k, 1), alpha_of_lambda(p, qp, k, Fraction(1, 2))
                if a_half < (a0 + a1) / 2:
                    out.fail({"p": p, "q_prime": qp, "K": k, "concavity": [a0, a_half, a1]})
    out.methods.append(f"exhaustive exact check: difference quotient at lambda = {LAM} equals the formula, "
                       f"and midpoint concavity, over all p, q' on N = {n}, grid 1/{d}, and all "
                       f"{len(kernels)} row-stochastic K with entries in multiples of 1/{kd}")
    _optimisers(out, laws, kernels)


def _optimisers(out, laws, kernels) -> None:
    """The LP and the mixing search against every enumerated kernel / lambda (float64)."""
    f64 = lambda x: np.asarray(x, dtype=np.float64)  # noqa: E731
    pairs = [(p, qp) for qp in laws for p in laws]
    sets = [([p], [qp]) for p, qp in pairs] + [([p for p, _ in pairs], [qp for _, qp in pairs])]
    for ps, qps in sets:
        p, qp = f64(ps), f64(qps)
        m, best = best_static_kernel_lp(p, qp)
        attained = float(np.mean(acceptance_rate(p, qp @ m, check=False)))
        rows_ok = bool(np.all(m >= -LP_ATOL) and np.allclose(m.sum(1), 1.0, atol=LP_ATOL, rtol=0))
        beaten = max(float(np.mean(acceptance_rate(p, qp @ f64(k), check=False))) for k in kernels)
        out.cases += 1
        if not rows_ok or abs(attained - best) > LP_ATOL or beaten > best + LP_ATOL:
            out.fail({"p": ps, "q_prime": qps, "lp_mean_alpha": best, "attained": attained,
                      "best_enumerated": beaten, "row_stochastic": rows_ok})
        for w in laws:
            k = np.tile(f64(w), (len(w), 1))  # M = (1 - lam) Id + lam 1 w^T
            lam, top = best_mixing_lambda(p, qp, f64(w))
            grid = [float(np.mean(alpha_of_lambda(p, qp, k, j / LAM_STEPS))) for j in range(LAM_STEPS + 1)]
            at = float(np.mean(alpha_of_lambda(p, qp, k, lam)))
            out.cases += 1
            if not 0 <= lam <= 1 or abs(at - top) > LP_ATOL or max(grid) > top + LP_ATOL:
                out.fail({"p": ps, "q_prime": qps, "w": w, "lam": lam, "mean_alpha": top,
                          "attained": at, "best_on_grid": max(grid)})
    out.methods.append(f"float64 check (within {LP_ATOL:g}) of best_static_kernel_lp (attains its value, "
                       f"row-stochastic, no enumerated K higher) and best_mixing_lambda (lambda in [0, 1] "
                       f"attains its value, none in steps of 1/{LAM_STEPS} higher) on each of the "
                       f"{len(pairs)} (p, q') pairs and on all of them as one set")


def check():
    return run_check(ID, TITLE, PERTURBED, _body, "proved")
