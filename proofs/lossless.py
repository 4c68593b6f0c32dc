r"""Statement L (lossless): one verification step emits exactly the target law.

For every target law :math:`p` on :math:`T` and every (sub-)stochastic proposal :math:`r`,

.. math::
    P(\mathrm{out} = y) = \min(p(y), r(y)) + (1 - \alpha)\,
    \frac{(p(y) - r(y))^+}{\sum_x (p(x) - r(x))^+} = p(y),
    \qquad \alpha = \sum_x \min(p(x), r(x)).

Proof (symbolic): the two-case split of min gives :math:`\min(a, b) + (a - b)^+ = a` for all real
:math:`a, b`; summing over :math:`x` with :math:`\sum p = 1` gives the normaliser
:math:`\sum_x (p - r)^+ = 1 - \alpha` (the telescoping of the output law), so the reject branch
contributes exactly :math:`(p(y) - r(y))^+` and the two branches add up to :math:`p(y)`. When
:math:`\alpha = 1` the reject branch has weight 0 and the residual is never used.

Cross-check: the core's :func:`rdk_theory.acceptance.step_output_law` equals :math:`p` with
``==`` for every pair on the grid below.

Perturbed statement (must be refuted): the reject branch draws from :math:`p` itself
("resample from the target") instead of the residual.
"""
from __future__ import annotations

import sympy as sp

from rdk_theory.acceptance import acceptance_rate, step_output_law

from .exhaustive import distributions, inexact, sub_distributions
from .result import run_check
from .symbolic import Steps

ID = "L"
TITLE = "one verification step is lossless for every (sub-)stochastic proposal"
PERTURBED = "resampling from p (instead of the residual) on rejection is also lossless"
GRID = dict(n=3, d=4)


def _symbolic() -> Steps:
    a, b = sp.symbols("a b", real=True)
    e = sp.symbols("e", nonnegative=True)
    lemma = sp.Min(a, b) + sp.Max(0, a - b) - a
    steps = Steps()
    # case a <= b: b = a + e;  case a > b: a = b + e.
    steps.require("lemma, case a <= b", sp.simplify(lemma.subs(b, a + e)) == 0)
    steps.require("lemma, case a > b", sp.simplify(lemma.subs(a, b + e)) == 0)
    # the residual's normaliser for a symbolic vocabulary of size n. By the lemma, each term
    # (p - r)^+ equals p - min(p, r); the sum of those is sum p - alpha by linearity, and the
    # hypothesis sum p = 1 makes it 1 - alpha. The hypothesis is needed: without it the
    # difference is sum p - 1, which sympy must not call 0.
    n = sp.Symbol("n", integer=True, positive=True)
    x = sp.Idx("x", n)
    pp, rr = sp.IndexedBase("p"), sp.IndexedBase("r")

    def total(term):
        return sp.Sum(term, (x, 0, n - 1))

    alpha, sum_p = total(sp.Min(pp[x], rr[x])), total(pp[x])
    term_by_lemma = sp.Max(0, pp[x] - rr[x]) - (pp[x] - sp.Min(pp[x], rr[x]))
    steps.require("(p - r)^+ = p - min(p, r), by the lemma",
                  sp.simplify(term_by_lemma - lemma.subs({a: pp[x], b: rr[x]})) == 0)
    normaliser = total(pp[x] - sp.Min(pp[x], rr[x])).expand()  # linearity of the sum
    steps.require("normaliser = 1 - alpha given sum p = 1",
                  sp.simplify(normaliser.subs(sum_p, 1) - (1 - alpha)) == 0)
    steps.require("normaliser != 1 - alpha without sum p = 1",
                  sp.simplify(normaliser - (1 - alpha)) != 0)
    # the output law for alpha < 1: the reject branch (weight 1 - alpha) draws y from the
    # residual, (p - r)^+ over the normaliser proved above; with it, min + branch = p (lemma)
    law = (sp.Min(a, b) + (1 - alpha) * sp.Max(0, a - b) / normaliser.subs(sum_p, 1)) - a
    steps.require("accept + reject branches = p", sp.simplify(law - lemma) == 0)
    unused = (sp.Min(a, b) + (1 - alpha) * sp.Max(0, a - b) / normaliser) - a  # no sum p = 1
    steps.require("branches != p without sum p = 1", sp.simplify(unused - lemma) != 0)
    return steps


def _body(out):
    steps = _symbolic()
    out.require_steps(steps)
    out.methods.append("sympy: two-case split of min gives min(a,b) + (a-b)^+ = a; by it and "
                       "linearity, over a symbolic vocabulary, the residual's normaliser "
                       "sum (p-r)^+ is sum p - alpha, which is 1 - alpha given sum p = 1 (and "
                       "not without it); for alpha < 1 the two branches add to p "
                       f"({len(steps.results)} steps)")
    n, d = GRID["n"], GRID["d"]
    for p in distributions(n, d):
        for r in sub_distributions(n, d):
            out.cases += 1
            law, alpha = step_output_law(p, r), acceptance_rate(p, r)
            if list(law) != list(p) or inexact(law, alpha) is not None:
                out.fail({"p": p, "r": r, "output_law": law, "alpha": alpha})
            wrong = [min(pi, ri) + (1 - alpha) * pi for pi, ri in zip(p, r)]
            if wrong != list(p):
                out.refute({"p": p, "r": r, "perturbed_output_law": wrong})
    out.methods.append(f"exhaustive exact check of rdk_theory.acceptance.step_output_law == p over "
                       f"all p (N = {n}) and sub-stochastic r on the 1/{d} grid (every number a "
                       f"Fraction: the grid is exact in floats too)")


def check():
    return run_check(ID, TITLE, PERTURBED, _body, "proved")
