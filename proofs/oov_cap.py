r"""Statement O2 (OOV cap): :math:`\alpha_{TLI} \le p(I)`; for a pruned drafter
:math:`\alpha_{vanilla} = \alpha_{TLI} \le p(D)`.

TLI's proposal lives on :math:`I`, so :math:`\alpha_{TLI} = \sum_{x \in I} \min(p(x), q'(x)) \le
\sum_{x \in I} p(x) = p(I)`. A pruned drafter has :math:`q(I) = 1`, hence :math:`q' = q` and the two
samplers coincide; there :math:`I` is the kept set :math:`D`.

Proof (symbolic): :math:`\min(p, r) \le p` in both cases of min; the support argument is exact.
Cross-check: the core's :func:`rdk_theory.acceptance.oov_cap` (also against :math:`\sum_{x \in I}
p(x)` written out) and proposals over every drafter map with :math:`N_T, N_D \le 3` (pruned maps
with :math:`N_D < N_T`, where :math:`p(D) < 1`, included) and every exact :math:`p, q` on the grid.

Perturbed statement (must be refuted): the cap also binds exact RDK (it does not: a kernel moves
drafted mass onto OOV tokens, statement O4).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import sympy as sp

from rdk_theory.acceptance import acceptance_rate, oov_cap
from rdk_theory.kernels import DenseKernel
from rdk_theory.proposals import rdk_proposal, tli_proposal, vanilla_proposal
from rdk_theory.vocab import VocabMap

from .exhaustive import distributions, every_map, fractions
from .result import run_check
from .symbolic import holds_for_all_orderings

ID = "O2"
TITLE = "OOV cap: alpha_TLI <= p(I); pruned drafter: alpha_vanilla = alpha_TLI <= p(D)"
PERTURBED = "exact RDK with a uniform kernel is also capped by p(I)"
GRID = dict(n_max=3, d=3)


def _body(out):
    p_, r_ = sp.symbols("p r", real=True)
    ok, _ = holds_for_all_orderings(p_ - sp.Min(p_, r_), [p_, r_], ">=")
    if not ok:
        out.fail("sympy could not establish min(p, r) <= p")
    out.methods.append("sympy: min(p, r) <= p in both cases; TLI's proposal vanishes off I")
    n_max, d = GRID["n_max"], GRID["d"]
    laws = {n: list(distributions(n, d)) for n in range(1, n_max + 1)}
    uniform = {n: DenseKernel(np.array([list(fractions([1] * n, n))] * n, dtype=object), check=False)
               for n in laws}
    for nt, nd, m in every_map(n_max):
        vm = VocabMap(nt, m)
        in_target = sorted({int(x) for x in m if x >= 0})  # I, written out
        for q in laws[nd]:
            van, tli = vanilla_proposal(q, vm), tli_proposal(q, vm)
            rdk = rdk_proposal(q, vm, uniform[nt])
            for p in laws[nt]:
                out.cases += 1
                cap, a_t, a_v = oov_cap(p, vm), acceptance_rate(p, tli), acceptance_rate(p, van)
                if cap != sum((p[x] for x in in_target), Fraction(0)):
                    out.fail({"p": p, "draft_to_target": m, "oov_cap": cap, "I": in_target})
                if a_t > cap:
                    out.fail({"p": p, "q": q, "draft_to_target": m, "alpha_tli": a_t, "cap": cap})
                if vm.is_pruned and a_v != a_t:
                    out.fail({"p": p, "q": q, "draft_to_target": m, "alpha_vanilla": a_v, "alpha_tli": a_t})
                a_r = acceptance_rate(p, rdk)
                if a_r > cap:
                    out.refute({"p": p, "q": q, "draft_to_target": m, "kernel": "uniform",
                                "alpha_rdk": a_r, "cap": cap})
    out.methods.append(f"exhaustive exact check (p(I) also against its definition) over every "
                       f"drafter map with N_T, N_D in 1..{n_max} and every p, q on the 1/{d} grid")


def check():
    return run_check(ID, TITLE, PERTURBED, _body, "proved")
