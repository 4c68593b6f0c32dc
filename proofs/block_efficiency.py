r"""Statement B (block efficiency): with per-position acceptances :math:`\alpha_1..\alpha_\gamma`,
the expected number of tokens per target call is

.. math::
    E_\gamma = 1 + \sum_{k=1}^{\gamma} \prod_{t \le k} \alpha_t, \qquad
    \text{i.i.d.: } E_\gamma = \frac{1 - \alpha^{\gamma + 1}}{1 - \alpha}.

A block of :math:`\gamma` drafts is verified left to right; the number :math:`N` of accepted
drafts has :math:`P(N = k) = \prod_{t \le k} \alpha_t (1 - \alpha_{k+1})` for :math:`k < \gamma` and
:math:`P(N = \gamma) = \prod_{t \le \gamma} \alpha_t`; the call emits :math:`N + 1` tokens (the
accepted drafts plus one residual or bonus token).

Proof (symbolic): sympy expands :math:`E[N + 1]` from this law and subtracts the tail-sum formula,
getting 0 for symbolic :math:`\alpha_1..\alpha_\gamma`, :math:`\gamma = 1..` ``MAX_GAMMA``; the
induction step :math:`E_\gamma(\alpha_1..) = 1 + \alpha_1 E_{\gamma - 1}(\alpha_2..)` is checked the
same way; the i.i.d. closed form is proved for a *symbolic* :math:`\gamma` by sympy's geometric
summation. Cross-check: :func:`rdk_theory.bounds.expected_tokens_per_call` and exact enumeration of all :math:`2^\gamma` accept/reject patterns for
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


def _body(out):
    ok = True
    for g in range(1, MAX_GAMMA + 1):
        a = sp.symbols(f"alpha1:{g + 1}")
        ok &= sp.expand(expected_from_law(a) - tail_sum(a)) == 0
        if g > 1:
            ok &= sp.expand(tail_sum(a) - (1 + a[0] * tail_sum(a[1:]))) == 0
    alpha = sp.Symbol("alpha", positive=True)
    gamma = sp.Symbol("gamma", integer=True, positive=True)
    k = sp.Symbol("k", integer=True, positive=True)
    diff = sp.piecewise_fold(1 + sp.summation(alpha ** k, (k, 1, gamma)) - (1 - alpha ** (gamma + 1)) / (1 - alpha))
    # sympy returns a Piecewise split on alpha == 1; the closed form is claimed for alpha != 1 only.
    pieces = diff.args if isinstance(diff, sp.Piecewise) else ((diff, True),)
    ok &= all(sp.simplify(expr) == 0 for expr, cond in pieces if cond != sp.Eq(alpha, 1))
    if not ok:
        out.fail("sympy could not establish the expectation identity")
    out.methods.append(f"sympy: E[N+1] from the law of N minus the tail sum expands to 0 and the induction "
                       f"step E_g = 1 + alpha_1 E_(g-1) holds, for symbolic alphas and gamma = 1..{MAX_GAMMA}; "
                       f"i.i.d. closed form by geometric summation for symbolic gamma (alpha != 1)")
    for g in range(1, 5):
        for alphas in itertools.product(GRID, repeat=g):
            out.cases += 1
            enum = expected_by_enumeration(alphas)
            if enum != tail_sum(alphas) or expected_tokens_per_call(np.array(alphas, dtype=object)) != enum:
                out.fail({"alphas": list(alphas), "enumerated": enum, "formula": tail_sum(alphas)})
            if len(set(alphas)) == 1 and alphas[0] != 1:
                a0 = alphas[0]
                if (1 - a0 ** (g + 1)) / (1 - a0) != enum:
                    out.fail({"alphas": list(alphas), "iid_closed_form": (1 - a0 ** (g + 1)) / (1 - a0)})
            if 1 + sum(alphas) != enum:
                out.refute({"alphas": list(alphas), "enumerated": enum, "perturbed": 1 + sum(alphas)})
    out.methods.append(f"exhaustive exact enumeration of accept/reject patterns (also against "
                       f"rdk_theory.bounds.expected_tokens_per_call) for gamma <= 4 and "
                       f"alphas in {{{', '.join(map(str, GRID))}}}")


def check():
    return run_check(ID, TITLE, PERTURBED, _body, "proved")
