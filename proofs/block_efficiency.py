r"""Statement B (block efficiency): with per-position acceptances :math:`\alpha_1..\alpha_\gamma`,
the expected number of tokens per target call is

.. math::
    E_\gamma = 1 + \sum_{k=1}^{\gamma} \prod_{t \le k} \alpha_t, \qquad
    \text{i.i.d.: } E_\gamma = \frac{1 - \alpha^{\gamma + 1}}{1 - \alpha}.

A block of :math:`\gamma` drafts is verified left to right; the number :math:`N` of accepted
drafts has :math:`P(N = k) = \prod_{t \le k} \alpha_t (1 - \alpha_{k+1})` for :math:`k < \gamma` and
:math:`P(N = \gamma) = \prod_{t \le \gamma} \alpha_t`; the call emits :math:`N + 1` tokens (the
accepted drafts plus one residual or bonus token).

Proof (symbolic): with :math:`T_k = \prod_{t \le k} \alpha_t` (:math:`T_0 = 1`) the law reads
:math:`P(N = k) = T_k (1 - \alpha_{k+1}) = T_k - T_{k+1}` for :math:`k < \gamma` and
:math:`P(N = \gamma) = T_\gamma`, i.e. :math:`T_\gamma - T_{\gamma+1}` with :math:`T_{\gamma+1} := 0`.
Summation by parts, :math:`\sum_{k=0}^{g} (k+1)(T_k - T_{k+1}) = \sum_{k=0}^{g} T_k - (g+1) T_{g+1}`,
is proved by induction on a *symbolic* :math:`g` for an arbitrary sequence :math:`T` (sympy checks
the base case and that both sides grow by the same term), so :math:`E[N + 1] = \sum_{k=0}^{\gamma}
T_k` for every :math:`\gamma`. Sympy also expands :math:`E[N + 1]` from the law and subtracts the
tail-sum formula, getting 0 for symbolic :math:`\alpha_1..\alpha_\gamma`, :math:`\gamma = 1..`
``MAX_GAMMA``; the i.i.d. closed form is proved for a symbolic :math:`\gamma` by sympy's
geometric summation. Cross-check: :func:`rdk_theory.bounds.expected_tokens_per_call` and exact enumeration of all :math:`2^\gamma` accept/reject patterns for
rational acceptances.

Perturbed statement (must be refuted): the acceptances add without the product,
:math:`1 + \sum_k \alpha_k`.
"""
from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import sympy as sp

from rdk_theory.bounds import expected_tokens_per_call

from .result import run_check
from .symbolic import Steps

ID = "B"
TITLE = "expected tokens per target call = 1 + sum_k prod_{t<=k} alpha_t; i.i.d. closed form"
PERTURBED = "expected tokens per target call = 1 + sum_k alpha_k"
MAX_GAMMA = 8
GRID = (Fraction(0), Fraction(1, 3), Fraction(1, 2), Fraction(1))


def tail_sum(alphas):
    """``1 + sum_k prod_{t<=k} alpha_t`` (exact on Fractions or sympy symbols)."""
    total, prod = 1, 1
    for a in alphas:
        prod = prod * a
        total = total + prod
    return total


def expected_from_law(alphas):
    """``E[N + 1]`` computed from the law of the number ``N`` of accepted drafts."""
    g = len(alphas)
    e, prod = 0, 1
    for k in range(g):
        e = e + (k + 1) * prod * (1 - alphas[k])
        prod = prod * alphas[k]
    return e + (g + 1) * prod


def expected_by_enumeration(alphas):
    """``E[N + 1]`` by summing over all ``2^gamma`` accept/reject coin patterns (exact on Fractions).

    Position ``t`` flips an independent coin with success probability ``alpha_t``; the block
    accepts the leading run of successes, ``N`` is its length.
    """
    e = 0
    for pattern in itertools.product((True, False), repeat=len(alphas)):
        prob = 1
        for a, acc in zip(alphas, pattern):
            prob = prob * (a if acc else 1 - a)
        n = next((i for i, acc in enumerate(pattern) if not acc), len(alphas))
        e = e + prob * (n + 1)
    return e


