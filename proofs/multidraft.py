r"""Statement K (multi-draft, [6]): K-SEQ with :math:`k` i.i.d. drafts and parameter
:math:`\rho \ge 1` is lossless when

.. math::
    1 - (1 - \beta(\rho))^k \le \rho\, \beta(\rho), \qquad \beta(\rho) = \sum_x \min(q(x), p(x)/\rho),

its acceptance is :math:`1 - (1 - \beta)^k`, and at the smallest valid :math:`\rho^*` it reaches at
least :math:`1 - 1/e` of the optimal acceptance of any lossless :math:`k`-draft rule.

Method (no symbolic route attempted; hence ``verified``): exhaustive exact check with Fractions
over all :math:`p, q` on a grid and rational :math:`\rho`:

* condition => the K-SEQ output law (accepted part plus normalised residual,
  :func:`rdk_theory.multidraft.kseq_output_law`) equals :math:`p` with ``==``;
* condition fails and some :math:`x` has :math:`\rho q(x) \ge p(x) > 0` => the output law differs
  from :math:`p` (the "only if" direction; it needs this side condition, always true when
  :math:`\mathrm{supp}\, q \subseteq \mathrm{supp}\, p`; without it the condition is only sufficient);
* the law of the accepted token, computed by walking every tuple of :math:`k` drafts
  (draft :math:`x` accepted with probability :math:`\min(1, p(x) / (\rho q(x)))`, the first
  accepted one emitted), equals the closed form
  :func:`rdk_theory.multidraft.kseq_accept_law`, and its mass is :math:`1 - (1 - \beta)^k`;
* float64: :math:`\rho^*` by bisection is valid and :math:`\rho^* - 10^{-6}` is not (unless
  :math:`\rho^* = 1`); :math:`(1 - 1/e)\,\mathrm{OPT} \le` acceptance :math:`\le \mathrm{OPT}` with OPT from
  ``scipy.optimize.linprog``, which also equals the min-cut closed form.

Perturbed statement (must be refuted): every :math:`\rho \ge 1` is lossless (drop the condition),
e.g. :math:`\rho = 1` with two drafts.
"""
from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from rdk_theory.multidraft import (
    beta, kseq_accept_law, kseq_acceptance, kseq_best_rho, kseq_is_valid, kseq_output_law,
    one_minus_inv_e, optimal_acceptance_cut, optimal_acceptance_lp,
)

from .exhaustive import distributions
from .result import run_check

ID = "K"
TITLE = "K-SEQ validity condition, acceptance 1 - (1 - beta)^k, best rho >= (1 - 1/e) OPT"
PERTURBED = "K-SEQ is lossless for every rho >= 1 (validity condition dropped)"
GRID = dict(n=3, d=4, ks=(1, 2, 3), rhos=(Fraction(1), Fraction(5, 4), Fraction(3, 2), Fraction(2), Fraction(3)))
LP_GRID = dict(n=3, d=4, ks=(1, 2, 3))
LP_ATOL = 1e-7


def _body(out):
    n, d = GRID["n"], GRID["d"]
    laws = list(distributions(n, d))
    for p in laws:
        for q in laws:
            for k in GRID["ks"]:
                for rho in GRID["rhos"]:
                    if rho > k:
                        continue
                    out.cases += 1
                    law = kseq_output_law(p, q, rho, k)
                    valid = kseq_is_valid(p, q, rho, k)
                    scan = _accept_law_by_scan(p, q, rho, k)
                    if (list(kseq_accept_law(p, q, rho, k)) != scan
                            or sum(scan) != kseq_acceptance(p, q, rho, k)):
                        out.fail({"p": p, "q": q, "k": k, "rho": rho, "why": "accepted law",
                                  "by_scan": scan})
                    if valid and list(law) != list(p):
                        out.fail({"p": p, "q": q, "k": k, "rho": rho, "output_law": law})
                    side = any(rho * qx >= px > 0 for px, qx in zip(p, q))
                    if not valid and side and list(law) == list(p):
                        out.fail({"p": p, "q": q, "k": k, "rho": rho, "why": "invalid rho yet lossless"})
                    if list(law) != list(p):
                        out.refute({"p": p, "q": q, "k": k, "rho": rho, "beta": beta(p, q, rho),
                                    "output_law": law})
    out.methods.append(f"exhaustive exact check of validity => output law == p, invalidity (with some "
                       f"rho q(x) >= p(x) > 0) => output law != p, and the accepted token's law by "
                       f"walking every draft tuple == the closed form, of mass 1 - (1 - beta)^k, over "
                       f"all p, q on N = {n}, grid 1/{d}, k in {GRID['ks']}, rho in "
                       f"{{{', '.join(map(str, GRID['rhos']))}}} (rho <= k)")
    worst = 1.0
    n, d = LP_GRID["n"], LP_GRID["d"]
    for p in distributions(n, d):
        for q in distributions(n, d):
            pf, qf = p.astype(np.float64), q.astype(np.float64)
            for k in LP_GRID["ks"]:
                out.cases += 1
                rho = kseq_best_rho(pf, qf, k)
                acc = float(kseq_acceptance(pf, qf, rho, k))
                opt = optimal_acceptance_lp(pf, qf, k)
                cut = float(optimal_acceptance_cut(p, q, k))
                bad = not kseq_is_valid(pf, qf, rho, k) or (rho > 1 + 1e-6 and kseq_is_valid(pf, qf, rho - 1e-6, k))
                if bad or abs(opt - cut) > LP_ATOL or acc > opt + LP_ATOL or acc < one_minus_inv_e() * opt - LP_ATOL:
                    out.fail({"p": p, "q": q, "k": k, "rho_star": rho, "acceptance": acc, "lp": opt, "cut": cut})
                if opt > 0:
                    worst = min(worst, acc / opt)
    out.notes.append(f"smallest ratio acceptance(rho*) / OPT on the grid: {worst:.4f} "
                     f"(guarantee 1 - 1/e = {one_minus_inv_e():.4f}).")
    out.methods.append(f"float64: rho* by bisection is the smallest valid rho (1e-6 resolution), LP optimum "
                       f"(scipy linprog) == min-cut closed form and (1 - 1/e) OPT <= acceptance(rho*) <= OPT, "
                       f"over all p, q on N = {n}, grid 1/{d}, k in {LP_GRID['ks']}")


def _accept_law_by_scan(p, q, rho, k):
    """The law of the token K-SEQ emits by acceptance, by walking every tuple of ``k`` i.i.d.
    drafts from ``q``: each is accepted with probability ``min(1, p(x) / (rho q(x)))`` and the
    first accepted one is emitted (a list of Fractions; no closed form used)."""
    law = [Fraction(0)] * len(p)
    support = [x for x in range(len(p)) if q[x] > 0]
    for drafts in itertools.product(support, repeat=k):
        reach = Fraction(1)
        for x in drafts:
            reach *= q[x]
        for x in drafts:
            take = min(Fraction(1), p[x] / (rho * q[x]))
            law[x] += reach * take
            reach *= 1 - take
    return law


def check():
    return run_check(ID, TITLE, PERTURBED, _body, "verified")
