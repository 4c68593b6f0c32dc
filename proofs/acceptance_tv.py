r"""Statement A (acceptance): :math:`\alpha(p, r) = 1 - \mathrm{TV}(p, r)` when :math:`r` sums to 1,
and :math:`0 \le \alpha \le 1` for every (sub-)stochastic :math:`r`.

Proof (symbolic): the two-case split gives :math:`\min(a, b) = (a + b - |a - b|)/2`; summing with
:math:`\sum p = \sum r = 1` gives :math:`\alpha = 1 - \tfrac12 \sum |p - r| = 1 - \mathrm{TV}`.
Bounds: :math:`0 \le \min(p, r) \le p` termwise, so :math:`0 \le \alpha \le \sum p = 1`.

Cross-check: :func:`rdk_theory.acceptance.acceptance_rate` and
:func:`rdk_theory.acceptance.total_variation` on every exact pair of the grid, the TV also
against its definition :math:`\tfrac12 \sum |p - r|` written out, sub-stochastic :math:`r`
included (there the identity is not claimed, so without this a TV right only for equal
masses, such as twice the negative part of :math:`p - r`, went unseen).

Perturbed statement (must be refuted): the identity also holds for a sub-stochastic proposal
(dropping the hypothesis :math:`\sum r = 1`).
"""
from __future__ import annotations

from fractions import Fraction

import sympy as sp

from rdk_theory.acceptance import acceptance_rate, total_variation

from .exhaustive import distributions, inexact, sub_distributions
from .result import run_check

ID = "A"
TITLE = "alpha = 1 - TV(p, r) for normalised r, and 0 <= alpha <= 1"
PERTURBED = "alpha = 1 - TV(p, r) also for a sub-stochastic r"
GRID = dict(n=3, d=4)


def _symbolic() -> bool:
    a, b = sp.symbols("a b", real=True)
    e = sp.symbols("e", nonnegative=True)
    f = sp.Min(a, b) - (a + b - sp.Abs(a - b)) / 2
    return sp.simplify(f.subs(b, a + e)) == 0 and sp.simplify(f.subs(a, b + e)) == 0


def _body(out):
    if not _symbolic():
        out.fail("sympy could not establish min(a,b) = (a + b - |a - b|)/2")
    out.methods.append("sympy: two-case split min(a,b) = (a + b - |a-b|)/2, summed with sum p = sum r = 1")
    n, d = GRID["n"], GRID["d"]
    tv_wrong = None  # reported after the bound and identity legs, whose counterexamples come first
    for p in distributions(n, d):
        for r in sub_distributions(n, d):
            out.cases += 1
            alpha, tv = acceptance_rate(p, r), total_variation(p, r)
            if inexact(alpha, tv) is not None:
                out.fail({"p": p, "r": r, "alpha": alpha, "tv": tv, "inexact": True})
            if not 0 <= alpha <= 1:
                out.fail({"p": p, "r": r, "alpha": alpha})
            if sum(r) == 1 and alpha != 1 - tv:
                out.fail({"p": p, "r": r, "alpha": alpha, "tv": tv})
            want = _tv_by_definition(p, r)
            if tv != want and tv_wrong is None:
                tv_wrong = {"p": p, "r": r, "tv": tv, "by_definition": want}
            if sum(r) < 1 and alpha != 1 - tv:
                out.refute({"p": p, "r": r, "alpha": alpha, "1 - tv": 1 - tv})
    if tv_wrong is not None:
        out.fail(tv_wrong)
    out.methods.append(f"exhaustive exact check of acceptance_rate / total_variation (TV also against "
                       f"its definition 1/2 sum |p - r|) over all p and (sub-)stochastic r on N = {n}, "
                       f"grid 1/{d}")


def _tv_by_definition(a, b):
    """``TV(a, b) = 1/2 sum_x |a(x) - b(x)|``, written out term by term."""
    return sum((abs(x - y) for x, y in zip(a, b)), Fraction(0)) / 2


def check():
    return run_check(ID, TITLE, PERTURBED, _body, "proved")
