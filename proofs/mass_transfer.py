r"""Statement O4 (mass transfer): moving :math:`\delta \le r(i) - p(i)` of proposal mass from a
surplus token :math:`i` to a deficit token :math:`j` (:math:`r(j) < p(j)`) raises
:math:`\alpha` by exactly :math:`\min(\delta, p(j) - r(j))`.

Proof (symbolic): term :math:`i` is unchanged, since :math:`p(i) \le r(i) - \delta \le r(i)` gives
:math:`\min(p(i), r(i) - \delta) = \min(p(i), r(i)) = p(i)`; term :math:`j` goes from :math:`r(j)`
to :math:`\min(p(j), r(j) + \delta) = r(j) + \min(\delta, p(j) - r(j))`. sympy checks both in every
ordering compatible with the hypotheses. Hence a kernel that moves drafted mass onto OOV tokens
with :math:`p > 0` (where TLI puts none) lifts :math:`\alpha` above the OOV cap :math:`p(I)`.

Cross-check: the core's ``acceptance_rate`` on every exact :math:`p, r`, every ordered pair
:math:`(i, j)` and every grid :math:`\delta`.

Perturbed statement (must be refuted): the gain is :math:`\min(\delta, p(j) - r(j))` for any
:math:`\delta \le r(i)` (dropping the surplus condition :math:`\delta \le r(i) - p(i)`).
"""
from __future__ import annotations

from fractions import Fraction

import sympy as sp

from rdk_theory.acceptance import acceptance_rate

from .exhaustive import distributions, inexact
from .result import run_check
from .symbolic import Steps, holds_for_all_orderings

ID = "O4"
TITLE = "moving surplus mass to a deficit token raises alpha by min(delta, p(j) - r(j))"
PERTURBED = "the same gain holds for any delta <= r(i) (surplus condition dropped)"
GRID = dict(n=3, d=4)


def _symbolic() -> Steps:
    steps = Steps()
    p_i, s_i, r_i = sp.symbols("p_i s_i r_i", real=True)  # s_i = r_i - delta
    ok_i, _ = holds_for_all_orderings(sp.Min(p_i, s_i) - sp.Min(p_i, r_i), [p_i, s_i, r_i],
                                      given=[(p_i, s_i), (s_i, r_i)])
    steps.require("term i unchanged", ok_i)
    r_j, p_j, u_j = sp.symbols("r_j p_j u_j", real=True)  # u_j = r_j + delta
    gain = sp.Min(p_j, u_j) - sp.Min(p_j, r_j) - sp.Min(u_j - r_j, p_j - r_j)
    ok_j, _ = holds_for_all_orderings(gain, [r_j, p_j, u_j], given=[(r_j, p_j), (r_j, u_j)])
    steps.require("term j gains min(delta, p(j) - r(j))", ok_j)
    return steps


def _body(out):
    out.require_steps(_symbolic())
    out.methods.append("sympy: per-token identities for i (unchanged) and j (gain min(delta, p_j - r_j)) "
                       "in every ordering allowed by the hypotheses")
    n, d = GRID["n"], GRID["d"]
    laws = list(distributions(n, d))
    claimed = 0  # cases with delta <= r(i) - p(i), where the gain is claimed
    for p in laws:
        for r in laws:
            a0 = acceptance_rate(p, r)
            for i in range(n):
                for j in range(n):
                    if i == j or not r[j] < p[j]:
                        continue
                    for k in range(1, int(r[i] * d) + 1):
                        delta = Fraction(k, d)
                        moved = r.copy()
                        moved[i] -= delta
                        moved[j] += delta
                        gain = acceptance_rate(p, moved) - a0
                        if inexact(gain) is not None:
                            out.fail({"p": p, "r": r, "i": i, "j": j, "delta": delta, "gain": gain,
                                      "inexact": True})
                        claim = min(delta, p[j] - r[j])
                        out.cases += 1
                        inside = delta <= r[i] - p[i]  # the surplus condition
                        claimed += inside
                        if inside and gain != claim:
                            out.fail({"p": p, "r": r, "i": i, "j": j, "delta": delta, "gain": gain})
                        if not inside and gain != claim:
                            out.refute({"p": p, "r": r, "i": i, "j": j, "delta": delta,
                                        "gain": gain, "claimed": claim})
    out.methods.append(f"exhaustive exact check over all p, r on N = {n}, grid 1/{d}, all (i, j) "
                       f"and all grid delta ({claimed} of the cases inside the claim, delta <= r(i) - p(i))")


def check():
    return run_check(ID, TITLE, PERTURBED, _body, "proved")