def _by_parts_for_every_gamma(law_term=None) -> bool:
    """The general-gamma step: ``E[N + 1] = sum_(k=0..gamma) T_k`` from the law of ``N``.

    ``T`` is an arbitrary sequence (sympy ``IndexedBase``). First ``P(N = k) = T_k (1 -
    alpha_(k+1)) = T_k - T_(k+1)`` given ``T_(k+1) = T_k alpha_(k+1)``. Then, by induction on a
    symbolic ``g >= 0``, ``D(g) = sum_(k<=g) (k+1)(T_k - T_(k+1)) - sum_(k<=g) T_k + (g+1) T_(g+1)``
    is 0: ``D(0)`` is evaluated, and ``D(g+1) - D(g)`` is the new summands (the sums over
    ``0..g+1`` are those over ``0..g`` plus their term at ``g+1``) plus the change of the last
    term. With ``T_(gamma+1) := 0`` (``P(N = gamma) = T_gamma``) this is the tail sum.
    ``law_term`` replaces ``(k+1)(T_k - T_(k+1))`` in the tests' negative control.
    """
    g = sp.Symbol("g", integer=True, nonnegative=True)
    k = sp.Symbol("k", integer=True, nonnegative=True)
    a_next = sp.Symbol("a", real=True)
    T = sp.IndexedBase("T")
    law_ok = sp.expand((T[k] * (1 - a_next) - (T[k] - T[k + 1])).subs(T[k + 1], T[k] * a_next)) == 0
    law = law_term or (lambda j: (j + 1) * (T[j] - T[j + 1]))
    base = sp.Sum(law(k), (k, 0, 0)).doit() - T[0] + T[1]
    step = law(g + 1) - T[g + 1] + (g + 2) * T[g + 2] - (g + 1) * T[g + 1]
    return bool(law_ok and sp.expand(base) == 0 and sp.expand(step) == 0)


def _symbolic() -> Steps:
    steps = Steps()
    steps.require("summation by parts for every gamma", _by_parts_for_every_gamma())
    for g in range(1, MAX_GAMMA + 1):
        a = sp.symbols(f"alpha1:{g + 1}")
        steps.require(f"law minus tail sum, gamma = {g}",
                      sp.expand(expected_from_law(a) - tail_sum(a)) == 0)
    alpha = sp.Symbol("alpha", positive=True)
    gamma = sp.Symbol("gamma", integer=True, positive=True)
    k = sp.Symbol("k", integer=True, positive=True)
    diff = sp.piecewise_fold(1 + sp.summation(alpha ** k, (k, 1, gamma)) - (1 - alpha ** (gamma + 1)) / (1 - alpha))
    # sympy returns a Piecewise split on alpha == 1; the closed form is claimed for alpha != 1 only.
    pieces = diff.args if isinstance(diff, sp.Piecewise) else ((diff, True),)
    steps.require("i.i.d. closed form for every gamma (alpha != 1)",
                  all(sp.simplify(expr) == 0 for expr, cond in pieces if cond != sp.Eq(alpha, 1)))
    return steps


def _body(out):
    out.require_steps(_symbolic())
    out.methods.append(f"sympy: P(N = k) = T_k - T_(k+1) with T_k = prod_(t<=k) alpha_t, and summation by "
                       f"parts sum_(k<=g) (k+1)(T_k - T_(k+1)) = sum_(k<=g) T_k - (g+1) T_(g+1) by induction "
                       f"on a symbolic g, so E[N+1] = sum_(k<=gamma) T_k for every gamma; E[N+1] from the "
                       f"law minus the tail sum also expands to 0 for symbolic alphas and gamma = "
                       f"1..{MAX_GAMMA}; i.i.d. closed form by geometric summation for symbolic gamma "
                       f"(alpha != 1)")
    iid = 0  # constant tuples alpha != 1, where the i.i.d. closed form is checked
    for g in range(1, 5):
        for alphas in itertools.product(GRID, repeat=g):
            out.cases += 1
            enum = expected_by_enumeration(alphas)
            if enum != tail_sum(alphas) or expected_tokens_per_call(np.array(alphas, dtype=object)) != enum:
                out.fail({"alphas": list(alphas), "enumerated": enum, "formula": tail_sum(alphas)})
            if len(set(alphas)) == 1 and alphas[0] != 1:
                a0, iid = alphas[0], iid + 1
                if (1 - a0 ** (g + 1)) / (1 - a0) != enum:
                    out.fail({"alphas": list(alphas), "iid_closed_form": (1 - a0 ** (g + 1)) / (1 - a0)})
            if 1 + sum(alphas) != enum:
                out.refute({"alphas": list(alphas), "enumerated": enum, "perturbed": 1 + sum(alphas)})
    out.methods.append(f"exhaustive exact enumeration of accept/reject patterns (also against "
                       f"rdk_theory.bounds.expected_tokens_per_call) for gamma <= 4 and "
                       f"alphas in {{{', '.join(map(str, GRID))}}}, the i.i.d. closed form on the {iid} "
                       f"constant tuples with alpha != 1")


def check():
    return run_check(ID, TITLE, PERTURBED, _body, "proved")
