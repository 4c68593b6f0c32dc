r"""Statement O1 (TLI >= vanilla): :math:`\alpha(p, q') \ge \alpha(p, q)` for every drafter map.

With :math:`q(I) \in (0, 1]` the TLI proposal is :math:`q'(x) = q(x) / q(I) \ge q(x)` on :math:`I`
(and both are 0 off :math:`I`); :math:`\min(p, \cdot)` is non-decreasing, so the inequality holds
termwise. When :math:`q(I) = 0` both acceptances are 0 (**[definition]** of MATH.md section 3).

Proof (symbolic): sympy shows :math:`q/s - q \ge 0` for every :math:`s = 1/(1 + u) \in (0, 1]` (it is :math:`q u`), and
:math:`\min(p, b) - \min(p, a) \ge 0` for :math:`b = a + e`, :math:`e \ge 0`, in both cases of min.

Cross-check: core proposals on every drafter map with :math:`N_T, N_D \le 3` (``-1`` entries,
empty and singleton intersections included) and every exact :math:`p, q` on the grid; both
proposals also against their definitions written out (vanilla: :math:`q` placed token by
token; TLI: that vector divided by its sum :math:`q(I)`, all zeros where :math:`q(I) = 0`), since
a TLI off its definition but still above vanilla (divided by :math:`(q(I) + 1)/2`, say) keeps
the inequality.

Perturbed statement (must be refuted): swapped, vanilla >= TLI.
"""
from __future__ import annotations

import sympy as sp

from rdk_theory.acceptance import acceptance_rate
from rdk_theory.proposals import tli_proposal, vanilla_proposal
from rdk_theory.vocab import VocabMap

from .exhaustive import distributions, every_map, inexact
from .result import run_check
from .symbolic import Steps, decide, holds_for_all_orderings

ID = "O1"
TITLE = "TLI accepts at least as often as vanilla, termwise"
PERTURBED = "vanilla accepts at least as often as TLI"
GRID = dict(n_max=3, d=3)


def _symbolic() -> Steps:
    steps = Steps()
    q, u = sp.symbols("q u", nonnegative=True)
    s = 1 / (1 + u)  # every s in (0, 1], as u runs over [0, inf)
    steps.require("q/s >= q for s in (0, 1]", decide(q / s - q, ">="))  # = q u
    p, a, b = sp.symbols("p a b", real=True)
    ok_mono, _ = holds_for_all_orderings(sp.Min(p, b) - sp.Min(p, a), [p, a, b], ">=", given=[(a, b)])
    steps.require("min(p, .) is non-decreasing", ok_mono)
    return steps


def _body(out):
    out.require_steps(_symbolic())
    out.methods.append("sympy: q/s - q >= 0 for every s = 1/(1+u) in (0, 1] (it is q u), and "
                       "min(p, b) >= min(p, a) for a <= b in every ordering of p, a, b")
    n_max, d = GRID["n_max"], GRID["d"]
    laws = {n: list(distributions(n, d)) for n in range(1, n_max + 1)}
    tli_wrong = None  # reported after the inequality's counterexamples, which come first
    for nt, nd, m in every_map(n_max):
        vm = VocabMap(nt, m)
        for q in laws[nd]:
            van, tli = vanilla_proposal(q, vm), tli_proposal(q, vm)
            want = vanilla_by_definition(q, m, nt)
            if list(van) != list(want):  # the core's scatter, against the definition
                out.fail({"q": q, "draft_to_target": m, "vanilla": van, "by_definition": want})
            want_tli = tli_by_definition(q, m, nt)
            if tli_wrong is None and (list(tli) != want_tli or inexact(tli) is not None):
                tli_wrong = {"q": q, "draft_to_target": m, "tli": tli, "by_definition": want_tli}
            for p in laws[nt]:
                out.cases += 1
                a_v, a_t = acceptance_rate(p, van), acceptance_rate(p, tli)
                if a_t < a_v:
                    out.fail({"p": p, "q": q, "draft_to_target": m, "alpha_tli": a_t, "alpha_vanilla": a_v})
                if a_v < a_t:
                    out.refute({"p": p, "q": q, "draft_to_target": m, "alpha_vanilla": a_v, "alpha_tli": a_t})
    if tli_wrong is not None:
        out.fail(tli_wrong)
    out.methods.append(f"exhaustive exact check of the core proposals (vanilla and TLI also against "
                       f"their definitions, token by token) over every drafter map with "
                       f"N_T, N_D in 1..{n_max} and every p, q on the 1/{d} grid")


def vanilla_by_definition(q, draft_to_target, n_target):
    """``r(x) = q(j)`` for the drafter token ``j`` with target id ``x``, 0 elsewhere, written
    out token by token (no scatter plan, no identity shortcut)."""
    r = [0] * n_target
    for j, x in enumerate(draft_to_target):
        if x >= 0:
            r[x] = q[j]
    return r


def tli_by_definition(q, draft_to_target, n_target):
    """``q'(x) = q(x) / q(I)`` on ``I``, 0 elsewhere; all zeros where ``q(I) = 0`` (MATH.md
    section 3), written out from :func:`vanilla_by_definition`."""
    r = vanilla_by_definition(q, draft_to_target, n_target)
    mass = sum(r)
    return [x / mass for x in r] if mass else [0] * n_target


def check():
    return run_check(ID, TITLE, PERTURBED, _body, "proved")
